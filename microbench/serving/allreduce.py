"""Timing the tensor-parallel all-reduce with ``torch.distributed``: N processes on this machine, one per rank,
each summing a ``tokens × hidden`` tensor with the others, over a grid of token counts.

On GPUs the ranks use NCCL, one GPU each; on the CPU gloo over N local processes runs the same path (the same
collective, the same process group, the same timing), so the measuring code is exercised where no GPU is.  A
measured step profile records the medians as its ``comm`` table (``measured: true``); without N GPUs the table
is costed on the matched SKU's spec sheet instead (``roofline.serving.profiles.analytic.comm_tables``).
"""

from __future__ import annotations

import json
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from roofline.core.counting import TP_ALL_REDUCES_PER_LAYER
from roofline.serving.profile_doc import CommTable

BACKENDS = {"cpu": "gloo", "cuda": "nccl"}
# A rank that never joins (a crashed process, a port taken in between) fails the run instead of hanging it.
JOIN_TIMEOUT_S = 60
WARMUP = 2  # the first all-reduces set up the connections and buffers: not what a step pays


@dataclass(frozen=True)
class AllReduceTiming:
    """The median seconds of one all-reduce of ``tokens × hidden`` elements of ``dtype`` over ``ranks`` processes,
    per token count; each repeat is the slowest rank's time (an all-reduce ends when its last rank has the sum)."""

    ranks: int
    hidden: int
    dtype: str
    backend: str
    tokens: tuple[int, ...]
    time_s: tuple[float, ...]

    @property
    def source(self) -> str:
        return f"{self.backend}, {self.ranks} local processes"

    def comm_table(self) -> CommTable:
        return CommTable(ranks=self.ranks, per_layer=TP_ALL_REDUCES_PER_LAYER, measured=True,
                         source=f"measured: {self.source}, {self.dtype}", tokens=self.tokens, time_s=self.time_s)


def measure_all_reduce(ranks: int, hidden: int, tokens: Sequence[int], dtype: str = "bf16", device: str = "cpu",
                       repeats: int = 5) -> AllReduceTiming:
    """Spawn ``ranks`` processes (gloo on ``cpu``, NCCL on ``cuda``: one GPU per rank) and time the all-reduce at
    every token count.  Raises ``RuntimeError`` when a rank fails."""
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException, start_processes

    if ranks < 2:
        raise ValueError("an all-reduce needs at least 2 ranks")
    backend = BACKENDS[device]
    with tempfile.TemporaryDirectory(prefix="gpubench-allreduce-") as folder:
        out = Path(folder) / "times.json"
        args = (ranks, _free_port(), backend, device, dtype, hidden, tuple(tokens), repeats, str(out))
        try:
            start_processes(_rank_main, args=args, nprocs=ranks, join=True, start_method="spawn")
        except (ProcessRaisedException, ProcessExitedException) as exc:
            raise RuntimeError(f"all-reduce over {ranks} {backend} ranks failed: "
                               f"{str(exc).strip().splitlines()[-1]}") from None
        times = json.loads(out.read_text(encoding="utf-8"))
    return AllReduceTiming(ranks, hidden, dtype, backend, tuple(tokens), tuple(times))


def _free_port() -> int:
    """A port nobody listens on now, for rank 0's rendezvous (loopback only: nothing leaves the machine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank_main(rank: int, ranks: int, port: int, backend: str, device: str, dtype: str, hidden: int,
               tokens: tuple[int, ...], repeats: int, out: str) -> None:
    """One rank: join the group, time every token count, and (rank 0) write the medians."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # N ranks share the cores: one thread each keeps them from fighting
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks,
                            timeout=timedelta(seconds=JOIN_TIMEOUT_S))
    try:
        on = torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")
        if device == "cuda":
            torch.cuda.set_device(on)
        medians = [_median_all_reduce_s(dist, torch, on, dtype, count, hidden, repeats) for count in tokens]
        if rank == 0:
            Path(out).write_text(json.dumps(medians), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _median_all_reduce_s(dist, torch, on, dtype: str, tokens: int, hidden: int, repeats: int) -> float:
    import time

    from microbench.timing.ops import torch_dtype

    # What the row-parallel linear writes (``roofline.core.counting.all_reduce_bytes``): bf16 beside fp8 and the
    # weight-only formats.  Zeros: their sum stays finite however often it is reduced (ones would overflow bf16).
    written = dtype if dtype in ("fp32", "tf32", "fp16", "bf16") else "bf16"
    activations = torch.zeros(tokens, hidden, dtype=torch_dtype(torch, written), device=on)

    def sync() -> None:
        if on.type == "cuda":
            torch.cuda.synchronize(on)

    for _ in range(WARMUP):
        dist.all_reduce(activations)
    samples = []
    for _ in range(repeats):
        dist.barrier()  # the ranks start together: a sample times the all-reduce, not a late rank
        sync()
        start = time.perf_counter()
        dist.all_reduce(activations)
        sync()
        samples.append(time.perf_counter() - start)
    slowest = torch.tensor(samples, dtype=torch.float64, device=on)  # NCCL reduces device tensors only
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.cpu().median())


def profile_comm_table(tp: int, device: str, sku: str | None, model, dtype: str, tokens: Sequence[int]
                       ) -> CommTable | None:
    """A measured step profile's all-reduces: timed when ``tp`` ranks of this kind of device are here (the CPU
    always has N local processes; CUDA needs N GPUs), else costed on the matched SKU's spec sheet, else none."""
    if tp <= 1:
        return None
    if device == "cpu" or (device == "cuda" and _cuda_devices() >= tp):
        return measure_all_reduce(tp, model.hidden, tokens, dtype, device).comm_table()
    if sku:
        from roofline.serving.profiles.analytic import comm_tables
        from roofline.specs.gpus import load_gpu_spec
        from roofline.step.launches import StepModel

        return comm_tables(StepModel.of(model, tp, dtype=dtype), load_gpu_spec(sku), tuple(tokens))[0]
    return None


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()
