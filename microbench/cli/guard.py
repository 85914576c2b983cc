"""What every writing command holds while it runs: its output to itself, and one answer to a signal.

``writing_to`` is the one helper.  It takes an exclusive ``flock`` on ``<output>.lock`` beside each output
before anything is written there: a second run given the same ``-o`` is refused (exit 2, naming the pid and
command line of the run that holds it) instead of interleaving its saves with the first's.  The kernel drops
the lock when the process ends, however it ends (a crash or SIGKILL too), so a stale lock file never blocks.

It also answers SIGINT and SIGTERM for the parts of a command that have no handler of their own (the sweep,
the ceilings and the measured profile install theirs while they measure, and save what was measured): the run
stops, an output folder this run created and did not finish is removed, files named as unfinished are
removed, one line says so, and the exit status is 128 + the signal's number (130, 143).  A folder it created
and left empty (a refusal) is removed too, so a refused command leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import click

from microbench.cli.edges import NO_SPACE, BadInput
from microbench.timing.interrupt import signal_handlers


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


def _remove_unfinished(new_folders: list[Path], unfinished: Sequence[Path]) -> str:
    """Remove the output folders this run created (everything in them is this run's) and the unfinished
    files; say what was removed."""
    removed = [folder for folder in new_folders if folder.is_dir() and not folder.is_symlink()]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    files = [path for path in unfinished if path.is_file() or path.is_symlink()]
    for path in files:
        path.unlink(missing_ok=True)
    # A file inside a removed folder went with it: name the folder alone.
    named = removed + [path for path in files if not any(folder in path.parents for folder in removed)]
    if not named:
        return "nothing was written"
    return "removed the unfinished " + ", ".join(map(str, named)) + "; nothing was kept"


def _filesystem_of(path: Path) -> Path:
    """The mount point of the filesystem ``path`` is (or would be) on: what the user frees space on."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path


def _no_space_line(exc: OSError, given: list[Path], new_folders: list[Path],
                   kept: Callable[[Path], str] | None) -> str:
    """One line for a full disk: which filesystem, what is saved, and what to run once space is freed."""
    failed = Path(exc.filename) if isinstance(exc.filename, str) else (given[0] if given else Path("."))
    head = f"no space left on the filesystem at {_filesystem_of(failed)}"
    if kept is not None:
        return f"{head}: {kept(failed)}"
    removed = _remove_unfinished(new_folders, ())
    removed = "" if removed == "nothing was written" else f" ({removed})"
    what = given[0] if given else "the output"
    return f"{head}: {what} was not written{removed}; free space and run the command again"


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: what a finished or refused run wrote there stays


@contextlib.contextmanager
def writing_to(*outputs: Path | None, folder: Path | None = None, unfinished: Sequence[Path] = (),
               kept_on_full_disk: Callable[[Path], str] | None = None,
               kept_on_signal: str | None = None) -> Iterator[None]:
    """Hold ``outputs`` (files; None ones are skipped) and the output ``folder`` for the run: locked against
    other runs; on SIGINT/SIGTERM ``folder``, when this run created it, is removed with the ``unfinished``
    files (exit 128 + signal).  A full disk (or quota) is one line, exit 2: ``kept_on_full_disk(file that
    failed)`` says what is saved and how to continue; without it the run's new folder is removed and the line
    says to run again.  ``kept_on_signal``: what a run that saves as it goes kept (nothing is then removed).
    Folders created and left empty are removed on any exit."""
    given = [Path(output) for output in (*outputs, folder) if output is not None]
    created = [made for output in given for made in _missing_folders(output)]
    new_folders = [Path(folder)] if folder is not None and Path(folder) in created else []
    locks: list[tuple[Path, int]] = []
    try:
        for output in given:
            handle = _take_lock(output)
            if handle is not None:
                locks.append((output, handle))
        with _stop_on_signals():
            yield
    except Stopped as stop:
        what = kept_on_signal or _remove_unfinished(new_folders, unfinished)
        click.echo(f"gpubench: interrupted by {signal.Signals(stop.signum).name}; {what}", err=True)
        raise SystemExit(128 + stop.signum) from None
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        raise BadInput(_no_space_line(exc, given, new_folders, kept_on_full_disk)) from None
    finally:
        for output, handle in locks:
            _release_lock(output, handle)
        _remove_empty(created)
