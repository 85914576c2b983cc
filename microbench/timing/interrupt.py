"""SIGINT and SIGTERM during a sweep: the first finishes the point in flight and stops; the second
abandons the point in flight.  Either way what was measured is already saved.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


class Abandon(BaseException):
    """Raised by a second signal: leave the point in flight now (BaseException, so no point catches it)."""

    def __init__(self, signum: int):
        super().__init__(f"abandoned by signal {signum}")
        self.signum = signum


@contextlib.contextmanager
def signal_handlers(handler: Callable) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM while inside (main thread only); the previous handlers restored after."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, notice: Callable[[str], None]):
    """Install handlers that set ``stop`` (recording ``stop.signum``); restore the old ones afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if stop.is_set():
            raise Abandon(signum)
        stop.signum = signum  # pyright: ignore[reportAttributeAccessIssue]  # read back with getattr(stop, "signum")
        stop.set()
        notice(f"{signal.Signals(signum).name}: finishing the point in flight, then saving "
               "(send it again to abandon the point)")

    with signal_handlers(handler):
        yield
