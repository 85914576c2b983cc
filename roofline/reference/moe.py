"""The reference database's fused mixture-of-experts tables: one MoE layer's routed experts on one GPU, for a step
profile's grouped tables.

Convention, read in aiconfigurator's collector (``collector/vllm/collect_moe.py``): a row runs ``num_tokens`` tokens
into a MoE layer of ``num_experts`` experts of ``hidden_size`` × ``inter_size`` (the whole intermediate width:
each GPU holds ``inter_size / moe_tp_size`` of it, and ``num_experts / moe_ep_size`` of the experts), each token
routed to ``topk`` of them by ``distribution`` (``balanced``: gpubench's balanced routing), through the engine's
fused kernel (both grouped GEMMs, the activation between them and the routing's permutations); ``latency``
milliseconds.  The database times the fused layer, gpubench's profile its two grouped GEMMs: the profile splits
each measured time between them in proportion to their own roofline times, and says so.

A table is one model shape, dtype, split and routing of one kernel (the busiest); a token count is interpolated
linearly between the measured ones and refused past them.
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.core.interpolate import OutsideGrid, linear
from roofline.reference.database import MS, Database, ReferenceDataError, TableSource, busiest_kernel
from roofline.reference.gemm import OutsideTable
from roofline.specs.gpus import GpuSpec

# gpubench's dtype -> the database's name for a MoE layer's experts.
MOE_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block", "w4a16": "int4_wo",
              "mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4"}
ROUTINGS = {"balanced": "balanced"}


@dataclass(frozen=True)
class MoeTable:
    source: TableSource
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, dtype: str, hidden: int, intermediate: int, topk: int,
             experts: int, tp: int, ep: int, routing: str) -> MoeTable:
        system = db.system(gpu)
        path, version = db.table(system, "moe", engine, "moe_perf.parquet")
        name, distribution = MOE_DTYPES.get(dtype), ROUTINGS.get(routing)
        if name is None or distribution is None:
            raise ReferenceDataError(f"{db.label} times MoE layers in {', '.join(MOE_DTYPES)} under "
                                     f"{', '.join(ROUTINGS)} routing, not {dtype} under {routing}")
        rows = db.read(path, ["num_tokens", "latency", "kernel_source", "device"],
                       {"moe_dtype": name, "hidden_size": hidden, "inter_size": intermediate, "topk": topk,
                        "num_experts": experts, "moe_tp_size": tp, "moe_ep_size": ep, "distribution": distribution})
        if not rows["num_tokens"]:
            raise ReferenceDataError(f"{db.label} has no {dtype} MoE layer of {experts} experts of {hidden}x"
                                     f"{intermediate}, top-{topk}, TP {tp}, EP {ep} for {engine} {version} on "
                                     f"{system}")
        kernel = busiest_kernel(rows["kernel_source"])
        by_tokens: dict[int, list[float]] = {}
        for tokens, latency, source in zip(rows["num_tokens"], rows["latency"], rows["kernel_source"], strict=True):
            if source == kernel and latency and latency > 0:
                by_tokens.setdefault(int(tokens), []).append(float(latency) * MS)
        grid = tuple(sorted(by_tokens))
        source = TableSource(db.version, system, "moe (the fused layer)", engine, version, db.relative(path),
                             rows["device"][0], kernel)
        return cls(source, grid, tuple(sorted(by_tokens[t])[len(by_tokens[t]) // 2] for t in grid))

    def time_for(self, tokens: float) -> float:
        try:
            return linear(self.tokens, self.time_s, tokens, below="refuse", above="refuse",
                          what="tokens into the MoE layer")
        except OutsideGrid as exc:
            raise OutsideTable(str(exc)) from None
