"""What a measured profile says one GPU draws while a step runs: with ``--energy``, NVML's instantaneous power over
each linear's (and each expert set's) timed phase (``power_w``: the median of the readings that describe the
phase, as a sweep point records them), made into a draw per token count: at T tokens, the mean of the step's
linears' draws weighted by the seconds each runs in a step (its time times the layers it runs in).  Attention and
the elementwise work are charged at the same draw (the linears are most of a decode step's time, and theirs is
the draw read).  The median reading, not the energy counter's rise: on the H200 the counter moves in steps too
coarse for a phase of a few tenths of a second (tests/data/h200, 74 points: the counter's draw over a phase was
0.48-1.23x the readings' median, 0.60-1.16x from the 10th to the 90th percentile).  The readings are
instantaneous and swing above the board's limit, which the power controller holds on average: on that H200 the
compute-bound phases' medians were 720-800 W against a 700 W limit, and a sustained bf16 matmul drew ~690 W
(tests/data/h200/probe.json, ``sustained_segments``), so at compute-bound token counts the draw may read up to
~15% high.  Without ``--energy``, on the CPU, or where no reading fell inside a phase, the profile says why it
has no figure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from roofline.serving.profile_doc import no_power, power_record

ENERGY_BASIS = ("NVML's instantaneous power, the median reading over each timed phase of the step's linears, "
                "weighted by their seconds in a step, per token count (attention and the elementwise work charged "
                "at the same draw)")


CPU_HAS_NO_POWER = "the CPU has no energy counter gpubench reads (NVML reads GPUs)"


def measured_power(kind: str, energy: bool = False, per_tokens: Mapping[int, Iterable[tuple[Any, float, int]]]
                   | None = None, source: str = "") -> dict[str, Any]:
    """The measured profile's ``power`` record.  ``per_tokens``: per token count, each linear's (watts or None,
    seconds per launch, layers it runs in)."""
    if kind == "cpu":
        return no_power(CPU_HAS_NO_POWER)
    if not energy:
        return no_power("the profile was measured without --energy, so NVML's power was not read; profile with "
                        "--energy (each linear's timed phase then lasts long enough for NVML readings), or take an "
                        "analytic profile of the SKU (--analytic --gpu SKU: its TDP, an upper bound)")
    table = power_by_tokens(per_tokens or {})
    if not table["tokens"]:
        return no_power("no NVML power reading fell inside the linears' timed phases (NVML was not read, or each "
                        "phase was shorter than its readings)")
    mean = sum(table["watts"]) / len(table["watts"])
    return power_record(mean, ENERGY_BASIS, source, upper_bound=False, by_tokens=table)


def power_by_tokens(per_tokens: Mapping[int, Iterable[tuple[Any, float, int]]]) -> dict[str, list]:
    """``{"tokens", "watts"}``: at each token count whose every linear has a reading, the linears' draws weighted
    by their seconds in a step (the step's joules over its seconds)."""
    tokens, watts = [], []
    for count in sorted(per_tokens):
        rows = list(per_tokens[count])
        if not rows or any(w is None or w <= 0 or seconds <= 0 for w, seconds, _ in rows):
            continue
        joules = sum(w * s * layers for w, s, layers in rows)
        tokens.append(int(count))
        watts.append(joules / sum(s * layers for _, s, layers in rows))
    return {"tokens": tokens, "watts": watts}
