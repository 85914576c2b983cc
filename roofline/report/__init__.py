"""A result drawn and written: figures (``plots``, and ``format_plot`` for weight-only formats against bf16),
the fit and formats tables (``tables``) and the report folder (``result_report``).
"""
