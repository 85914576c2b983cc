"""What the transformers engine is configured with, per ``--engine-mode``: the continuous-batching manager's
``ContinuousBatchingConfig`` and the static path's ``generate`` settings.

- eager: no graphs, no compilation; every kernel is launched from Python, step by step.
- graphs (a CUDA device): the manager with ``use_cuda_graph=True``, which transformers (5.17 and 5.24,
  ``continuous_batching/initialization.py: decide_use_cuda_graphs``) follows as given for both its varlen
  and decode paths, padding queries and keys to its preset intervals (``q_padding_interval_size`` and
  ``kv_padding_interval_size`` left at 0: the preset) so that a few graphs serve every step; and ``generate``
  with a static KV cache and a ``CompileConfig`` of mode
  ``reduce-overhead``, the inductor mode that captures CUDA graphs: ``generate`` compiles the decode forward
  when the cache is compileable and the device is CUDA (``_valid_auto_compile_criteria``).  Shapes are static
  (``dynamic=False``): each (batch, cache length) compiles once, so every static batch of a size runs on one
  ``StaticCache`` of the longest request's length, reset between batches (transformers 5.17 ``cache_utils.py``:
  its tensors are marked static addresses, which the recorded CUDA graph reads; a new cache per ``generate``,
  as ``cache_implementation="static"`` makes, would be re-recorded inside the timed batch), and validate
  compiles and records every batch size before it times anything (``validate_run``); the decode then attends,
  masked, over that whole cache (``repeat_kv`` and a masked SDPA: ``integrations/sdpa_attention.py:
  use_gqa_in_sdpa`` turns GQA off under a mask), which the simulation models as attention over the cache's
  length (the static policy's ``cache=L``).
- graphs, continuous: the manager pads a step's queries to multiples of ``q_padding_interval_size`` (64) and its
  KV reads to ``kv_padding_interval_size`` (16,384 tokens, capped at the cache) and captures one graph per padded
  shape at its first step (5.17 ``continuous_batching/model_runner.py: maybe_pad_inputs, _capture_graph``);
  ``manager.warmup()`` (called before each run's clock starts) captures the largest varlen shape (and the decode
  fast path's sizes, which SDPA does not have: ``initialization.py: ensure_decode_fast_path_is_available``); a
  smaller padded shape is still captured at its first step, inside the run (each run is a new manager).
"""

from __future__ import annotations

import inspect

from microbench.points.plan import PlanError

ENGINE_MODES = ("eager", "graphs")


class EngineError(PlanError):
    """The engine cannot run here (missing package, an API this code does not know): one line, exit 2."""


def transformers_module():
    try:
        import transformers
    except ImportError:
        raise EngineError("validate --engine transformers needs transformers: pip install -e '.[serving]'") from None
    return transformers


def manager_failure(manager) -> str:
    """Why a continuous-batching manager's thread died, as the end of a one-line message: the error it recorded
    (``background_thread_status.fatal_error`` in 5.17 and 5.24; a MemoryError for a cache past the memory)."""
    status = getattr(manager, "background_thread_status", None)
    error = getattr(status, "fatal_error", None)
    if error is None:
        return ""
    text = str(error).splitlines()[0] if str(error) else ""
    return f": {type(error).__name__}" + (f" ({text})" if text else "")


def static_generation_settings(transformers, mode: str, own_cache: bool = False) -> dict:
    """What ``generate`` is given beyond greedy decoding: nothing in eager mode; a CUDA-graph-capturing compile of
    the decode step in graphs mode, with a static cache that ``generate`` makes unless the caller passes its own
    (``own_cache``: ``transformers_engine`` keeps one per batch size, so that every batch of a size runs on one
    cache length and on the tensors its graph was recorded on)."""
    if mode == "eager":
        return {}
    if mode != "graphs":
        raise EngineError(f"unknown engine mode {mode!r}; choose from {', '.join(ENGINE_MODES)}")
    compile_config = transformers.CompileConfig(fullgraph=False, dynamic=False, mode="reduce-overhead")
    return {"compile_config": compile_config, **({} if own_cache else {"cache_implementation": "static"})}


# Enough compiled decode shapes that none falls back to eager: dynamo's default (torch 2.11 ``_dynamo/config.py``
# ``recompile_limit = 8``; ``cache_size_limit`` is its alias) stops compiling the ninth and runs it uncompiled.
RECOMPILE_MARGIN = 8


def allow_compiles(torch, shapes: int) -> int:
    """Raise dynamo's recompile limit to hold ``shapes`` compiled shapes and a margin; returns the limit set."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, shapes + RECOMPILE_MARGIN)
    return config.recompile_limit


# What this code sets on the manager; a transformers without one of these is refused with a clear error.  The
# tokens of one KV block are ``block_size`` up to transformers 5.17 and ``page_size`` from 5.18 (which still
# takes ``block_size`` as a deprecated alias): whichever the installed config has.
CB_SETTINGS = ("max_batch_tokens", "max_requests_per_batch", "num_blocks", "allow_block_sharing",
               "use_async_batching", "use_cuda_graph", "scheduler_type")
CB_BLOCK_TOKENS_NAMES = ("page_size", "block_size")
CB_PAGE_TOKENS = 32


def graph_padding(transformers) -> tuple[int, int]:
    """(query, KV) padding intervals in tokens the manager's CUDA graphs use when ``ContinuousBatchingConfig``
    leaves them at 0, as this code does: transformers' ``FALLBACK_DEFAULTS`` (5.17 and 5.24:
    ``continuous_batching/initialization.py``, 64 and 16,384)."""
    try:
        from transformers.generation.continuous_batching.initialization import FALLBACK_DEFAULTS
    except ImportError:
        raise EngineError(f"transformers {transformers.__version__}: no continuous_batching.initialization."
                          "FALLBACK_DEFAULTS, where validate reads the CUDA graphs' padding") from None
    return int(FALLBACK_DEFAULTS["q_padding_interval_size"]), int(FALLBACK_DEFAULTS["kv_padding_interval_size"])


def graphs_policy_options(transformers, max_batch: int, longest_tokens: int) -> str:
    """The chunked policy's options that simulate the manager's graphs: each step packed, its queries and keys
    padded to the intervals (``graph_padding``), the keys at most the manager's cache (``cache_blocks``)."""
    pad_q, pad_kv = graph_padding(transformers)
    return f":pad-q={pad_q}:pad-kv={pad_kv}:kv-cap={cache_blocks(max_batch, longest_tokens) * CB_PAGE_TOKENS}"


def cache_blocks(max_batch: int, longest_tokens: int) -> int:
    """KV blocks the manager is given: ``max_batch`` sequences of the longest request, with room to spare."""
    return int(1.5 * max_batch * -(-(longest_tokens + 1) // CB_PAGE_TOKENS)) + 8


def continuous_config(transformers, lm, max_batch: int, budget_tokens: int, longest_tokens: int,
                      mode: str = "eager"):
    """The manager's settings: the given batch and token budget, and KV blocks for ``max_batch`` sequences of
    ``longest_tokens`` (with room to spare) so the cache never limits the batch: no preemption, and the
    simulator's KV limit does not bind either.  The block count depends on nothing else, because the manager's
    per-step bookkeeping grows with it: calibration and workload must run the same cache.  ``mode`` graphs
    turns the manager's CUDA graphs on (module docstring)."""
    config_class = getattr(transformers, "ContinuousBatchingConfig", None)
    manager_api = getattr(lm, "init_continuous_batching", None)
    if config_class is None or manager_api is None:
        raise EngineError(f"transformers {transformers.__version__} has no continuous-batching manager with a "
                          "ContinuousBatchingConfig (transformers 5.x has one); upgrade transformers")
    known = set(inspect.signature(config_class).parameters)
    missing = [name for name in CB_SETTINGS if name not in known]
    block_tokens = next((name for name in CB_BLOCK_TOKENS_NAMES if name in known), None)
    if block_tokens is None:
        missing.append(" or ".join(CB_BLOCK_TOKENS_NAMES))
    if missing:
        raise EngineError(f"transformers {transformers.__version__}: ContinuousBatchingConfig lacks "
                          f"{', '.join(missing)}; this validate knows the 5.x API")
    settings = {"max_batch_tokens": budget_tokens, "max_requests_per_batch": max_batch,
                "num_blocks": cache_blocks(max_batch, longest_tokens), str(block_tokens): CB_PAGE_TOKENS,
                "allow_block_sharing": False,
                "use_async_batching": False, "use_cuda_graph": mode == "graphs", "scheduler_type": "fifo"}
    if "auto_switch_to_flash" in known:  # stay on SDPA, the kernels the profile measured (and fetch nothing)
        settings["auto_switch_to_flash"] = False
    return config_class(**settings), settings


