"""JSON the user hands in, read safely: a size cap and a nesting cap, and one clear error for each way it fails.

Python's parser recurses once per level of nesting: a file nested 100,000 deep raises ``RecursionError`` (not a
``ValueError``, so a reader that catches only that one tracebacks), and one nested just under the interpreter's
limit parses, then breaks the first recursive walk of it (``json.dumps``, a copy, a schema check).  So the
nesting is counted before parsing, on the text with its strings taken out, and a document deeper than
``MAX_JSON_DEPTH`` is refused in one line naming where it came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import BadInputError

# The deepest JSON committed here nests 9 levels (a GuideLLM report: benchmarks[i].requests.successful[j].info
# .timings; tests/test_jsonfile.py reads every committed file), so 64 leaves room for any real document and
# stays far below the interpreter's recursion limit (1,000 frames), which the parser, json.dumps and every
# recursive walk of a document share with the frames of the command that reads it.
MAX_JSON_DEPTH = 64

# A JSON string: a quote, any characters but a quote or a backslash or an escaped pair, a quote.  Taken out
# before counting, so a bracket inside a string is not nesting.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")


class JsonFileError(BadInputError):
    """A JSON file or line that cannot be read: too large, nested too deep, or not JSON; one line."""


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (0: a bare value), counted without parsing it: its
    strings taken out, then its brackets summed (two regular-expression passes and a numpy sum, all at C
    speed)."""
    brackets = _NOT_A_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    codes = np.frombuffer(brackets.encode("ascii"), dtype=np.uint8)
    steps = np.where((codes == ord("[")) | (codes == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


def parse_json(text: str, source: str, max_depth: int = MAX_JSON_DEPTH,
               parse_constant: Callable[[str], Any] | None = None) -> Any:
    """The JSON value of ``text``, refused in one line naming ``source`` (a file, or a file and line) when it nests
    deeper than ``max_depth`` or is not JSON.  ``parse_constant``: json's hook for NaN and Infinity (None: they
    are read as floats, as Python's json module reads them)."""
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonFileError(f"{source}: nested {depth:,} levels deep; no document this reads nests more than "
                            f"{max_depth}")
    try:
        return json.loads(text, parse_constant=parse_constant) if parse_constant else json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and a parse_constant's refusal
        raise JsonFileError(f"{source}: not valid JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:  # unreachable past the depth check; kept so no input is ever a traceback
        raise JsonFileError(f"{source}: nested too deep to read") from None


def read_json_file(path: str | Path, max_bytes: int, max_depth: int = MAX_JSON_DEPTH,
                   encoding: str = "utf-8-sig") -> Any:
    """The JSON value in the file at ``path``, at most ``max_bytes`` long and ``max_depth`` deep, read as
    ``encoding`` (``utf-8-sig``: a byte-order mark some editors write is not JSON, and json.loads refuses it);
    anything else is one ``JsonFileError`` naming the file."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            raw = stream.read(max_bytes + 1)
    except OSError as exc:
        raise JsonFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise JsonFileError(f"{path}: larger than {max_bytes:,} bytes; not the JSON file expected")
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError:
        raise JsonFileError(f"{path}: not {encoding.removesuffix('-sig').upper()} text") from None
    return parse_json(text, str(path), max_depth)
