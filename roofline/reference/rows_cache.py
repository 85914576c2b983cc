"""A reference table's rows kept on disk between processes, so that a command's first profile does not import
pyarrow and decode Parquet again.

Every ``gpubench`` command is a process of its own, and the first analytic profile of each read the same five
tables again: importing pyarrow (0.1 s), its first read and the rows' conversion took about two thirds of that
profile's 0.3 s (``scripts/bench_analytic_profile.py``).  The rows ``Database.read`` returns are kept in the user's
cache folder (``$GPUBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpubench/reference``, else
``~/.cache/gpubench/reference``; ``GPUBENCH_CACHE_DIR=`` set empty turns it off), one file per (table file, its
size and modification time, the columns, the filter), written with ``marshal`` (plain lists of numbers and strings;
it cannot run code when loaded, unlike pickle) under the Python version that wrote it.  A reinstalled or changed
table has another size or time and so another file; a file that cannot be read or written is read from the table
again, never an error: the cache only ever saves time.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ENV = "GPUBENCH_CACHE_DIR"
FORMAT = 1  # changes when what is stored does


def folder() -> Path | None:
    """Where the rows are kept (None: the cache is off)."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home to find: no cache, the tables are read each time
            return None
    return Path(base) / "gpubench" / "reference"


def _file(path: Path, columns: tuple[str, ...], equal_items: tuple[tuple[str, Any], ...]) -> Path | None:
    where = folder()
    if where is None:
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    identity = repr((FORMAT, sys.version_info[:2], str(path.resolve()), stat.st_size, stat.st_mtime_ns, columns,
                     equal_items))
    return where / f"{hashlib.sha256(identity.encode()).hexdigest()[:32]}.marshal"


def load(path: Path, columns: tuple[str, ...], equal_items: tuple[tuple[str, Any], ...]) -> dict[str, list] | None:
    """The rows kept for this read of ``path``, or None when there are none (or they cannot be read whole)."""
    kept = _file(path, columns, equal_items)
    if kept is None:
        return None
    try:
        rows = marshal.loads(kept.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(rows, dict) and list(rows) == list(columns)
            and all(isinstance(values, list) for values in rows.values())
            and len({len(values) for values in rows.values()}) <= 1):
        return None
    return rows


def store(path: Path, columns: tuple[str, ...], equal_items: tuple[tuple[str, Any], ...],
          rows: dict[str, list]) -> None:
    """Keep ``rows`` for the next process: written beside and renamed into place (a reader never sees half a file);
    a folder that cannot be written is left alone."""
    kept = _file(path, columns, equal_items)
    if kept is None:
        return
    try:
        data = marshal.dumps(rows)
        kept.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=kept.parent, prefix=".", suffix=".tmp")
    except (OSError, ValueError):
        return
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, kept)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
