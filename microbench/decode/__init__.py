"""``gpubench decode`` measured: the job (``job``) and the launches of one decode step (``launches``).
"""
