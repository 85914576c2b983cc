"""Output folders, written whole.

A command that writes a folder (simulate, plan, decode, report, compare, validate, a sweep's report) writes every
file into a staging folder beside it, ``.<name>.partial-<pid>`` on the same filesystem (``open_staging``), and
only when all of them are written puts it at ``-o`` by renames (``replace_folder``); an error, a signal or a full
disk removes the staging folder (``discard_staging``) and leaves the folder at ``-o`` as it was.  So the folder at
``-o`` is always one run's: the earlier run's until the new one is complete, then the new one's.

A folder is replaced only when it is new, empty, or an earlier run's output of the same command: its document
(``FolderKind.document``) says so.  A folder of anything else is refused in one line (``check_output_folder``),
never merged into or emptied; files a person added to an output folder (not the command's own) are carried into
the new one.  ``microbench.cli.guard.writing_to`` holds the lock on the final path and calls these.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roofline.result.io import MAX_RESULT_BYTES, ResultError, check_output_name, refuse_special


@dataclass(frozen=True)
class FolderKind:
    """What one command writes into its output folder, and how an earlier run's folder of it is recognised:
    ``document`` holds a JSON object whose ``kind`` is ``kind`` (or, for documents that name no kind, which
    holds every key of ``keys``).  ``files``: the command's other files of fixed names (each, like ``document``,
    replaced only when it is a regular file); ``patterns``: names it makes from its input; ``page``: the files
    of a report page in a folder (``roofline.report.page.page_files``: its PNGs), when the command writes one."""

    command: str
    document: str
    kind: str | None = None
    keys: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    page: Callable[[Path], set[str]] | None = None

    def holds(self, folder: Path) -> bool:
        """Whether ``folder`` is an earlier output of this command: its document is a regular file of this kind."""
        path = folder / self.document
        try:
            info = os.lstat(path)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RESULT_BYTES:
                return False
            document = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return False
        if not isinstance(document, dict):
            return False
        if self.kind is not None and document.get("kind") != self.kind:
            return False
        return all(key in document for key in self.keys)

    def owned(self, folder: Path) -> set[str]:
        """The entries of ``folder`` this command writes: replaced by the next run's, never carried over."""
        names = {self.document, *self.files} | (self.page(folder) if self.page is not None else set())
        return {entry for entry in os.listdir(folder)
                if entry in names or any(fnmatch.fnmatchcase(entry, p) for p in self.patterns)}


def _is_current_folder_or_above(folder: Path) -> bool:
    here, target = os.path.realpath(os.getcwd()), os.path.realpath(folder)
    return here == target or here.startswith(target.rstrip(os.sep) + os.sep)


def check_output_folder(folder: str | os.PathLike, kind: FolderKind) -> None:
    """May ``kind.command`` write ``folder`` whole?  A new path, an empty folder, or an earlier output of the same
    command, each of the command's own files in it a regular file (a link or FIFO is never replaced).  Anything
    else is one line (``ResultError``), before anything runs."""
    folder = Path(folder)
    check_output_name(folder)  # its name, with room for the lock and the staging folder beside it
    if _is_current_folder_or_above(folder):
        raise ResultError(f"{folder}: is the folder you are in (or holds it), which gpubench would replace whole; "
                          "give a new folder's name for the output files")
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ResultError(f"{folder}: exists and is not a folder; give a folder for the output files")
    if not folder.exists():
        return
    for name in (kind.document, *kind.files):
        refuse_special(folder / name)
    try:
        entries = sorted(os.listdir(folder))
    except OSError as exc:
        raise ResultError(f"{folder}: cannot read it ({exc.strerror or exc})") from None
    if entries and not kind.holds(folder):
        shown = ", ".join(entries[:3]) + (", …" if len(entries) > 3 else "")
        raise ResultError(f"{folder}: holds files ({shown}) and is not a gpubench {kind.command} output (no "
                          f"{kind.document} of one); gpubench replaces an output folder whole, so give a new or "
                          "empty folder")


def staging_path(folder: Path) -> Path:
    """Where this process writes ``folder`` before it is put in place: a hidden sibling, the same filesystem."""
    absolute = Path(os.path.abspath(folder))
    return absolute.with_name(f".{absolute.name}.partial-{os.getpid()}")


def _remove_stale_staging(folder: Path) -> None:
    """Staging folders of ``folder`` left by runs that were killed (their process is gone): never a finished run's."""
    absolute = Path(os.path.abspath(folder))
    prefix = f".{absolute.name}.partial-"
    try:
        entries = os.listdir(absolute.parent)
    except OSError:
        return
    for entry in entries:
        pid = entry[len(prefix):]
        if entry.startswith(prefix) and pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(absolute.parent / entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def open_staging(folder: str | os.PathLike) -> Path:
    """A new, empty staging folder for ``folder`` (its folders above made as needed).  An error that is not a
    full disk is one line (``ResultError``); a full disk is left to the caller, which says it for every command."""
    folder = Path(folder)
    staging = staging_path(folder)
    try:
        staging.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(folder)
        shutil.rmtree(staging, ignore_errors=True)  # this pid's, from a killed run long ago
        staging.mkdir()
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise ResultError(f"{folder}: cannot write there ({exc.strerror or exc})") from None
    return staging


def discard_staging(staging: Path) -> None:
    """Remove a staging folder and everything in it (the run did not finish)."""
    shutil.rmtree(staging, ignore_errors=True)


def replace_folder(staging: Path, folder: str | os.PathLike, kind: FolderKind) -> None:
    """Put the finished ``staging`` at ``folder``: one rename for a new or empty folder; an earlier output is moved
    aside (``.<name>.old-XXXXXXXX``), the new one renamed in, the entries a person added to the old one (not
    ``kind``'s, nor a name the new run wrote) moved over, and the old one removed.  On an error the old folder is
    put back and the error raised; only a crash between the renames leaves it aside, whole."""
    folder = Path(os.path.abspath(folder))
    if not os.path.lexists(folder) or (folder.is_dir() and not os.listdir(folder)):
        os.rename(staging, folder)  # onto an empty folder too: rename(2) replaces an empty directory
        _sync(folder.parent)
        return
    os.chmod(staging, stat.S_IMODE(os.stat(folder).st_mode))
    skipped = kind.owned(folder) | set(os.listdir(staging))
    carried = [entry for entry in os.listdir(folder) if entry not in skipped]
    aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))  # a name no one else has
    try:
        os.rename(folder, aside)  # onto the empty folder mkdtemp made
    except OSError:
        os.rmdir(aside)
        raise
    try:
        os.rename(staging, folder)
    except OSError:
        os.rename(aside, folder)
        raise
    for entry in carried:
        os.rename(aside / entry, folder / entry)
    shutil.rmtree(aside, ignore_errors=True)
    _sync(folder.parent)


def _sync(folder: Path) -> None:
    """The renames in ``folder`` on disk (a crash after a reply must not bring the old folder back)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
