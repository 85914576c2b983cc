"""How big ``gpubench validate`` may be asked to be, checked before anything runs, and the step profile sized to
what the workload can fill.

- Requests: at most ``MAX_REQUESTS`` per workload.  validate runs the real engine on every request, once per
  repeat and path; 100,000 requests of even a tiny model are hours, and past it a workload's per-request
  lists are what fails (``[0.0] * 10**20`` raised OverflowError).
- Batch and token budget: what the engine allocates for them must fit in the machine's memory (the GPU's, or
  the host's on the CPU).  The continuous manager sizes its KV blocks for ``--max-batch`` sequences of the
  longest request and builds a step of ``--budget-tokens`` tokens, with SDPA an attention mask of budget x
  cached tokens; a static ``generate`` holds a cache of its batch (at most the workload's requests) x the
  longest request.  Past it transformers raised MemoryError in the manager's thread, after the profile had
  been measured.  The estimate counts what grows with the sizes (weights aside): a refusal is sure to be
  right, and an accepted run may still be tight.
- The profile: tokens and batch only up to what the workload can put in one step, whatever the flags say
  (``--static-batch 1000000 --requests 4`` profiles batch 4, not 10^6).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from microbench.points.plan import PlanError
from microbench.serving.engine.settings import CB_PAGE_TOKENS, cache_blocks
from roofline.core.counting import DTYPE_SIZES, compute_dtype
from roofline.specs.models import ModelSpec
from roofline.step.launches import StepModel
from roofline.step.memory import kv_bytes_per_token

MAX_REQUESTS = 100_000


def check_request_counts(requests: int, calibration_requests: int) -> None:
    for flag, value in (("--requests", requests), ("--calibration-requests", calibration_requests)):
        if value > MAX_REQUESTS:
            raise PlanError(f"{flag} {value}: give at most {MAX_REQUESTS:,} (validate runs the engine on every "
                            "request, every repeat, on both paths)")


def engine_bytes(model: ModelSpec, dtype: str, path: str, batch: int, budget_tokens: int, longest: int) -> int:
    """What one engine path allocates that grows with its sizes: the KV cache, a step's activations and
    logits, and (continuous, SDPA) the attention mask of a step's tokens over the whole cache."""
    element = DTYPE_SIZES[compute_dtype(dtype)][0]
    kv_per_token = kv_bytes_per_token(StepModel.of(model, dtype=dtype))
    if path == "static":
        cache_tokens, step_tokens, mask = batch * longest, batch * longest, 0
    else:
        cache_tokens = cache_blocks(batch, longest) * CB_PAGE_TOKENS
        step_tokens = budget_tokens
        mask = budget_tokens * cache_tokens * element
    activations = step_tokens * (4 * model.hidden + 2 * model.intermediate + model.vocab) * element
    return cache_tokens * kv_per_token + activations + mask


def machine_bytes(kind: str, index: int | None) -> int:
    """The memory the engine runs in: the GPU's, or this host's."""
    if kind == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(index or 0).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_engine_fits(setup, model: ModelSpec, dtype: str, requests: Sequence, kind: str, index: int | None) -> None:
    """Refuse, one line, a batch or budget whose allocations alone exceed the machine's memory."""
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    most = max(setup.requests, setup.calibration_requests)
    memory = machine_bytes(kind, index)
    sizes = {"static": (min(setup.static_batch, most), f"--static-batch {setup.static_batch}"),
             "continuous": (setup.max_batch, f"--max-batch {setup.max_batch} --budget-tokens {setup.budget_tokens}")}
    for path, (batch, flags) in sizes.items():
        needed = engine_bytes(model, dtype, path, batch, setup.budget_tokens, longest)
        if needed > memory:
            raise PlanError(f"{flags}: the {path} engine would allocate about {needed / 2**30:,.1f} GiB for "
                            f"{model.name} ({dtype}, requests up to {longest} tokens), more than this "
                            f"{kind} has ({memory / 2**30:,.1f} GiB); give smaller sizes")


def profile_sizes(setup, requests: Sequence) -> tuple[int, int]:
    """(tokens in one step, sequences in one step) the profile must cover: a static batch of at most the
    requests, padded to the longest prompt; a continuous step of at most the budget, the prompts there are
    and a decode token per sequence; the larger batch of the two paths, at most the requests."""
    most = max(setup.requests, setup.calibration_requests)
    static_batch, max_batch = min(setup.static_batch, most), min(setup.max_batch, most)
    longest_prompt = max(r.prompt_tokens for r in requests)
    continuous_tokens = min(setup.budget_tokens, sum(r.prompt_tokens for r in requests) + max_batch)
    return max(continuous_tokens, static_batch * longest_prompt), max(static_batch, max_batch)
