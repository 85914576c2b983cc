"""Proportional saves during a sweep: the whole document once, then one journal line per change.

Rewriting the result after every point (telemetry timeline included) costs O(points so far) bytes per save,
O(n²) over a sweep.  ``ResultWriter`` instead writes the document once at the start (atomically, as
``save_result`` does) and then appends to ``<result>.journal`` beside it: one JSON line per point, per
ceilings record, per telemetry header change and per chunk of new timeline rows, each batch flushed and
fsync'd before the sweep goes on.  A save then costs O(the new point + its telemetry).

At the end (finished, interrupted, or failed) ``finish`` folds: the whole document is written once more,
atomically, and the journal removed, so the output is one self-contained result JSON.  A sweep killed
outright (SIGKILL, power) leaves the document and its journal; ``roofline.result.io.load_result`` folds them
in memory, so ``report``, ``fit`` and ``sweep --resume`` see every point saved, and the resumed sweep's first
save writes the folded document.  The journal's first line names the sha256 of the document it extends:
a journal left over from an earlier run (the fold was written, the removal was not) describes another
document and is ignored.  A torn last line (killed mid-write) is the point in flight and is dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from roofline.result.document import Point, Result
from roofline.result.io import (
    JOURNAL_KIND,
    _atomic_write,
    check_journal,
    journal_path,
    refuse_special,
    result_to_json,
    save_result,
)
from roofline.result.sections import Ceilings, Telemetry


class Journal:
    """An append-only file of JSON lines extending one document, named by its sha256 on the first line."""

    def __init__(self, path: Path, on_write: Callable[[Path, int], None] | None = None):
        self.path = path
        self.on_write = on_write or (lambda path, nbytes: None)
        self._stream: IO[bytes] | None = None

    @property
    def started(self) -> bool:
        return self._stream is not None

    def start(self, document: bytes, kind: str = JOURNAL_KIND) -> None:
        """A new, empty journal for ``document`` (written already); an older journal there is replaced."""
        refuse_special(self.path)
        header = json.dumps({"kind": kind, "document_sha256": hashlib.sha256(document).hexdigest()}) + "\n"
        _atomic_write(self.path, header.encode("utf-8"))
        self.on_write(self.path, len(header))
        self._stream = open(self.path, "ab")  # noqa: SIM115 - held open while the document grows

    def append(self, entries: list[dict[str, Any]]) -> None:
        """One line per entry, flushed and fsync'd: on disk before the caller goes on."""
        if self._stream is None:
            raise RuntimeError("Journal.append before start")
        if not entries:
            return
        data = b"".join(json.dumps(e, allow_nan=False).encode("utf-8") + b"\n" for e in entries)
        self._stream.write(data)
        self._stream.flush()
        os.fsync(self._stream.fileno())
        self.on_write(self.path, len(data))

    def remove(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self.path.unlink(missing_ok=True)


class ResultWriter:
    """Saves one result document while it grows; ``on_write(path, nbytes)`` is the seam tests count with."""

    def __init__(self, path: str | os.PathLike, on_write: Callable[[Path, int], None] | None = None):
        self.path = Path(path)
        self.on_write = on_write or (lambda path, nbytes: None)
        self.journal = Journal(journal_path(self.path), self.on_write)
        self._rows = 0  # timeline rows already in the document or the journal
        self._head: dict[str, Any] = {}  # the telemetry record without its timeline, as last written

    @property
    def started(self) -> bool:
        return self.journal.started

    @contextlib.contextmanager
    def _naming_the_result(self):
        """An OS error while saving (a full disk) names the result, not the temp file or journal that failed:
        the result is what the user resumes."""
        try:
            yield
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc

    def start(self, result: Result) -> None:
        """Write the whole document (for a resumed file: everything it held, folded) and an empty journal."""
        check_journal(self.path)
        data = result_to_json(result).encode("utf-8")
        with self._naming_the_result():
            _atomic_write(self.path, data)
            self.on_write(self.path, len(data))
            self.journal.start(data)
        self._head, timeline = _split(result.telemetry.to_dict())
        self._rows = len(timeline)

    def append(self, point: Point | None = None, ceilings: Ceilings | dict[str, Any] | None = None,
               telemetry: Telemetry | dict[str, Any] | None = None) -> None:
        """Journal what changed since the last save: the new point, new ceilings, new telemetry rows."""
        entries: list[dict[str, Any]] = []
        if ceilings is not None:
            entries.append({"ceilings": Ceilings.from_dict(ceilings).to_dict()})
        if point is not None:
            entries.append({"point": point.to_dict()})
        if telemetry is not None:
            entries += self._telemetry_entries(telemetry)
        with self._naming_the_result():
            self.journal.append(entries)

    def _telemetry_entries(self, telemetry: Telemetry | dict[str, Any]) -> list[dict[str, Any]]:
        head, timeline = _split(telemetry.to_dict() if isinstance(telemetry, Telemetry) else telemetry)
        entries = []
        if head != self._head:
            entries.append({"telemetry": head})
            self._head = head
        if len(timeline) > self._rows:
            entries.append({"timeline": list(timeline[self._rows:])})
            self._rows = len(timeline)
        return entries

    def finish(self, result: Result) -> None:
        """Fold: write the whole document once, atomically, then remove the journal."""
        with self._naming_the_result():
            save_result(result, self.path)
        self.on_write(self.path, self.path.stat().st_size)
        self.journal.remove()


def _split(record: dict[str, Any]) -> tuple[dict[str, Any], Sequence[dict[str, Any]]]:
    head = {k: v for k, v in record.items() if k != "timeline"}
    return head, record.get("timeline") or ()
