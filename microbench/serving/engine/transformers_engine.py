"""Hugging Face transformers as the engine: a model with RANDOM weights built from a config (``engine.models``:
Llama, or Qwen3-MoE for a mixture of experts; nothing is downloaded), greedy, with EOS disabled so every request
produces exactly its workload's output length.

- static: ``generate`` on padded batches of up to B requests, formed in arrival order when the engine is
  idle (the simulator's ``static:batch=B``); every slot decodes until the batch's longest output ends.
- continuous: transformers' continuous-batching manager with a per-request ``max_new_tokens``.  Its FIFO
  scheduler runs every decode first, then prefill (split when it must) up to ``max_batch_tokens`` tokens, with
  at most ``max_requests_per_batch`` sequences: the simulator's ``chunked:budget=T:max-batch=B``.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from microbench.serving.engine.models import build_model as build_model  # callers build through this module
from microbench.serving.engine.settings import (
    EngineError,
    continuous_config,
    manager_failure,
    static_generation_settings,
    transformers_module,
)
from microbench.serving.engine.timing import EngineRun, stamped_timing

# wall: perf_counter.  thread-cpu: the CPU time of the thread that runs the engine loop (CPU device, one torch
# thread, burst arrivals): what the engine's work takes when other processes share the cores.
CLOCKS = ("wall", "thread-cpu")


def prompt_ids(request, vocab: int) -> list[int]:
    """A request's prompt: seeded token ids (never 0, the pad id)."""
    return [1 + (request.id * 7919 + 104729 * j) % (vocab - 1) for j in range(request.prompt_tokens)]


class _StepClock:
    """A generate() streamer that stamps each decoding step: ``put`` gets the prompt first, then every
    step's new tokens."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.stamps, self._prompt_seen = clock, [], False

    def put(self, value) -> None:
        if self._prompt_seen:
            self.stamps.append(self.clock())
        self._prompt_seen = True

    def end(self) -> None:
        pass


def _wait_until(clock, start: float, at_s: float) -> None:
    delay = at_s - (clock() - start)
    if delay > 0:
        time.sleep(delay)


def run_static(torch, lm, requests: Sequence, batch: int, device: str, clock: str = "wall",
               mode: str = "eager", cache_tokens: int | None = None) -> EngineRun:
    """Batches of up to ``batch`` requests, in arrival order, each as one padded ``generate`` (in this thread:
    ``thread-cpu`` is this thread's CPU time)."""
    tick = _static_clock(clock)
    pending = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    groups, step_s, start = [], [], tick()
    while pending:
        _wait_until(tick, start, pending[0].arrival_s)
        now = tick() - start
        group = [r for r in pending if r.arrival_s <= now][:batch]
        pending = [r for r in pending if r not in group]
        groups.append(group)
        step_s += [stamp - start for stamp in _generate(torch, lm, group, device, tick, mode, cache_tokens)]
    return static_run(groups, step_s, batch, clock, mode, cache_tokens)


def static_groups(requests: Sequence, batch: int) -> list[list]:
    """A burst's static batches: arrival order, ``batch`` at a time (what ``run_static`` forms when every
    request is there at the start)."""
    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    return [ordered[i:i + batch] for i in range(0, len(ordered), batch)]


def run_static_batch(torch, lm, group: Sequence, device: str, clock: str = "wall",
                     mode: str = "eager", cache_tokens: int | None = None) -> tuple[float, ...]:
    """One batch of a burst alone: its step durations (the first includes the batch's set-up, as in
    ``run_static``).  A burst's static run is its batches back to back, so batches of different runs can be
    interleaved and the runs put back together with ``static_run``."""
    tick = _static_clock(clock)
    start = tick()
    stamps = _generate(torch, lm, group, device, tick, mode, cache_tokens)
    return tuple(b - a for a, b in zip([start] + stamps[:-1], stamps, strict=True))


def static_run(groups: Sequence[Sequence], step_s: Sequence[float], batch: int, clock: str,
               mode: str = "eager", cache_tokens: int | None = None) -> EngineRun:
    """The EngineRun of batches run in order with these step stamps (seconds from the run's start)."""
    timings, first = [], 0
    for group in groups:
        for r in group:
            # A static batch steps together: every request takes a token in each of its batch's steps until it ends.
            timings.append(stamped_timing(r, step_s, range(first, first + r.output_tokens)))
        first += max(r.output_tokens for r in group)
    return EngineRun("transformers", "static", f"static:batch={batch}", tuple(sorted(timings, key=lambda t: t.id)),
                     {"api": "generate", "padding": "left", "clock": clock, "mode": mode,
                      **({"cache": "static", "cache_tokens": cache_tokens, "compile": "reduce-overhead (CUDA graphs)"}
                         if mode == "graphs" else {}),
                      "transformers": transformers_module().__version__}, tuple(step_s))


@contextlib.contextmanager
def _plain_attention(lm):
    """The model's own attention for a static ``generate``.  A continuous-batching manager switches the model to
    a paged implementation until it stops (transformers 5.17 to ``paged|sdpa``, which refuses a plain forward),
    and a static batch can run while a continuous run is parked between its segments."""
    current = lm.config._attn_implementation or ""
    if not current.startswith("paged|"):
        yield
        return
    lm.set_attn_implementation(current.removeprefix("paged|"))
    try:
        yield
    finally:
        lm.set_attn_implementation(current)


def _generate(torch, lm, group: Sequence, device: str, clock: Callable[[], float], mode: str,
              cache_tokens: int | None = None) -> list[float]:
    """One left-padded ``generate`` of the group, EOS disabled, in the engine mode's settings; the clock's
    reading at each step's tokens."""
    transformers = transformers_module()
    longest, steps = max(r.prompt_tokens for r in group), max(r.output_tokens for r in group)
    ids = torch.zeros((len(group), longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, r in enumerate(group):  # left padding: every prompt ends where decoding starts
        ids[row, longest - r.prompt_tokens:] = torch.tensor(prompt_ids(r, lm.config.vocab_size))
        mask[row, longest - r.prompt_tokens:] = 1
    stamps = _StepClock(clock)
    own = {_cache_keyword(lm): _static_cache(transformers, lm, len(group), cache_tokens)} \
        if mode == "graphs" and cache_tokens else {}
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=steps, min_new_tokens=steps,
                                           eos_token_id=None, pad_token_id=0, bos_token_id=None,
                                           **static_generation_settings(transformers, mode, own_cache=bool(own)))
    with torch.no_grad(), _plain_attention(lm):
        lm.generate(ids.to(device), attention_mask=mask.to(device), generation_config=config, streamer=stamps,
                    **own)
    if len(stamps.stamps) != steps:
        raise EngineError(f"generate produced {len(stamps.stamps)} steps for max_new_tokens={steps}")
    return stamps.stamps


def _static_cache(transformers, lm, batch: int, cache_tokens: int):
    """The model's static KV cache for batches of ``batch`` on ``cache_tokens`` tokens, made once and reset before
    each use: every batch of a size runs on the same tensors (``engine.settings``)."""
    caches = lm.__dict__.setdefault("_gpubench_static_caches", {})
    if (batch, cache_tokens) not in caches:
        caches[(batch, cache_tokens)] = transformers.StaticCache(config=lm.config, max_cache_len=cache_tokens)
    cache = caches[(batch, cache_tokens)]
    cache.reset()
    return cache


def _cache_keyword(lm) -> str:
    """How ``generate`` takes a cache: ``past_key_values`` up to transformers 5.17; later ones renamed it ``cache``
    (5.24: ``@deprecate_kwarg("past_key_values", "6.0.0", new_name="cache")`` on ``generate``)."""
    try:
        source = inspect.getsource(type(lm).generate)
    except (OSError, TypeError):
        return "past_key_values"
    return "cache" if 'deprecate_kwarg("past_key_values"' in source and 'new_name="cache"' in source else \
        "past_key_values"


def warm_static_shapes(torch, lm, requests: Sequence, batch_sizes: Sequence[int], device: str, mode: str,
                       cache_tokens: int | None) -> list[int]:
    """Graphs mode: one short ``generate`` per batch size the timed static runs will meet, on their cache length,
    so that each (batch, cache length) is compiled and its CUDA graph recorded before anything is timed (the
    compiled decode is entered from the second token; inductor's CUDA-graph trees run a new graph once before
    recording it, then replay).  Eager mode has nothing to warm.  Returns the batch sizes warmed."""
    if mode != "graphs":
        return []
    warmed = []
    for size in sorted(set(batch_sizes)):
        group = [replace(r, output_tokens=WARM_DECODE_TOKENS) for r in (list(requests) * size)[:size]]
        _generate(torch, lm, group, device, time.perf_counter, mode, cache_tokens)
        warmed.append(size)
    return warmed


# Tokens a warm-up generate produces: the prefill's, then decodes enough to compile, run once and record a graph.
WARM_DECODE_TOKENS = 5


def _static_clock(name: str) -> Callable[[], float]:
    if name not in CLOCKS:
        raise EngineError(f"unknown clock {name!r}; choose from {', '.join(CLOCKS)}")
    return time.perf_counter if name == "wall" else time.thread_time


def _check_manager(manager, transformers) -> None:
    router = getattr(manager, "output_router", None)
    if router is None or not hasattr(router, "deliver_batch") or not hasattr(router, "deliver"):
        raise EngineError(f"transformers {transformers.__version__}: the manager has no output_router.deliver_batch "
                          "(where this validate stamps each step's tokens); it knows the 5.x API")
    parameters = inspect.signature(manager.add_request).parameters
    for name in ("max_new_tokens", "streaming", "request_id", "eos_token_id"):
        if name not in parameters:
            raise EngineError(f"transformers {transformers.__version__}: ContinuousBatchingManager.add_request has "
                              f"no {name!r}; validate needs per-request max_new_tokens and token timestamps")


class _TokenStamps:
    """Wraps the manager's output delivery, which runs in the generation thread once per step for every
    request that got a token: the step of each of a request's tokens (its first is the first token, its last the
    finish, the ones between give the inter-token gaps), stamped on ``clock`` read in that thread."""

    def __init__(self, clock: Callable[[], float]):
        self.clock, self.tokens, self.steps = clock, {}, []
        self.token_steps: dict[str, list[int]] = {}

    def wrap(self, deliver: Callable) -> Callable:
        def stamped(outputs):
            self.steps.append(self.clock())
            step = len(self.steps) - 1
            for out in outputs if isinstance(outputs, list) else [outputs]:
                # generated_tokens is all of the request's tokens so far: the step gave it those beyond the last
                # count (one a step; more, were they ever delivered together, are stamped at the same step).
                count = len(out.generated_tokens)
                new = count - self.tokens.get(out.request_id, 0)
                self.token_steps.setdefault(out.request_id, []).extend([step] * new)
                self.tokens[out.request_id] = count
            return deliver(outputs)

        return stamped


def _engine_clocks(manager, clock: str) -> tuple[Callable[[], float], Callable[[], float]]:
    """(clock read inside the generation thread, the same clock read from here).  ``thread-cpu`` is the
    generation thread's CPU time: on a shared CPU it counts the engine's work, not other processes' turns.
    The clock from here finds the generation thread when first read (after ``manager.start()``)."""
    if clock == "wall":
        return time.perf_counter, time.perf_counter
    if not hasattr(time, "pthread_getcpuclockid"):
        raise EngineError("--clock thread-cpu needs pthread CPU clocks (Linux)")
    clock_ids: list[int] = []

    def generation_thread_cpu() -> float:
        if not clock_ids:
            thread = getattr(manager, "_generation_thread", None)
            if thread is None or thread.ident is None:
                raise EngineError("--clock thread-cpu: the manager has no running generation thread to time")
            try:
                clock_ids.append(time.pthread_getcpuclockid(thread.ident))
            except (ProcessLookupError, OSError):  # the thread ended first: the manager died
                raise EngineError(f"the continuous-batching manager stopped{manager_failure(manager)}") from None
        return time.clock_gettime(clock_ids[0])

    return time.thread_time, generation_thread_cpu


def run_continuous(torch, lm, requests: Sequence, max_batch: int, budget_tokens: int, clock: str = "wall",
                   longest_tokens: int | None = None, timeout_s: float = 600.0, gate=None,
                   mode: str = "eager") -> EngineRun:
    """Every request submitted at its arrival time to a running manager, streaming, so that every step's new
    tokens pass through the stamped delivery: the first stamp is the first token, the last the finish.
    ``gate`` (an ``engine.segments.StepGate``) parks the engine between steps, its parked time off the stamps."""
    transformers = transformers_module()
    longest = longest_tokens or max(r.prompt_tokens + r.output_tokens for r in requests)
    cb_config, settings = continuous_config(transformers, lm, max_batch, budget_tokens, longest, mode)
    generation = transformers.GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0, bos_token_id=None,
                                               max_new_tokens=max(r.output_tokens for r in requests))
    manager = lm.init_continuous_batching(generation_config=generation, continuous_batching_config=cb_config)
    _check_manager(manager, transformers)
    if mode == "graphs":  # capture the largest padded shape before the run's clock starts (engine.settings)
        _warm_manager(manager, transformers)
    # The attention the manager switched the model to (transformers 5.17: ``paged|sdpa``).  Another run on the same
    # model, between two segments of this one, may switch it back (a manager that stops restores the original):
    # each segment puts this one back before the engine's next step.
    engine_attention = lm.config._attn_implementation

    def restore_attention() -> None:
        if lm.config._attn_implementation != engine_attention:
            lm.set_attn_implementation(engine_attention)

    results: dict[str, Any] = {}
    ordered = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    inside, outside = _engine_clocks(manager, clock)
    stamps = _TokenStamps(gate.clock(inside) if gate else inside)
    router = manager.output_router
    router.deliver, router.deliver_batch = stamps.wrap(router.deliver), stamps.wrap(router.deliver_batch)
    if gate is not None:
        def done() -> bool:
            return all(stamps.tokens.get(f"r{r.id}", 0) >= r.output_tokens for r in ordered)

        router.deliver, router.deliver_batch = (gate.wrap(deliver, lambda: len(stamps.steps), done, inside,
                                                          restore_attention)
                                                for deliver in (router.deliver, router.deliver_batch))
    burst = all(r.arrival_s == 0 for r in ordered)
    started = _queue_burst(manager, lm, ordered, stamps.clock) if burst else None
    manager.start()
    try:
        _wait_ready(manager, time.perf_counter, timeout_s)
        start = started.at_s(manager) if started else _submit(manager, lm, ordered, outside)
        _wait_for_tokens(manager, stamps, ordered, timeout_s)
        _collect(manager, results, len(ordered), time.perf_counter, timeout_s)
    finally:
        manager.stop(block=True, timeout=30)
        destroy = getattr(manager, "destroy", None)
        if destroy:
            destroy()
    timings, step_s = [], [t - start for t in stamps.steps]
    for r in ordered:
        key = f"r{r.id}"
        if len(results[key].generated_tokens) != r.output_tokens or stamps.tokens.get(key) != r.output_tokens:
            raise EngineError(f"request {r.id}: the manager produced {len(results[key].generated_tokens)} tokens "
                              f"for max_new_tokens={r.output_tokens}")
        timings.append(stamped_timing(r, step_s, stamps.token_steps[key]))
    policy = f"chunked:budget={budget_tokens}:max-batch={max_batch}"
    return EngineRun("transformers", "continuous", policy, tuple(sorted(timings, key=lambda t: t.id)),
                     {"api": "ContinuousBatchingManager (streaming)", "clock": clock, "mode": mode, **settings,
                      "transformers": transformers.__version__}, tuple(step_s))


def _warm_manager(manager, transformers) -> None:
    """``manager.warmup()`` (transformers 5.17 ``continuous_api.py``): builds the batch processor and captures the
    CUDA graph of the largest varlen step (and the decode fast path's, with flash attention).  ``start`` reuses
    that processor (``_create_batch_processor`` resets and returns an existing one), so the graphs survive into
    the run."""
    warmup = getattr(manager, "warmup", None)
    if warmup is None:
        raise EngineError(f"transformers {transformers.__version__}: the manager has no warmup(); graphs mode "
                          "captures its graphs before the run's clock starts")
    warmup()


def _add(manager, lm, r) -> None:
    manager.add_request(prompt_ids(r, lm.config.vocab_size), request_id=f"r{r.id}",
                        max_new_tokens=r.output_tokens, streaming=True, eos_token_id=-1)


class _EngineStart:
    """When the generation thread has built its batch processor (its KV cache), stamped in that thread on the
    run's own clock: the moment a serving engine is up, just before its first step."""

    def __init__(self, manager, clock: Callable[[], float]):
        create = getattr(manager, "_create_batch_processor", None)
        if create is None:
            raise EngineError("this transformers' manager has no _create_batch_processor, where validate stamps the "
                              "start of a burst; it knows transformers 5.17 to 5.24")
        self._at_s: float | None = None

        def created(*args, **kwargs):
            processor = create(*args, **kwargs)
            self._at_s = clock()
            return processor

        manager._create_batch_processor = created

    def at_s(self, manager) -> float:
        if self._at_s is None:
            raise EngineError("the continuous-batching manager stopped before its batch processor was built"
                              f"{manager_failure(manager)}")
        return self._at_s


def _queue_burst(manager, lm, ordered: Sequence, clock: Callable[[], float]) -> _EngineStart:
    """A burst is queued before the engine starts, so its first step sees the whole burst (the same steps on
    every repeat, on every transformers: 5.17 has no ``pause()`` to hold the loop while submitting), and the run
    starts once the engine is up."""
    started = _EngineStart(manager, clock)
    for r in ordered:
        _add(manager, lm, r)
    return started


def _submit(manager, lm, ordered: Sequence, clock: Callable[[], float]) -> float:
    """Submit every request at its arrival time to the running engine; returns the run's start on ``clock``."""
    start, wall_start = clock(), time.perf_counter()
    for r in ordered:
        _wait_until(time.perf_counter, wall_start, r.arrival_s)
        _add(manager, lm, r)
    return start


def _wait_ready(manager, clock, timeout_s: float) -> None:
    """The manager builds its KV cache in its own thread after ``start``: the run's clock starts once it is
    built, as a serving engine is up before traffic comes."""
    if not hasattr(manager, "batch_processor"):
        return
    deadline = clock() + timeout_s
    while manager.batch_processor is None and manager.is_running() and clock() < deadline:
        time.sleep(0.001)


# How often the caller looks whether the engine is done.  It does not take results while the engine works: a
# consumer woken by every streamed token takes the GIL from the generation thread several times a step, which
# made the continuous path's steps slower and noisier than the static path's (which has no second thread).
POLL_S = 0.01


def _wait_for_tokens(manager, stamps: _TokenStamps, ordered: Sequence, timeout_s: float) -> None:
    """Sleep until every request's last token has been stamped (or the manager stops, or the timeout)."""
    deadline = time.perf_counter() + timeout_s
    while manager.is_running() and time.perf_counter() < deadline:
        if all(stamps.tokens.get(f"r{r.id}", 0) >= r.output_tokens for r in ordered):
            return
        time.sleep(POLL_S)


def _collect(manager, results: dict, expected: int, clock, timeout_s: float) -> None:
    deadline = clock() + timeout_s
    while len(results) < expected:
        if clock() > deadline:
            raise EngineError(f"the continuous-batching manager finished {len(results)} of {expected} requests "
                              f"in {timeout_s:.0f} s")
        out = manager.get_result(timeout=1)
        if out is None:
            if not manager.is_running():
                raise EngineError("the continuous-batching manager stopped before finishing every request")
            continue
        if getattr(out, "error", None):
            raise EngineError(f"request {out.request_id} failed in the manager: {out.error}")
        if out.is_finished():
            results[out.request_id] = out
