"""Routers: which replica an arriving request goes to, decided at its arrival from each replica's state then.

``round-robin`` ignores the state; ``least-loaded`` picks the replica with the fewest outstanding requests
(routed and not finished: Vidur's "least outstanding requests"); ``shortest-queue`` the one with the fewest
waiting (routed and not yet admitted into a batch).  Ties go to the first tied replica after the one chosen
last, so an idle fleet spreads its requests instead of piling them on replica 0.  The names a command takes
are ``roofline.serving.simulate_config.ROUTERS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from roofline.serving.simulate_config import ROUTERS


class ReplicaState(Protocol):
    """What a router reads of a replica at an arrival's time."""

    def outstanding(self, time_s: float) -> int: ...

    def waiting(self, time_s: float) -> int: ...


def _loads(name: str) -> Callable[[ReplicaState, float], int] | None:
    """The load a router minimises (None: round robin, which reads none)."""
    return {"round-robin": None,
            "least-loaded": lambda replica, time_s: replica.outstanding(time_s),
            "shortest-queue": lambda replica, time_s: replica.waiting(time_s)}[name]


class Router:
    """One router over one pool of replicas; ``choose`` is called once per request, in arrival order."""

    def __init__(self, name: str) -> None:
        if name not in ROUTERS:
            raise ValueError(f"unknown router {name!r}; routers: {', '.join(ROUTERS)}")
        self.name, self.last = name, -1
        self._load = _loads(name)

    @property
    def reads_state(self) -> bool:
        """Whether ``choose`` reads the replicas (round robin does not)."""
        return self._load is not None

    def choose(self, replicas: Sequence[ReplicaState], time_s: float) -> int:
        count = len(replicas)
        if self._load is None:
            self.last = (self.last + 1) % count
            return self.last
        best, best_load = -1, 0
        for offset in range(1, count + 1):
            index = (self.last + offset) % count
            load = self._load(replicas[index], time_s)
            if best < 0 or load < best_load:
                best, best_load = index, load
                if load == 0:  # nothing is below an idle replica
                    break
        self.last = best
        return best
