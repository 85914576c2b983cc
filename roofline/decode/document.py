"""Assemble a decode analysis (measured and/or analytic) into one JSON-able document and its summary lines.

The figure drawn from that document is ``roofline.decode.plot``."""

from __future__ import annotations

from typing import Any

from roofline.core.roof import ridge_flop_per_byte
from roofline.core.units import seconds, si_bytes
from roofline.decode.ceilings import sku_basis, step_dtypes
from roofline.decode.moe import experts_crossover, moe_words
from roofline.decode.step import (
    DecodeSetup,
    comm_time,
    kv_capacity,
    latency_knee,
    measured_energy,
    measured_time,
    no_peak_note,
    power_energy,
    ridge_crossing,
    rows_to_dicts,
    step_rows,
)
from roofline.result.folders import FolderKind
from roofline.result.sections import Device
from roofline.specs.gpus import GpuSpec, Interconnect
from roofline.step.comm import collectives

# What ``gpubench decode -o`` writes (decode.json names no kind: it is known by its keys).
DECODE_FOLDER = FolderKind("decode", "decode.json", keys=("setup", "summary"), files=("decode.png",))


def comm_part(setup: DecodeSetup, interconnect: Interconnect | None, where: str) -> dict[str, Any] | None:
    """What the step's collectives are and what they are costed on (``where``: whose spec sheet); None on one GPU."""
    kinds = collectives(setup.step, 1)
    if not kinds:
        return None
    per_layer = {c.name: c.count / setup.model.layers for c in kinds}
    return {"all_reduces_per_layer": per_layer.get("all_reduce", 0), "ranks": setup.step.parallelism.gpus,
            "collectives": [{"kind": c.name, "ranks": c.ranks, "per_step": c.count,
                             "crosses": c.crossing(interconnect) if interconnect else None} for c in kinds],
            "source": where, "interconnect": interconnect.to_dict() if interconnect else None}


def _comm_fn(setup: DecodeSetup, interconnect: Interconnect | None):
    return comm_time(setup, interconnect) if interconnect is not None and setup.step.parallelism.gpus > 1 else None


BASIS_NAMES = {"reference": "per-matrix efficiencies", "flat": "achievable ceilings", "ideal": "spec sheet"}


def analytic_document(setup: DecodeSetup, profile: GpuSpec, batches: list[int], mem_fraction: float,
                      efficiency: str = "flat", ideal: bool = False) -> dict[str, Any]:
    """The same step from the SKU's analytic basis (``roofline.decode.ceilings``, the one ``profile --analytic``
    times its tables on): no GPU needed.  MBU, MFU and the ridge are against the basis's ceilings (the achievable
    ones; the datasheet's with ``ideal``).  The KV capacity is sized from the memory the driver reports for the
    board, not the datasheet's rounder figure."""
    dtypes = step_dtypes(setup.step) | (step_dtypes(setup.drafter) if setup.drafter else set())
    basis = sku_basis(profile, setup.dtype, dtypes, ideal=ideal, efficiency=efficiency, require_peak=False,
                      step=setup.step)
    bandwidth, peak = basis.roof.bandwidth_bytes_per_s, basis.roof.peak_flop_per_s  # never another dtype's peak
    capacity = kv_capacity(setup, profile.reported_bytes, mem_fraction)
    rows = step_rows(setup, batches, basis.time_s, bandwidth, peak, capacity["max_batch"],
                     _comm_fn(setup, profile.interconnect),
                     power_energy(profile.tdp_w * setup.step.parallelism.gpus) if profile.tdp_w else None)
    energy = {"basis": f"every GPU at its TDP, {profile.tdp_w:g} W (an upper bound: decode at small batch draws "
                       "less)", "source": profile.tdp_source} if profile.tdp_w else \
        {"basis": None, "why_none": f"spec sheet {profile.sku} has no power figure"}
    ridge = ridge_flop_per_byte(peak, bandwidth)
    return {"source": f"{BASIS_NAMES[basis.efficiency]}: {profile.name} ({profile.sku})", "basis": basis.basis,
            "bandwidth_bytes_per_s": bandwidth, "peak_flop_per_s": peak,
            "rows": rows_to_dicts(rows), "kv": capacity, "energy": energy,
            "comm": comm_part(setup, profile.interconnect, f"spec sheet {profile.sku}"),
            "crossing": ridge_crossing(setup, ridge, batches) if ridge else None,
            **_without_speculation(setup, ridge, batches),
            "experts_crossover": experts_crossover(setup.step, ridge),
            "warnings": [] if peak else [no_peak_note(setup.dtype, profile.name)],
            "knee_batch_1p10": latency_knee(rows, 1.10), "knee_batch_1p25": latency_knee(rows, 1.25)}


def measured_document(setup: DecodeSetup, batches: list[int], times: dict, bandwidth: float | None,
                      peak: float | None, memory_bytes: float | None, mem_fraction: float, device: Device | dict,
                      warnings: list[str] = (), spec: GpuSpec | None = None,
                      joules: dict | None = None) -> dict[str, Any]:
    """The measured step.  ``warnings``: why to trust the launch times less (``roofline.analysis.trust``), plus a
    step slower at a larger batch than at a smaller one, which no roofline does: noise or a kernel change.  One
    device cannot time an all-reduce between several: at TP > 1 the step's are costed on ``spec``'s interconnect
    (the matched SKU's, or --gpu's); without one they are not counted, and a warning says so."""
    capacity = kv_capacity(setup, memory_bytes, mem_fraction)
    link = spec.interconnect if spec is not None else None
    measured_on = Device.from_dict(device)
    energy_fn = measured_energy(setup, joules) if joules else None
    rows = step_rows(setup, batches, measured_time(setup, times), bandwidth, peak, capacity["max_batch"],
                     _comm_fn(setup, link), energy_fn)
    energy = {"basis": "each launch's median NVML power over its timed phase times its time",
              "source": measured_on.label} \
        if energy_fn is not None and rows and rows[0].joules_per_token is not None else \
        {"basis": None, "why_none": "the CPU has no energy counter gpubench reads (NVML reads GPUs)"
         if measured_on.kind == "cpu" else "the launches' points carry no energy reading"}
    ridge = ridge_flop_per_byte(peak, bandwidth)
    uncounted = [f"{setup.step.parallelism.describe()}: the collectives between GPUs are not counted (no spec sheet "
                 "matched this device; --gpu SKU gives its interconnect)"] \
        if setup.step.parallelism.gpus > 1 and link is None else []
    return {"source": f"measured on {measured_on.label}", "device_kind": measured_on.kind,
            "bandwidth_bytes_per_s": bandwidth, "peak_flop_per_s": peak,
            "rows": rows_to_dicts(rows), "kv": capacity, "energy": energy,
            "comm": comm_part(setup, link, f"spec sheet {spec.sku}" if spec else "not counted"),
            "crossing": ridge_crossing(setup, ridge, batches) if ridge else None,
            **_without_speculation(setup, ridge, batches),
            "experts_crossover": experts_crossover(setup.step, ridge),
            "warnings": list(warnings) + uncounted + _inversions(rows),
            "knee_batch_1p10": latency_knee(rows, 1.10), "knee_batch_1p25": latency_knee(rows, 1.25)}


def _without_speculation(setup: DecodeSetup, ridge: float | None, batches: list[int]) -> dict[str, Any]:
    """Beside a speculative step's crossover, the plain step's: speculation moves it to about 1/(K+1)."""
    if setup.spec is None:
        return {}
    return {"crossing_without_speculation": ridge_crossing(setup.without_speculation(), ridge, batches)
            if ridge else None}


def _crossing_batch(crossing: dict[str, Any]) -> str:
    if crossing["never"]:
        return "never (attention keeps it memory-bound)"
    batch = crossing["crossover_batch"] or crossing.get("crossover_batch_beyond_list")
    return f"batch {batch}"


def _speculation_words(spec: dict[str, Any], crossing: dict[str, Any], part: dict[str, Any]) -> str:
    """Where the weight GEMMs and the whole step turn compute-bound, with and without speculation."""
    plain = part["crossing_without_speculation"]
    gemm, gemm_plain = crossing.get("gemm_crossover_batch"), plain.get("gemm_crossover_batch")
    text = (f"with {spec['draft']} draft tokens ({spec['tokens_per_step']:.2f} tokens per sequence per step) the "
            f"weight GEMMs turn compute-bound at a batch of {gemm or 'no'} sequences, without speculation at "
            f"{gemm_plain or 'none'}")
    if gemm and gemm_plain:
        text += f" ({gemm / gemm_plain:.2f}×)"
    return (text + f"; the whole step at {_crossing_batch(crossing)}, without speculation at "
            f"{_crossing_batch(plain)}.")


def _inversions(rows) -> list[str]:
    """Steps that no roofline gives: faster at a larger batch, or slower by as much as the work grew (FLOP and
    bytes both), so that tokens/s does not rise with the batch; under load a CPU shows both."""
    lines = []
    for small, large in zip(rows, rows[1:], strict=False):
        growth = large.step_time_s / small.step_time_s
        work = max(large.flop / small.flop, large.bytes / small.bytes)
        if growth < 1:
            lines.append(f"batch {large.batch} takes {large.step_time_s * 1e3:.3g} ms per step, less than batch "
                         f"{small.batch} ({small.step_time_s * 1e3:.3g} ms) for more work: the launch times are "
                         "noisy (a busy device?) or the library changed kernels")
        elif growth >= work:  # tokens/s did not rise: the step grew at least as fast as its FLOP
            lines.append(f"batch {large.batch} takes {growth:.1f}× the step time of batch {small.batch} for "
                         f"{work:.1f}× the work: the launch times are noisy (a busy device?) or the library "
                         "changed kernels")
    return lines


def _comm_words(part: dict[str, Any], first: dict[str, Any]) -> str:
    """The collectives' share of the first row's step, the link each crosses (the domain's, or the scale-out link
    between domains), and whether they bind the step (half of it or more)."""
    comm = part.get("comm")
    if not comm or not comm.get("interconnect"):
        return ""
    link = comm["interconnect"]
    kinds = " and ".join(f"{c['per_step']} {c['kind'].replace('_', '-')}s over {c['ranks']} GPUs "
                         f"({c.get('crosses') or link['kind']})" for c in comm.get("collectives") or [])
    words = (f"; the step's {kinds} take {seconds(first['comm_time_s'])}, "
             f"{100 * first['comm_share']:.0f}% of the step")
    return words + (": communication binds the step" if first["comm_share"] >= 0.5 else "")


def _per_device(part: dict[str, Any], tp: int) -> str:
    """Whose memory the weights are counted in: a GPU's (the spec sheet's, or a GPU measured), else the device's:
    a CPU has no GPU to speak of, and at TP 1 holds them all."""
    if part.get("device_kind", "cuda") == "cuda":  # the analytic side is a GPU's spec sheet
        return " per GPU"
    return " per TP rank" if tp > 1 else ""


def summary_lines(document: dict[str, Any]) -> list[str]:
    """The answer in words, for each of measured and analytic."""
    lines = []
    setup = document["setup"]
    split = f"TP {setup['tp']}" + (f", EP {setup['ep']}" if setup.get("ep", 1) > 1 else "")
    head = f"{setup['model']} ({split}, context {setup['context']}, {setup['dtype']}, KV {setup['kv_dtype']})"
    for key in ("measured", "analytic"):
        part = document.get(key)
        if not part:
            continue
        first = part["rows"][0]
        spec = setup.get("speculation")
        per_step = f"per step ({spec['tokens_per_step']:.2f} tokens per sequence)" if spec else "per token"
        text = (f"{part['source'] if key == 'measured' else 'analytic, ' + part['source']}: {head}: batch "
                f"{first['batch']} takes {seconds(first['step_time_s'])} {per_step}, reads {si_bytes(first['bytes'])}")
        if first["mfu_linear"] is not None:
            text += (f", the weight GEMMs use {100 * first['mfu_linear']:.2f}% of peak FLOP/s "
                     f"({100 * first['mfu']:.2f}% with attention)")
        if first["mbu"] is not None:
            text += f", MBU {100 * first['mbu']:.0f}%"
        if first.get("joules_per_token") is not None:
            bound = " at most (every GPU at its TDP)" if key == "analytic" else ""
            text += f", {first['joules_per_token']:.3g} J per token{bound}"
        text += _comm_words(part, first)
        crossing = part.get("crossing")
        if crossing:
            text += f". Ridge {crossing['ridge_flop_per_byte']:.0f} FLOP/byte: "
            if crossing["never"]:
                text += (f"the step never turns compute-bound at this context (its intensity tends to "
                         f"{crossing['limit_intensity_flop_per_byte']:.0f} FLOP/byte as the batch grows: "
                         f"{setup.get('mixing', 'attention')})")
            elif crossing["crossover_batch"] is not None:
                text += f"the step turns compute-bound at batch {crossing['crossover_batch']}"
            else:
                text += f"compute-bound only past batch {crossing.get('crossover_batch_beyond_list')}"
            if crossing["context_limit"]:
                text += f"; past context {crossing['context_limit']} it stays memory-bound at every batch"
        kv = part["kv"]
        text += f". The weights take {si_bytes(kv['weight_bytes'])}{_per_device(part, setup['tp'])} (embeddings aside)"
        kept = kv.get("sequence_bytes") or {}
        if kv["fits"] is False:
            text += " and do not fit in memory at this TP"
        elif kv["max_batch"] and (kept.get("state") or kept.get("window")):
            text += f"; what the sequences keep (KV, windows, states) caps the batch at {kv['max_batch']}"
        elif kv["max_batch"]:  # 0: the CLI says why (the context), exit 2
            text += f"; the KV cache caps the batch at {kv['max_batch']}"
        if part.get("knee_batch_1p10"):
            text += f"; time per token is 10% above batch 1 by batch {part['knee_batch_1p10']}"
        lines.append(text + ".")
        if part.get("basis"):
            lines.append(f"{key} basis: {part['basis']}.")
        if setup.get("speculation") and crossing and part.get("crossing_without_speculation"):
            lines.append(f"{key}: {_speculation_words(setup['speculation'], crossing, part)}")
        if setup.get("moe"):
            lines.append(f"{key}: {moe_words(setup['moe'], part.get('experts_crossover'))}")
        lines += [f"{key}: warning: {warning}." for warning in part.get("warnings") or []]
    if setup.get("layers"):
        lines.append(f"Layers: {setup['layers']}.")
    kept = next((document[k]["kv"].get("sequence_bytes") for k in ("analytic", "measured") if document.get(k)), None)
    if kept:
        lines.append(f"One sequence at {setup['context']} tokens keeps {si_bytes(sum(kept.values()))}"
                     f"{' a GPU' if setup['tp'] > 1 else ''}: {_kept_words(kept)}.")
    if setup.get("dtype_note"):
        lines.append(f"Formats: {setup['dtype_note']}.")
    if setup.get("weights"):
        lines.append(f"Weights: {setup['weights']}.")
    return lines


def _kept_words(kept: dict[str, int]) -> str:
    words = {"kv": "of KV cache (the layers that keep every token)", "window": "of sliding windows (at most their "
             "windows)", "state": "of recurrent state (the same at any length)"}
    return ", ".join(f"{si_bytes(kept[k])} {words[k]}" for k in ("kv", "window", "state") if kept.get(k))
