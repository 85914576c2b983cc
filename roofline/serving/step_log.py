"""Every simulated step, kept column by column: a ``StepLog`` stores each step's record as 8-byte numbers in one
flat ``array``, not as a Python object per step.

A run of 100,000 requests on a fleet is millions of steps: as frozen dataclasses of floats they took about
700 bytes each and a fifth of the engine's time to build; here a step is ``len(FIELDS)`` doubles.  The
summary, the timeline and the composition read whole columns (``column``); a ``StepRecord`` is made only when
one step is asked for (``log[i]``, iteration).  Logs of several replicas read as one (``StepLog.joined``):
their columns concatenated, replica after replica, never copied until a column is read.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, overload

import numpy as np

from roofline.serving.step_cost import StepCost


@dataclass(frozen=True, slots=True)
class StepRecord(StepCost):
    """One simulated step: its cost (``StepCost``'s fields) and the state of the batch and the KV cache."""

    start_s: float
    decodes: int
    prefill_tokens: int
    sequences: int  # decodes + prefill chunks in the step (static: every slot, finished or not)
    waiting: int  # arrived requests not admitted when the step began
    kv_tokens: int  # tokens held in the KV cache after the step
    kv_blocks_used: int | None
    wasted_slots: int  # static: slots that decode for an already finished sequence
    padding_tokens: int  # static: prompt tokens of padding prefilled
    kv_blocked: bool  # a waiting request was refused for lack of KV blocks
    preempted: int
    decode_tokens: int  # tokens the step's decodes emitted (speculative decoding: accepted drafts + 1 each)


COST_FIELDS = tuple(f.name for f in fields(StepCost))
FIELDS = tuple(f.name for f in fields(StepRecord))  # the cost's fields first, then the engine's state
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_WIDTH = len(FIELDS)
_INTEGERS = frozenset({"decodes", "prefill_tokens", "sequences", "waiting", "kv_tokens", "wasted_slots",
                       "padding_tokens", "preempted", "decode_tokens"})
_BOOLEANS = frozenset({"compute_bound", "kv_blocked"})


def _value(name: str, number: float) -> Any:
    """A stored double back as the field's type (every integer here is far below 2^53: exact as a double)."""
    if name in _INTEGERS:
        return int(number)
    if name in _BOOLEANS:
        return bool(number)
    if name == "kv_blocks_used":
        return None if math.isnan(number) else int(number)
    return number


class StepLog(Sequence[StepRecord]):
    """The steps of one run in order (``append``), or of several runs one after the other (``joined``)."""

    def __init__(self, parts: Sequence[array] | None = None) -> None:
        self._parts: list[array] = list(parts) if parts is not None else [array("d")]
        self._extend = self._parts[-1].extend

    @classmethod
    def joined(cls, logs: Sequence[StepLog]) -> StepLog:
        """The steps of every log, log after log (a fleet's replicas: columns read as one)."""
        return cls([part for log in logs for part in log._parts] or None)

    def append(self, *, cost: StepCost, start_s: float, decodes: int, prefill_tokens: int, sequences: int,
               waiting: int, kv_tokens: int, kv_blocks_used: int | None, wasted_slots: int, padding_tokens: int,
               kv_blocked: bool, preempted: int, decode_tokens: int) -> None:
        """One step's record, every field by name: twelve positional numbers are easy to swap unseen."""
        self._extend((cost.time_s, cost.linear_s, cost.attention_s, cost.other_s, cost.overhead_s, cost.comm_s,
                      cost.draft_s, cost.flop, cost.bytes, cost.compute_bound, start_s, decodes, prefill_tokens,
                      sequences, waiting, kv_tokens, math.nan if kv_blocks_used is None else kv_blocks_used,
                      wasted_slots, padding_tokens, kv_blocked, preempted, decode_tokens))

    def column(self, name: str) -> np.ndarray:
        """Field ``name`` of every step, as float64 (a copy: the log may still grow)."""
        index = _INDEX[name]
        if not self._parts or len(self) == 0:
            return np.empty(0)
        return np.concatenate([np.frombuffer(part, dtype=float).reshape(-1, _WIDTH)[:, index] for part in self._parts])

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts) // _WIDTH

    def _record(self, part: array, row: int) -> StepRecord:
        values = part[row * _WIDTH:(row + 1) * _WIDTH]
        return StepRecord(**{name: _value(name, number) for name, number in zip(FIELDS, values, strict=True)})

    @overload
    def __getitem__(self, index: int) -> StepRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[StepRecord]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        for part in self._parts:
            rows = len(part) // _WIDTH
            if 0 <= index < rows:
                return self._record(part, index)
            index -= rows
        raise IndexError("step index out of range")

    def __iter__(self) -> Iterator[StepRecord]:
        for part in self._parts:
            for row in range(len(part) // _WIDTH):
                yield self._record(part, row)
