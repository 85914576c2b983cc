"""The groups of a search run in worker processes, their records journalled as they arrive.

``run_groups`` hands each group to a pool of ``workers`` processes (``concurrent.futures`` with a spawn context:
each worker imports the simulator afresh and builds the profiles it needs; one worker runs in this process).  A
record is appended to the journal (``SearchJournal``, ``<output>.journal`` beside the output folder: a header naming
the search's identity, then one JSON line per finished configuration, each flushed and fsync'd) before it is
counted, so whatever stops the search (SIGINT, SIGTERM, a kill), every configuration that finished is on disk, and
``--resume`` skips them.  When the parent stops, its workers are ended (their running groups are lost: at most one
group a worker) and the journal is left as it is.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import hashlib
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from roofline.core.errors import BadInputError
from roofline.result.io import _atomic_write, journal_path, refuse_special
from roofline.search.evaluate import SearchContext, evaluate_group, start_worker
from roofline.search.space import Group

JOURNAL_KIND = "gpubench-search-journal"

Finished = Callable[[list[dict[str, Any]]], None]


class SearchJournal:
    """``<output>.journal``: the configurations a search finished, one JSON line each, after a header naming the
    search (the sha256 of its identity: ``roofline.search.space.identity``)."""

    def __init__(self, output: Path, identity: bytes):
        self.path = journal_path(output)
        self.identity = identity
        self._stream: IO[bytes] | None = None

    def header(self) -> bytes:
        return (json.dumps({"kind": JOURNAL_KIND, "search_sha256": hashlib.sha256(self.identity).hexdigest()})
                + "\n").encode("utf-8")

    def read(self) -> list[dict[str, Any]]:
        """The records a journal of this same search holds (an absent journal: none); a journal of another search
        is refused in one line (its options differ)."""
        refuse_special(self.path)
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        first = data.split(b"\n", 1)[0]
        try:
            head = json.loads(first)
        except ValueError:
            head = {}
        if not isinstance(head, dict) or head.get("kind") != JOURNAL_KIND:
            raise BadInputError(f"{self.path}: not a gpubench search journal; gpubench will not read or replace it")
        if head.get("search_sha256") != hashlib.sha256(self.identity).hexdigest():
            raise BadInputError(f"{self.path}: journals a search with other options (model, workload, SLO, rates "
                                "or space); give the same options to --resume it, or run without --resume to start "
                                "over")
        lines = data.split(b"\n")[1:-1]  # what follows the last newline is a line torn by a kill: dropped
        records = []
        for number, line in enumerate(lines, start=2):
            try:
                record = json.loads(line)
            except ValueError:
                raise BadInputError(f"{self.path}: line {number} is not JSON; move the journal away to start "
                                    "over") from None
            if isinstance(record, dict) and isinstance(record.get("key"), str):
                records.append(record)
        return records

    def start(self, kept: list[dict[str, Any]]) -> None:
        """A journal holding ``kept`` (a resumed search's records) and open for more: written whole, then appended."""
        refuse_special(self.path)
        body = b"".join(json.dumps(r, allow_nan=False).encode("utf-8") + b"\n" for r in kept)
        _atomic_write(self.path, self.header() + body)
        self._stream = open(self.path, "ab")  # noqa: SIM115 - held open while the search runs

    def append(self, records: list[dict[str, Any]]) -> None:
        if self._stream is None:
            raise RuntimeError("SearchJournal.append before start")
        self._stream.write(b"".join(json.dumps(r, allow_nan=False).encode("utf-8") + b"\n" for r in records))
        self._stream.flush()
        os.fsync(self._stream.fileno())

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def run_groups(groups: list[Group], context: SearchContext, workers: int, finished: Finished) -> None:
    """Run every group, handing each one's records to ``finished`` as it ends (in the order they end)."""
    if not groups:
        return
    if workers <= 1:
        for group in groups:
            finished(evaluate_group(group, context))
        return
    with _pool(min(workers, len(groups)), context) as pool:
        pending = {pool.submit(evaluate_group, group) for group in groups}
        while pending:
            done, pending = futures.wait(pending, timeout=0.5, return_when=futures.FIRST_COMPLETED)
            for future in done:
                finished(future.result())


@contextlib.contextmanager
def _pool(workers: int, context: SearchContext) -> Iterator[futures.ProcessPoolExecutor]:
    """A spawn pool whose workers are ended, not waited for, when the search stops early (a signal, an error)."""
    pool = futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=start_worker, initargs=(context,))
    try:
        yield pool
    except BaseException:
        processes = list(getattr(pool, "_processes", {}).values())  # the executor keeps no public handle on them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(Exception):
                process.terminate()
        for process in processes:
            with contextlib.suppress(Exception):
                process.join(timeout=5)
        raise
    pool.shutdown(wait=True)
