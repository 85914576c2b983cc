"""A step profile from a roofline instead of timers: the ceilings of a SKU, or the fitted roofline of each series
of a measured sweep (``--from RESULT.json``).  Same document as a measured profile, ``source: analytic``.

A SKU's ceilings are by default what it reaches in practice, its spec sheet's ``[achievable]`` table (a streaming
kernel's bandwidth and mamf-finder's matmul FLOP/s, measured by others): the datasheet's peaks are never reached, and
a profile on them is optimistic.  ``ideal=True`` (``--ideal``) takes the datasheet's peaks instead.  The KV capacity
is sized from the memory the driver reports for the board (``reported_bytes``), not the datasheet's "80 GB".

The step's other kernels (norms, residual adds, rotary embeddings, the MLP's activation) are elementwise: each
token's bytes (``roofline.core.counting.other_kernel_bytes_per_token``) at the ceilings' bandwidth, the ``other``
table.  Their launch latency, which dominates them at a few tokens, is not in it.

Tensor parallelism adds the ``comm`` table: one ring all-reduce of ``tokens × hidden`` activations per token count
of the grid, costed on the spec sheet's interconnect (``Interconnect.all_reduce_time_s``), two per layer.  A sweep
measures one GPU, never the links between several, so with ``--from`` the all-reduces take the matched SKU's sheet
(none matched: no comm table).

Linear layers use the project's roofline time (``roofline.decode.step.analytic_time``: max(bytes/BW, FLOP/P) per
launch, with bytes and FLOP from ``roofline.core.counting``); in a weight-only format the layers' linears are timed
in it and the LM head in bf16, as the checkpoints store them.  Attention kernels are not GEMMs, so their bytes and
FLOP are counted here (flash-style: Q, K, V read once, the output written once) and put through the same
max(bytes/BW, FLOP/P).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from roofline.analysis.trust import busy_why
from roofline.core.counting import (
    DTYPE_SIZES,
    TP_ALL_REDUCES_PER_LAYER,
    all_reduce_bytes,
    io_sizes,
    other_kernel_bytes_per_token,
)
from roofline.core.options import check_dtypes
from roofline.core.roof import Roof
from roofline.decode.step import analytic_time
from roofline.result.document import Result
from roofline.serving.profile_doc import CommTable, LinearTable, StepProfile, Table1D, Table2D
from roofline.specs.gpus import GpuSpec, SpecError
from roofline.specs.models import (
    LayerShape,
    ModelSpec,
    check_tp,
    kv_bytes_per_token,
    layer_shapes,
    per_rank,
    weight_bytes,
)

LINEAR_NAMES = {"qkv": "qkv_proj", "o": "o_proj", "gate_up": "gate_up_proj", "up": "up_proj",
                "down": "down_proj"}
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DECODE_CONTEXTS = (1, 128, 512, 2048, 8192, 32768)


def token_grid(maximum: int) -> tuple[int, ...]:
    """1, 2, 3, 4, 6, 8, 12, … up to and including ``maximum``: 1.5× steps keep interpolation close."""
    out, power = [], 1
    while power <= maximum:
        out += [power] + ([power * 3 // 2] if power >= 2 and power * 3 // 2 <= maximum else [])
        power *= 2
    return tuple(sorted(set(out + [maximum])))


def spec_roof(gpu: GpuSpec, dtype: str) -> Roof:
    peak = gpu.peak_for(dtype)
    if not peak:
        raise SpecError(f"{gpu.sku} has no {dtype} peak in its spec sheet")
    return Roof(gpu.bandwidth_bytes_per_s, peak)


def sku_roof(gpu: GpuSpec, dtype: str, ideal: bool) -> tuple[Roof, str]:
    """The SKU's ceilings and what they are: its achievable ones by default, the datasheet's with ``ideal``."""
    spec = spec_roof(gpu, dtype)  # a dtype the SKU lacks is refused the same way either way
    if ideal:
        return spec, f"spec sheet {gpu.sku} (--ideal)"
    achievable = gpu.achievable
    return Roof(achievable.bandwidth_bytes_per_s, achievable.peak_for(dtype)), \
        f"achievable ceilings of {gpu.sku}: {achievable.describe(dtype)}"


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


def _linear(name: str, n: int, k: int, dtype: str, roof: Roof, tokens: tuple[int, ...]) -> LinearTable:
    time_fn = analytic_time(roof.bandwidth_bytes_per_s, {dtype: roof.peak_flop_per_s})
    return LinearTable(name, n, k, 1, tokens, tuple(time_fn("gemm", dtype, t, n, k) for t in tokens))


def _linear_tables(shapes: list[LayerShape], dtype: str, result: Result | None, series: list[dict[str, Any]],
                   default: Roof, tokens: tuple[int, ...]) -> tuple[tuple[LinearTable, ...], LinearTable, int]:
    """The layers' linears, the LM head (last of ``shapes``), and how many of them a fit of ``result`` timed.  In a
    weight-only format the LM head is bf16: it takes the run's bf16 fits, not the format's."""
    roofs = {dtype: fitted_roofs(series, default)}
    head = shapes[-1]
    head_dtype = head.weight_dtype(dtype)
    if head_dtype not in roofs:
        roofs[head_dtype] = fitted_roofs(_fit_series(result, head_dtype), default) if result is not None else {}
    tables = [_linear(LINEAR_NAMES.get(s.name, s.name), s.n, s.k, s.weight_dtype(dtype),
                      roofs[s.weight_dtype(dtype)].get((s.n, s.k), default), tokens) for s in shapes]
    fitted = sum((s.n, s.k) in roofs[s.weight_dtype(dtype)] for s in shapes)
    return tuple(tables[:-1]), tables[-1], fitted


def _attention_tables(model: ModelSpec, tp: int, dtype: str, kv_dtype: str, roof: Roof, tokens, contexts):
    heads, kv_heads, hd = model.heads // tp, model.kv_heads // tp, model.head_dim
    s, s_kv = io_sizes(dtype)[0], DTYPE_SIZES[kv_dtype][0]  # a weight-only format's activations are bf16

    def attn(queries: int, keys: int, query_keys: float) -> float:
        flop = 4 * heads * hd * query_keys
        nbytes = 2 * queries * heads * hd * s + 2 * keys * kv_heads * hd * s_kv
        return roof.time_s(flop, nbytes)

    decode = Table2D("roofline", "batches", "contexts", DECODE_BATCHES, contexts,
                     tuple(tuple(attn(b, b * c, b * c) for c in contexts) for b in DECODE_BATCHES))
    prefill = Table1D("roofline", "prompt_tokens", contexts_grid := token_grid(max(contexts)),
                      tuple(attn(p, p, p * (p + 1) / 2) for p in contexts_grid))
    prefixes = (0,) + tuple(contexts)
    chunk = Table2D("roofline", "chunk_tokens", "prefix_tokens", tokens, prefixes,
                    tuple(tuple(attn(c, c + p, c * (p + (c + 1) / 2)) for p in prefixes) for c in tokens))
    return decode, prefill, chunk


def other_table(model: ModelSpec, tp: int, dtype: str, bandwidth_bytes_per_s: float, tokens: tuple[int, ...]
                ) -> Table1D:
    """The step's elementwise kernels, all layers, per token count: their bytes at ``bandwidth_bytes_per_s``."""
    rank = per_rank(model, tp)
    per_token = other_kernel_bytes_per_token(dtype, rank.hidden, rank.heads, rank.kv_heads, rank.head_dim,
                                             rank.intermediate, rank.gated_mlp, rank.layers)
    return Table1D("roofline", "tokens", tokens, tuple(per_token * t / bandwidth_bytes_per_s for t in tokens))


def comm_table(model: ModelSpec, tp: int, dtype: str, gpu: GpuSpec, tokens: tuple[int, ...]) -> CommTable | None:
    """One ring all-reduce per token count on ``gpu``'s interconnect; None at TP 1 (nothing to reduce)."""
    if tp <= 1:
        return None
    link = gpu.interconnect
    return CommTable(ranks=tp, per_layer=TP_ALL_REDUCES_PER_LAYER, measured=False,
                     source=f"ring all-reduce on spec sheet {gpu.sku}: {link.describe()}", tokens=tokens,
                     time_s=tuple(link.all_reduce_time_s(all_reduce_bytes(dtype, t, model.hidden), tp)
                                  for t in tokens))


def analytic_profile(model: ModelSpec, *, tp: int, dtype: str, kv_dtype: str, max_tokens: int, max_context: int,
                     gpu: GpuSpec | None, result: Result | None = None, result_name: str = "",
                     tool: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
                     argv: tuple[str, ...] = (), ideal: bool = False) -> StepProfile:
    """The step profile of ``model`` on a roofline: ``gpu``'s achievable ceilings (its spec sheet's with
    ``ideal``), or the fits of ``result``."""
    check_tp(model, tp)
    if model.experts > 1:
        raise SpecError(f"{model.name} is a mixture of experts: the serving simulator models dense models only")
    if max_tokens < 2 or max_context < 2:
        raise SpecError("--max-tokens and --max-context must be at least 2")
    check_dtypes(dtype, kv_dtype)
    spec, sheet = sku_roof(gpu, dtype, ideal) if gpu else (None, "")
    if result is None and spec is None:
        raise SpecError("--analytic needs --gpu SKU or --from RESULT.json")
    series = _fit_series(result, dtype) if result is not None else []
    default, rest = result_roof(result, dtype, spec, series) if result is not None else (spec, "spec")
    bandwidth = default.bandwidth_bytes_per_s if default is not None else None
    if not bandwidth:  # every roof built above has one: a guard for the type checker and for future roofs
        raise SpecError("no memory bandwidth to put the profile's kernels on")
    tokens = token_grid(max_tokens)
    contexts = tuple(sorted({c for c in DECODE_CONTEXTS if c < max_context} | {max_context}))
    shapes = layer_shapes(model, tp)
    linears, lm_head, fitted = _linear_tables(shapes, dtype, result, series, default, tokens)
    decode, prefill, chunk = _attention_tables(model, tp, dtype, kv_dtype, default, tokens, contexts)
    # A measured run's device says what its driver reported; a SKU's, what the driver reports for the board.
    device = dict(result.device) if result is not None else {"kind": "cuda", "name": gpu.name, "sku": gpu.sku,
                                                             "memory_bytes": int(gpu.reported_bytes)}
    memory_bytes = device.get("memory_bytes") or (gpu.reported_bytes if gpu else None)
    roof_basis = (_basis(result_name, dtype, fitted, len(shapes), rest, sheet, busy_why(result))
                  if result is not None else sheet)
    # Each table's basis: the linears and attention on the roofline named, the other kernels their bytes (the comm
    # table names its link itself).
    basis = f"{roof_basis}; other kernels: their bytes at {bandwidth / 1e12:.3g} TB/s"
    return StepProfile(
        source="analytic", basis=basis, model=model_dict(model), tp=tp, dtype=dtype, kv_dtype=kv_dtype,
        lm_head_dtype=shapes[-1].weight_dtype(dtype),
        memory={"device_bytes": int(memory_bytes) if memory_bytes else None,
                "weight_bytes": weight_bytes(model, dtype, tp), "kv_bytes_per_token": kv_bytes_per_token(model,
                                                                                                         kv_dtype, tp)},
        linears=linears, lm_head=lm_head, decode_attention=decode, prefill_attention=prefill, chunk_attention=chunk,
        other=other_table(model, tp, dtype, bandwidth, tokens), engine_overhead=None,
        comm=comm_table(model, tp, dtype, gpu, tokens) if gpu else None,
        roof={"bandwidth_bytes_per_s": default.bandwidth_bytes_per_s, "peak_flop_per_s": default.peak_flop_per_s,
              "basis": roof_basis},
        tool=tool or {}, created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        argv=argv, host=host or {}, device=device)


def model_dict(model: ModelSpec) -> dict[str, Any]:
    """The profile document's ``model`` object (the keys docs/serving.md names, plus id and source)."""
    return {"name": model.name, "id": model.id, "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
            "kv_heads": model.kv_heads, "head_dim": model.head_dim, "intermediate": model.intermediate,
            "vocab": model.vocab, "mlp": "gated" if model.gated_mlp else "plain", "experts": model.experts,
            "tied_embeddings": model.tied_embeddings, "max_positions": model.max_positions, "source": model.source}
