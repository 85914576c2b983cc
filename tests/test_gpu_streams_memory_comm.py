"""GPU tests of the CUDA-only paths no other test ran on a GPU: CuPy's STREAM kernels for the ceilings,
``--max-memory`` as the caching allocator's limit, the tensor-parallel all-reduce on CUDA devices, and the GPU
memory validate sizes its engine against.  Run with
``pytest -m gpu`` on a CUDA host; skipped elsewhere, saying why.  Never faked."""

from __future__ import annotations

import pytest

from tests.conftest import requires_gpu
from tests.test_gpu import cuda_session

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_cupy_stream_kernels_move_their_bytes_within_what_the_memory_can():
    """Each kernel's bytes (STREAM's arrays moved per element) over its median: above the memory's theoretical
    rate, its byte count is wrong; under a third of it, the kernel is (the H200 ran 3.96 to 4.6 of 4.81 TB/s)."""
    pytest.importorskip("cupy")
    from microbench.sweep.ceilings import measure_cupy_streams

    session = cuda_session(budget_s=0.1)
    theoretical = session.device.get("theoretical_bandwidth_bytes_per_s")
    if not theoretical:
        pytest.skip("NVML gave no memory clock and bus width: no theoretical bandwidth to hold the kernels to")
    kernels = measure_cupy_streams(session)
    assert set(kernels) == {"copy", "scale", "add", "triad", "read"}
    for kind, entry in kernels.items():
        assert entry["timer"] in ("cuda-graph", "cuda-eager"), entry
        assert theoretical / 3 < entry["bytes_per_s"] <= 1.05 * theoretical, (kind, entry["bytes_per_s"], theoretical)


def test_max_memory_caps_the_caching_allocator_on_the_gpu():
    """``--max-memory`` on a GPU is the caching allocator's limit (``Session.apply_memory_cap``): an allocation
    past it is a real out-of-memory error, and a point past it is recorded ``oom``; the cap is lifted after."""
    import torch

    from microbench.points.config import SweepConfig
    from microbench.points.plan import PointSpec
    from microbench.timing.measure import measure_point
    from microbench.timing.observer import SweepObserver
    from microbench.timing.session import open_session

    cap = 2 * 2**30
    session = open_session(SweepConfig(device="cuda", ops=(), budget_s=0.1, max_memory_bytes=cap, save=False),
                           SweepObserver())
    index = session.choice.index
    torch.cuda.empty_cache()
    try:
        session.apply_memory_cap()
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(cap + 2**30, dtype=torch.uint8, device=f"cuda:{index}")
        point = measure_point(session, PointSpec("gemv", "bf16", 1, 32768, 65536))  # 4.3 GB of weights a copy
        assert point.status in ("oom", "skipped"), (point.status, point.reason)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
        torch.cuda.empty_cache()


def test_a_tp_2_all_reduce_is_costed_on_the_spec_sheet_without_two_gpus():
    import torch

    from microbench.serving.allreduce import _cuda_devices, profile_comm_table
    from roofline.specs.models import load_model

    assert _cuda_devices() == torch.cuda.device_count()
    if _cuda_devices() >= 2:
        pytest.skip(f"{_cuda_devices()} GPUs here: the all-reduce is measured (the NCCL test below)")
    table = profile_comm_table(2, "cuda", "h200-sxm", load_model("llama-3-8b"), "bf16", (1, 64))
    assert table is not None and not table.measured and table.ranks == 2


def test_a_tp_2_all_reduce_is_timed_with_nccl_on_two_gpus():
    import torch

    from microbench.serving.allreduce import measure_all_reduce

    if torch.cuda.device_count() < 2:
        pytest.skip(f"an NCCL all-reduce needs two GPUs; this host has {torch.cuda.device_count()}")
    tokens = (1, 64, 4096)
    timing = measure_all_reduce(2, hidden=4096, tokens=tokens, dtype="bf16", device="cuda", repeats=5)
    assert timing.backend == "nccl" and timing.tokens == tokens
    assert all(1e-6 < t < 1e-2 for t in timing.time_s), timing.time_s
    assert timing.time_s[-1] > timing.time_s[0]  # 64 MB against 8 kB: the larger message takes longer
    assert timing.comm_table().measured and "nccl, 2 local processes" in timing.comm_table().source


def test_validate_sizes_its_engine_against_the_gpus_own_memory():
    import torch

    from microbench.serving.validate_sizes import machine_bytes

    session = cuda_session()
    index = session.choice.index
    assert machine_bytes("cuda", index) == torch.cuda.mem_get_info(index)[1] == session.device["memory_bytes"]
