"""The work behind ``gpubench decode``: check the arguments, measure or look up, assemble the document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from microbench.sweep.plan import PlanError, parse_batches
from roofline.core.counting import DTYPES
from roofline.decode.document import analytic_document, measured_document, summary_lines
from roofline.decode.step import DecodeSetup
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import check_tp, load_hf_config, load_model

# A decode table with more rows than this is no longer read; 4096 rows took 8.3 s here, a million over half an hour.
MAX_DECODE_BATCHES = 4096


def run_decode(model: str | None, hf_config: Path | None, tp: int, context: int, dtype: str, kv_dtype: str | None,
               batches: str, mem_fraction: float, analytic: bool, sku: str | None, from_result: Path | None,
               device: str, budget: float | None) -> dict[str, Any]:
    if bool(model) == bool(hf_config):
        raise PlanError("give one of --model NAME or --hf-config PATH")
    # one of --model / --hf-config is given (checked above)
    profile = load_model(model) if model else load_hf_config(hf_config)  # pyright: ignore[reportArgumentType]
    check_tp(profile, tp)
    if context <= 0:
        raise PlanError(f"--context must be positive, got {context}")
    kv_dtype = kv_dtype or dtype
    for value in (dtype, kv_dtype):
        if value not in DTYPES:
            raise PlanError(f"unknown dtype {value!r}; choose from {', '.join(DTYPES)}")
    if not 0 < mem_fraction <= 1:
        raise PlanError("--mem-fraction must be in (0, 1]")
    if analytic and not sku:
        raise PlanError("--analytic needs --gpu SKU")
    if analytic and from_result is not None:  # it would be ignored: --analytic measures nothing, reads nothing
        raise PlanError("--from gives measured launch times; --analytic is the spec sheet only: give one of them")
    batch_list = parse_batches(batches)
    if len(batch_list) > MAX_DECODE_BATCHES:  # each is a row of the table and a point of the figure
        raise PlanError(f"--batch {batches}: {len(batch_list)} batches, more than the {MAX_DECODE_BATCHES} a decode "
                        "table shows; use a ratio step (1:1048576:x2) or a shorter range")
    setup = DecodeSetup(profile, tp, context, dtype, kv_dtype)
    document: dict[str, Any] = {"setup": {"model": profile.name, "model_id": profile.id, "tp": tp, "context": context,
                                          "dtype": dtype, "kv_dtype": kv_dtype, "batches": batch_list,
                                          "model_source": profile.source}}
    if not analytic:
        document["measured"] = _measured(setup, batch_list, mem_fraction, from_result, device, budget)
        sku = sku or document["measured"].pop("sku", None)
    if sku:
        document["analytic"] = analytic_document(setup, load_gpu_spec(sku), batch_list, mem_fraction)
    document["summary"] = summary_lines(document)
    return document


def _measured(setup: DecodeSetup, batches: list[int], mem_fraction: float, from_result: Path | None, device: str,
              budget: float | None) -> dict[str, Any]:
    from microbench.decode.launches import measure_launches, measured_roof, needed_launches, times_from_result
    from microbench.sweep.config import SweepConfig
    from roofline.analysis.trust import decode_noise_lines, target_rel_ci
    from roofline.result.io import load_result

    keys = needed_launches(setup, batches)
    if from_result is not None:
        source = load_result(from_result)
        times, device_record = times_from_result(source, from_result, keys)
        points, roof = [], {}
        # The launches' own noise travels with their times (the table must say when to trust it less).
        used = [p for p in source.points if p.usable and p.backend == "torch" and p.plan_key[:5] in set(keys)]
        warnings = decode_noise_lines(used, source.settings.get("busy_at_start"), target_rel_ci(source))
    else:
        from microbench.cli.render import terminal_observer

        with terminal_observer() as observer:
            times, device_record, points, roof = measure_launches(keys, device, budget, observer, setup.dtype)
        warnings = decode_noise_lines(points, None, SweepConfig.target_rel_ci)
    # Only the times travel with --from; MBU/MFU then come from the spec side.
    bandwidth, peak = measured_roof(points, roof, setup.dtype) if from_result is None else (None, None)
    memory = device_record.get("memory_bytes")
    part = measured_document(setup, batches, times, bandwidth, peak, memory, mem_fraction, device_record, warnings)
    part["sku"] = device_record.get("sku")
    return part
