"""The result format as data: the JSON Schema and the key tables of docs/reference/result.md, both generated
from the record declarations (roofline.result.sections) and the point's keys declared here, plus a small validator.

Tests check that docs/result.schema.json is what ``json_schema()`` generates, that every checked-in result
and a fresh sweep validate against it, and that docs/reference/result.md holds every key table: neither the
schema nor the document can drift from the code.  (``jsonschema`` is not a dependency; the validator below
covers what the generated schema uses: type, enum, properties, required, additionalProperties, items, $ref.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from roofline.core.counting import DTYPES, MIXER_DTYPES, OPS, SPARSE_KINDS, STATE_KINDS
from roofline.result.keys import JSON_TYPES, Key, Record, key
from roofline.result.sections import SECTIONS, PointTelemetry, Telemetry

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "result.schema.json"


@dataclass(frozen=True, kw_only=True)
class Correctness(Record):
    SECTION: ClassVar[str] = "points[].correctness"
    rel_err: float | None = key("number", doc="||y - ref|| / ||ref|| on sampled outputs (null: not finite)")
    tolerance: float | None = key("number", doc="the dtype's tolerance (settings.tolerances)")
    outputs_written: bool | None = key("boolean", doc="the poisoned outputs were all overwritten")
    passed: bool | None = key("boolean", doc="written and rel_err within tolerance")
    reference: str | None = key("string", doc="what the reference is")


@dataclass(frozen=True, kw_only=True)
class StatsDocument(Record):
    SECTION: ClassVar[str] = "points[].stats|eager_stats"
    n: int | None = key("integer", required=True, doc="samples")
    median_s: float | None = key("number", unit="s", required=True, doc="median time per launch")
    q1_s: float | None = key("number", unit="s", doc="first quartile")
    q3_s: float | None = key("number", unit="s", doc="third quartile")
    min_s: float | None = key("number", unit="s", doc="fastest sample")
    mean_s: float | None = key("number", unit="s", doc="mean")
    ci95_s: tuple | None = key("array", items="number", unit="s", doc="95% CI of the median [low, high]")


@dataclass(frozen=True, kw_only=True)
class MixerShapeDocument(Record):
    """``roofline.core.counting.MixerShape``: the keys a state_update or sparse_attention point's mixer has."""

    SECTION: ClassVar[str] = "points[].mixer"
    kind: str | None = key("string", required=True, choices=STATE_KINDS + SPARSE_KINDS,
                           doc="gdn (Gated DeltaNet) | mamba2 (state_update); dsa (sparse_attention)")
    heads: int | None = key("integer", required=True,
                            doc="gdn: value heads; mamba2: heads; dsa: the latent attention's query heads")
    groups: int | None = key("integer", doc="gdn: key heads; mamba2: the groups sharing B and C")
    conv_kernel: int | None = key("integer", doc="gdn, mamba2: the short convolution's width")
    state_dtype: str | None = key("string", choices=MIXER_DTYPES, doc="gdn, mamba2: what the state is kept in")
    rope: int | None = key("integer", doc="dsa: rope dims beside the latent k")
    index_heads: int | None = key("integer", doc="dsa: the indexer's heads")
    index_dim: int | None = key("integer", doc="dsa: the indexer's head size (its fp8 key per cached token)")
    topk: int | None = key("integer", doc="dsa: keys each query attends, chosen by the indexer")


@dataclass(frozen=True, kw_only=True)
class PointDocument(Record):
    """The keys ``roofline.result.document.Point.to_dict`` writes (Point is the typed form; derived keys are
    recomputed on load, never trusted)."""

    SECTION: ClassVar[str] = "points[]"
    op: str | None = key("string", required=True, choices=OPS,
                         doc="the op (grouped: a mixture of experts' grouped GEMM; state_update: a recurrent "
                             "mixer's decode; sparse_attention: DSA's decode)")
    backend: str | None = key("string", required=True, doc="torch | cupy | imported")
    dtype: str | None = key("string", required=True, choices=DTYPES,
                             doc="a plain dtype or a weight-only format (w8a16, w4a16: int weights, bf16 in and out)")
    batch: int | None = key("integer", required=True, doc="decode batch B (bmm: groups; grouped: tokens routed)")
    m: int | None = key("integer", doc="derived: rows of X (1 for gemv and bmm)")
    n: int | None = key("integer", required=True, doc="output features N")
    k: int | None = key("integer", required=True, doc="input features K")
    groups: int | None = key("integer", doc="derived: independent matrices (bmm)")
    flop: int | None = key("integer", unit="FLOP", doc="derived: FLOP per launch (checked on load)")
    bytes: int | None = key("integer", unit="B", doc="derived: minimum bytes per launch (checked on load)")
    intensity_flop_per_byte: float | None = key("number", unit="FLOP/B", doc="derived: flop / bytes")
    status: str | None = key("string", required=True, choices=("ok", "skipped", "oom", "error", "unsupported"),
                             doc="what happened")
    reason: str | None = key("string", doc="why, for any status but ok")
    timer: str | None = key("string", doc="perf_counter | cuda-graph | cuda-eager | imported")
    launches_per_sample: int | None = key("integer", doc="launches one sample times (graph replays)")
    stop_reason: str | None = key("string", doc="why sampling stopped (CI reached, budget, max samples)")
    rotation_copies: int | None = key("integer", doc="weight copies rotated so launches read DRAM")
    samples_s: tuple | None = key("array", items="number", unit="s", doc="every timed sample, per launch")
    warmup_samples_s: tuple | None = key("array", items="number", unit="s", doc="warm-up samples, kept")
    eager_samples_s: tuple | None = key("array", items="number", unit="s", doc="one launch per event pair")
    stats: StatsDocument | None = key("object", record=StatsDocument, doc="derived: of samples_s")
    eager_stats: StatsDocument | None = key("object", record=StatsDocument, doc="derived: of eager_samples_s")
    launch_overhead_s: float | None = key("number", unit="s", doc="derived: eager median - graph median")
    time_s: float | None = key("number", unit="s", doc="derived: median time per launch")
    flop_per_s: float | None = key("number", unit="FLOP/s", doc="derived: flop / time_s")
    bytes_per_s: float | None = key("number", unit="B/s", doc="derived: bytes / time_s")
    correctness: Correctness | None = key("object", record=Correctness, doc="the check against float64")
    telemetry: PointTelemetry | None = key("object", record=PointTelemetry, doc="readings of its timed phase")
    started_at: str | None = key("string", doc="UTC time it started")
    finished_at: str | None = key("string", doc="UTC time it finished")
    attempt: int | None = key("integer", doc="1, or 2 for a point measured again")
    superseded: bool | None = key("boolean", doc="a first attempt replaced by a second (analyses skip it)")
    kernel: str | None = key("string", doc="what ran: torch.matmul, cuBLAS via cupy.matmul, ...")
    experts: int | None = key("integer", doc="grouped: the experts, each an N×K matrix")
    topk: int | None = key("integer", doc="grouped: experts each token is routed to")
    routing: str | None = key("string", doc="grouped: balanced | uniform | zipf:S | power-law:ALPHA (seeded)")
    touched: int | None = key("integer", doc="grouped: experts the routing gave a token (their weights are read)")
    mixer: MixerShapeDocument | None = key("object", record=MixerShapeDocument,
                                           doc="state_update: n the value (Mamba-2: head) size, k the key (state) "
                                               "size; sparse_attention: n the context, k the latent; the rest here")


@dataclass(frozen=True, kw_only=True)
class ResultDocument(Record):
    SECTION: ClassVar[str] = ""
    schema_version: int | None = key("integer", required=True, doc="format version (see the history)")
    origin: str | None = key("string", choices=("measured", "imported"), doc="measured (default) or imported")
    tool: Any = key("object", record=SECTIONS["tool"], required=True, doc="what wrote it")
    created_at: str | None = key("string", required=True, doc="UTC ISO-8601 time the run started")
    argv: tuple | None = key("array", items="string", required=True, doc="the command line")
    host: Any = key("object", record=SECTIONS["host"], required=True, doc="the machine")
    device: Any = key("object", record=SECTIONS["device"], required=True, doc="the device measured")
    settings: Any = key("object", record=SECTIONS["settings"], required=True, doc="how it was measured")
    ceilings: Any = key("object", record=SECTIONS["ceilings"], doc="bandwidth and compute ceilings")
    points: tuple | None = key("array", items="object", item_record=PointDocument, required=True,
                               doc="every point, in the order measured")
    telemetry: Telemetry | None = key("object", record=Telemetry, doc="the sampler and its timeline")


# What writes each section, for the docs.
WRITERS = {
    "": ("microbench.sweep.prepare.prepare_sweep (measured), roofline.result.importer (imported); "
         "saved by roofline.result.io"),
    "tool": "microbench.device.provenance.tool_info; import: roofline.result.importer",
    "host": "microbench.device.provenance.host_info",
    "device": "microbench.device.provenance.describe_device (NVML state: microbench.telemetry.nvml.device_state)",
    "settings": ("microbench.sweep.prepare.settings_record; resumed: microbench.sweep.resume; "
                 "import: roofline.result.importer"),
    "ceilings": "microbench.sweep.ceilings.measure_ceilings (peaks: microbench.sweep.peaks); spec: roofline.specs.gpus",
    "telemetry": "microbench.telemetry.nvml_reader.start_telemetry and microbench.timing.session.telemetry_record",
    "points[]": "microbench.timing.measure.measure_point (Point.to_dict); import: roofline.result.importer",
    "points[].telemetry": "microbench.telemetry.sampler.summarize_window",
}


def records(root: type[Record] | None = None) -> list[type[Record]]:
    """Every record the document of ``root`` (default: the result) holds, parents before children, each once."""
    found: list[type[Record]] = []

    def walk(record: type[Record]) -> None:
        if record in found:
            return
        found.append(record)
        for spec in record.registry().values():
            for child in (spec.record, spec.item_record):
                if child is not None:
                    walk(child)

    walk(root or ResultDocument)
    return found


@dataclass(frozen=True)
class ShapedKey(Key):
    """A key of the serving documents, typed one level further than a result's: whether null is allowed apart
    from being required (a key the writer always writes may still be null), the type of the items of an
    array's items (a table of times per row), and the type of each value of an object with free keys."""

    nullable: bool | None = None  # None: as a result's key, null exactly when the key is not required
    cells: str | None = None  # an array of arrays: the JSON type of each inner item
    values: str | None = None  # an object with free keys (and no record): the JSON type of each value


def shaped_key(*types: str, unit: str | None = None, doc: str = "", **options: Any) -> Any:
    """Declare a field of a serving document's record (``key`` with ShapedKey's options)."""
    return field(default=None, metadata={"key": ShapedKey("", tuple(types), unit, doc, **options)})


def _nullable(spec: Key) -> bool:
    chosen = getattr(spec, "nullable", None)
    return not spec.required if chosen is None else chosen


def _item_schema(spec: Key) -> dict[str, Any]:
    """What each item of an array holds: a result's items may be null, a serving document's are typed."""
    if not isinstance(spec, ShapedKey):
        return {"type": [spec.items, "null"] if spec.items != "object" else "object"}
    item: dict[str, Any] = {"type": spec.items}
    if spec.cells:
        item["items"] = {"type": spec.cells}
    return item


def _property(spec: Key) -> dict[str, Any]:
    nullable = _nullable(spec)
    types = list(spec.types) + (["null"] if nullable else [])
    out: dict[str, Any] = {"description": spec.doc + (f" [{spec.unit}]" if spec.unit else "")}
    child = spec.record or spec.item_record
    if child is not None and spec.keyed:
        out["additionalProperties"] = {"$ref": f"#/$defs/{child.__name__}"}
    elif child is not None and spec.item_record is not None:
        out["items"] = {"$ref": f"#/$defs/{child.__name__}"}
    elif child is not None:
        return {"anyOf": [{"$ref": f"#/$defs/{child.__name__}"}, {"type": "null"}]} if nullable \
            else {"$ref": f"#/$defs/{child.__name__}"}
    elif spec.items:
        out["items"] = _item_schema(spec)
    elif getattr(spec, "values", None):
        out["additionalProperties"] = {"type": spec.values}
    out["type"] = types if len(types) > 1 else types[0]
    if spec.choices:
        out["enum"] = list(spec.choices) + ([None] if nullable else [])
    return out


def _object(record: type[Record], what: str = "the result document") -> dict[str, Any]:
    registry = record.registry()
    return {"type": "object", "description": (record.SECTION or what),
            "properties": {name: _property(spec) for name, spec in registry.items()},
            "required": [name for name, spec in registry.items() if spec.required],
            "additionalProperties": False}


def document_schema(root: type[Record], file_name: str, title: str, what: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of the document whose top level ``root`` declares, every record it holds
    under ``$defs``; ``file_name`` is its name under docs/."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://github.com/gpubench/gpubench/docs/{file_name}", "title": title,
            **_object(root, what),
            "$defs": {r.__name__: _object(r, what) for r in records(root) if r is not root}}


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of what this version writes."""
    from roofline.result.document import SCHEMA_VERSION

    return document_schema(ResultDocument, "result.schema.json",
                           f"gpubench result document, schema_version {SCHEMA_VERSION}", "the result document")


def schema_text() -> str:
    return json.dumps(json_schema(), indent=1, ensure_ascii=False) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> None:
    """Regenerate docs/result.schema.json after changing a declaration."""
    path.write_text(schema_text(), encoding="utf-8")


# --- a validator for the subset the generated schema uses (JSON types as the key registry maps them) --------
def _has_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, JSON_TYPES[name])


def validate(instance: Any, schema: dict[str, Any], root: dict[str, Any] | None = None,
             where: str = "$") -> list[str]:
    """Every way ``instance`` breaks ``schema``, as ``path: what`` lines (empty: valid)."""
    root = root or schema
    if "$ref" in schema:
        return validate(instance, root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root, where)
    if "anyOf" in schema:
        tries = [validate(instance, option, root, where) for option in schema["anyOf"]]
        return [] if any(not t for t in tries) else min(tries, key=len)
    types = schema.get("type")
    if types is not None and not any(_has_type(instance, t) for t in ([types] if isinstance(types, str) else types)):
        return [f"{where}: {type(instance).__name__} is not {types}"]
    if "enum" in schema and instance not in schema["enum"]:
        return [f"{where}: {instance!r} is not one of {schema['enum']}"]
    errors: list[str] = []
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        errors += [f"{where}: lacks {name}" for name in schema.get("required", []) if name not in instance]
        extra = schema.get("additionalProperties", True)
        for name, value in instance.items():
            if name in properties:
                errors += validate(value, properties[name], root, f"{where}.{name}")
            elif extra is False:
                errors.append(f"{where}: {name} is not a key of this format")
            elif isinstance(extra, dict):
                errors += validate(value, extra, root, f"{where}.{name}")
    if isinstance(instance, list) and "items" in schema:
        for index, item in enumerate(instance):
            errors += validate(item, schema["items"], root, f"{where}[{index}]")
    return errors


# --- the key tables of docs/reference/result.md ------------------------------------------------------------
def key_table(record: type[Record], writers: dict[str, str] | None = None) -> str:
    """The Markdown table of one record's keys, as docs/reference/result.md (and the other pages there) holds it."""
    writers = WRITERS if writers is None else writers
    section = record.SECTION or "(top level)"
    lines = [f"#### `{section}`", ""]
    if record.SECTION in writers:
        lines += [f"Written by {writers[record.SECTION]}.", ""]
    lines += ["| key | type | unit | meaning |", "|---|---|---|---|"]
    for name, spec in record.registry().items():
        kind = " or ".join(spec.types) + (f" of {spec.items}" if spec.items else "")
        kind += f" of {spec.cells}" if getattr(spec, "cells", None) else ""
        kind += f" of {spec.values}" if getattr(spec, "values", None) else ""
        kind += " or null" if isinstance(spec, ShapedKey) and _nullable(spec) else ""
        kind += ", required" if spec.required else ""
        meaning = spec.doc.replace("|", "/")
        lines.append(f"| `{name}` | {kind} | {spec.unit or ''} | {meaning} |")
    return "\n".join(lines) + "\n"


def key_tables() -> str:
    return "\n".join(key_table(r) for r in records())
