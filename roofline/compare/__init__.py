"""Results side by side: the comparison (``comparison``) and how it is shown (``view``).
"""
