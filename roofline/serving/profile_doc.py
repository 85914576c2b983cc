"""The step-profile document: what one engine step of one model costs on one device, as kernel-time tables.

Format and rules: ``docs/serving.md``.  ``from_dict`` validates everything the step-cost model relies on, so a
profile that loads can be simulated; a bad file is one ``ProfileDocError`` line, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofline.core.counting import DTYPES, KV_DTYPES, PLAIN_DTYPES
from roofline.core.errors import BadInputError
from roofline.core.interpolate import interp1, interp2, linear
from roofline.specs.models import stored_dtype

SCHEMA_VERSION = 1
KIND = "gpubench-step-profile"
SOURCES = ("measured", "analytic", "reference")
MODEL_KEYS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "mlp")


class ProfileDocError(BadInputError):
    """A step profile that cannot be used; one line.  Bad input (``BadInputError``): the CLI makes it exit 2."""


# No kernel of one engine step takes an hour; 1e308 s is finite but its sums are not (inf, then NaN rates).
MAX_KERNEL_S = 3600.0


def _object(value: Any, what: str, optional: bool = False) -> dict[str, Any]:
    if optional and value is None:
        return {}
    if not isinstance(value, dict):
        raise ProfileDocError(f"{what} must be an object, got {type(value).__name__}")
    return dict(value)


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProfileDocError(f"{what} must be a list")
    return value


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _grid(values: Any, what: str) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)) or not values:
        raise ProfileDocError(f"{what} must be a non-empty list")
    out = []
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ProfileDocError(f"{what} must hold non-negative integers, got {value!r}")
        out.append(value)
    if any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ProfileDocError(f"{what} must be strictly increasing")
    return tuple(out)


def _times(values: Any, length: int, what: str) -> tuple[float, ...]:
    if not isinstance(values, (list, tuple)) or len(values) != length:
        raise ProfileDocError(f"{what} must be a list of {length} times")
    out = []
    for value in values:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= MAX_KERNEL_S:
            raise ProfileDocError(f"{what} must hold seconds from 0 to {MAX_KERNEL_S:g}, got {value!r}")
        out.append(float(value))
    return tuple(out)


def _table(values: Any, rows: int, cols: int, what: str) -> tuple[tuple[float, ...], ...]:
    if not isinstance(values, (list, tuple)) or len(values) != rows:
        raise ProfileDocError(f"{what} must have {rows} rows")
    return tuple(_times(row, cols, f"{what}[{i}]") for i, row in enumerate(values))


def _positive_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ProfileDocError(f"{what} must be a positive integer, got {value!r}")
    return value


def _one_of(value: Any, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ProfileDocError(f"{what} {value!r} is not one of {', '.join(allowed)}")


@dataclass(frozen=True)
class LinearTable:
    """One linear layer (weight N×K), ``per_layer`` instances per transformer layer, in ``layers`` of the layers
    (None: every layer; a mixture of experts' dense or routed layers are some of them); time of ONE instance against
    the tokens one GPU runs it on."""

    name: str
    n: int
    k: int
    per_layer: int
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]
    layers: int | None = None
    source: str = ""  # where the times come from (a reference profile names it per table); "": the profile's basis

    @classmethod
    def from_dict(cls, d: dict[str, Any], what: str) -> LinearTable:
        tokens = _grid(d.get("tokens"), f"{what}.tokens")
        layers = d.get("layers")
        return cls(name=str(d.get("name", what)), n=_positive_int(d.get("n"), f"{what}.n"),
                   k=_positive_int(d.get("k"), f"{what}.k"), per_layer=_positive_int(d.get("per_layer", 1),
                                                                                     f"{what}.per_layer"),
                   tokens=tokens, time_s=_times(d.get("time_s"), len(tokens), f"{what}.time_s"),
                   layers=None if layers is None else _positive_int(layers, f"{what}.layers"),
                   source=str(d.get("source", "")))

    def at(self, tokens: float) -> float:
        """ONE instance's time at ``tokens`` (``roofline.core.interpolate.interp1``)."""
        return interp1(self.tokens, self.time_s, tokens)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "n": self.n, "k": self.k, "per_layer": self.per_layer,
               "tokens": list(self.tokens), "time_s": list(self.time_s)}
        out = {**out, "layers": self.layers} if self.layers is not None else out
        return {**out, "source": self.source} if self.source else out


@dataclass(frozen=True)
class GroupedTable:
    """One MoE layer's routed experts on one GPU (``experts`` of N×K, top-``topk``), in ``layers`` layers: the time
    of ONE grouped launch against the tokens the GPU's experts are given (routed by the profile's routing)."""

    name: str
    n: int
    k: int
    experts: int
    topk: int
    layers: int
    kernel: str
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]
    source: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any], what: str) -> GroupedTable:
        tokens = _grid(d.get("tokens"), f"{what}.tokens")
        values = {key: _positive_int(d.get(key), f"{what}.{key}") for key in ("n", "k", "experts", "topk", "layers")}
        return cls(name=str(d.get("name", what)), kernel=str(d.get("kernel", "")), tokens=tokens,
                   time_s=_times(d.get("time_s"), len(tokens), f"{what}.time_s"), source=str(d.get("source", "")),
                   **values)

    def at(self, tokens: float) -> float:
        """ONE grouped launch's time at ``tokens`` given to this GPU's experts."""
        return interp1(self.tokens, self.time_s, tokens)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "n": self.n, "k": self.k, "experts": self.experts, "topk": self.topk,
               "layers": self.layers, "kernel": self.kernel, "tokens": list(self.tokens),
               "time_s": list(self.time_s)}
        return {**out, "source": self.source} if self.source else out


@dataclass(frozen=True)
class Table1D:
    """Time against one grid (prompt tokens, or tokens in the step); ``axis`` names the grid's key."""

    kernel: str
    axis: str
    grid: tuple[int, ...]
    time_s: tuple[float, ...]
    source: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any], axis: str, what: str) -> Table1D:
        grid = _grid(d.get(axis), f"{what}.{axis}")
        return cls(kernel=str(d.get("kernel", "")), axis=axis, grid=grid,
                   time_s=_times(d.get("time_s"), len(grid), f"{what}.time_s"), source=str(d.get("source", "")))

    def at(self, x: float) -> float:
        return interp1(self.grid, self.time_s, x)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.axis: list(self.grid), "time_s": list(self.time_s)}
        out = {"kernel": self.kernel, **out} if self.kernel else out
        return {**out, "source": self.source} if self.source else out


@dataclass(frozen=True)
class Table2D:
    """Time over rows × columns (decode: batch × context; chunk: chunk tokens × prefix tokens)."""

    kernel: str
    row_axis: str
    col_axis: str
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    time_s: tuple[tuple[float, ...], ...]
    source: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any], row_axis: str, col_axis: str, what: str) -> Table2D:
        rows, cols = _grid(d.get(row_axis), f"{what}.{row_axis}"), _grid(d.get(col_axis), f"{what}.{col_axis}")
        return cls(kernel=str(d.get("kernel", "")), row_axis=row_axis, col_axis=col_axis, rows=rows, cols=cols,
                   time_s=_table(d.get("time_s"), len(rows), len(cols), f"{what}.time_s"),
                   source=str(d.get("source", "")))

    def at(self, row: float, col: float) -> float:
        return interp2(self.rows, self.cols, self.time_s, row, col)

    def to_dict(self) -> dict[str, Any]:
        out = {"kernel": self.kernel, self.row_axis: list(self.rows), self.col_axis: list(self.cols),
               "time_s": [list(r) for r in self.time_s]}
        return {**out, "source": self.source} if self.source else out


@dataclass(frozen=True)
class MixerTable:
    """The tables of one mixer kind the profile's attention tables do not time (a hybrid model's linear attention,
    Mamba-2 or a local attention of its own shape), per layer on one GPU: ``decode`` over batches × contexts (a
    recurrent kind, whose state does not grow, over one context column), ``prefill`` per prompt of one sequence,
    ``chunk`` over chunk × prefix tokens (None: from ``prefill``).  ``name`` is the step model's name of the kind
    (``StepModel.mixer_name``), ``layers`` the blocks that hold it."""

    name: str
    op: str
    layers: int
    decode: Table2D
    prefill: Table1D
    chunk: Table2D | None = None
    source: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any], what: str) -> MixerTable:
        chunk = d.get("chunk")
        return cls(name=str(d.get("name", what)), op=str(d.get("op", "")),
                   layers=_positive_int(d.get("layers"), f"{what}.layers"),
                   decode=Table2D.from_dict(_object(d.get("decode"), f"{what}.decode"), "batches", "contexts",
                                            f"{what}.decode"),
                   prefill=Table1D.from_dict(_object(d.get("prefill"), f"{what}.prefill"), "prompt_tokens",
                                             f"{what}.prefill"),
                   chunk=Table2D.from_dict(_object(chunk, f"{what}.chunk"), "chunk_tokens", "prefix_tokens",
                                           f"{what}.chunk") if chunk is not None else None,
                   source=str(d.get("source", "")))

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "op": self.op, "layers": self.layers, "decode": self.decode.to_dict(),
               "prefill": self.prefill.to_dict(), "chunk": self.chunk.to_dict() if self.chunk else None}
        return {**out, "source": self.source} if self.source else out


@dataclass(frozen=True)
class CommTable:
    """The tensor-parallel all-reduces: ``per_layer`` per transformer layer, each summing ``tokens × hidden``
    activations over ``ranks`` GPUs; the time of ONE all-reduce per token count.  ``measured``: timed (``source``
    says with what), else a ring all-reduce costed on a spec sheet's interconnect (``roofline.core.roof``)."""

    ranks: int
    per_layer: int
    measured: bool
    source: str
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any], what: str = "comm") -> CommTable:
        tokens = _grid(d.get("tokens"), f"{what}.tokens")
        if not isinstance(d.get("measured"), bool):
            raise ProfileDocError(f"{what}.measured must be true or false")
        return cls(ranks=_positive_int(d.get("ranks"), f"{what}.ranks"),
                   per_layer=_positive_int(d.get("per_layer"), f"{what}.per_layer"), measured=d["measured"],
                   source=str(d.get("source", "")), tokens=tokens,
                   time_s=_times(d.get("time_s"), len(tokens), f"{what}.time_s"))

    def at(self, tokens: float) -> float:
        """ONE collective's time at ``tokens``."""
        return interp1(self.tokens, self.time_s, tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "per_layer": self.per_layer, "measured": self.measured, "source": self.source,
                "tokens": list(self.tokens), "time_s": list(self.time_s)}


@dataclass(frozen=True)
class EngineOverhead:
    """Engine time outside the kernels, in seconds: per step, per sequence in the step, per cached token the
    step's sequences attend to (the engine's KV bookkeeping: cache copies, masks, block tables, which grow with
    the cache), and once more for a step that runs prefill (a static batch's ``generate`` set-up, a continuous
    engine admitting requests).  Documents written before the last two terms load with them at zero.
    ``fitted_from``: where ``gpubench validate`` fitted it (the validation, engine and version, mode, path,
    calibration workload), so a calibrated profile says which engine its overhead belongs to; None: not recorded.
    ``preset``: the engine preset (``profiles/engines/<preset>.toml``) the terms were taken from, not fitted; a
    simulation's ``--engine`` replaces them, where it never replaces fitted ones."""

    per_step_s: float
    per_sequence_s: float = 0.0
    fitted_on: str = "given"
    per_cached_token_s: float = 0.0
    per_prefill_step_s: float = 0.0
    fitted_from: dict[str, Any] | None = field(default=None, compare=False)
    preset: str | None = None

    # Each term and what it is paid for, in the order a step adds them up: the one list of the terms.
    UNITS = {"per_step_s": "step", "per_sequence_s": "sequence", "per_cached_token_s": "cached token",
             "per_prefill_step_s": "prefill step"}
    TERMS = tuple(UNITS)

    def __post_init__(self) -> None:
        for name in self.TERMS:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= MAX_KERNEL_S:
                raise ProfileDocError(f"engine overhead {name} must be seconds from 0 to {MAX_KERNEL_S:g}")

    def step_s(self, sequences: int, cached_tokens: float, prefill: bool) -> float:
        """The overhead of one step of ``sequences`` sequences attending to ``cached_tokens`` keys in all."""
        return (self.per_step_s + self.per_sequence_s * sequences + self.per_cached_token_s * cached_tokens
                + (self.per_prefill_step_s if prefill else 0.0))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineOverhead:
        return cls(per_step_s=d.get("per_step_s"), per_sequence_s=d.get("per_sequence_s", 0.0),
                   fitted_on=str(d.get("fitted_on", "")), per_cached_token_s=d.get("per_cached_token_s", 0.0),
                   per_prefill_step_s=d.get("per_prefill_step_s", 0.0), fitted_from=d.get("fitted_from"),
                   preset=str(d["preset"]) if d.get("preset") else None)

    def to_dict(self) -> dict[str, Any]:
        where = {"fitted_from": dict(self.fitted_from)} if self.fitted_from is not None else {}
        preset = {"preset": self.preset} if self.preset else {}
        return {**{name: getattr(self, name) for name in self.TERMS}, "fitted_on": self.fitted_on, **where, **preset}


@dataclass(frozen=True)
class StepProfile:
    source: str
    basis: str
    model: dict[str, Any]
    tp: int
    dtype: str
    kv_dtype: str
    memory: dict[str, Any]
    linears: tuple[LinearTable, ...]
    lm_head: LinearTable
    decode_attention: Table2D
    prefill_attention: Table1D
    chunk_attention: Table2D | None = None
    other: Table1D | None = None
    engine_overhead: EngineOverhead | None = None
    roof: dict[str, Any] | None = None
    tool: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    argv: tuple[str, ...] = ()
    host: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    lm_head_dtype: str | None = None  # None: the compute dtype of ``dtype`` (bf16 for a weight-only format)
    comm: CommTable | None = None  # None: no all-reduces costed (TP 1, or a profile written before they were)
    # A mixture of experts: its routed experts' tables, how tokens spread over them, and with expert parallelism
    # (``ep`` GPUs) the dispatch and combine all-to-alls (per MoE layer, one table of ONE all-to-all).
    grouped: tuple[GroupedTable, ...] = ()
    ep: int = 1
    routing: str = "balanced"
    all_to_all: CommTable | None = None
    # What one GPU draws while the step runs (``power_record``): watts with their basis and source, or why none
    # (None: a profile written before profiles carried one).
    power: dict[str, Any] | None = None
    # A hybrid model's mixer kinds that the attention tables above do not time, one entry each (empty: every
    # mixer is the attention's, or its own over a sliding window).
    mixers: tuple[MixerTable, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ProfileDocError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")
        missing = [k for k in MODEL_KEYS if k not in self.model]
        if missing:
            raise ProfileDocError(f"model lacks {', '.join(missing)}")
        for key in MODEL_KEYS[1:-1]:
            _positive_int(self.model[key], f"model.{key}")
        if self.model.get("max_positions") is not None:
            _positive_int(self.model["max_positions"], "model.max_positions")
        if self.model["mlp"] not in ("gated", "plain"):
            raise ProfileDocError(f"model.mlp must be 'gated' or 'plain', got {self.model['mlp']!r}")
        _positive_int(self.tp, "tp")
        _one_of(self.dtype, DTYPES, "dtype")
        _one_of(self.kv_dtype, KV_DTYPES, "kv_dtype")  # a KV cache holds activations: never a weight-only format
        if self.lm_head_dtype is not None:
            _one_of(self.lm_head_dtype, PLAIN_DTYPES, "lm_head.dtype")
        for key in ("weight_bytes", "kv_bytes_per_token"):
            _positive_int(self.memory.get(key), f"memory.{key}")
        if self.memory.get("device_bytes") is not None:
            _positive_int(self.memory["device_bytes"], "memory.device_bytes")
        if not self.linears:
            raise ProfileDocError("linears must not be empty")
        if self.comm is not None and self.comm.ranks != self.tp:
            raise ProfileDocError(f"comm.ranks {self.comm.ranks} is not tp {self.tp}")
        _positive_int(self.ep, "ep")
        if self.all_to_all is not None and self.all_to_all.ranks != self.ep:
            raise ProfileDocError(f"all_to_all.ranks {self.all_to_all.ranks} is not ep {self.ep}")
        experts = self.model.get("experts", 1)
        if (experts or 1) > 1 and not self.grouped:
            raise ProfileDocError(f"model.experts is {experts} but the profile has no grouped (experts) tables")
        try:
            step = self.step_model()
        except (BadInputError, ValueError, KeyError, TypeError) as exc:
            raise ProfileDocError(f"the model and its split are not a step model ({exc})") from None
        wanted = {step.mixer_name(rules) for rules, _ in step.mixers if not step.reads_main_tables(rules)}
        given = [t.name for t in self.mixers]
        if sorted(given) != sorted(wanted):
            raise ProfileDocError(f"the profile's mixer tables ({', '.join(given) or 'none'}) are not its model's "
                                  f"other mixer kinds ({', '.join(sorted(wanted)) or 'none'})")
        if self.power is not None:
            _check_power(self.power)
        if self.roof is not None:
            for key in ("bandwidth_bytes_per_s", "peak_flop_per_s"):
                value = self.roof.get(key)
                if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                    raise ProfileDocError(f"roof.{key} must be a positive number")

    @property
    def layers(self) -> int:
        return self.model["layers"]

    def weights_overflow(self, mem_fraction: float) -> str | None:
        """Why one replica cannot hold its weights in ``mem_fraction`` of its GPU's memory (None: they fit, or the
        profile does not know the memory)."""
        device, weights = self.memory.get("device_bytes"), self.memory["weight_bytes"]
        if not device or mem_fraction * device - weights > 0:
            return None
        return (f"the weights ({weights / 1e9:.1f} GB a GPU) do not fit in {mem_fraction:g} of {device / 1e9:.1f} GB: "
                "profile with a larger --tp (or --ep for a mixture), or a smaller --dtype")

    @property
    def gpus(self) -> int:
        """GPUs one replica of this profile runs on: its expert-parallel group, else its tensor-parallel one."""
        return self.ep if self.ep > 1 else self.tp

    @property
    def power_figure(self) -> dict[str, Any]:
        """The profile's ``power`` record, or for a profile written before profiles carried one, why none."""
        return self.power if self.power is not None else no_power(
            "the profile records no power figure (written before step profiles carried one)")

    def step_model(self):
        """The step model this profile's tables time (``roofline.step``): the model, its split, formats, routing."""
        from roofline.specs.models import ModelSpec
        from roofline.step.launches import StepModel

        return StepModel.of(ModelSpec.from_record(self.model), self.tp, self.ep, self.dtype, self.kv_dtype,
                            self.routing)

    @property
    def head_dtype(self) -> str:
        """The dtype the LM head's weight is stored and timed in: a weight-only format leaves it in bf16."""
        return self.lm_head_dtype or stored_dtype("lm_head", self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "kind": KIND, "tool": self.tool, "created_at": self.created_at,
            "argv": list(self.argv), "host": self.host, "device": self.device, "source": self.source,
            "basis": self.basis, "model": dict(self.model), "tp": self.tp, "dtype": self.dtype,
            "kv_dtype": self.kv_dtype, "memory": dict(self.memory), "roof": dict(self.roof) if self.roof else None,
            "linears": [t.to_dict() for t in self.linears],
            "lm_head": {**{k: v for k, v in self.lm_head.to_dict().items() if k not in ("name", "per_layer")},
                        "dtype": self.head_dtype},
            "decode_attention": self.decode_attention.to_dict(),
            "prefill_attention": self.prefill_attention.to_dict(),
            "chunk_attention": self.chunk_attention.to_dict() if self.chunk_attention else None,
            "other": self.other.to_dict() if self.other else None,
            "engine_overhead": self.engine_overhead.to_dict() if self.engine_overhead else None,
            # Only where all-reduces were costed: a TP 1 profile is the document it always was.
            **({"comm": self.comm.to_dict()} if self.comm is not None else {}),
            # Only for a mixture of experts: a dense profile is the document it always was.
            **({"ep": self.ep, "routing": self.routing, "grouped": [t.to_dict() for t in self.grouped]}
               if self.grouped else {}),
            **({"all_to_all": self.all_to_all.to_dict()} if self.all_to_all is not None else {}),
            **({"power": dict(self.power)} if self.power is not None else {}),
            **({"mixers": [t.to_dict() for t in self.mixers]} if self.mixers else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepProfile:
        if not isinstance(d, dict) or d.get("kind") != KIND:
            raise ProfileDocError(f"not a step profile (kind is not {KIND!r})")
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ProfileDocError(f"step profile schema_version {version!r}; this gpubench reads {SCHEMA_VERSION}")
        try:
            return cls._parse(d)
        except KeyError as exc:
            raise ProfileDocError(f"step profile lacks {exc}") from None
        except (TypeError, AttributeError) as exc:
            raise ProfileDocError(f"malformed step profile ({exc})") from None

    @classmethod
    def _parse(cls, d: dict[str, Any]) -> StepProfile:
        linears = d["linears"]
        if not isinstance(linears, list):
            raise ProfileDocError("linears must be a list")
        chunk, other, overhead = d.get("chunk_attention"), d.get("other"), d.get("engine_overhead")
        return cls(
            source=d["source"], basis=str(d.get("basis", "")), model=_object(d["model"], "model"), tp=d.get("tp", 1),
            dtype=d["dtype"], kv_dtype=d.get("kv_dtype", d["dtype"]), memory=_object(d["memory"], "memory"),
            linears=tuple(LinearTable.from_dict(t, f"linears[{i}]") for i, t in enumerate(linears)),
            lm_head=LinearTable.from_dict({"name": "lm_head", **d["lm_head"]}, "lm_head"),
            decode_attention=Table2D.from_dict(d["decode_attention"], "batches", "contexts", "decode_attention"),
            prefill_attention=Table1D.from_dict(d["prefill_attention"], "prompt_tokens", "prefill_attention"),
            chunk_attention=Table2D.from_dict(chunk, "chunk_tokens", "prefix_tokens", "chunk_attention")
            if chunk else None,
            other=Table1D.from_dict(other, "tokens", "other") if other else None,
            engine_overhead=EngineOverhead.from_dict(overhead) if overhead else None,
            roof=_object(d["roof"], "roof") if d.get("roof") is not None else None,
            tool=_object(d.get("tool"), "tool", optional=True), created_at=str(d.get("created_at", "")),
            argv=tuple(str(a) for a in d.get("argv") or ()), host=_object(d.get("host"), "host", optional=True),
            device=_object(d.get("device"), "device", optional=True), lm_head_dtype=d["lm_head"].get("dtype"),
            comm=CommTable.from_dict(_object(d["comm"], "comm")) if d.get("comm") is not None else None,
            grouped=tuple(GroupedTable.from_dict(t, f"grouped[{i}]") for i, t in enumerate(d.get("grouped") or ())),
            ep=d.get("ep", 1), routing=str(d.get("routing", "balanced")),
            all_to_all=CommTable.from_dict(_object(d["all_to_all"], "all_to_all"), "all_to_all")
            if d.get("all_to_all") is not None else None,
            power=_object(d["power"], "power") if d.get("power") is not None else None,
            mixers=tuple(MixerTable.from_dict(_object(t, f"mixers[{i}]"), f"mixers[{i}]")
                         for i, t in enumerate(_list(d.get("mixers"), "mixers"))),
        )


def power_record(watts_per_gpu: float, basis: str, source: str, upper_bound: bool,
                 by_tokens: dict[str, list] | None = None) -> dict[str, Any]:
    """What one GPU draws while a step runs, in W: ``basis`` says how it was found, ``source`` where from, and
    ``upper_bound`` whether the step draws at most this (a board's TDP) rather than this (a measured draw).
    ``by_tokens`` (a measured draw): ``{"tokens": [...], "watts": [...]}``, the draw by tokens in the step, which
    the simulator charges each step at (``watts_per_gpu`` is then their mean, for the record)."""
    record = {"watts_per_gpu": float(watts_per_gpu), "upper_bound": upper_bound, "basis": basis, "source": source}
    return {**record, "by_tokens": by_tokens} if by_tokens is not None else record


def step_watts(power: dict[str, Any], tokens: int) -> float | None:
    """What one GPU draws during a step of ``tokens`` tokens: the power table's draw interpolated linearly in
    log(tokens) and held at its ends, else the one figure (None: no figure)."""
    table = power.get("by_tokens")
    if not table:
        return power.get("watts_per_gpu")
    return linear(table["tokens"], table["watts"], tokens, below="hold", above="hold", log=True)


def no_power(why: str) -> dict[str, Any]:
    """A profile without a power figure, saying why (never a made-up number)."""
    return {"watts_per_gpu": None, "why_none": why}


def _check_power(power: dict[str, Any]) -> None:
    watts = power.get("watts_per_gpu")
    if watts is None:
        if not isinstance(power.get("why_none"), str) or not power["why_none"]:
            raise ProfileDocError("power without watts_per_gpu must say why_none")
        return
    if not isinstance(watts, (int, float)) or isinstance(watts, bool) or not math.isfinite(watts) or watts <= 0:
        raise ProfileDocError(f"power.watts_per_gpu must be a positive number of watts, got {watts!r}")
    if not isinstance(power.get("upper_bound"), bool):
        raise ProfileDocError("power.upper_bound must be true or false")
    table = power.get("by_tokens")
    if table is None:
        return
    tokens, draws = (table.get(k) if isinstance(table, dict) else None for k in ("tokens", "watts"))
    if not isinstance(tokens, list) or not isinstance(draws, list) or not tokens or len(tokens) != len(draws):
        raise ProfileDocError("power.by_tokens must hold lists tokens and watts of one length")
    if any(not isinstance(t, int) or isinstance(t, bool) or t <= 0 for t in tokens) or tokens != sorted(set(tokens)):
        raise ProfileDocError("power.by_tokens.tokens must be positive integers, increasing")
    if any(not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w <= 0 for w in draws):
        raise ProfileDocError("power.by_tokens.watts must be positive numbers of watts")


def load_profile(path: str | os.PathLike) -> StepProfile:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileDocError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        document = json.loads(text, parse_constant=_refuse_constant)  # NaN/Infinity: not JSON, not writable
    except (ValueError, RecursionError) as exc:
        raise ProfileDocError(f"{path}: not valid JSON ({str(exc).splitlines()[0]})") from None
    try:
        return StepProfile.from_dict(document)
    except ProfileDocError as exc:
        raise ProfileDocError(f"{path}: {exc}") from None


def save_json_atomic(document: dict[str, Any], path: str | os.PathLike) -> None:
    """Temp file in the same folder, fsync, rename (a reader never sees half a file); never over a link, FIFO
    or device: the rename would replace it (``-o /dev/null`` became a regular file)."""
    from roofline.result.io import write_output_file

    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    write_output_file(path, json.dumps(document, indent=1, allow_nan=False) + "\n")


def check_profile_output(path: str | os.PathLike) -> None:
    """The ``-o`` of a step profile, checked before anything is computed: a writable new path or regular
    file, and an existing file only when it is a step profile (a sweep result mistyped as -o is kept)."""
    from roofline.result.io import check_output

    path = Path(path)
    check_output(path)
    if not path.exists():
        return
    try:
        kind = json.loads(path.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind != KIND:
        raise ProfileDocError(f"{path} exists and is not a step profile: not overwriting it")


def save_profile(profile: StepProfile, path: str | os.PathLike) -> None:
    save_json_atomic(profile.to_dict(), path)
