"""What every writing command holds while it runs: its output to itself, written whole, and one answer to a signal.

``writing_to`` is the one helper.  It checks each output's name first (``check_output_name``: a name too long
for the filesystem is one line, exit 2) and takes an exclusive ``flock`` on ``<output>.lock`` beside each output
before anything is written there: a second run given the same ``-o`` is refused (exit 2, naming the pid and
command line of the run that holds it) instead of interleaving its saves with the first's.  The kernel drops
the lock when the process ends, however it ends (a crash or SIGKILL too), so a stale lock file never blocks.

An output folder is written whole (``roofline.result.folders``): the command writes into a staging folder
beside it, and the folder at ``-o`` is replaced by renames only once every file is written, so it always holds
one run's files.  An existing folder is replaced only when it is empty or an earlier output of the same
command; anything else is refused before the run starts.

It also answers SIGINT and SIGTERM for the parts of a command that have no handler of their own (the sweep,
the ceilings and the measured profile install theirs while they measure, and save what was measured): the run
stops, the staging folder is removed (the folder at ``-o`` is as it was), one line says so, and the exit
status is 128 + the signal's number (130, 143).  A signal that comes while the finished folder is being put in
place waits for the renames.  Folders above an output that a run made and left empty (a refusal) are removed
too, so a refused command leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from microbench.cli.edges import NO_SPACE, BadInput
from microbench.timing.interrupt import signal_handlers
from roofline.result.folders import FolderKind, check_output_folder, discard_staging, open_staging, replace_folder
from roofline.result.io import ResultError, check_output_name


class Stopped(BaseException):
    """A signal arrived where the command has no handler of its own (BaseException: no ``except Exception``
    in the library swallows it)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def lock_path(output: Path) -> Path:
    """Where the lock of ``output`` (a file or a folder) lives: beside it, as ``<name>.lock``."""
    absolute = Path(os.path.abspath(output))
    return absolute / ".gpubench.lock" if not absolute.name else absolute.with_name(absolute.name + ".lock")


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    pid, _, command = text.partition(" ")
    return f"pid {pid}: {command}" if pid.isdigit() else "its pid not recorded"


def _take_lock(output: Path) -> int | None:
    """The open, exclusively locked lock file of ``output``; refused (exit 2) when another run holds it.
    None where no lock file can be made (a file where its folder should be, no write permission): the command
    cannot write its output there either, and its own check refuses that in one line."""
    path = lock_path(output)
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            return None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            raise BadInput(f"{output}: another gpubench run is writing it ({_holder(path)}); wait for it to end "
                           "or give another -o") from None
        # A run that releases unlinks the file before closing it: a lock taken on that unlinked file would
        # not exclude a third run that creates a new one, so take it again on the file now at the path.
        try:
            current = os.stat(path).st_ino == os.fstat(handle).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(handle)
    with contextlib.suppress(OSError):  # who holds it, for the refusal; the lock excludes without it (a full disk)
        os.ftruncate(handle, 0)
        os.write(handle, f"{os.getpid()} gpubench {' '.join(sys.argv[1:])}\n".encode())
    return handle


def _release_lock(output: Path, handle: int) -> None:
    with contextlib.suppress(OSError):
        lock_path(output).unlink()
    os.close(handle)


def _missing_folders(path: Path) -> list[Path]:
    """The folders above ``path`` (and ``path`` itself) that do not exist yet, deepest first."""
    missing = []
    for folder in [path, *path.parents]:
        if folder.exists() or folder.is_symlink():
            break
        missing.append(folder)
    return missing


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Stopped`` (in the main thread; elsewhere there is no handler to install)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Stopped(signum)

    with signal_handlers(handler):
        yield


@contextlib.contextmanager
def _signals_held() -> Iterator[list[int]]:
    """SIGINT and SIGTERM wait while a folder is put in place (a few renames, never left half done); the signals
    that came are listed, for the caller to answer once it is."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    with signal_handlers(lambda signum, frame: caught.append(signum)):
        yield caught


def _filesystem_of(path: Path) -> Path:
    """The mount point of the filesystem ``path`` is (or would be) on: what the user frees space on."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path


def _no_space_line(exc: OSError, given: list[Path], kept: Callable[[Path], str] | None, untouched: str) -> str:
    """One line for a full disk: which filesystem, what is saved, and what to run once space is freed."""
    failed = Path(exc.filename) if isinstance(exc.filename, str) else (given[0] if given else Path("."))
    head = f"no space left on the filesystem at {_filesystem_of(failed)}"
    if kept is not None:
        return f"{head}: {kept(failed)}"
    what = given[0] if given else "the output"
    return f"{head}: {what} was not written{untouched}; free space and run the command again"


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: what a finished or refused run wrote there stays


def _checked(check: Callable[[], Path | None]) -> Path | None:
    """A check of ``roofline.result`` (a name, a folder) as the CLI's one line, exit 2."""
    try:
        return check()
    except ResultError as exc:
        raise BadInput(str(exc)) from None


@dataclass
class _Staged:
    """Where a run's output folder is being written, and whether it was put in place."""

    staging: Path | None = None
    done: bool = False

    def holds(self, exc: OSError) -> bool:
        """Whether ``exc`` is about a file of the staging folder (writing the output, not reading an input)."""
        name = exc.filename if isinstance(exc.filename, str) else None
        return self.staging is not None and name is not None and Path(name).is_relative_to(self.staging)


@contextlib.contextmanager
def _staged(folder: Path | None, kind: FolderKind | None, state: _Staged) -> Iterator[Path | None]:
    """The staging folder of ``folder`` while the body writes it; put in place at the end (``state.done``),
    removed on any exception.  None without a folder."""
    if folder is None:
        yield None
        return
    if kind is None:
        raise TypeError("an output folder is written whole: give its FolderKind")
    _checked(lambda: check_output_folder(folder, kind))
    try:
        staging = state.staging = _checked(lambda: open_staging(folder))
        assert staging is not None
        yield staging
        with _signals_held() as caught:
            replace_folder(staging, folder, kind)
    except BaseException:
        if state.staging is not None:
            discard_staging(state.staging)
        raise
    state.done = True
    if caught:  # answered now that the folder is whole
        raise Stopped(caught[0])


@contextlib.contextmanager
def writing_to(*outputs: Path | None, folder: Path | None = None, kind: FolderKind | None = None,
               kept_on_full_disk: Callable[[Path], str] | None = None,
               kept_on_signal: str | None = None) -> Iterator[Path | None]:
    """Hold ``outputs`` (files; None ones are skipped) and the output ``folder`` for the run, locked against
    other runs, each name checked first (``check_output_name``).

    ``folder`` is written whole (``roofline.result.folders``): checked against ``kind`` (new, empty, or an
    earlier output of the same command), the body writes into the staging folder this yields (None without a
    folder), and only when the body ends normally is it put at ``folder``.  An exception, SIGINT/SIGTERM (exit
    128 + signal) or a full disk removes the staging folder and leaves ``folder`` as it was, and says so.
    A full disk (or quota) is one line, exit 2: ``kept_on_full_disk(file that failed)`` says what is saved and
    how to continue; without it the line says to run again.  ``kept_on_signal``: what a run that saves as it
    goes kept.  Folders above the outputs created and left empty are removed on any exit."""
    folder = Path(folder) if folder is not None else None
    given = [Path(output) for output in (*outputs, folder) if output is not None]
    for output in given:
        _checked(lambda output=output: check_output_name(output))
    created = [made for output in given for made in _missing_folders(output) if made != folder]
    untouched = f" ({folder} is as it was)" if folder is not None and os.path.lexists(folder) else ""
    state = _Staged()
    locks: list[tuple[Path, int]] = []
    try:
        for output in given:
            handle = _take_lock(output)
            if handle is not None:
                locks.append((output, handle))
        with _stop_on_signals(), _staged(folder, kind, state) as staging:
            yield staging
    except Stopped as stop:
        what = kept_on_signal or (f"{folder} was written whole before it stopped" if state.done else
                                  f"nothing was written{untouched}")
        click.echo(f"gpubench: interrupted by {signal.Signals(stop.signum).name}; {what}", err=True)
        raise SystemExit(128 + stop.signum) from None
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise BadInput(_no_space_line(exc, given, kept_on_full_disk, untouched)) from None
        if state.holds(exc):  # the output could not be written (a failing disk, a read-only remount)
            raise BadInput(f"{folder}: cannot write there ({exc.strerror or exc}){untouched}") from None
        raise
    finally:
        for output, handle in locks:
            _release_lock(output, handle)
        _remove_empty(created)


@contextlib.contextmanager
def writing_folder(folder: Path, kind: FolderKind, kept: str | None = None) -> Iterator[Path]:
    """``writing_to`` of an output folder that is always given: yields the staging folder to write into.
    ``kept``: what an earlier step saved, said instead when a signal or a full disk stops the folder."""
    with writing_to(folder=folder, kind=kind, kept_on_signal=kept,
                    kept_on_full_disk=None if kept is None else lambda failed: kept) as staging:
        assert staging is not None  # writing_to yields one for every folder
        yield staging
