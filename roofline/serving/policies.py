"""Batching policies and routers, each from one registry.

A batching policy is a small object that decides what the next engine step runs.  The engine loop
(``roofline.serving.simulate``) owns the clock, the queues and the KV cache; a policy only reads them and
returns a ``StepPlan``.  ``POLICIES`` is every policy by kind: ``parse_policy`` reads a ``--policy`` string with
it, ``policy_syntax`` writes the option's help from it, and the documents' schema takes its kinds from it.

A router picks which replica of a fleet takes an arriving request (``roofline.fleet.router`` applies the rule).
``ROUTERS`` is every router by name, with what it minimises: the ``--router`` option's choices and help and the
documents' schema read it.  Semantics of each: ``docs/serving.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from roofline.core.errors import BadInputError

DEFAULT_MAX_BATCH = 256  # vLLM's max_num_seqs
DEFAULT_MAX_TOKENS = 8192  # tokens one prefill step may hold (vLLM: max_num_batched_tokens)
DEFAULT_BLOCK = 16  # vLLM's block size in tokens


class PolicyError(BadInputError):
    """A policy string that cannot be parsed; one line."""


@dataclass(frozen=True)
class Packing:
    """A step run as transformers' continuous batching runs it on ``paged|sdpa`` with CUDA graphs: every query
    token of the step in one masked SDPA against every key the step reads, the queries padded to a multiple of
    ``q_pad`` (at most ``q_cap``, the token budget) and the keys to a multiple of ``kv_pad`` (at most ``kv_cap``,
    the cache; 0: no cap) — transformers 5.17 ``continuous_batching/model_runner.py: maybe_pad_inputs``,
    ``integrations/sdpa_paged.py``."""

    q_pad: int
    q_cap: int
    kv_pad: int = 0
    kv_cap: int = 0

    def queries(self, tokens: int) -> int:
        return _padded(tokens, self.q_pad, self.q_cap)

    def keys(self, keys: int) -> int:
        return _padded(keys, self.kv_pad, self.kv_cap) if self.kv_pad else keys


def _padded(size: int, interval: int, cap: int) -> int:
    """The smallest multiple of ``interval`` at least ``size`` (one interval for 0), at most ``cap`` (0: none)."""
    padded = -(-size // interval) * interval if size > 0 else interval
    return min(padded, cap) if cap else padded


@dataclass
class StepPlan:
    """What one step runs: sequences that decode one token, and prefill chunks (sequence, tokens)."""

    decodes: list[Any] = field(default_factory=list)
    chunks: list[tuple[Any, int]] = field(default_factory=list)
    padded_prompt_tokens: int = 0  # static: the prompt length every slot is padded to (0: no padding)
    attended_tokens: int = 0  # static with cache=L: the keys every decode attends over (0: its own context)
    packed: Packing | None = None  # chunked with pad-q: one packed, padded attention over the whole step

    def __bool__(self) -> bool:
        return bool(self.decodes or self.chunks)


@dataclass(frozen=True)
class Policy:
    """Base: ``kind``, the text it was parsed from, and whether it keeps a block-limited KV cache."""

    text: str
    max_batch: int = DEFAULT_MAX_BATCH
    block: int = DEFAULT_BLOCK
    prefix_cache: bool = False  # paged KV blocks kept by prefix hash and found again (roofline.serving.prefix_cache)
    # What admission reserves in a block cache: the prompt's blocks ("prompt": the rest taken as the output grows,
    # preempting by recompute when none is free, vLLM's way) or prompt and whole output ("full": never preempts,
    # TensorRT-LLM's default GUARANTEED_NO_EVICT scheduler).
    reserve: str = "prompt"

    kind = "base"
    paged = False
    # What the policy string takes after its kind: option as typed -> (the field it sets, its placeholder in the
    # syntax); REQUIRED: the options it cannot go without.
    OPTIONS: ClassVar[dict[str, tuple[str, str]]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def syntax(cls, short: bool = False) -> str:
        """How the policy is typed: ``chunked:budget=T[:block=16][:max-batch=B]`` (``short``: the required
        options only, ``chunked:budget=T``)."""
        return cls.kind + "".join(f":{name}={placeholder}" if name in cls.REQUIRED else f"[:{name}={placeholder}]"
                                  for name, (_, placeholder) in cls.OPTIONS.items()
                                  if name in cls.REQUIRED or not short)

    def schedule(self, engine) -> StepPlan:  # pragma: no cover - every policy overrides it
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.text, "kind": self.kind, "max_batch": self.max_batch,
                "block_tokens": self.block if self.paged else None,
                **({"cache_tokens": self.cache} if getattr(self, "cache", 0) else {}),
                "prefix_cache": self.prefix_cache if self.paged else None,
                "kv_reserve": self.reserve if self.paged else None}


@dataclass(frozen=True)
class Static(Policy):
    """Batches of up to ``max_batch`` in arrival order; prompts padded to the longest; every slot decodes until
    the longest output of its batch ends, finished or not.  ``cache`` (tokens): a static KV cache of that length
    (transformers' ``cache_implementation="static"``, as CUDA graphs need), which every decode attends over,
    masked, whatever its context."""

    cache: int = 0
    kind = "static"
    OPTIONS: ClassVar[dict[str, tuple[str, str]]] = {"batch": ("max_batch", "B"), "cache": ("cache", "L")}
    REQUIRED: ClassVar[tuple[str, ...]] = ("batch",)

    def schedule(self, engine) -> StepPlan:
        batch = engine.static_batch
        if batch and any(not s.finished for s in batch):
            padded = max(s.request.prompt_tokens for s in batch)
            return StepPlan(decodes=list(batch), padded_prompt_tokens=padded, attended_tokens=self.cache)
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
    OPTIONS: ClassVar[dict[str, tuple[str, str]]] = {"max-batch": ("max_batch", "B"), "max-tokens": ("max_tokens", "T")}

    def schedule(self, engine) -> StepPlan:
        admitted = engine.admit(self.max_batch, self.max_tokens)
        if admitted:
            return StepPlan(chunks=[(s, s.prefill_left) for s in admitted])
        return StepPlan(decodes=engine.decodable())


@dataclass(frozen=True)
class Paged(Continuous):
    """Continuous with a KV cache of fixed-size blocks: admission by blocks, preemption by recompute (or, with
    ``reserve=full``, every block a request can need reserved at admission and no preemption), and (unless
    ``prefix-cache=off``) the blocks of a prompt's prefix found again by a later prompt that starts the same."""

    prefix_cache: bool = True  # on by default, as vLLM's automatic prefix caching and SGLang's radix cache are
    kind = "paged"
    paged = True
    OPTIONS: ClassVar[dict[str, tuple[str, str]]] = {"block": ("block", str(DEFAULT_BLOCK)),
                                                     **Continuous.OPTIONS,
                                                     "prefix-cache": ("prefix_cache", "on|off"),
                                                     "reserve": ("reserve", "prompt|full")}


@dataclass(frozen=True)
class Chunked(Policy):
    """Sarathi-style stall-free batching: every decode first (each its K + 1 verified tokens under speculative
    decoding), then prefill chunks in arrival order until the step holds ``budget`` tokens.  KV as ``paged``."""

    budget: int = 512
    pad_q: int = 0  # > 0: the step is packed and padded as transformers' CUDA graphs run it (``Packing``)
    pad_kv: int = 0
    kv_cap: int = 0
    prefix_cache: bool = True
    kind = "chunked"
    paged = True
    OPTIONS: ClassVar[dict[str, tuple[str, str]]] = {"budget": ("budget", "T"), "block": ("block", str(DEFAULT_BLOCK)),
                                                     "max-batch": ("max_batch", "B"), "pad-q": ("pad_q", "Q"),
                                                     "pad-kv": ("pad_kv", "V"), "kv-cap": ("kv_cap", "C"),
                                                     "prefix-cache": ("prefix_cache", "on|off"),
                                                     "reserve": ("reserve", "prompt|full")}
    REQUIRED: ClassVar[tuple[str, ...]] = ("budget",)

    @property
    def packing(self) -> Packing | None:
        return Packing(self.pad_q, self.budget, self.pad_kv, self.kv_cap) if self.pad_q else None

    def schedule(self, engine) -> StepPlan:
        decodes = engine.decodable()
        # A speculative decode verifies its drafts too: 1 + lookahead tokens of the budget each.
        room = self.budget - len(decodes) * (1 + engine.lookahead)
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
        return StepPlan(decodes=decodes, chunks=chunks, packed=self.packing)

    def to_dict(self) -> dict[str, Any]:
        padding = {"pad_q_tokens": self.pad_q, "pad_kv_tokens": self.pad_kv, "kv_cap_tokens": self.kv_cap} \
            if self.pad_q else {}
        return {**super().to_dict(), "budget_tokens": self.budget, **padding}


# Every batching policy by kind, in the order the help lists them; the one a command runs without --policy.
POLICIES: dict[str, type[Policy]] = {policy.kind: policy for policy in (Static, Continuous, Paged, Chunked)}
POLICY_KINDS = tuple(POLICIES)
DEFAULT_POLICIES = ("continuous",)


def policy_syntax() -> str:
    """Every policy as typed, for ``--policy``'s help: ``static:batch=B | continuous[:max-batch=B]... | ...``."""
    return " | ".join(policy.syntax() for policy in POLICIES.values())


# Policy options that take on or off rather than a number, and those that take one of a few words.
SWITCHES = ("prefix-cache",)
WORDS = {"reserve": ("prompt", "full")}


def _options(text: str, parts: list[str], allowed: tuple[str, ...]) -> dict[str, Any]:
    """The policy's options as typed: counts as integers, switches as booleans."""
    out: dict[str, Any] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in allowed:
            raise PolicyError(f"policy {text!r}: unknown option {part!r}; options: {', '.join(allowed) or 'none'}")
        if key in out:  # last-wins would hide a typo in a long policy string
            raise PolicyError(f"policy {text!r}: {key} is given twice")
        if key in WORDS:
            if value.strip() not in WORDS[key]:
                raise PolicyError(f"policy {text!r}: {key} is {' or '.join(WORDS[key])}")
            out[key] = value.strip()
        else:
            out[key] = _switch(text, key, value) if key in SWITCHES else _count(text, key, value)
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
    """A ``--policy`` string: one of ``policy_syntax()``, e.g. ``chunked:budget=512:max-batch=64``."""
    kind, *parts = text.strip().split(":")
    policy = POLICIES.get(kind)
    if policy is None:
        kinds = [p.syntax(short=True) for p in POLICIES.values()]
        raise PolicyError(f"unknown policy {text!r}; use {', '.join(kinds[:-1])} or {kinds[-1]}")
    given = _options(text, parts, tuple(policy.OPTIONS))
    for name in policy.REQUIRED:
        if name not in given:
            raise PolicyError(f"policy {text!r}: {kind} needs {name}={policy.OPTIONS[name][1]}")
    if kind == "chunked" and ("pad-kv" in given or "kv-cap" in given) and "pad-q" not in given:
        raise PolicyError(f"policy {text!r}: pad-kv and kv-cap pad a packed step: give pad-q=Q too")
    return policy(text=text, **{policy.OPTIONS[name][0]: value for name, value in given.items()})


# --- routers ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RouterRule:
    """What a router does, in words (``help``), and the load it minimises over a pool's replicas at an arrival
    (``load(replica, time_s)``; None: it reads no state and takes the next in turn)."""

    help: str
    load: Callable[[Any, float], int] | None = None


# Every router by name, the default first.  Round robin is the default: on the fleet benchmark
# (scripts/bench_fleet.py) it gave the lower TTFT P90 and TPOT P99 at both rates; least-loaded piles consecutive
# arrivals on the replica that just emptied.
ROUTERS: dict[str, RouterRule] = {
    "round-robin": RouterRule("the next in turn"),
    "least-loaded": RouterRule("the fewest outstanding requests (routed and not finished)",
                               lambda replica, time_s: replica.outstanding(time_s)),
    "shortest-queue": RouterRule("the fewest waiting (routed and not yet admitted)",
                                 lambda replica, time_s: replica.waiting(time_s)),
}
ROUTER_NAMES = tuple(ROUTERS)
DEFAULT_ROUTER = ROUTER_NAMES[0]


def router_help() -> str:
    """``--router``'s help: each router and what it picks."""
    return "which replica takes each arriving request: " + "; ".join(
        f"{name}, {rule.help}" for name, rule in ROUTERS.items())
