"""What every other room builds on: FLOP and byte counting (``counting``), the roofline formula (``roof``),
statistics of timing samples (``stats``), reading between a table's points (``interpolate``), the SI formatter
(``units``) and the bad-input error (``errors``).  Imports nothing else of the project.
"""
