"""A step profile from a roofline instead of timers: a SKU's ceilings, or the fitted roofline of each series of a
measured sweep (``--from RESULT.json``).  Same document as a measured profile, ``source: analytic``.

A SKU's launches are timed by the analytic basis ``decode --analytic`` reads too (``roofline.decode.ceilings``), so
the two give the same kernel time for a launch: by default (``--efficiency auto``) each GEMM on the datasheet's
roofline over its matrix's efficiency, derived from a reference database's measured GEMM curves on the SKU (the
``[reference]`` extra), else the SKU's achievable ceilings (its spec sheet's ``[achievable]`` table: one bandwidth,
one peak per dtype, measured by others); ``--ideal`` takes the datasheet's peaks, never reached.  The basis says
which.  The KV capacity is sized from the memory the driver reports for the board (``reported_bytes``), not the
datasheet's "80 GB".

What the step launches, and each launch's FLOP and bytes, is the step model's (``roofline.step``): its dense
linears, its routed experts' grouped GEMMs (a mixture of experts, under the profile's routing), its attention
(GQA or MLA) and its elementwise kernels (``StepModel.other_bytes_per_token``, the ``other`` table, their bytes at
the achievable bandwidth; their launch latency, which dominates them at a few tokens, is not in it).  In a quantized
format the layers' linears are timed in it and the LM head in bf16, as the checkpoints store them.

Tensor parallelism adds the ``comm`` table (one ring all-reduce of a GPU's tokens' hidden vectors per token count,
two per layer) and expert parallelism the ``all_to_all`` table (one dispatch or combine per token count, two per MoE
layer), costed on the spec sheet's interconnect.  A sweep measures one GPU, never the links between several, so
with ``--from`` they take the matched SKU's sheet (none matched: no comm tables).

``analytic_profile_of`` records ``--engine``'s overhead preset (``roofline.specs.engines``) as the profile's
``engine_overhead`` (none under ``--engine none``), and reads that engine's kernel tables where the reference
database is read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from roofline.analysis.trust import busy_why
from roofline.core.counting import TP_ALL_REDUCES_PER_LAYER, all_reduce_bytes, all_to_all_bytes
from roofline.core.errors import BadInputError
from roofline.core.options import check_dtypes
from roofline.core.roof import Roof
from roofline.decode.ceilings import check_efficiency, sku_basis, sku_roof, step_dtypes
from roofline.decode.step import TimeFn, analytic_time
from roofline.result.document import Result
from roofline.result.io import load_result
from roofline.result.sections import Provenance
from roofline.serving.profile_doc import (
    CommTable,
    GroupedTable,
    LinearTable,
    MixerTable,
    StepProfile,
    Table1D,
    Table2D,
    no_power,
    power_record,
)
from roofline.serving.profiles.engine_time import preset_overhead
from roofline.serving.simulate_config import ModelOptions
from roofline.specs.engines import kernel_engine
from roofline.specs.gpus import GpuSpec, SpecError, load_gpu_spec, load_gpu_spec_file, with_link_gbps
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import ModelSpec, load_model, step_formats
from roofline.step.batch import Batch
from roofline.step.comm import ALL_TO_ALLS_PER_MOE_LAYER
from roofline.step.grids import DECODE_BATCHES, DECODE_CONTEXTS, token_grid
from roofline.step.kinds import MixerRules
from roofline.step.launches import Launch, StepModel
from roofline.step.memory import kv_bytes_per_token, memory_extras, weight_bytes


def _fit_series(result: Result, dtype: str) -> list[dict[str, Any]]:
    """The run's GEMM series of ``dtype`` whose fit found a bandwidth, full fits first."""
    from roofline.analysis.series import analyse

    series = [s for s in analyse(result)["series"] if s["op"] == "gemm" and s["dtype"] == dtype
              and s.get("bandwidth_bytes_per_s")]
    return sorted(series, key=lambda s: s["status"] != "ok")


def fitted_roofs(series: list[dict[str, Any]], default: Roof) -> dict[tuple[int, int], Roof]:
    """Per GEMM series (n, k): its fitted roofline, with the default's peak where the fit saw bandwidth only."""
    roofs = {}
    for s in series:  # a full fit wins over a bandwidth-only one
        roofs.setdefault((s["n"], s["k"]), Roof(s["bandwidth_bytes_per_s"],
                                                s.get("peak_flop_per_s") or default.peak_flop_per_s))
    return roofs


def result_roof(result: Result, dtype: str, spec: Roof | None, series: list[dict[str, Any]]) -> tuple[Roof, str]:
    """The roof for what no series of the run fits, and where it came from: the run's ceilings, else the best
    bandwidth and peak its ``dtype`` fits reached (a run of other layer shapes, e.g. the Vidur reference, has
    no ceilings but its fits still measured this GPU), else the matched SKU's ceilings (``spec``)."""
    from roofline.analysis.summary import measured_bandwidth, measured_peak

    bandwidth, peak = measured_bandwidth(result), measured_peak(result, dtype)
    if bandwidth and peak:
        return Roof(bandwidth, peak), "ceilings"
    fit_peaks = [s["peak_flop_per_s"] for s in series if s.get("peak_flop_per_s")]
    if series and (peak or fit_peaks or spec):
        return Roof(bandwidth or max(s["bandwidth_bytes_per_s"] for s in series),
                    peak or (max(fit_peaks) if fit_peaks else spec.peak_flop_per_s)), "best fit"
    if spec is None:
        raise SpecError(f"the result measured no {dtype} ceilings, fitted no {dtype} GEMM and matched no SKU: "
                           "give --gpu SKU")
    return Roof(bandwidth or spec.bandwidth_bytes_per_s, peak or spec.peak_flop_per_s), "spec"


def _basis(result_name: str, dtype: str, fitted: int, total: int, rest: str, sheet: str, busy: str | None) -> str:
    """The label says what the tables really used: a profile none of whose tables is a fit is not a 'fit of'.
    ``sheet``: what the matched SKU's ceilings are (``sku_roof``'s label); ``busy``: why the result's device was
    busy (``roofline.analysis.trust.busy_why``), said wherever its figures were used: they run slower than the
    device does quiet, and every time simulated on them is as slow."""
    if fitted == 0 and rest == "spec":
        return f"{sheet} ({result_name} fits no {dtype} GEMM)"
    where = {"ceilings": "its ceilings", "best fit": f"its best {dtype} fit", "spec": sheet}[rest]
    basis = f"fit of {result_name}" + ("" if fitted == total else
                                       f" ({fitted} of {total} layer shapes fitted; the rest on {where})")
    return basis + (f", measured on a busy device ({busy}): slower than the device runs quiet" if busy else "")


def roof_time(roof: Roof) -> TimeFn:
    """A launch on one roof, whatever its dtype (a sweep's fit is of one dtype's curve)."""
    def time_s(launch: Launch) -> float:
        return analytic_time(roof.bandwidth_bytes_per_s, {launch.dtype: roof.peak_flop_per_s})(launch)  # pyright: ignore[reportArgumentType]
    return time_s


class Timer:
    """Each launch's time: a fitted roof for the (dtype, N, K) a sweep fitted, else ``default``."""

    def __init__(self, default: TimeFn, fits: dict[str, dict[tuple[int, int], Roof]]):
        self.default, self.fits = default, fits

    def __call__(self, launch: Launch) -> float:
        roof = self.fits.get(launch.dtype, {}).get((launch.n, launch.k))
        return self.default(launch) if roof is None else roof_time(roof)(launch)

    def fitted(self, dtype: str, n: int, k: int) -> bool:
        return (n, k) in self.fits.get(dtype, {})


def _linear_tables(step: StepModel, timer: Timer, tokens: tuple[int, ...]) -> tuple[list[LinearTable], LinearTable]:
    """The dense linears (each in the layers that have it) and the LM head (last), one time per token count."""
    layers = step.model.layers
    tables = []
    for linear in step.linears:
        times = tuple(timer(step.linear_launch(linear, t)) for t in tokens)
        tables.append(LinearTable(linear.name, linear.n, linear.k, 1, tokens, times,
                                  None if linear.layers == layers or linear.part == "head" else linear.layers))
    return tables[:-1], tables[-1]


def grouped_grid(step: StepModel, tokens: tuple[int, ...]) -> tuple[int, ...]:
    """The rows a GPU's grouped GEMMs are given, up to what a step of the profile's largest token count gives them
    (with expert parallelism ``tokens × top-k / EP``, more than the step's tokens): the grid the grouped tables are
    read on, never past."""
    return token_grid(max(tokens[-1], step.grouped_tokens(tokens[-1])))


def _grouped_tables(step: StepModel, timer: Timer, tokens: tuple[int, ...]) -> tuple[GroupedTable, ...]:
    rows = grouped_grid(step, tokens)
    return tuple(GroupedTable(g.name, g.n, g.k, g.experts, g.topk, g.layers, "roofline", rows,
                              tuple(timer(step.grouped_launch(g, r)) for r in rows)) for g in step.grouped)


def kind_tables(step: StepModel, rules: MixerRules, time_s: TimeFn, tokens, contexts
                ) -> tuple[Table2D, Table1D, Table2D | None]:
    """One layer of a mixer kind on one GPU, timed by ``time_s``: decode (batch × context; a recurrent kind at one
    context, its state being the same at any), whole prompts, and chunks over a cached prefix (none for a recurrent
    kind: a chunk costs its tokens whatever its prefix).  Each cell is a step model's batch (``roofline.step``)."""
    def layer(batch: Batch) -> float:
        return time_s(step.mixer_launch(rules, 1, batch))

    decode_contexts = (1,) if rules.recurrent else contexts
    decode = Table2D("roofline", "batches", "contexts", DECODE_BATCHES, decode_contexts,
                     tuple(tuple(layer(Batch.decode(b, c)) for c in decode_contexts) for b in DECODE_BATCHES))
    prompts = token_grid(max(contexts))
    prefill = Table1D("roofline", "prompt_tokens", prompts, tuple(layer(Batch(chunks=((p, 0),))) for p in prompts))
    if rules.recurrent:
        return decode, prefill, None
    prefixes = (0,) + tuple(contexts)
    chunk = Table2D("roofline", "chunk_tokens", "prefix_tokens", tokens, prefixes,
                    tuple(tuple(layer(Batch(chunks=((c, p),))) for p in prefixes) for c in tokens))
    return decode, prefill, chunk


def mixer_tables(step: StepModel, time_s: TimeFn, tokens, contexts, source: str = "") -> tuple[MixerTable, ...]:
    """A table set for each mixer kind the main attention tables do not time (``StepModel.reads_main_tables``)."""
    out = []
    for rules, count in step.mixers:
        if not step.reads_main_tables(rules):
            decode, prefill, chunk = kind_tables(step, rules, time_s, tokens, contexts)
            out.append(MixerTable(step.mixer_name(rules), rules.op, count, decode, prefill, chunk, source))
    return tuple(out)


def other_table(step: StepModel, bandwidth_bytes_per_s: float, tokens: tuple[int, ...], floor_s: float = 0.0,
                fused: bool = False) -> Table1D:
    """The step's elementwise kernels, all layers, per token count: their bytes at ``bandwidth_bytes_per_s``, plus
    ``floor_s`` per launch (a measured launch floor; ``StepModel.elementwise_launches`` counts them); with
    ``fused`` the routed experts' activation is left out (the grouped tables hold a measured fused MoE layer,
    which runs it)."""
    per_token = step.other_bytes_per_token(routed_activation=not fused)
    fixed = floor_s * step.elementwise_launches()
    return Table1D("roofline", "tokens", tokens, tuple(fixed + per_token * t / bandwidth_bytes_per_s for t in tokens))


def other_words(step: StepModel, bandwidth_bytes_per_s: float, kernels) -> tuple[float, bool, str]:
    """The launch floor the elementwise kernels are charged (from ``kernels``, the reference tables a basis read,
    where they measured one), whether the routed experts' activation is inside a measured fused MoE layer, and the
    words for the ``other`` table's source."""
    fused = getattr(kernels, "moe", None) is not None
    words = f"their bytes at {bandwidth_bytes_per_s / 1e12:.3g} TB/s" + (
        " (the routed experts' activation left out: the fused MoE layer measured runs it)" if fused else "")
    floor = getattr(kernels, "elementwise", None)
    if floor is None:
        why = getattr(kernels, "lacks", {}).get("elementwise")
        return 0.0, fused, words + (f", no launch floor ({why})" if why else "")
    return floor.time_s, fused, (f"{words}, plus {floor.time_s * 1e6:.2g} us for each of the step's "
                                 f"{step.elementwise_launches()} launches (the launch floor: {floor.source})")


def comm_tables(step: StepModel, gpu: GpuSpec, tokens: tuple[int, ...]) -> tuple[CommTable | None, CommTable | None]:
    """The all-reduce (TP > 1) and all-to-all (EP > 1) tables on ``gpu``'s interconnect, per GPU token count: a
    group larger than the sheet's NVLink domain on its scale-out link too, and the source says so."""
    link, par, m = gpu.interconnect, step.parallelism, step.model
    reduce = None if par.tp <= 1 else CommTable(
        ranks=par.tp, per_layer=TP_ALL_REDUCES_PER_LAYER, measured=False,
        source=f"ring all-reduce on spec sheet {gpu.sku}: {link.describe(par.tp)}",
        tokens=tokens, time_s=tuple(link.all_reduce_time_s(all_reduce_bytes(step.dtype, t, m.hidden), par.tp)
                                    for t in tokens))
    exchange = None if par.ep <= 1 or m.moe is None else CommTable(
        ranks=par.ep, per_layer=ALL_TO_ALLS_PER_MOE_LAYER, measured=False,
        source=f"all-to-all on spec sheet {gpu.sku}: {link.describe(par.ep)}",
        tokens=tokens, time_s=tuple(link.all_to_all_time_s(
            all_to_all_bytes(step.dtype, t, m.moe.latent or m.hidden, m.moe.topk, m.moe.experts, par.ep), par.ep)
            for t in tokens))
    return reduce, exchange


# What the TDP bounds: the board never draws more, and a step that leaves it waiting on memory draws less.
TDP_BASIS = "the board's TDP from its spec sheet: an upper bound (a step that does not saturate the GPU draws less)"


def sku_power(gpu: GpuSpec | None, result_name: str = "") -> dict[str, Any]:
    """The power figure an analytic or reference profile carries: ``gpu``'s TDP as an upper bound, or why none
    (no spec sheet named or matched, or one without a ``[power]`` table)."""
    if gpu is None:
        return no_power(f"no spec sheet named (--gpu) or matched by {result_name or 'the sweep'}'s device: no TDP "
                        "to charge, and a sweep's fitted roofline carries no power")
    if not gpu.tdp_w:
        return no_power(f"spec sheet {gpu.sku} has no [power] table (TDP)")
    return power_record(gpu.tdp_w, TDP_BASIS, gpu.tdp_source or f"spec sheet {gpu.sku}", upper_bound=True)


def analytic_profile(model: ModelSpec, *, tp: int, dtype: str, kv_dtype: str, max_tokens: int, max_context: int,
                     gpu: GpuSpec | None, result: Result | None = None, result_name: str = "",
                     tool: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
                     argv: tuple[str, ...] = (), ideal: bool = False, ep: int = 1,
                     routing: str = "balanced", efficiency: str = "flat", engine: str = "vllm") -> StepProfile:
    """The step profile of ``model`` on a roofline: ``gpu``'s analytic basis (``roofline.decode.ceilings``:
    ``efficiency`` reference, flat, or auto, on ``engine``'s kernel tables; the datasheet with ``ideal``), or the
    fits of ``result``."""
    step = StepModel.of(model, tp, ep, dtype, kv_dtype, routing)
    if max_tokens < 2 or max_context < 2:
        raise SpecError("--max-tokens and --max-context must be at least 2")
    check_dtypes(dtype, kv_dtype)
    check_efficiency(efficiency, ideal, result is not None)
    if result is None and gpu is None:
        raise SpecError("--analytic needs --gpu SKU or --from RESULT.json")
    series = _fit_series(result, dtype) if result is not None else []
    kernels = None  # the reference's tables beyond GEMMs, where the SKU's basis read them
    if result is None:
        assert gpu is not None  # refused above
        sku = sku_basis(gpu, dtype, step_dtypes(step), ideal=ideal, efficiency=efficiency, engine=engine,
                        step=step)
        default, default_time, roof_basis, kernels = sku.roof, sku.time_s, sku.basis, sku.kernels
    else:
        spec, sheet = sku_roof(gpu, dtype, ideal) if gpu else (None, "")
        default, rest = result_roof(result, dtype, spec, series)
        default_time, roof_basis = roof_time(default), ""
    bandwidth = default.bandwidth_bytes_per_s if default is not None else None
    if not bandwidth:  # every roof built above has one: a guard for the type checker and for future roofs
        raise SpecError("no memory bandwidth to put the profile's kernels on")
    tokens = token_grid(max_tokens)
    contexts = tuple(sorted({c for c in DECODE_CONTEXTS if c < max_context} | {max_context}))
    timer = Timer(default_time, _fits(step, result, series, default))
    linears, lm_head = _linear_tables(step, timer, tokens)
    shapes = [(lin.dtype, lin.n, lin.k) for lin in step.linears]
    fitted = sum(timer.fitted(*shape) for shape in shapes)
    decode, prefill, chunk = kind_tables(step, step.main_mixer, default_time, tokens, contexts)
    # A measured run's device says what its driver reported; a SKU's, what the driver reports for the board.
    device = dict(result.device) if result is not None else {"kind": "cuda", "name": gpu.name, "sku": gpu.sku,
                                                             "memory_bytes": int(gpu.reported_bytes)}
    memory_bytes = device.get("memory_bytes") or (gpu.reported_bytes if gpu else None)
    if result is not None:
        roof_basis = _basis(result_name, dtype, fitted, len(shapes), rest, sheet, busy_why(result))
    # Each table's basis: the linears and attention on the roofline named, the other kernels their bytes (the comm
    # tables name their link themselves).
    floor_s, fused, other_basis = other_words(step, bandwidth, kernels)
    basis = f"{roof_basis}; other kernels: {other_basis}"
    reduce, exchange = comm_tables(step, gpu, tokens) if gpu else (None, None)
    return StepProfile(
        source="analytic", basis=basis, model=model.to_record(), tp=tp, dtype=dtype, kv_dtype=step.cache_dtype,
        lm_head_dtype=step.stored_dtype("head"),
        memory={"device_bytes": int(memory_bytes) if memory_bytes else None,
                "weight_bytes": weight_bytes(step), "kv_bytes_per_token": kv_bytes_per_token(step),
                **memory_extras(step)},
        linears=tuple(linears), lm_head=lm_head, decode_attention=decode, prefill_attention=prefill,
        chunk_attention=chunk, other=other_table(step, bandwidth, tokens, floor_s, fused), engine_overhead=None,
        comm=reduce,
        grouped=_grouped_tables(step, timer, tokens), ep=ep, routing=step.routing.spelled, all_to_all=exchange,
        mixers=mixer_tables(step, default_time, tokens, contexts),
        roof={"bandwidth_bytes_per_s": default.bandwidth_bytes_per_s, "peak_flop_per_s": default.peak_flop_per_s,
              "basis": roof_basis},
        tool=tool or {}, created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        argv=argv, host=host or {}, device=device, power=sku_power(gpu, result_name))


def _fits(step: StepModel, result: Result | None, series: list[dict[str, Any]], default: Roof
          ) -> dict[str, dict[tuple[int, int], Roof]]:
    """The sweep's fitted roofs by dtype: the profile's own, and the LM head's (bf16 beside a quantized format)."""
    if result is None:
        return {}
    fits = {step.dtype: fitted_roofs(series, default)}
    for dtype in {lin.dtype for lin in step.linears} - set(fits):
        fits[dtype] = fitted_roofs(_fit_series(result, dtype), default)
    return fits


def analytic_profile_of(options: ModelOptions, provenance: Provenance) -> StepProfile:
    """The analytic step profile a command's model options ask for: the model (``--model`` or ``--hf-config``) on
    the achievable ceilings of ``--gpu``, its spec sheet with ``--ideal``, or the fits of ``--from`` (whose matched
    SKU, if any, gives the interconnect).  ``--dtype`` not given: simulate's default."""
    if bool(options.model) == bool(options.hf_config):
        raise BadInputError("give one of --model NAME or --hf-config PATH")
    if not options.sku and not options.gpu_spec and options.from_result is None:
        raise BadInputError("--analytic needs --gpu SKU or --gpu-spec FILE.toml (or --from RESULT.json)")
    # Exactly one of the two is given (checked above).
    model = load_model(options.model) if options.model else load_hf_config(cast(Path, options.hf_config))
    result = load_result(options.from_result) if options.from_result is not None else None
    sku = options.sku or (result.device.get("sku") if result is not None else None)
    gpu = load_gpu_spec_file(options.gpu_spec) if options.gpu_spec else load_gpu_spec(sku) if sku else None
    if options.interconnect_gbps is not None:
        if gpu is None:
            raise BadInputError("--interconnect-gbps replaces a spec sheet's link: give --gpu SKU or --gpu-spec "
                                "FILE.toml (the result matched no SKU)")
        if options.tp == 1 and options.ep == 1:
            raise BadInputError("--interconnect-gbps: at --tp 1 and --ep 1 nothing crosses a link between GPUs")
        gpu = with_link_gbps(gpu, options.interconnect_gbps)
    model, dtype, kv_dtype, note = step_formats(model, options.dtype, options.kv_dtype)
    profile = analytic_profile(model, tp=options.tp, dtype=dtype, kv_dtype=kv_dtype,
                               max_tokens=options.max_tokens, max_context=options.max_context,
                               gpu=gpu, result=result,
                               result_name=options.from_result.name if options.from_result else "",
                               tool=provenance.tool, host=provenance.host, argv=provenance.argv, ideal=options.ideal,
                               ep=options.ep, routing=options.routing, efficiency=_efficiency(options),
                               engine=kernel_engine(options.engine))
    profile = with_formats_note(profile, note)
    # The engine's preset is the profile's engine time (none under --engine none): simulate and plan charge it.
    return replace(profile, engine_overhead=preset_overhead(options.engine, profile.layers))


def with_formats_note(profile: StepProfile, note: str | None) -> StepProfile:
    """A profile whose basis says that ``--dtype`` replaced its checkpoint's quantization (``note``), where it did."""
    return replace(profile, basis=f"{profile.basis}; {note}") if note else profile


def _efficiency(options: ModelOptions) -> str:
    """``--efficiency`` as typed; its default ``auto`` means the reference's curves only for a SKU's own profile
    (``--from`` carries a sweep's measured curves, ``--ideal`` the datasheet)."""
    if options.efficiency == "auto" and (options.from_result is not None or options.ideal):
        return "flat"
    return options.efficiency
