"""``gpubench compare MY.json --reference aiconfigurator``: a local sweep beside a reference database's kernel
times for its SKU, per shape and batch, with a verdict in words.

The reference rows are read as ``gpubench import --reference`` reads them (``roofline.reference.importer``): for
each SKU among the results, the database's GEMM table of each dtype measured, at the shapes and batches measured
that the table holds.  What it does not hold (a dtype, a shape, a batch) is said in the comparison's notes, never
interpolated: a reference is what was measured.  The first SKU's reference is the baseline (unless ``--baseline``
names another), so each local row's speed is the reference's time over its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from roofline.analysis.series import analyse
from roofline.compare.comparison import Loaded
from roofline.reference.database import ReferenceDataError, check_engine, check_reference, open_database
from roofline.reference.gemm import GemmTable
from roofline.reference.importer import as_result, reference_points
from roofline.result.io import ResultError
from roofline.specs.gpus import load_gpu_spec

# Within this fraction of the reference the verdict says "the same as": the database keeps one mean per shape and
# batch, so there is no spread to decide on; 5% is the minimum effect compare's own verdicts use.
SAME_WITHIN = 0.05


def _measured(item: Loaded) -> dict[str, dict[tuple[int, int], set[int]]]:
    """dtype -> (n, k) -> the batches a local result measured as GEMV or GEMM (GEMV is the batch-1 GEMM)."""
    wanted: dict[str, dict[tuple[int, int], set[int]]] = {}
    for p in item.result.points:
        if p.usable and p.op in ("gemm", "gemv") and p.backend in ("torch", "cupy"):
            wanted.setdefault(p.dtype, {}).setdefault((p.n, p.k), set()).add(p.batch)
    return wanted


def reference_items(loaded: list[Loaded], reference: str, engine: str | None) -> tuple[list[Loaded], list[str]]:
    """One reference result per SKU among ``loaded``'s GPU results, and what the database lacks of them."""
    check_reference(reference)
    chosen = check_engine(engine)
    skus = list(dict.fromkeys(i.result.device.sku for i in loaded if i.result.device.kind == "cuda"
                              and i.result.device.sku and i.result.origin != "imported"))
    if not skus:
        raise ResultError(f"--reference {reference} compares GPU results of a known SKU; none of the results "
                          "compared is one (a CPU run, or a GPU no spec sheet matched)")
    db, items, notes = open_database(), [], []
    for sku in skus:
        gpu = load_gpu_spec(sku)
        wanted: dict[str, dict[tuple[int, int], set[int]]] = {}
        for item in loaded:
            if item.result.device.sku == sku:
                for dtype, shapes in _measured(item).items():
                    for shape, batches in shapes.items():
                        wanted.setdefault(dtype, {}).setdefault(shape, set()).update(batches)
        tables, points = [], []
        for dtype, shapes in wanted.items():
            try:
                table = GemmTable.read(db, gpu, chosen, dtype)
            except ReferenceDataError as exc:
                notes.append(f"{sku} {dtype}: {exc}")
                continue
            held = [shape for shape in shapes if shape in set(table.shapes())]
            notes += [f"{sku} {dtype} {n}x{k}: not in the reference ({table.source.engine} "
                      f"{table.source.engine_version} on {table.source.system})" for n, k in shapes
                      if (n, k) not in held]
            for n, k in held:
                lacking = sorted(shapes[(n, k)] - set(table.batches(n, k)))
                if lacking:
                    notes.append(f"{sku} {dtype} {n}x{k}: the reference has no batch {', '.join(map(str, lacking))}")
            found, dropped = reference_points(table, held, set().union(*shapes.values())) if held else ([], [])
            tables.append(table)
            points += found
            notes += dropped
        if points:
            result = as_result(db, gpu, tables, points, [])
            items.append(Loaded(f"{reference}:{sku}", result, analyse(result)))
    if not items:
        raise ResultError(f"--reference {reference}: the database holds none of the shapes and dtypes measured ("
                          + "; ".join(notes) + ")")
    return items, notes


def verdicts(comparison: dict[str, Any], loaded: list[Loaded]) -> list[str]:
    """Per shape, each local result against the baseline reference at its smallest and largest common batch:
    "NVIDIA H200 [sweep] reads 12% slower than the reference (…) at batch 1 on bf16 10240x8192"."""
    base = comparison["baseline"]
    by_file = {i.file: i for i in loaded}
    if base is None or by_file[base].result.settings.reference is None:
        return []
    words = by_file[base].result.settings.reference.words()
    out = []
    for group in comparison["groups"]:
        for row in group["rows"]:
            speed = group["speed_vs_baseline"].get(row["file"])
            if not speed or row["file"] == base:
                continue
            for batch in sorted({min(speed), max(speed)}):
                ratio = speed[batch]  # the reference's time over this one's
                how = "the same as" if abs(ratio - 1) <= SAME_WITHIN else \
                    f"{abs(1 - ratio) * 100:.0f}% {'slower' if ratio < 1 else 'faster'} than"
                out.append(f"{row['device']} reads {how} the reference ({words}) at batch {batch} on "
                           f"{group['dtype']} {group['n']}x{group['k']} ({Path(row['file']).name}: "
                           f"{row['times_s'][batch] * 1e6:.1f} us, reference {ratio * row['times_s'][batch] * 1e6:.1f}"
                           " us)")
    return out
