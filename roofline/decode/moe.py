"""What a mixture of experts changes about decode, in numbers a sentence can carry: the parameters in all and
those one token runs through (active), the bytes a step reads per token at batch 1 and at the batch where (nearly)
every expert is touched, and the experts' own crossover: the tokens one expert's GEMM needs to reach the ridge, and
the global batch that gives each touched expert that many under the routing.
"""

from __future__ import annotations

import math
from typing import Any

from roofline.core.counting import count_work, critical_intensity_batch
from roofline.core.units import si, si_bytes
from roofline.step.launches import Batch, StepModel
from roofline.step.memory import parameters

# "Every expert touched": the batch whose expected touched experts is within half an expert of all of them.
ALL_TOUCHED_SLACK = 0.5


def all_touched_batch(step: StepModel) -> int:
    """The smallest batch whose routing touches (nearly) every expert of a layer."""
    m, routing = step.model, step.routing
    batch = 1
    while routing.expected_touched(m.experts, m.experts_per_token, batch) < m.experts - ALL_TOUCHED_SLACK:
        batch *= 2
    low = batch // 2
    while batch - low > 1:
        mid = (low + batch) // 2
        touched = routing.expected_touched(m.experts, m.experts_per_token, mid)
        low, batch = (low, mid) if touched >= m.experts - ALL_TOUCHED_SLACK else (mid, batch)
    return batch


def moe_summary(step: StepModel, context: int) -> dict[str, Any] | None:
    """None for a dense model."""
    if not step.model.is_moe:
        return None
    params = parameters(step)
    full = all_touched_batch(step)
    one = step.work(Batch.decode(1, context)).total.bytes
    many = step.work(Batch.decode(full, context)).total.bytes / full
    return {"parameters": params["total"], "active_parameters": params["active"], "experts": step.model.experts,
            "experts_per_token": step.model.experts_per_token, "routing": step.routing.spelled,
            "bytes_per_token_batch_1": one, "all_touched_batch": full, "bytes_per_token_all_touched": many}


def experts_crossover(step: StepModel, ridge: float | None) -> dict[str, Any] | None:
    """Where the routed experts turn compute-bound on a ridge: per expert (their largest GEMM's crossover, the down
    projection's, as the one that binds last) and as the global batch the routing needs for it."""
    if not step.model.is_moe or not ridge:
        return None
    down = step.grouped[-1]
    per_expert = float(critical_intensity_batch(down.dtype, down.n, down.k, ridge))
    m = step.model
    if not math.isfinite(per_expert):  # a narrow expert slice: its GEMM's intensity levels off below the ridge
        limit = count_work("gemm", down.dtype, HUGE_ROWS, down.n, down.k)
        return {"tokens_per_expert": None, "global_batch": None,
                "why_none": f"one expert's {down.n}x{down.k} {down.dtype} GEMM on a GPU tends to "
                            f"{limit.flop / limit.bytes:.0f} FLOP/byte at any token count, below the ridge of "
                            f"{ridge:.0f}: the experts never turn compute-bound at this split"}
    return {"tokens_per_expert": per_expert,
            "global_batch": step.routing.global_tokens(m.experts, m.experts_per_token, per_expert)}


# Where a GEMM's intensity is read as its limit as the rows grow.
HUGE_ROWS = 10**9


def moe_words(moe: dict[str, Any], crossover: dict[str, Any] | None) -> str:
    """One sentence for the summary."""
    active, total = si(moe["active_parameters"], ""), si(moe["parameters"], "")
    text = (f"A mixture of {moe['experts']} experts, top-{moe['experts_per_token']} ({moe['routing']} routing): "
            f"{active} of {total} parameters active per token; one GPU reads "
            f"{si_bytes(moe['bytes_per_token_batch_1'])} per token in a step at batch 1 and "
            f"{si_bytes(moe['bytes_per_token_all_touched'])} at batch {moe['all_touched_batch']}, where every "
            "expert is touched")
    if crossover and crossover.get("tokens_per_expert") is None:
        text += f"; {crossover['why_none']}"
    elif crossover:
        text += (f"; the experts turn compute-bound at ~{crossover['tokens_per_expert']:.0f} tokens each, a global "
                 f"batch of ~{crossover['global_batch']:.0f}")
    return text + "."
