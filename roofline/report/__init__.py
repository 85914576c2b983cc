"""A result drawn and written: figures (``plots``), the fit table (``tables``) and the report folder
(``result_report``).
"""
