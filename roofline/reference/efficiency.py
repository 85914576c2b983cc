"""How far each matrix's kernel falls short of the spec sheet's roofline, derived from the reference's GEMM curves:
the analytic side's efficiencies, per matrix instead of one flat fraction per SKU.

For a GEMM of ``m`` rows on an ``n × k`` weight, the efficiency is the datasheet roofline's time of that GEMM
(``max(bytes / BW, FLOP / peak)``, ``roofline.core.roof``) over the time the reference measured for it: at one
row it is the fraction of the datasheet's bandwidth that weight streams at (a small matrix reaches far less than a
large one: launch and tail), at many rows the fraction of its peak (a narrow or short matrix fills fewer tiles).
A launch is then timed as its own roofline time over its matrix's efficiency, so a format the database did not
time (w4a16's quarter of the bytes) keeps its own bytes and FLOP and takes the efficiency of the same shape in the
dtype the database did time (its compute dtype's table where it has one, else bf16's), which the basis says.

Shapes outside the table take the efficiency of the nearest shape it measured (each of m, n and k clamped into
its range): an efficiency carried over, never a time extrapolated.  A measured time faster than the datasheet's
roofline (a small weight that stayed in L2 across the collector's six copies) is an efficiency of 1: no launch is
timed faster than the datasheet allows.  Launches that are not GEMMs (attention) read their bytes at the fraction
of bandwidth a one-row GEMM reaches for as many bytes (``memory_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roofline.core.counting import count_work
from roofline.core.interpolate import linear, nearest
from roofline.core.roof import roof_time_s
from roofline.reference.database import GEMM_DTYPES, Database, ReferenceDataError
from roofline.reference.gemm import GemmTable, OutsideTable
from roofline.specs.gpus import GpuSpec


def slower_than_bf16(table: GemmTable, bf16: GemmTable) -> float:
    """The median over the shapes both tables measured of ``table``'s time over bf16's (0: none in common)."""
    ratios = sorted(time_s / bf16.latency_s[key] for key, time_s in table.latency_s.items() if key in bf16.latency_s)
    return ratios[len(ratios) // 2] if ratios else 0.0


def _clamp(value: float, grid: tuple[int, ...]) -> float:
    return min(max(value, grid[0]), grid[-1])


@dataclass
class GemmEfficiency:
    """Per-matrix efficiencies of ``gpu`` from the reference's GEMM tables (by gpubench dtype; ``bf16`` always)."""

    gpu: GpuSpec
    tables: dict[str, GemmTable]
    # dtype -> its table's median time over bf16's on the shapes both measured, for tables set aside as slower
    set_aside: dict[str, float] = field(default_factory=dict)
    _cache: dict[tuple, float] = field(default_factory=dict, repr=False)
    _memory: tuple[tuple[float, ...], tuple[float, ...]] | None = field(default=None, repr=False)

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, dtypes: set[str]) -> GemmEfficiency:
        """bf16's table and each of ``dtypes``' where the database times it (the rest take bf16's)."""
        tables = {"bf16": GemmTable.read(db, gpu, engine, "bf16")}
        set_aside: dict[str, float] = {}
        for dtype in sorted(dtypes - {"bf16"}):
            if dtype in GEMM_DTYPES and gpu.peak_for(dtype):
                try:
                    table = GemmTable.read(db, gpu, engine, dtype)
                except ReferenceDataError:
                    continue  # the database did not time it on this GPU: bf16's efficiencies, said in the basis
                ratio = slower_than_bf16(table, tables["bf16"])
                if ratio > 1.0:  # a format that moves fewer bytes, slower than bf16: that kernel, not the format
                    set_aside[dtype] = ratio
                    continue
                tables[dtype] = table
        return cls(gpu, tables, set_aside)

    def table_for(self, dtype: str) -> GemmTable:
        return self.tables.get(dtype) or self.tables["bf16"]

    def factor(self, dtype: str, m: float, n: int, k: int) -> float:
        """The efficiency (0, 1] of an ``m``-row GEMM on an ``n × k`` weight in ``dtype``'s table."""
        table = self.table_for(dtype)
        key = (table.dtype, m, n, k)
        if key not in self._cache:
            self._cache[key] = self._factor(table, m, n, k)
        return self._cache[key]

    def _factor(self, table: GemmTable, m: float, n: int, k: int) -> float:
        if m < table.ms[0] and table.dtype != "bf16":
            # Fewer rows than this dtype's table measured (fp8-block's start at 32): bf16's measured one, not an
            # efficiency at 32 rows carried down to a decode's one.
            return self._factor(self.tables["bf16"], m, n, k)
        rows, cols, depth = _clamp(m, table.ms), max(n, table.ns[0]), int(_clamp(k, table.ks))
        try:  # a matrix wider than the widest measured: the lookup splits it into measured widths
            measured = table.lookup(rows, cols, depth).time_s
        except OutsideTable:  # a bracketing shape was not measured: the nearest measured one's
            rows = nearest(rows, table.ms)
            cols, depth = nearest(min(cols, table.ns[-1]), table.ns), nearest(depth, table.ks)
            if (rows, cols, depth) not in table.latency_s:
                return self.memory_fraction(count_work("gemm", table.dtype, int(rows), cols, depth).bytes)
            measured = table.latency_s[(int(rows), cols, depth)]
        one, two = count_work("gemm", table.dtype, 1, cols, depth), count_work("gemm", table.dtype, 2, cols, depth)
        # FLOP and bytes are affine in the rows: scaled to a fractional row count (a grouped GEMM's rows per expert).
        flop, nbytes = one.flop * rows, one.bytes + (two.bytes - one.bytes) * (rows - 1)
        roof = float(roof_time_s(flop, nbytes, self.gpu.bandwidth_bytes_per_s, self.gpu.peak_for(table.dtype)))
        return min(1.0, roof / measured)

    def memory_fraction(self, nbytes: float) -> float:
        """The fraction of the datasheet's bandwidth a one-row bf16 GEMM moving ``nbytes`` reaches (piecewise
        linear in log bytes between the table's one-row shapes, the end's fraction past either end)."""
        if self._memory is None:
            self._memory = self._memory_curve()
        sizes, fractions = self._memory
        return linear(sizes, fractions, max(nbytes, 1.0), below="hold", above="hold", log=True)

    def _memory_curve(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        table = self.tables["bf16"]
        by_size: dict[int, list[float]] = {}
        for (m, n, k), time_s in table.latency_s.items():
            if m == 1:
                nbytes = count_work("gemm", "bf16", 1, n, k).bytes
                by_size.setdefault(nbytes, []).append(min(1.0, nbytes / self.gpu.bandwidth_bytes_per_s / time_s))
        sizes = sorted(by_size)
        return (tuple(float(s) for s in sizes),
                tuple(sorted(by_size[s])[len(by_size[s]) // 2] for s in sizes))

    def gemm_floor(self):
        """The fastest one-row GEMM the bf16 table measured on the SKU: no launch of a GEMM kernel is faster (a
        grouped launch the database has no MoE table of is charged at least this)."""
        from roofline.reference.kernels import Floor

        table = self.tables["bf16"]
        (m, n, k), time_s = min(((key, t) for key, t in table.latency_s.items() if key[0] == 1), key=lambda kv: kv[1])
        return Floor(time_s, f"the fastest one-row GEMM of {table.source.describe()} ({n}x{k})")

    def describe(self, dtype: str, example: tuple[int, int] = (8192, 8192)) -> str:
        """One line for a basis: where the efficiencies come from, and what they are on ``example``."""
        table = self.table_for(dtype)
        n, k = example
        low, high = self.factor(dtype, 1, n, k), self.factor(dtype, 4096, n, k)
        if dtype in self.set_aside:
            borrowed = (f" ({dtype} takes {table.dtype}'s: the database's {dtype} GEMMs run a median "
                        f"{self.set_aside[dtype]:.1f}x slower than its bf16 ones on the same shapes, which describes "
                        "that kernel, not the format)")
        elif table.dtype != dtype:
            borrowed = f" ({dtype} takes {table.dtype}'s: the database did not time {dtype} on this GPU)"
        else:
            borrowed = "" if table.ms[0] == 1 else \
                f" (below {table.ms[0]} rows, where its {dtype} table starts, bf16's)"
        return (f"per-matrix efficiencies from {table.source.describe()}{borrowed}: a {n}x{k} weight at "
                f"{100 * low:.0f}% of the datasheet's bandwidth on one row, {100 * high:.0f}% of its {table.dtype} "
                f"peak on 4096")
