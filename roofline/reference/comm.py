"""The reference database's all-reduce and all-to-all tables: one collective of a message over N GPUs, for a step
profile's ``comm`` and ``all_to_all`` tables.

The engine's own all-reduce where the database timed it (``comm/<engine>/<version>/custom_allreduce_perf.parquet``:
vLLM's and SGLang's custom all-reduce, TensorRT-LLM's; the CUDA-graph rows where both were timed, as a decode step
runs in a graph), else NCCL's (``comm/nccl/<version>/nccl_perf.parquet``, nccl-tests' ``all_reduce_perf``, in the
version the system's file names).  Convention, read in aiconfigurator's collectors (``collector/collect_nccl.py``:
``message_size = bytes // bytes_per_element``; ``collector/collect_all_reduce.py``: the input tensor holds
``message_size`` elements): ``message_size`` counts elements (fp16 or bf16, two bytes each), ``latency``
milliseconds.  A message is interpolated linearly between the measured sizes that bracket it; one smaller than the
smallest measured takes the smallest's time (an all-reduce of fewer elements is no slower: its latency floor), and
one larger than the largest is refused.

The all-to-all is NCCL's (the same ``nccl_perf.parquet``, ``op_name`` ``alltoall``: nccl-tests' ``alltoall_perf``,
whose size is each rank's whole send buffer, ``1/N`` of it to each peer): the engines' own expert-parallel exchanges
(DeepEP's dispatch and combine in ``comm/<engine>/<version>/moe_a2a_perf.parquet``) are timed per model shape and at
eight GPUs only, and which one an engine runs is a deployment's choice, so they are not read here.  A message past
the largest measured takes that row's time plus the spec sheet's link time for the bytes beyond it (``time_for``).
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.core.interpolate import OutsideGrid, linear
from roofline.reference.database import MS, Database, ReferenceDataError, TableSource, busiest_kernel, median
from roofline.reference.gemm import OutsideTable
from roofline.specs.gpus import GpuSpec, Interconnect

ELEMENT_BYTES = 2  # the tables' fp16 (NCCL's "half") and bf16 rows


@dataclass(frozen=True)
class AllReduceTable:
    """Seconds of one all-reduce over ``ranks`` GPUs by message size in bytes."""

    ranks: int
    source: TableSource
    sizes_bytes: tuple[int, ...]
    time_s: tuple[float, ...]

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, engine: str, ranks: int) -> AllReduceTable:
        system = db.system(gpu)
        try:
            path, version = db.table(system, "comm", engine, "custom_allreduce_perf.parquet")
            rows = db.read(path, ["message_size", "latency", "kernel_source", "device"],
                           {"num_gpus": ranks, "allreduce_dtype": "bfloat16", "op_name": "all_reduce"})
            family, owner = "all-reduce", engine
        except ReferenceDataError:
            rows = {"message_size": []}
        if not rows["message_size"]:  # the engine's own was not timed: NCCL's
            path, version = db.nccl_table(system)
            rows = db.read(path, ["message_size", "latency", "kernel_source", "device"],
                           {"num_gpus": ranks, "nccl_dtype": "half", "op_name": "all_reduce"})
            family, owner = "all-reduce (nccl-tests all_reduce_perf)", "nccl"
        if not rows["message_size"]:
            raise ReferenceDataError(f"{db.label} has no all-reduce over {ranks} GPUs on {system}")
        graph = sorted(k for k in set(rows["kernel_source"]) if "graph" in k.lower())
        kernel = graph[0] if graph else busiest_kernel(rows["kernel_source"])
        by_size: dict[int, list[float]] = {}
        for size, latency, source in zip(rows["message_size"], rows["latency"], rows["kernel_source"], strict=True):
            if source == kernel and latency and latency > 0:
                by_size.setdefault(int(size) * ELEMENT_BYTES, []).append(float(latency) * MS)
        sizes = tuple(sorted(by_size))
        source = TableSource(db.version, system, family, owner, version, db.relative(path), rows["device"][0], kernel)
        return cls(ranks, source, sizes, tuple(sorted(by_size[s])[len(by_size[s]) // 2] for s in sizes))

    def time_for(self, message_bytes: float) -> float:
        """One all-reduce of ``message_bytes`` from each GPU."""
        try:  # smaller than the smallest measured: its time (the latency floor); larger than the largest: refused
            return linear(self.sizes_bytes, self.time_s, message_bytes, below="hold", above="refuse",
                          what="an all-reduce's bytes")
        except OutsideGrid as exc:
            raise OutsideTable(str(exc)) from None


@dataclass(frozen=True)
class AllToAllTable:
    """Seconds of one NCCL all-to-all over ``ranks`` GPUs by the bytes each rank sends (its whole send buffer)."""

    ranks: int
    source: TableSource
    sizes_bytes: tuple[int, ...]
    time_s: tuple[float, ...]

    @classmethod
    def read(cls, db: Database, gpu: GpuSpec, ranks: int) -> AllToAllTable:
        system = db.system(gpu)
        path, version = db.nccl_table(system)
        rows = db.read(path, ["message_size", "latency", "kernel_source", "device"],
                       {"num_gpus": ranks, "nccl_dtype": "half", "op_name": "alltoall"})
        if not rows["message_size"]:
            raise ReferenceDataError(f"{db.label} has no all-to-all over {ranks} GPUs on {system}")
        by_size: dict[int, list[float]] = {}
        for size, latency in zip(rows["message_size"], rows["latency"], strict=True):
            if latency and latency > 0:  # the 2.26.2 table times most sizes twice: their median
                by_size.setdefault(int(size) * ELEMENT_BYTES, []).append(float(latency) * MS)
        sizes = tuple(sorted(by_size))
        source = TableSource(db.version, system, "all-to-all (nccl-tests alltoall_perf)", "nccl", version,
                             db.relative(path), rows["device"][0], busiest_kernel(rows["kernel_source"]))
        return cls(ranks, source, sizes, tuple(median(by_size[s]) for s in sizes))

    def measures(self, message_bytes: float) -> bool:
        """Whether ``message_bytes`` lies within the measured sizes (or below them, at the latency floor)."""
        return message_bytes <= self.sizes_bytes[-1]

    def time_for(self, message_bytes: float, link: Interconnect) -> float:
        """One all-to-all of ``message_bytes`` from each GPU: interpolated between measured sizes, the smallest's time
        below them (the latency floor), and past the largest that row's time plus ``link``'s time for the bytes
        beyond it (its bandwidth term: the measured row already holds the latency)."""
        if self.measures(message_bytes):
            return linear(self.sizes_bytes, self.time_s, message_bytes, below="hold", above="refuse",
                          what="an all-to-all's bytes")
        largest = self.sizes_bytes[-1]
        return self.time_s[-1] + (link.all_to_all_time_s(message_bytes, self.ranks)
                                  - link.all_to_all_time_s(largest, self.ranks))
