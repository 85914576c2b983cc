"""The one exception for input the user gave that cannot be used (arguments, files, configs).

The CLI turns it, and only it (with the spec-sheet and device errors, ``SpecError`` and ``DeviceError``), into
one line and exit 2: a ``ValueError`` or ``TypeError`` from inside the tool is a bug and stays a traceback.
"""

from __future__ import annotations


class BadInputError(Exception):
    """Bad arguments or an unusable input file; the message is one line, fit for the terminal."""
