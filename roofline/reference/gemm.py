"""One GEMM table of the reference database: the latency of ``Y[m, n] = X[m, k] · Wᵀ`` for one SKU, engine and dtype,
and a shape looked up in it.

Convention, read in aiconfigurator's collector (``collector/vllm/collect_gemm.py``: ``RowParallelLinear(
input_size=k, output_size=n)`` run on ``x`` of ``(m, k)``) and in its model code (``ops.GEMM(name, layers, n, k)``
with ``n`` the output features: ``context_qkv_gemm`` has ``n = heads·head_dim/tp + 2·kv_heads·head_dim/tp`` and
``k = hidden``): ``m`` is the tokens, ``n`` the weight's output features and ``k`` its input features, so the
weight is ``W[n, k]`` as ``nn.Linear`` stores it, gpubench's N×K, and ``m`` is gpubench's batch.

A lookup is measured (a row of the table), interpolated (linearly in m, n and k between the measured shapes that
bracket it, as gpubench's own profile tables are read), or split (a matrix wider than the widest measured, ``n``
past it: timed as ``⌈n / n_max⌉`` matrices of an even share of its columns, as a GEMM's column tiles run
independently).  Past the table in ``m`` or ``k``, below it in any dimension, or where a bracketing shape was not
measured, it is refused (``OutsideTable``): never extrapolated without saying so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import product

from roofline.core.interpolate import OutsideGrid, weights
from roofline.reference.database import (
    GEMM_DTYPES,
    MS,
    Database,
    ReferenceDataError,
    TableSource,
    busiest_kernel,
    median,
)
from roofline.specs.gpus import GpuSpec


class OutsideTable(ReferenceDataError):
    """A shape the table does not hold and cannot be read between measured shapes."""


@dataclass(frozen=True)
class Lookup:
    time_s: float
    how: str  # measured | interpolated | split


def _around(grid: tuple[int, ...], x: float, axis: str, what: str) -> tuple[tuple[int, float], ...]:
    """The grid values around ``x`` and their linear weights (``roofline.core.interpolate.weights``)."""
    try:
        return tuple((grid[i], w) for i, w in weights(grid, x, axis))
    except OutsideGrid as exc:
        raise OutsideTable(f"{what}: {exc}") from None


@dataclass(frozen=True)
class GemmTable:
    """One dtype's GEMM latencies in seconds by (m, n, k), of one kernel (the engine's busiest)."""

    dtype: str  # gpubench's
    source: TableSource
    latency_s: dict[tuple[int, int, int], float]

    # The axes are read on every lookup (hundreds per profile): sorted once per table, not once per lookup.
    @cached_property
    def ms(self) -> tuple[int, ...]:
        return tuple(sorted({m for m, _, _ in self.latency_s}))

    @cached_property
    def ns(self) -> tuple[int, ...]:
        return tuple(sorted({n for _, n, _ in self.latency_s}))

    @cached_property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted({k for _, _, k in self.latency_s}))

    def shapes(self) -> list[tuple[int, int]]:
        """Every (n, k) the table holds, in order."""
        return sorted({(n, k) for _, n, k in self.latency_s})

    def batches(self, n: int, k: int) -> list[int]:
        return sorted(m for m, nn, kk in self.latency_s if (nn, kk) == (n, k))

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, dtype: str) -> GemmTable:
        """The ``dtype`` GEMM table of ``engine`` on ``gpu`` (refused in one line when the database lacks it): read
        once per process for each (system, engine, dtype)."""
        return _read_table(db, db.system(gpu), engine, dtype)

    @classmethod
    def _read(cls, db: Database, system: str, engine: str, dtype: str) -> GemmTable:
        name = GEMM_DTYPES.get(dtype)
        path, version = db.table(system, "gemm", engine, "gemm_perf.parquet")
        if name is None:
            raise ReferenceDataError(f"{db.label} times GEMMs in {', '.join(GEMM_DTYPES)}, not {dtype}")
        rows = db.read(path, ["m", "n", "k", "latency", "kernel_source", "device"], {"gemm_dtype": name})
        if not rows["m"]:
            present = sorted(set(db.read(path, ["gemm_dtype"])["gemm_dtype"]))
            raise ReferenceDataError(f"{db.label} has no {dtype} GEMMs of {engine} {version} on {system} (it has "
                                     f"{', '.join(present)})")
        kernel = busiest_kernel(rows["kernel_source"])
        # Most cells hold one row (35,742 rows, 35,742 cells in the H200's bf16 table): a cell's first row is its
        # time, and only a cell measured again takes the median of its rows (read once per process, but the first
        # profile of a command pays it).
        latency_s: dict[tuple[int, int, int], float] = {}
        repeated: dict[tuple[int, int, int], list[float]] = {}
        for m, n, k, latency, source in zip(rows["m"], rows["n"], rows["k"], rows["latency"], rows["kernel_source"],
                                            strict=True):
            if source == kernel and latency is not None and math.isfinite(latency) and latency > 0:
                key = (int(m), int(n), int(k))
                value = float(latency) * MS
                if key in latency_s:
                    repeated.setdefault(key, [latency_s[key]]).append(value)
                else:
                    latency_s[key] = value
        latency_s.update((key, median(values)) for key, values in repeated.items())
        source = TableSource(db.version, system, "gemm", engine, version, db.relative(path), rows["device"][0],
                             kernel)
        return cls(dtype, source, latency_s)

    def lookup(self, m: float, n: float, k: float) -> Lookup:
        """The time of one (m, n, k) GEMM: measured, interpolated, or split (``OutsideTable`` otherwise)."""
        exact = self.latency_s.get((int(m), int(n), int(k))) if (m, n, k) == (int(m), int(n), int(k)) else None
        if exact is not None:
            return Lookup(exact, "measured")
        ns = self.ns
        if n > ns[-1]:
            pieces = math.ceil(n / ns[-1])
            return Lookup(pieces * self.lookup(m, n / pieces, k).time_s, "split")
        what = f"{self.dtype} {m:g}×{n:g}×{k:g} (m×n×k)"
        time = 0.0
        for (mm, wm), (nn, wn), (kk, wk) in product(_around(self.ms, m, "m", what), _around(ns, n, "n", what),
                                                    _around(self.ks, k, "k", what)):
            corner = self.latency_s.get((mm, nn, kk))
            if corner is None:
                raise OutsideTable(f"{what}: the table lacks {mm}×{nn}×{kk}, which brackets it")
            time += wm * wn * wk * corner
        return Lookup(time, "interpolated")

    def nearest_shapes(self, n: int, k: int, count: int = 3) -> list[tuple[int, int]]:
        """The measured (n, k) closest to ``n × k`` (by ratio), for a message about a shape the table lacks."""
        def distance(shape: tuple[int, int]) -> float:
            return abs(math.log(shape[0] / n)) + abs(math.log(shape[1] / k))
        return sorted(self.shapes(), key=distance)[:count]


@lru_cache(maxsize=64)
def _read_table(db: Database, system: str, engine: str, dtype: str) -> GemmTable:
    return GemmTable._read(db, system, engine, dtype)
