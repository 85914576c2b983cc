"""The reference database's GEMM rows as a gpubench result (``gpubench import --reference``), so ``fit``, ``report``
and ``compare`` read them as they read a sweep.

Each row is one point: op ``gemm``, batch ``m``, weight ``n × k`` (``roofline.reference.gemm`` says why), one
sample (the collector's mean of a CUDA graph's replays, which is all the database keeps), ``backend: imported``
and its kernel named.  The result is ``origin: imported``; ``settings.reference`` says which database and version,
who measured it, on which system, with which engine and version and which kernel; ``device`` is the rows' device
and the SKU asked for.  A shape the table does not hold is refused, naming the nearest it does: a reference is
what was measured, never a shape interpolated into one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from roofline.reference.database import Database, ReferenceDataError
from roofline.reference.gemm import GemmTable
from roofline.result.document import Point, Result, plausible_time
from roofline.specs.gpus import GpuSpec


def _missing(table: GemmTable, shapes: list[tuple[int, int]]) -> None:
    have = set(table.shapes())
    for n, k in shapes:
        if (n, k) not in have:
            near = ", ".join(f"{a}x{b}" for a, b in table.nearest_shapes(n, k))
            raise ReferenceDataError(f"--shape {n}x{k}: {table.source.engine} {table.source.engine_version}'s "
                                     f"{table.dtype} table on {table.source.system} did not measure it (nearest: "
                                     f"{near})")


def reference_points(table: GemmTable, shapes: list[tuple[int, int]] | None = None,
                     batches: set[int] | None = None) -> tuple[list[Point], list[str]]:
    """One point per row of ``shapes`` (all the table's when None; only ``batches`` when given), and what was
    dropped (a time no device could take)."""
    chosen = table.shapes() if not shapes else list(shapes)
    _missing(table, chosen)
    points, dropped = [], []
    for n, k in chosen:
        for m in table.batches(n, k):
            if batches is not None and m not in batches:
                continue
            time_s = table.latency_s[(m, n, k)]
            point = Point(op="gemm", dtype=table.dtype, batch=m, n=n, k=k, backend="imported", status="ok",
                          timer="imported", kernel=table.source.kernel, samples_s=(time_s,)) \
                if plausible_time(_work(table.dtype, m, n, k), time_s) else None
            if point is None:
                dropped.append(f"gemm {table.dtype} batch={m} {n}x{k}: {time_s:.3g} s is too short to be real")
            else:
                points.append(point)
    return points, dropped


def _work(dtype: str, m: int, n: int, k: int):
    from roofline.core.counting import count_work

    return count_work("gemm", dtype, m, n, k)


def reference_result(db: Database, gpu: GpuSpec, engine: str, dtypes: list[str],
                     shapes: list[tuple[int, int]] | None = None, *, tool: dict[str, Any] | None = None,
                     host: dict[str, Any] | None = None, argv: tuple[str, ...] = (),
                     batches: set[int] | None = None) -> Result:
    """The GEMM rows of ``dtypes`` (of ``shapes``, all when None) that ``engine`` ran on ``gpu``, as a result."""
    tables = [GemmTable.read(db, gpu, engine, dtype) for dtype in dtypes]
    points, warnings = [], []
    for table in tables:
        found, dropped = reference_points(table, shapes, batches)
        points += found
        warnings += dropped
    return as_result(db, gpu, tables, points, warnings, tool=tool, host=host, argv=argv)


def as_result(db: Database, gpu: GpuSpec, tables: list[GemmTable], points: list[Point], warnings: list[str], *,
              tool: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
              argv: tuple[str, ...] = ()) -> Result:
    """Reference points read from ``tables`` (one per dtype) as a result marked as imported from the database."""
    if not points:
        raise ReferenceDataError(f"{db.label}: no {', '.join(t.dtype for t in tables)} GEMM rows to import for "
                                 f"{gpu.sku}")
    first = tables[0].source
    device = {"kind": "cuda", "name": first.device, "sku": gpu.sku}
    kernels = {t.dtype: t.source.kernel for t in tables}
    warnings = warnings + [f"{dtype}: the kernel {kernel} (the database's most measured for it); others left out"
                           for dtype, kernel in kernels.items() if len(kernels) > 1]
    return Result(
        tool={"name": "gpubench", **(tool or {}), "imported_from": f"{db.label}: {first.file}"},
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        argv=argv, host=host or {}, device=device,
        settings={"timer": "imported", "source_file": first.file, "import_warnings": warnings,
                  "reference": first.to_dict()},
        ceilings={"spec": gpu.to_dict()}, points=tuple(points),
        telemetry={"source": "none", "reason": "reference data measured elsewhere has no telemetry"},
        origin="imported",
    )
