"""Reading and writing result documents: atomic saves, strict loads, schema migration.

A save never leaves a half-written file (temp file, fsync, rename), so an interrupted sweep loses at
most the point in flight.  A load of anything else than a valid document raises ``ResultError`` with a
one-line message; loading only parses JSON, it never executes anything.

A sweep writes its document once and then journals each point beside it (``roofline.result.journal``); a sweep
killed before folding leaves ``<result>.journal``, which ``load_result`` folds in (see ``fold_journal``).
The format, field by field, and its history: docs/result-format.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from roofline.core.errors import BadInputError
from roofline.result.document import SCHEMA_VERSION, Point, Result
from roofline.result.sections import Telemetry

JOURNAL_KIND = "gpubench-result-journal"
# Larger than any real sweep by orders of magnitude; refusing early keeps a hostile file from eating memory.
MAX_RESULT_BYTES = 512 * 1024 * 1024


class ResultError(BadInputError):
    """A result file that cannot be used; the message is one line, fit for the terminal."""


# The other documents gpubench writes (each names its kind), and what to do with one handed over as a result.
OTHER_DOCUMENTS = {
    "gpubench-step-profile": "a step profile (gpubench profile; give it to gpubench simulate)",
    "gpubench-simulation": "a simulation (gpubench simulate)",
    "gpubench-validation": "a validation (gpubench validate)",
    JOURNAL_KIND: "a result's journal (load the result it sits beside)",
}


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a measurement can have")


# Migrations from version N to N + 1, applied in order on load.  None yet: version 1 is the first.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def migrate(document: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to ``SCHEMA_VERSION``; refuse newer ones."""
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ResultError("not a gpubench result: no integer schema_version")
    if version > SCHEMA_VERSION:
        raise ResultError(
            f"schema_version {version} is newer than this gpubench reads ({SCHEMA_VERSION}); upgrade gpubench"
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ResultError(f"no migration from schema_version {version}")
        document = MIGRATIONS[version](document)
        version = document["schema_version"]
    return document


def result_from_json(text: str, source: str = "<string>") -> Result:
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise ResultError(f"{source}: not valid JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(document, dict):
        raise ResultError(f"{source}: not a gpubench result (top level is not an object)")
    kind = document.get("kind")
    if isinstance(kind, str) and kind in OTHER_DOCUMENTS:  # a result has no kind: these are gpubench's others
        raise ResultError(f"{source}: {OTHER_DOCUMENTS[kind]}, not a sweep result")
    try:
        document = migrate(document)
        if not isinstance(document.get("points"), list):
            raise ResultError(f"points must be a list, found {json.dumps(document.get('points'))[:40]}")
        return Result.from_dict(document)
    except ResultError as exc:
        raise ResultError(f"{source}: {exc}") from None
    except KeyError as exc:
        raise ResultError(f"{source}: missing field {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ResultError(f"{source}: invalid result ({exc})") from None


def load_result(path: str | os.PathLike) -> Result:
    """Load and validate one result file, with what its journal adds when a sweep was killed mid-way."""
    path = Path(path)
    data = _read(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultError(f"{path}: not valid JSON (not UTF-8 text)") from None
    result = result_from_json(text, str(path))
    journal = journal_path(path)
    if os.path.isfile(journal) and not os.path.islink(journal):
        result = fold_journal(result, data, _read(journal), str(journal))
    return result


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise ResultError(f"{path}: {size} bytes is larger than any result ({MAX_RESULT_BYTES} max)")
        return path.read_bytes()
    except FileNotFoundError:
        raise ResultError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultError(f"{path}: is a directory, not a result file") from None
    except OSError as exc:
        raise ResultError(f"{path}: cannot read ({exc.strerror})") from None


def journal_path(path: str | os.PathLike) -> Path:
    """Where a sweep journals the points it saves into ``path``."""
    path = Path(path)
    return path.with_name(path.name + ".journal")


def journal_entries(document: bytes, journal: bytes, source: str = "<journal>",
                    kind: str = JOURNAL_KIND) -> list[dict[str, Any]]:
    """The entries a journal adds to ``document`` (the bytes it was started on), in order.

    A journal whose header names another document (an earlier run's, already folded) adds nothing; a last
    line without its newline was being written when the process died and is dropped."""
    if b"\n" not in journal:  # empty, or a header torn by the kill: the process died before any entry
        return []
    lines = journal.split(b"\n")
    header = _journal_line(lines[0], source, 1)
    if header.get("kind") != kind:
        raise ResultError(f"{source}: not a gpubench journal of this kind ({kind})")
    if header.get("document_sha256") != hashlib.sha256(document).hexdigest():
        return []
    # lines[-1] is what follows the last newline: empty, or a line torn by the kill.
    return [_journal_line(line, source, number) for number, line in enumerate(lines[1:-1], start=2)]


def fold_journal(result: Result, document: bytes, journal: bytes, source: str = "<journal>") -> Result:
    """``result`` (parsed from ``document``) with the points, ceilings and telemetry its journal adds."""
    entries = journal_entries(document, journal, source)
    if not entries:
        return result
    points, telemetry = list(result.points), result.telemetry.to_dict()
    rows, ceilings = list(telemetry.pop("timeline", None) or ()), result.ceilings
    for number, entry in enumerate(entries, start=2):
        try:
            if "point" in entry:
                points.append(Point.from_dict(entry["point"]))
            if "ceilings" in entry:
                ceilings = entry["ceilings"]
            if "telemetry" in entry:
                telemetry = dict(entry["telemetry"])
            rows += entry.get("timeline") or []
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultError(f"{source}: line {number}: invalid entry ({exc})") from None
    if rows:
        telemetry["timeline"] = rows
    try:
        return replace(result, points=tuple(points), ceilings=ceilings, telemetry=Telemetry.from_dict(telemetry))
    except (TypeError, ValueError) as exc:
        raise ResultError(f"{source}: invalid entry ({exc})") from None


def _journal_line(line: bytes, source: str, number: int) -> dict[str, Any]:
    try:
        entry = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ResultError(f"{source}: line {number} is not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(entry, dict):
        raise ResultError(f"{source}: line {number} is not an object")
    return entry


def check_journal(path: str | os.PathLike) -> None:
    """The journal beside ``path`` may be written: absent, or a regular file that is a gpubench journal."""
    journal = journal_path(path)
    refuse_special(journal)
    if journal.exists():
        with open(journal, "rb") as stream:
            first = stream.readline(4096)
        try:
            kind = json.loads(first).get("kind")
        except (ValueError, AttributeError):
            kind = None
        if not (isinstance(kind, str) and kind.startswith("gpubench-") and kind.endswith("-journal")):
            raise ResultError(f"{journal}: exists and is not a gpubench journal; gpubench will not replace it")


def result_to_json(result: Result) -> str:
    # allow_nan=False: NaN and Infinity are not JSON, and no measured quantity may be one.
    return json.dumps(result.to_dict(), indent=1, allow_nan=False) + "\n"


def save_result(result: Result, path: str | os.PathLike) -> None:
    """Write atomically: temp file in the same folder, fsync, rename over the target (a regular file only)."""
    path = Path(path)
    text = result_to_json(result)
    refuse_special(path)
    _atomic_write(path, text.encode("utf-8"))


def _atomic_write(path: Path, data: bytes) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(handle, 0o666 & ~_umask())  # mkstemp makes 0600; a result is as readable as any file
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    try:
        directory = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def refuse_special(path: Path) -> None:
    """Only a regular file may be replaced: a rename over /dev/null, a FIFO or a symlink would destroy it."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ResultError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    if stat.S_ISLNK(mode):
        raise ResultError(f"{path}: is a symbolic link; gpubench only replaces regular files (give the real path)")
    if stat.S_ISDIR(mode):
        raise ResultError(f"{path}: is a directory; give a file name")
    if not stat.S_ISREG(mode):
        raise ResultError(f"{path}: is a device, FIFO or socket; gpubench only replaces regular files")


# What gpubench adds to an output's name for the files beside it: the longest is an atomic save of the profile's
# partial file, ``.<name>.partial.XXXXXXXX.tmp`` (22 bytes more); the staging folder adds 17, ``.lock`` 5.
NAME_HEADROOM_BYTES = 32
# POSIX NAME_MAX and PATH_MAX on Linux, where the filesystem does not say (pathconf).
DEFAULT_NAME_MAX, DEFAULT_PATH_MAX = 255, 4096


def _shown(path: Path) -> str:
    """``path`` with each very long part shortened, for a one-line message."""
    parts = [p if len(p) <= 40 else f"{p[:16]}…{p[-8:]}" for p in str(path).split(os.sep)]
    return os.sep.join(parts)


def _limits(absolute: str) -> tuple[int, int]:
    """NAME_MAX and PATH_MAX of the filesystem the nearest existing folder above ``absolute`` is on."""
    folder = absolute
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        folder = os.path.dirname(folder)
    limits = []
    for name, default in (("PC_NAME_MAX", DEFAULT_NAME_MAX), ("PC_PATH_MAX", DEFAULT_PATH_MAX)):
        try:
            limits.append(os.pathconf(folder, name))
        except (OSError, ValueError):
            limits.append(default)
    return limits[0], limits[1]


def check_output_name(path: str | os.PathLike) -> None:
    """``path`` fits the filesystem: each folder name in it within NAME_MAX bytes, its own name within NAME_MAX
    less ``NAME_HEADROOM_BYTES`` (the names gpubench makes beside it), the whole within PATH_MAX."""
    absolute = os.path.abspath(path)
    name_max, path_max = _limits(absolute)
    parts = [part for part in absolute.split(os.sep) if part]
    for part in parts[:-1]:
        if len(os.fsencode(part)) > name_max:
            raise ResultError(f"{_shown(Path(path))}: the folder name {_shown(Path(part))} is "
                              f"{len(os.fsencode(part))} bytes, more than the {name_max} a name can have here")
    own = len(os.fsencode(parts[-1])) if parts else 0
    if own > name_max - NAME_HEADROOM_BYTES:
        raise ResultError(f"{_shown(Path(path))}: its name is {own} bytes; give one of at most "
                          f"{name_max - NAME_HEADROOM_BYTES} (gpubench keeps files named after it beside it, "
                          f"such as <name>.lock, in the {name_max} bytes a name can have here)")
    if len(os.fsencode(absolute)) + NAME_HEADROOM_BYTES >= path_max:
        raise ResultError(f"{_shown(Path(path))}: the path is {len(os.fsencode(absolute))} bytes, too long for "
                          f"the {path_max} a path can have here with gpubench's files beside it")


def check_output(path: str | os.PathLike, overwrite: bool = True, folder: bool = False,
                 resumable: bool = True) -> None:
    """The one check every ``-o`` goes through, before anything is measured or written; its name first, within
    the filesystem's limits (``check_output_name``).

    A file output may be a new path or (with ``overwrite``) a regular file.  ``folder``: a folder that collects
    files as they are saved (``sweep --device all``) must be a new path or a directory; a folder written whole
    (simulate, report, ...) goes through ``roofline.result.folders.check_output_folder`` instead.  Either way its
    folder must be writable: the probe creates and removes a file.  ``resumable``: the refusal of an existing
    file also names ``--resume`` (a sweep's output can be resumed).
    """
    path = Path(path)
    check_output_name(path)
    if folder:
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise ResultError(f"{path}: exists and is not a folder; give a folder for the output files")
        where = path
    else:
        refuse_special(path)
        check_journal(path)
        if path.exists() and not overwrite:
            raise ResultError(f"{path}: already exists; --force replaces it"
                              + (", --resume continues it" if resumable else ""))
        where = path.parent if str(path.parent) else Path(".")
    try:
        where.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".gpubench-probe.", dir=where)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise ResultError(f"{path}: cannot write there ({exc.strerror or exc})") from None


def write_output_file(path: Path, data: str | bytes) -> None:
    """One file of an output folder (compare.md, decode.png): atomic, and never over a special file."""
    refuse_special(path)
    _atomic_write(path, data.encode("utf-8") if isinstance(data, str) else data)
