"""The work behind ``gpubench decode``: read the model, measure or look up, assemble the document."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from microbench.decode.config import DecodeConfig
from microbench.timing.observer import SweepObserver
from roofline.decode.document import analytic_document, measured_document, summary_lines
from roofline.decode.step import DecodeSetup
from roofline.specs.gpus import SpecError, load_gpu_spec
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import load_model, past_context_window, step_formats, weights_note
from roofline.step.launches import StepModel
from roofline.step.speculative import parse_spec_decode


def run_decode(config: DecodeConfig, progress: Callable[[], AbstractContextManager[SweepObserver]] | None = None
               ) -> dict[str, Any]:
    """The decode document of a checked config: the model read, measured (or its times read ``--from`` a
    result) unless ``--analytic``, and the SKU's analytic side (``roofline.decode.ceilings``) wherever a SKU is
    known.  ``progress`` opens the
    observer a measurement reports to (the CLI's progress bar); none: it reports to nobody."""
    if config.model:
        profile = load_model(config.model)
    else:
        assert config.hf_config is not None  # DecodeConfig.from_options requires one of the two
        profile = load_hf_config(config.hf_config)
    profile, dtype, kv_dtype, dtype_note = step_formats(profile, config.dtype, config.kv_dtype)
    step = StepModel.of(profile, config.tp, config.ep, dtype, kv_dtype, config.routing)
    past = past_context_window(profile.name, profile.max_positions, config.context)
    if past:  # a KV cache the model never holds: every attention time past it describes no real step
        raise SpecError(f"--context {config.context}: {past}")
    tp, context, sku = config.tp, config.context, config.sku
    batch_list, mem_fraction = list(config.batches), config.mem_fraction
    spec = parse_spec_decode(config.spec_decode)
    setup = DecodeSetup(step, context, spec)
    document: dict[str, Any] = {"setup": {"model": profile.name, "model_id": profile.id, "tp": tp, "ep": config.ep,
                                          "gpus": step.parallelism.gpus, "context": context,
                                          "dtype": dtype, "kv_dtype": kv_dtype, "batches": batch_list,
                                          "model_source": profile.source,
                                          "weights": weights_note(dtype, profile.formats),
                                          **({"dtype_note": dtype_note} if dtype_note else {}),
                                          "layers": profile.describe_layers(), "mixing": mixing_words(step),
                                          **({"notes": list(profile.notes)} if profile.notes else {}),
                                          "moe": moe_words(step, context),
                                          **({"speculation": spec.to_dict()} if spec else {})}}
    if not config.analytic:
        document["measured"] = _measured(setup, batch_list, mem_fraction, config.from_result, config.device,
                                         config.budget_s, progress or _silent, config.sku)
        sku = sku or document["measured"].pop("sku", None)
    if sku:
        document["analytic"] = analytic_document(setup, load_gpu_spec(sku), batch_list, mem_fraction,
                                                 config.efficiency, config.ideal)
    document["summary"] = summary_lines(document)
    return document


def mixing_words(step: StepModel) -> str:
    """What keeps a step memory-bound as its batch grows, in words: the reads of each sequence's own cache or state."""
    kinds = {"recurrent states" if rules.recurrent else "attention" for rules, _ in step.mixers}
    return " and ".join(sorted(kinds))


def moe_words(step: StepModel, context: int) -> dict[str, Any] | None:
    """What a mixture of experts changes, for the summary: parameters in all and active, and the weight bytes one
    step reads at batch 1 and once every expert is touched."""
    from roofline.decode.moe import moe_summary

    return moe_summary(step, context)


@contextmanager
def _silent() -> Iterator[SweepObserver]:
    yield SweepObserver()


def _measured(setup: DecodeSetup, batches: list[int], mem_fraction: float, from_result: Path | None, device: str,
              budget: float | None, progress: Callable[[], AbstractContextManager[SweepObserver]],
              sku: str | None) -> dict[str, Any]:
    from microbench.decode.launches import measure_launches, measured_roof, needed_launches, times_from_result
    from roofline.analysis.trust import decode_noise_lines, target_rel_ci
    from roofline.result.io import load_result

    keys = needed_launches(setup, batches)
    if from_result is not None:
        source = load_result(from_result)
        times, device_record = times_from_result(source, from_result, keys)
        points, roof = [], {}
        # The launches' own noise travels with their times (the table must say when to trust it less).
        used = [p for p in source.points if p.usable and p.backend == "torch" and p.launch_key in set(keys)]
        warnings = decode_noise_lines(used, source.settings.get("busy_at_start"), target_rel_ci(source))
        points = used
    else:
        with progress() as observer:
            times, device_record, points, roof = measure_launches(keys, device, budget, observer, setup.dtype,
                                                                  setup.step.routing.spelled)
        warnings = decode_noise_lines(points, None, float(roof["target_rel_ci"] or 0.01))
    # Only the times (and energies) travel with --from; MBU/MFU then come from the spec side.
    bandwidth, peak = measured_roof(points, roof, setup.dtype) if from_result is None else (None, None)
    memory = device_record.get("memory_bytes")
    # One device times no all-reduce between several: --gpu's or the matched SKU's interconnect costs them.
    link_sku = sku or device_record.get("sku")
    joules = {p.launch_key: launch_joules(p) for p in points if p.telemetry is not None}
    part = measured_document(setup, batches, times, bandwidth, peak, memory, mem_fraction, device_record, warnings,
                             spec=load_gpu_spec(link_sku) if link_sku else None, joules=joules)
    part["sku"] = device_record.get("sku")
    part["kernels"] = kernels_by_dtype(points if from_result is None else used)
    return part


def launch_joules(point) -> float | None:
    """One launch's energy: the median NVML power reading over its timed phase times its time, as the measured
    profile reads it (``microbench.serving.profile_power``: the energy counter moves too coarsely on an H200 for
    a phase this short); without a power reading, the counter's rise per launch (None: neither)."""
    power = point.telemetry.power_w
    seconds = point.stats.median_s if point.stats is not None else None
    if power is not None and power.median is not None and seconds:
        return power.median * seconds
    return point.telemetry.energy_per_launch_j


def kernels_by_dtype(points) -> dict[str, list[str]]:
    """dtype -> the kernels its launches ran (a weight-only format's time is its kernel's as much as the
    format's, so the document and the table name them)."""
    out: dict[str, list[str]] = {}
    for point in points:
        names = out.setdefault(point.dtype, [])
        if point.kernel and point.kernel not in names:
            names.append(point.kernel)
    return out
