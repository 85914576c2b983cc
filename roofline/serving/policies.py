"""Batching policies: small objects that decide what the next engine step runs.  The engine loop
(``roofline.serving.simulate``) owns the clock, the queues and the KV cache; a policy only reads them and
returns a ``StepPlan``.  Semantics of each policy: ``docs/serving.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roofline.core.errors import BadInputError

DEFAULT_MAX_BATCH = 256  # vLLM's max_num_seqs
DEFAULT_MAX_TOKENS = 8192  # tokens one prefill step may hold (vLLM: max_num_batched_tokens)
DEFAULT_BLOCK = 16  # vLLM's block size in tokens


class PolicyError(BadInputError):
    """A policy string that cannot be parsed; one line."""


@dataclass
class StepPlan:
    """What one step runs: sequences that decode one token, and prefill chunks (sequence, tokens)."""

    decodes: list[Any] = field(default_factory=list)
    chunks: list[tuple[Any, int]] = field(default_factory=list)
    padded_prompt_tokens: int = 0  # static: the prompt length every slot is padded to (0: no padding)

    def __bool__(self) -> bool:
        return bool(self.decodes or self.chunks)


@dataclass(frozen=True)
class Policy:
    """Base: ``kind``, the text it was parsed from, and whether it keeps a block-limited KV cache."""

    text: str
    max_batch: int = DEFAULT_MAX_BATCH
    block: int = DEFAULT_BLOCK
    prefix_cache: bool = False  # paged KV blocks kept by prefix hash and found again (roofline.serving.prefix_cache)

    kind = "base"
    paged = False

    def schedule(self, engine) -> StepPlan:  # pragma: no cover - every policy overrides it
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.text, "kind": self.kind, "max_batch": self.max_batch,
                "block_tokens": self.block if self.paged else None,
                "prefix_cache": self.prefix_cache if self.paged else None}


@dataclass(frozen=True)
class Static(Policy):
    """Batches of up to ``max_batch`` in arrival order; prompts padded to the longest; every slot decodes until
    the longest output of its batch ends, finished or not."""

    kind = "static"

    def schedule(self, engine) -> StepPlan:
        batch = engine.static_batch
        if batch and any(not s.finished for s in batch):
            padded = max(s.request.prompt_tokens for s in batch)
            return StepPlan(decodes=list(batch), padded_prompt_tokens=padded)
        engine.static_batch = batch = engine.take_waiting(self.max_batch)
        if not batch:
            return StepPlan()
        padded = max(s.request.prompt_tokens for s in batch)
        return StepPlan(chunks=[(s, padded) for s in batch], padded_prompt_tokens=padded)


@dataclass(frozen=True)
class Continuous(Policy):
    """Iteration-level batching, prefill-first: a step with waiting requests and room prefills them (up to
    ``max_tokens`` prompt tokens, at least one request); otherwise every running sequence decodes."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    kind = "continuous"

    def schedule(self, engine) -> StepPlan:
        admitted = engine.admit(self.max_batch, self.max_tokens)
        if admitted:
            return StepPlan(chunks=[(s, s.prefill_left) for s in admitted])
        return StepPlan(decodes=engine.decodable())


@dataclass(frozen=True)
class Paged(Continuous):
    """Continuous with a KV cache of fixed-size blocks: admission by blocks, preemption by recompute, and (unless
    ``prefix-cache=off``) the blocks of a prompt's prefix found again by a later prompt that starts the same."""

    prefix_cache: bool = True  # on by default, as vLLM's automatic prefix caching and SGLang's radix cache are
    kind = "paged"
    paged = True


@dataclass(frozen=True)
class Chunked(Policy):
    """Sarathi-style stall-free batching: every decode first, then prefill chunks in arrival order until the
    step holds ``budget`` tokens.  KV as ``paged``."""

    budget: int = 512
    prefix_cache: bool = True
    kind = "chunked"
    paged = True

    def schedule(self, engine) -> StepPlan:
        decodes = engine.decodable()
        room = self.budget - len(decodes)
        chunks = []
        for seq in engine.prefilling():
            if room <= 0:
                break
            take = min(room, seq.prefill_left)
            chunks.append((seq, take))
            room -= take
        while room > 0:
            admitted = engine.admit(self.max_batch, None, count=1)
            if not admitted:
                break
            take = min(room, admitted[0].prefill_left)
            chunks.append((admitted[0], take))
            room -= take
        return StepPlan(decodes=decodes, chunks=chunks)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "budget_tokens": self.budget}


# Policy options that take on or off rather than a number.
SWITCHES = ("prefix-cache",)


def _options(text: str, parts: list[str], allowed: tuple[str, ...]) -> dict[str, Any]:
    """The policy's options by field name: counts as integers, switches as booleans."""
    out: dict[str, Any] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise PolicyError(f"policy {text!r}: unknown option {part!r}; options: {', '.join(allowed) or 'none'}")
        if key.replace("-", "_") in out:  # last-wins would hide a typo in a long policy string
            raise PolicyError(f"policy {text!r}: {key} is given twice")
        out[key.replace("-", "_")] = _switch(text, key, value) if key in SWITCHES else _count(text, key, value)
    return out


def _count(text: str, key: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise PolicyError(f"policy {text!r}: {key} must be an integer") from None
    if number < 1:
        raise PolicyError(f"policy {text!r}: {key} must be positive")
    return number


def _switch(text: str, key: str, value: str) -> bool:
    if value.strip() not in ("on", "off"):
        raise PolicyError(f"policy {text!r}: {key} is on or off")
    return value.strip() == "on"


def parse_policy(text: str) -> Policy:
    """``static:batch=B`` | ``continuous[:max-batch=B][:max-tokens=T]`` | ``paged[:block=16][:max-batch=B]
    [:max-tokens=T][:prefix-cache=on|off]`` | ``chunked:budget=T[:block=16][:max-batch=B][:prefix-cache=on|off]``."""
    kind, *parts = text.strip().split(":")
    if kind == "static":
        opts = _options(text, parts, ("batch",))
        if "batch" not in opts:
            raise PolicyError(f"policy {text!r}: static needs batch=B")
        return Static(text=text, max_batch=opts["batch"])
    if kind == "continuous":
        return Continuous(text=text, **_options(text, parts, ("max-batch", "max-tokens")))
    if kind == "paged":
        return Paged(text=text, **_options(text, parts, ("block", "max-batch", "max-tokens", "prefix-cache")))
    if kind == "chunked":
        opts = _options(text, parts, ("budget", "block", "max-batch", "prefix-cache"))
        if "budget" not in opts:
            raise PolicyError(f"policy {text!r}: chunked needs budget=T")
        return Chunked(text=text, **opts)
    raise PolicyError(f"unknown policy {text!r}; use static:batch=B, continuous, paged or chunked:budget=T")
