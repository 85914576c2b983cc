"""A discrete-event simulation of one replica: requests arrive, a policy picks each step's batch, the step-cost
model says how long the step takes, the clock jumps by that much.

Events are engine steps (and arrivals while the engine is idle); nothing happens between them, so a run of
10,000 requests is a few tens of thousands of steps of plain Python.  Tokens are emitted at the end of the
step that computes them: a step that completes a prompt's prefill emits its first token.  Each token's time is
kept (8 bytes a token, in an ``array``), for the inter-token latency.  With speculative decoding
(``roofline.step.speculative``) a decoding sequence verifies K drafts a step and gains 1 + the accepted drafts,
drawn from the acceptance distribution (seeded), every one at the step's end.
"""

from __future__ import annotations

import math
from array import array
from bisect import insort
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from roofline.core.errors import BadInputError
from roofline.serving.kv_blocks import KvBlocks
from roofline.serving.latency import ServedRequest, span_s
from roofline.serving.policies import Chunked, Continuous, Policy, Static, StepPlan, parse_policy
from roofline.serving.profile_doc import EngineOverhead, StepProfile, step_watts
from roofline.serving.step_cost import CostModel
from roofline.serving.step_log import StepLog
from roofline.serving.workload import Request
from roofline.specs.models import past_context_window
from roofline.step.memory import fixed_bytes_per_sequence
from roofline.step.speculative import SpecDecode, acceptance_rng

# What a long simulation reports as it runs: the requests finished so far (the caller knows how many there are).
Finished = Callable[[int], None]
# Steps between two reports: at the ~31 us a step measured by scripts/measure_simulation_memory.py, about every
# 60 ms, often enough for a progress bar and too seldom to slow the loop.
PROGRESS_STEPS = 2048


class SimulationError(BadInputError):
    """A simulation that cannot run (a request larger than the KV cache, no memory size); one line."""


@dataclass(frozen=True, slots=True)
class RequestOutcome(ServedRequest):
    """A request as the simulator served it: its times (``ServedRequest``; every output token's time an array of
    'd') and what the engine loop also knows of it."""

    preemptions: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache when first admitted (not prefilled)
    scheduled_s: float = math.nan  # when first admitted into a step (NaN: not recorded): TTFT's queueing ends

    @property
    def queue_s(self) -> float:
        """Arrival to first admission (scheduling delay, seconds): the part of TTFT spent waiting."""
        return self.scheduled_s - self.arrival_s

    @property
    def prefill_s(self) -> float:
        """First admission to first token (seconds): the rest of TTFT, prefill (and any step it shared)."""
        return self.first_token_s - self.scheduled_s


@dataclass(frozen=True)
class SimulationRun:
    policy: dict[str, Any]
    requests: tuple[RequestOutcome, ...]
    steps: StepLog  # empty when simulated without logging steps (``log_steps=False``)
    kv_blocks_total: int | None
    kv_tokens_capacity: int | None
    overhead: EngineOverhead | None
    shared_prefixes: bool = False  # some requests said what their tokens are: a prefix cache could find them
    # Seconds the engine ran steps, summed as it ran them: a run without a step log still has its busy time (what
    # energy is charged on).
    busy_s: float = 0.0
    # Joules one GPU drew over those steps, each at the profile's draw for its tokens (``step_watts``); None: the
    # profile has no draw table (``power.by_tokens``), so busy_s times its one figure is the energy.
    busy_j: float | None = None
    speculation: dict[str, Any] | None = None  # --spec-decode: SpecDecode.to_dict() (None: one token a step)

    @property
    def makespan_s(self) -> float:
        return span_s(self.requests)


class Seq:
    """One request's mutable progress inside the engine (never leaves this module)."""

    __slots__ = ("request", "output_tokens", "prefill_left", "prefill_target", "generated", "kv_tokens", "blocks",
                 "first_token_s", "finish_s", "preemptions", "finished", "active", "token_times", "keys", "held",
                 "kept", "cached_tokens", "scheduled_s")

    def __init__(self, request: Request) -> None:
        # prefill_left is an attribute, not a property: the engine reads it for every sequence of every step.
        self.request, self.prefill_left, self.prefill_target = request, request.prompt_tokens, request.prompt_tokens
        self.output_tokens = request.output_tokens
        self.generated = self.kv_tokens = self.blocks = self.preemptions = 0
        self.first_token_s = self.finish_s = self.scheduled_s = math.nan
        self.finished = self.active = False  # active: in the running set
        self.token_times = array("d")  # 8 bytes a token, and numpy reads it without converting each float
        # The prefix cache's view: the keys of its keyed blocks (None: not computed, or no cache), the cached
        # blocks it holds, how many of its first blocks the cache has been given, and what its first admission
        # found cached (-1: not admitted yet).
        self.keys: list[int] | None = None
        self.held: list[int] = []
        self.kept = 0
        self.cached_tokens = -1

    def handed_over(self, first_token_s: float) -> Seq:
        """This sequence as it arrives from another replica that prefilled its prompt (disaggregated serving):
        with the prompt's KV cache and the first token (made there at ``first_token_s``), left to decode."""
        self.prefill_left, self.kv_tokens, self.generated = 0, self.request.prompt_tokens, 1
        self.first_token_s = self.scheduled_s = first_token_s
        self.token_times.append(first_token_s)
        return self


def _arrival(seq: Seq) -> tuple[float, int]:
    return seq.request.arrival_s, seq.request.id


class Engine:
    """Queues, clock and KV blocks (``kv``: None without a block-limited cache; with ``prefix_cache`` its blocks
    are kept by prefix and found again, ``roofline.serving.kv_blocks``); the policies call ``admit``,
    ``take_waiting``, ``decodable``, ``prefilling``."""

    def __init__(self, requests: Sequence[Request], kv_blocks: int | None, block: int,
                 prefix_cache: bool = False, concurrency: int | None = None, reserve_full: bool = False,
                 spec: SpecDecode | None = None, seed: int = 0, index: int = 0, fixed: int = 0) -> None:
        # A conversation's later turn waits for the turn before it to end: it is sent (think_s later) only then.
        self.followers = {r.after: Seq(r) for r in requests if r.after is not None}
        firsts = [r for r in requests if r.after is None]
        # A closed loop (``concurrency`` clients): the requests are sent in id order, whatever their arrival times
        # said (a benchmark numbers them in sending order; tests/test_serving_load.py sends them against their
        # arrival order): the first at once, one per client, each later one when any client's request ends.
        self.unsent: deque[Seq] = deque()
        if concurrency is None:
            self.pending = sorted((Seq(r) for r in firsts), key=_arrival)
        else:
            firsts.sort(key=lambda r: r.id)
            self.unsent.extend(Seq(r) for r in firsts[concurrency:])
            self.pending = [Seq(replace(r, arrival_s=0.0)) for r in firsts[:concurrency]]
        self.shared = any(r.segments for r in requests)
        self.next_arrival = 0
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.static_batch: list[Seq] = []
        self.kv = KvBlocks(kv_blocks, block, prefix_cache, reserve_full, fixed) if kv_blocks is not None else None
        self.clock_s = 0.0
        self.kv_blocked = False
        self.preempted = self.finished_count = 0
        self.kv_tokens = 0  # held by running sequences (a static batch's are summed when its step is logged)
        self.left_running = False  # a sequence finished this step: filter the running list once
        self.finished_log: list[Seq] | None = None  # a list: every sequence that finishes, in order (a fleet's)
        # Speculative decoding: each decode verifies spec.draft drafts, whose KV needs room (vLLM's lookahead
        # slots) before the step runs; the accepted counts are drawn from the replica's own stream.
        self.spec = spec
        self.lookahead = spec.draft if spec is not None else 0
        self.rng = acceptance_rng(seed, index) if spec is not None else None
        self.step_tokens = 0  # tokens the last step's decodes emitted

    def arrive(self) -> None:
        while self.next_arrival < len(self.pending) and \
                self.pending[self.next_arrival].request.arrival_s <= self.clock_s:
            self.waiting.append(self.pending[self.next_arrival])
            self.next_arrival += 1

    def take_waiting(self, count: int) -> list[Seq]:
        out = [self.waiting.popleft() for _ in range(min(count, len(self.waiting)))]
        for seq in out:
            seq.active = True
            if math.isnan(seq.scheduled_s):  # its first admission (a readmission after a preemption keeps it)
                seq.scheduled_s = self.clock_s
        self.running.extend(out)
        return out

    def admit(self, max_batch: int, max_tokens: int | None, count: int | None = None) -> list[Seq]:
        """Move waiting requests into the running set in arrival order while slots, the token cap and KV
        blocks allow (the first request of a step is never refused for the token cap)."""
        out, tokens, kv = [], 0, self.kv
        block = kv.block if kv is not None else 0
        while self.waiting and len(self.running) < max_batch and (count is None or len(out) < count):
            seq = self.waiting[0]
            # The token cap counts what the step prefills: a cached prefix is not prefilled.
            cached = kv.cached_prefix(seq) if kv is not None else 0
            if max_tokens is not None and out and tokens + seq.prefill_left - cached * block > max_tokens:
                break
            if kv is not None and not kv.reserve(seq, cached, bool(self.running)):
                self.kv_blocked = True
                break
            self.waiting.popleft()
            seq.active = True
            if math.isnan(seq.scheduled_s):  # its first admission (a readmission after a preemption keeps it)
                seq.scheduled_s = self.clock_s
            self.running.append(seq)
            self.kv_tokens += seq.kv_tokens  # 0, but for a sequence handed over with its prompt's KV
            out.append(seq)
            tokens += seq.prefill_left
        return out

    def prefilling(self) -> list[Seq]:
        return [s for s in self.running if s.prefill_left > 0]

    def decodable(self) -> list[Seq]:
        """Running sequences past their prefill, each with room for one more token (preempting the latest
        admitted sequence, by recompute, when no block is free)."""
        kv = self.kv
        if kv is None:  # no blocks to find: every prefilled sequence decodes
            return [s for s in self.running if s.prefill_left == 0]
        out, block, ahead = [], kv.block, 1 + self.lookahead
        for seq in list(self.running):
            if seq.prefill_left > 0 or not seq.active:
                continue
            while seq.active and seq.kv_tokens + ahead > seq.blocks * block:
                while not kv.spare() and seq.active:
                    self.preempt(self.running[-1])
                if seq.active:
                    kv.take(1)
                    seq.blocks += 1
            if seq.active:
                out.append(seq)
        return out

    def preempt(self, seq: Seq) -> None:
        """Free the sequence's KV and requeue it at the front: readmitted, it prefills prompt + tokens so far."""
        self.running.remove(seq)
        seq.active = False  # already out of the running list: no need to set left_running
        if self.kv is not None:
            self.kv.release(seq)
        self.kv_tokens -= seq.kv_tokens
        seq.kv_tokens = 0
        seq.prefill_target = seq.prefill_left = seq.request.prompt_tokens + seq.generated
        seq.preemptions += 1
        self.preempted += 1
        self.waiting.appendleft(seq)

    def emit(self, seq: Seq) -> None:
        seq.generated += 1
        seq.token_times.append(self.clock_s)
        if seq.generated == 1:
            seq.first_token_s = self.clock_s
        if seq.generated >= seq.output_tokens:
            self.finish(seq)

    def finish(self, seq: Seq) -> None:
        seq.finished, seq.finish_s, seq.active = True, self.clock_s, False
        self.finished_count += 1
        self.left_running = True
        if self.finished_log is not None:
            self.finished_log.append(seq)
        self.kv_tokens -= seq.kv_tokens
        if self.kv is not None:
            self.kv.release(seq)
            seq.keys = None  # done with: a finished sequence keeps no block of its own
        follower = self.followers.pop(seq.request.id, None) if self.followers else None
        if follower is not None:  # the conversation's next turn is sent now, think_s after this answer
            follower.request = replace(follower.request, arrival_s=self.clock_s + follower.request.think_s)
            insort(self.pending, follower, lo=self.next_arrival, key=_arrival)
        if self.unsent:  # the client whose request ended sends the next one now
            sent = self.unsent.popleft()
            sent.request = replace(sent.request, arrival_s=self.clock_s)
            insort(self.pending, sent, lo=self.next_arrival, key=_arrival)

    def apply(self, plan: StepPlan) -> int:
        """Advance every sequence in the plan by what the step computed; returns the wasted slots."""
        now = self.clock_s
        if self.spec is not None:
            self.kv_tokens += sum(t for _, t in plan.chunks)
            wasted = self._speculate(plan.decodes, now)
            return self._apply_chunks(plan, wasted)
        wasted = 0
        self.kv_tokens += len(plan.decodes) + sum(t for _, t in plan.chunks)
        self.step_tokens = len(plan.decodes)
        for seq in plan.decodes:  # the hot loop: emit() inlined (a decode is never a sequence's first token)
            seq.kv_tokens += 1
            if seq.finished:
                wasted += 1
                continue
            seq.generated += 1
            seq.token_times.append(now)
            if seq.generated >= seq.output_tokens:
                self.finish(seq)
        self.step_tokens -= wasted
        return self._apply_chunks(plan, wasted)

    def _speculate(self, decodes: list[Seq], now: float) -> int:
        """Each decode's verification: 1 + accepted drafts (drawn), never past its output; the rejected drafts'
        KV is dropped, the accepted tokens' kept.  Returns the wasted slots (static: already finished)."""
        assert self.spec is not None and self.rng is not None
        wasted = emitted = 0
        for seq, drawn in zip(decodes, self.spec.draw(self.rng, len(decodes)).tolist(), strict=True):
            tokens = 1 if seq.finished else min(drawn, seq.output_tokens - seq.generated)
            seq.kv_tokens += tokens
            self.kv_tokens += tokens
            if seq.finished:
                wasted += 1
                continue
            seq.generated += tokens
            emitted += tokens
            seq.token_times.extend([now] * tokens)
            if seq.generated >= seq.output_tokens:
                self.finish(seq)
        self.step_tokens = emitted
        return wasted

    def _apply_chunks(self, plan: StepPlan, wasted: int) -> int:
        for seq, tokens in plan.chunks:
            seq.prefill_left = max(0, seq.prefill_left - tokens)
            seq.kv_tokens += tokens
            if seq.keys:  # its newly computed full blocks can be found by the next prompt that starts the same
                self.kv.keep(seq)  # pyright: ignore[reportOptionalMemberAccess] - keys are made by kv alone
            if seq.prefill_left == 0:
                self.emit(seq)
        if self.left_running:
            self.running = [s for s in self.running if s.active]
            self.left_running = False
        return wasted


def kv_cache_bytes(profile: StepProfile, mem_fraction: float) -> float | None:
    """What ``mem_fraction`` of the device memory leaves for the KV cache after the weights (negative when the
    weights alone overflow it; None when the profile does not know the device memory)."""
    device = profile.memory.get("device_bytes")
    return mem_fraction * device - profile.memory["weight_bytes"] if device else None


def kv_blocks_that_fit(profile: StepProfile, mem_fraction: float, block: int = 1) -> int | None:
    """Whole blocks of ``block`` tokens in ``kv_cache_bytes`` (``block=1``: tokens); None as it is None."""
    free = kv_cache_bytes(profile, mem_fraction)
    return None if free is None else max(0, int(free // (profile.memory["kv_bytes_per_token"] * block)))


def kv_block_count(profile: StepProfile, block: int, mem_fraction: float) -> int:
    """``kv_blocks_that_fit`` for a policy that manages blocks: a memory it cannot size is an error."""
    free = kv_cache_bytes(profile, mem_fraction)
    if free is None:
        raise SimulationError("the profile does not know the device memory: paged and chunked need it")
    if free <= 0:
        raise SimulationError(f"the weights ({profile.memory['weight_bytes'] / 1e9:.1f} GB) do not fit in "
                              f"{mem_fraction:g} of {profile.memory['device_bytes'] / 1e9:.1f} GB")
    return kv_blocks_that_fit(profile, mem_fraction, block)


def fixed_blocks(profile: StepProfile, block: int) -> int:
    """The KV blocks' worth of memory one running sequence of ``profile`` holds whatever its length: its recurrent
    states and its sliding windows (``roofline.step.memory.fixed_bytes_per_sequence``), in blocks of ``block``
    tokens of the layers that keep every token."""
    fixed = fixed_bytes_per_sequence(profile.step_model())
    return -(-fixed // (profile.memory["kv_bytes_per_token"] * block)) if fixed else 0


def prefix_cache_applies(profile: StepProfile) -> bool:
    """Whether a prefix cache can reuse a cached prefix of this model: not where a layer keeps a recurrent state,
    whose value at a block's end no block holds (vLLM checkpoints such states per block only in some versions and
    modes; gpubench models none: a hybrid model's prompts are prefilled whole)."""
    return not any(rules.recurrent for rules, _ in profile.step_model().mixers)


PREFIX_CACHE_OFF = ("the model's layers keep recurrent states, whose values at a cached block's end no block holds; "
                    "gpubench models no per-block state checkpoints")


def largest_step_tokens(policy: Policy, requests: Sequence[Request]) -> int:
    """The most tokens one step of ``policy`` can run on ``requests``: a static batch's padded prompts, a
    continuous step's prefill budget (or the longest prompt, admitted alone), a chunked step's budget."""
    prompts = sorted((r.prompt_tokens for r in requests), reverse=True)
    if isinstance(policy, Static):
        return min(policy.max_batch, len(prompts)) * prompts[0]
    decodes = min(policy.max_batch, len(prompts))  # a decode step: a token for each running sequence
    if isinstance(policy, Chunked):
        return min(policy.budget, sum(prompts) + decodes)
    if isinstance(policy, Continuous):  # prompts up to the budget, at least one; at most max_batch of them
        return max(prompts[0], min(policy.max_tokens, sum(prompts[:policy.max_batch])), decodes)
    return prompts[0]


def check_requests(profile: StepProfile, requests: Sequence[Request], policy: Policy, mem_fraction: float,
                   lookahead: int = 0) -> int | None:
    """Refuse what no replica of ``profile`` can serve (a request past the context window, past the profile's
    largest context, or larger than the whole KV cache with ``lookahead`` draft tokens' room); the policy's KV
    blocks (None: it keeps no block cache)."""
    if not requests:
        raise SimulationError("no requests to simulate")
    turns = [r.after for r in requests if r.after is not None]
    if turns and (len(set(turns)) < len(turns) or not set(turns) <= {r.id for r in requests}):
        raise SimulationError("each later turn of a conversation follows one earlier request of the workload, and "
                              "no request is followed twice")
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    past = past_context_window(profile.model["name"], profile.model.get("max_positions"), longest)
    if past:
        raise SimulationError(f"a request of {longest} tokens is {past}")
    # The decode table's last context is as far as the profile measured (or computed) attention: past it the
    # step cost is a straight-line guess that grows without bound (a 10^20-token trace row read as MFU 10^17 %).
    limit = profile.decode_attention.cols[-1]
    if longest > limit:
        raise SimulationError(f"the longest request, {longest} tokens (prompt + output), is past the profile's "
                              f"max context of {limit} tokens: profile with a larger --max-context")
    largest, grid = largest_step_tokens(policy, requests), min(t.tokens[-1] for t in profile.linears)
    if profile.step_model().rank_tokens(largest) > grid:
        # Past the token grid a step's linears would be a straight line through the grid's last two points.
        raise SimulationError(f"a {policy.kind} step of up to {largest} tokens is past the profile's largest token "
                              f"count, {grid}: profile with --max-tokens {largest}")
    overflow = profile.weights_overflow(mem_fraction)
    if overflow:  # every policy: a replica whose weights overflow its GPUs serves nothing
        raise SimulationError(overflow)
    kv_blocks = kv_block_count(profile, policy.block, mem_fraction) if policy.paged else None
    if kv_blocks is not None:
        if -(-(longest + lookahead) // policy.block) + fixed_blocks(profile, policy.block) > kv_blocks:
            drafts = f" (and {lookahead} draft tokens)" if lookahead else ""
            raise SimulationError(f"a request of {longest} tokens{drafts} needs more than the {kv_blocks} KV blocks "
                                  f"of {policy.block} tokens the memory holds")
    return kv_blocks


def _outcome(seq: Seq) -> RequestOutcome:
    return RequestOutcome(seq.request, seq.first_token_s, seq.finish_s, seq.token_times, seq.preemptions,
                          max(seq.cached_tokens, 0), seq.scheduled_s)


class Replica:
    """One replica's engine loop, a step at a time: ``simulate`` runs one to the end with every request known;
    a fleet (``roofline.fleet``) hands each replica its requests as they arrive and advances the replicas in
    time order, which gives the same steps because a step only takes requests that arrived by its start."""

    def __init__(self, profile: StepProfile, policy: Policy, overhead: EngineOverhead | None, kv_blocks: int | None,
                 requests: Sequence[Request] = (), log_steps: bool = True, spec: SpecDecode | None = None,
                 seed: int = 0, index: int = 0, concurrency: int | None = None) -> None:
        """``spec``: speculative decoding, its acceptances drawn under ``seed`` (``index``: the replica's stream
        in a fleet); ``concurrency``: a closed loop of that many clients."""
        self.policy, self.kv_blocks, self.spec = policy, kv_blocks, spec
        self.model = CostModel(profile, overhead, spec)
        self.prefix_cache = policy.prefix_cache and prefix_cache_applies(profile)
        self.engine = Engine(requests, kv_blocks, policy.block, self.prefix_cache,
                             concurrency=concurrency, reserve_full=policy.reserve == "full", spec=spec, seed=seed,
                             index=index, fixed=fixed_blocks(profile, policy.block) if kv_blocks is not None else 0)
        self.steps = StepLog()
        self.busy_s = 0.0
        self.power = profile.power_figure
        self.busy_j: float | None = 0.0 if self.power.get("by_tokens") else None  # summed only where it varies
        # A run read only for its requests' latencies (a capacity probe) keeps no step: at a low rate every
        # request decodes alone, and 100,000 requests' steps are 2 GB of log that nobody reads.
        self.log_steps = log_steps

    @property
    def clock_s(self) -> float:
        return self.engine.clock_s

    def add(self, request: Request, first_token_s: float | None = None) -> None:
        """Hand the replica one more request, arriving no earlier than those it has.  With ``first_token_s`` the
        request was prefilled on another replica and arrives with its prompt's KV and first token."""
        seq = Seq(request)
        self.engine.pending.append(seq if first_token_s is None else seq.handed_over(first_token_s))
        self.engine.shared = self.engine.shared or bool(request.segments)

    def log_finished(self) -> None:
        """From now on keep every request that finishes, for ``take_finished``."""
        self.engine.finished_log = []

    def take_finished(self) -> list[RequestOutcome]:
        """The requests finished since the last call (``log_finished`` first), in the order they finished."""
        log = self.engine.finished_log or []
        self.engine.finished_log = []
        return [_outcome(s) for s in log]

    def step(self) -> bool:
        """One turn of the loop: a step, or the clock moved to the next arrival while idle.  False when nothing
        can run and nothing more has arrived or been handed over."""
        engine = self.engine
        engine.arrive()
        engine.kv_blocked, engine.preempted = False, 0
        waiting = len(engine.waiting)
        plan = self.policy.schedule(engine)
        if not plan:
            if engine.next_arrival >= len(engine.pending):
                return False
            engine.clock_s = max(engine.clock_s, engine.pending[engine.next_arrival].request.arrival_s)
            return True
        # A static cache is attended whole (masked); otherwise each decode reads its own context and its new token.
        # A verification's K + 1 new tokens are in the context it attends (its drafts included).
        queries = 1 + engine.lookahead
        context_sum = len(plan.decodes) * (plan.attended_tokens + queries - 1) if plan.attended_tokens else \
            sum(s.kv_tokens for s in plan.decodes) + len(plan.decodes) * queries
        cost = self.model.cost(len(plan.decodes), context_sum, [(t, s.kv_tokens) for s, t in plan.chunks],
                               plan.packed)
        start_s = engine.clock_s
        engine.clock_s += cost.time_s
        self.busy_s += cost.time_s
        if self.busy_j is not None:
            tokens = len(plan.decodes) * queries + sum(t for _, t in plan.chunks)
            self.busy_j += cost.time_s * step_watts(self.power, tokens)  # pyright: ignore[reportOperatorIssue]
        wasted = engine.apply(plan)
        # Static slots keep their KV until the whole batch ends; elsewhere a finished sequence frees it.
        padded = plan.padded_prompt_tokens
        if not self.log_steps:
            return True
        self.steps.append(
            cost=cost, start_s=start_s, decodes=len(plan.decodes), prefill_tokens=sum(t for _, t in plan.chunks),
            sequences=len(plan.decodes) + len(plan.chunks), waiting=waiting,
            # A block several sequences hold (a shared prefix) is in memory once.
            kv_tokens=sum(s.kv_tokens for s in engine.static_batch) if padded else
            engine.kv_tokens - (engine.kv.shared_tokens() if engine.kv else 0),
            kv_blocks_used=None if engine.kv is None else engine.kv.in_use(),
            wasted_slots=wasted,
            padding_tokens=sum(padded - s.request.prompt_tokens for s, _ in plan.chunks) if padded else 0,
            kv_blocked=engine.kv_blocked, preempted=engine.preempted, decode_tokens=engine.step_tokens)
        return True

    def finish(self, progress: Finished | None = None) -> None:
        """Run until every request handed over (and every one a closed loop's clients still have to send) has
        finished; ``progress``: told the requests finished every ``PROGRESS_STEPS`` steps."""
        engine, steps = self.engine, 0
        while len(engine.pending) > engine.finished_count:
            if not self.step():
                raise SimulationError(f"{self.policy.text}: nothing can run and nothing more arrives")
            steps += 1
            if progress is not None and steps % PROGRESS_STEPS == 0:
                progress(engine.finished_count)
        if progress is not None:
            progress(engine.finished_count)

    def outcomes(self) -> tuple[RequestOutcome, ...]:
        return tuple(_outcome(s) for s in sorted(self.engine.pending, key=lambda s: s.request.id))

    def run(self, overhead: EngineOverhead | None) -> SimulationRun:
        """The finished replica as a run."""
        policy, record = self.policy, self.policy.to_dict()
        if record.get("prefix_cache") and not self.prefix_cache:
            record = {**record, "prefix_cache": False, "prefix_cache_off": PREFIX_CACHE_OFF}
        return SimulationRun(policy=record, requests=self.outcomes(), steps=self.steps,
                             kv_blocks_total=self.kv_blocks,
                             kv_tokens_capacity=self.kv_blocks * policy.block if self.kv_blocks is not None else None,
                             overhead=overhead, shared_prefixes=self.engine.shared, busy_s=self.busy_s,
                             busy_j=self.busy_j,
                             speculation=self.spec.to_dict() if self.spec is not None else None)


def simulate(profile: StepProfile, requests: Sequence[Request], policy: Policy | str,
             overhead: EngineOverhead | None = None, mem_fraction: float = 0.9, log_steps: bool = True,
             spec: SpecDecode | None = None, seed: int = 0, concurrency: int | None = None,
             progress: Finished | None = None) -> SimulationRun:
    """Run ``requests`` through one replica under ``policy``; per-request times and a record per step (with
    ``log_steps`` False, an empty step log: the run is read for its requests only).  ``spec``: speculative
    decoding, its acceptances drawn under ``seed``.  With ``concurrency`` C the load is a closed loop: C clients,
    each sending the next request (in id order) when its last one ends, so a request's arrival is the end of the
    one its client sent before (the requests' own arrival times unused).  ``progress``: told the requests finished
    as the run goes."""
    policy = parse_policy(policy) if isinstance(policy, str) else policy
    if concurrency is not None and any(r.after is not None for r in requests):
        raise SimulationError("a closed loop's clients send requests in turn; conversations (--sessions) already "
                              "wait for each answer: give one or the other")
    kv_blocks = check_requests(profile, requests, policy, mem_fraction, spec.draft if spec is not None else 0)
    replica = Replica(profile, policy, overhead, kv_blocks, requests, log_steps, spec, seed,
                      concurrency=concurrency)
    replica.finish(progress)
    return replica.run(overhead)
