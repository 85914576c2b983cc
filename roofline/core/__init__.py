"""What every other room builds on: FLOP and byte counting (``counting``), the roofline formula (``roof``),
statistics of timing samples (``stats``), reading between a table's points (``interpolate``), the SI formatter
(``units``), the bad-input error (``errors``) and the safe reading of a JSON file the user gives (``jsonfile``: a
size and a nesting cap).  Imports nothing else of the project.
"""
