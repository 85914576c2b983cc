"""The reference database's attention tables: one layer's attention on one GPU, for a step profile.

Convention, read in aiconfigurator's collector (``collector/vllm/collect_attn.py``): a ``context_attention`` row
runs ``batch_size`` prompts of ``isl`` tokens each, no cached prefix (``seq_lens = query_lens = isl``); a
``generation_attention`` row decodes one token for each of ``batch_size`` sequences whose KV cache holds ``step``
tokens, the new one included (``seq_lens = step``, ``query_lens = 1``), gpubench's decode context.  ``num_heads``
and ``num_key_value_heads`` are one GPU's (the collector runs one rank's heads), ``latency`` milliseconds of one
layer.  Rows of a sliding window (``window_size`` > 0) are left out: gpubench's tables are full attention's.

A table is one (heads, KV heads, head size, KV dtype) of one kernel (the busiest for it).  A lookup is measured
or interpolated linearly between the measured lengths and batches that bracket it; a decode batch larger than any
measured at a cache length (the collector caps batch × length) is extrapolated linearly in the batch from the two
largest measured there, and the table counts such cells so the profile can say so.  Beyond the measured lengths,
or below the smallest batch, it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roofline.core.interpolate import OutsideGrid, weights
from roofline.reference.database import KV_DTYPES, MS, Database, ReferenceDataError, TableSource, busiest_kernel
from roofline.reference.gemm import OutsideTable
from roofline.specs.gpus import GpuSpec

GENERATION = ("generation_attention", "generation_attention_perf.parquet", "step")
CONTEXT = ("context_attention", "context_attention_perf.parquet", "isl")


def _between(grid: list[int], x: float, what: str) -> tuple[int, int, float]:
    """The measured values around ``x`` and how far along: (lo, hi, fraction); refused outside the grid."""
    try:
        around = weights(grid, x, what)
    except OutsideGrid as exc:
        raise OutsideTable(str(exc)) from None
    (lo, _), (hi, f) = around[0], around[-1]
    return grid[lo], grid[hi], f if hi != lo else 0.0


@dataclass
class AttentionTable:
    """One layer's attention time (s) by (batch, length): length is the prompt (context) or the cache (generation)."""

    kind: str  # context | generation
    source: TableSource
    latency_s: dict[tuple[int, int], float]
    extrapolated: int = field(default=0)  # decode cells read past the measured batches so far

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, kind: str, heads: int, kv_heads: int, head_dim: int,
             kv_dtype: str) -> AttentionTable:
        family_op, filename, length = GENERATION if kind == "generation" else CONTEXT
        system = db.system(gpu)
        path, version = db.table(system, "attention", engine, filename)
        name = KV_DTYPES.get(kv_dtype)
        if name is None:
            raise ReferenceDataError(f"{db.label} times attention with a KV cache in {', '.join(KV_DTYPES)}, "
                                     f"not {kv_dtype}")
        rows = db.read(path, ["batch_size", length, "latency", "kernel_source", "device"],
                       {"num_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
                        "kv_cache_dtype": name, "window_size": 0, "attn_dtype": "bfloat16"})
        if not rows["batch_size"]:
            raise ReferenceDataError(f"{db.label} has no {family_op.replace('_', ' ')} of {heads} heads, "
                                     f"{kv_heads} KV heads of {head_dim} ({kv_dtype} KV) for {engine} {version} "
                                     f"on {system}")
        kernel = busiest_kernel(rows["kernel_source"])
        times: dict[tuple[int, int], list[float]] = {}
        for batch, size, latency, source in zip(rows["batch_size"], rows[length], rows["latency"],
                                                rows["kernel_source"], strict=True):
            if source == kernel and latency and latency > 0:
                times.setdefault((int(batch), int(size)), []).append(float(latency) * MS)
        source = TableSource(db.version, system, f"attention ({family_op})", engine, version, db.relative(path),
                             rows["device"][0], kernel)
        return cls(kind, source, {key: sorted(v)[len(v) // 2] for key, v in times.items()})

    def _at_length(self, batch: float, length: int) -> float:
        """The time at a measured length, interpolated in the batch (extrapolated past the largest measured)."""
        batches = sorted(b for b, s in self.latency_s if s == length)
        if batches and batch > batches[-1] and len(batches) >= 2 and self.kind == "generation":
            self.extrapolated += 1
            (b1, b2) = batches[-2:]
            t1, t2 = self.latency_s[(b1, length)], self.latency_s[(b2, length)]
            return t2 + (batch - b2) * (t2 - t1) / (b2 - b1)
        lo, hi, f = _between(batches, batch, f"batch at length {length}")
        return self.latency_s[(lo, length)] + f * (self.latency_s[(hi, length)] - self.latency_s[(lo, length)])

    def time_s(self, batch: float, length: float) -> float:
        """One layer's time for ``batch`` sequences (prompts) at ``length`` cached (prompt) tokens each."""
        lengths = sorted({s for _, s in self.latency_s})
        lo, hi, f = _between(lengths, length, "decode context" if self.kind == "generation" else "prompt length")
        low = self._at_length(batch, lo)
        return low if hi == lo else low + f * (self._at_length(batch, hi) - low)
