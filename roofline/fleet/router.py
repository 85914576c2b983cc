"""Routers: which replica an arriving request goes to, decided at its arrival from each replica's state then.

``round-robin`` ignores the state; ``least-loaded`` picks the replica with the fewest outstanding requests
(routed and not finished: Vidur's "least outstanding requests"); ``shortest-queue`` the one with the fewest
waiting (routed and not yet admitted into a batch).  Ties go to the first tied replica after the one chosen
last, so an idle fleet spreads its requests instead of piling them on replica 0.  Every router, with the load
it minimises and its help, is one entry of ``roofline.serving.policies.ROUTERS``; this module applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from roofline.serving.policies import ROUTERS


class ReplicaState(Protocol):
    """What a router reads of a replica at an arrival's time."""

    def outstanding(self, time_s: float) -> int: ...

    def waiting(self, time_s: float) -> int: ...


class Router:
    """One router over one pool of replicas; ``choose`` is called once per request, in arrival order."""

    def __init__(self, name: str) -> None:
        if name not in ROUTERS:
            raise ValueError(f"unknown router {name!r}; routers: {', '.join(ROUTERS)}")
        self.name, self.last = name, -1
        self._load = ROUTERS[name].load  # None: round robin, which reads no state

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
