"""The w8a16 Triton kernel's planned memory traffic, from its launch plan alone (``triton_w8a16.launch_plan``: the
grid and tiles the launch uses), on the H200 the fixtures recorded, against the bytes ``count_work`` counts for
w8a16 on Llama-3-8B's down_proj (nn.Linear's N×K = 4096×14336).

The model of the kernel's traffic (the one place outside ``roofline/core/counting.py`` that writes bytes down,
because it models what this kernel moves, not what the format needs):

- through L2, every program's loads and stores: its x tile's rows and its weight tile's columns along its share of
  K (masked lanes load nothing), and the output tile it writes, or with a split K its fp32 partial product, which
  the reduction reads back with a scale per output;
- from DRAM: each byte once, where the reuse the launch order plans stays in L2: the programs that share a weight
  tile are adjacent in launch order (M tiles fastest), so they run together when there are no more of them than
  multiprocessors; x, re-read by every column of tiles, stays in L2 when it fits in half of it (the weights stream
  through the other half).  The partial products are charged to DRAM both ways.

L2 loads within 1.5× of the counted bytes are asked of the memory-bound batches (M = 1 and 16), where they would
add to the time.  At M = 128 and 512 no tiled GEMM can: its tiles read the weights once per row of tiles and x once
per column, M·N·K·(2/BLOCK_N + 1/BLOCK_M) bytes, several times the counted bytes for any tile of 64-128; there the
kernel must read no more than the widest tile the plan allows (128×128, K unsplit) would, within the same 1.5×."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from roofline.core.counting import count_work
from tests.conftest import ROOT

pytest.importorskip("triton", reason="triton is in the test extra: pip install -e '.[test]'")

from microbench.timing.triton_w8a16 import LaunchPlan, launch_plan  # noqa: E402

N, K = 4096, 14336
BATCHES = (1, 16, 128, 512)
BOUND = 1.5


@dataclass(frozen=True)
class Traffic:
    l2_bytes: int
    dram_bytes: int


def h200() -> dict:
    return json.loads((ROOT / "tests" / "data" / "h200" / "first-run-sweep.json").read_text())["device"]


def traffic(plan: LaunchPlan, sms: int, l2_cache_bytes: int) -> Traffic:
    """What ``plan`` moves (module docstring): int8 weights, bf16 x, scales and output, fp32 partial products."""
    m, n, k = plan.m, plan.n, plan.k
    weights, x, scales, y = n * k, 2 * m * k, 2 * n, 2 * m * n
    if plan.kernel == "gemv":  # every program reads all of x and its rows' weights and scales, writes its outputs
        return Traffic(l2_bytes=weights + plan.tiles_n * x + scales + y, dram_bytes=weights + x + scales + y)
    partials = 4 * plan.split_k * m * n if plan.split_k > 1 else 0
    # The split K's reduction reads every partial product and a scale per output; unsplit, each tile its scales.
    scale_loads = 2 * m * n if plan.split_k > 1 else plan.tiles_m * scales
    l2 = plan.tiles_m * weights + plan.tiles_n * x + scale_loads + 2 * partials + y
    weight_reads = -(-plan.tiles_m // sms)  # the programs sharing a weight tile, one wave at a time
    x_reads = 1 if x <= l2_cache_bytes // 2 else plan.tiles_n
    dram = weight_reads * weights + x_reads * x + scales + 2 * partials + y
    return Traffic(l2_bytes=l2, dram_bytes=dram)


def counted_bytes(m: int) -> int:
    return count_work("gemv" if m == 1 else "gemm", "w8a16", m, N, K).bytes


@pytest.mark.parametrize("m", BATCHES)
def test_the_kernel_moves_at_most_half_again_the_counted_bytes_from_dram(m):
    device = h200()
    plan = launch_plan(m, N, K, device["sm_count"])
    planned = traffic(plan, device["sm_count"], device["l2_cache_bytes"])
    assert planned.dram_bytes <= BOUND * counted_bytes(m), (plan, planned, counted_bytes(m))


@pytest.mark.parametrize("m", BATCHES)
def test_the_kernel_reads_from_l2_no_more_than_a_memory_bound_launch_or_the_widest_tile_allows(m):
    device = h200()
    sms, l2 = device["sm_count"], device["l2_cache_bytes"]
    plan = launch_plan(m, N, K, sms)
    planned = traffic(plan, sms, l2)
    if m <= 16:
        assert planned.l2_bytes <= BOUND * counted_bytes(m), (plan, planned, counted_bytes(m))
    else:
        widest = traffic(replace(plan, block_m=128, block_n=128, split_k=1), sms, l2)
        assert planned.l2_bytes <= BOUND * widest.l2_bytes, (plan, planned, widest)


def test_the_plan_this_kernel_had_fails_the_model():
    """The tiling the issue measured (BLOCK_N shrunk to 16 to fill the GPU, every program re-reading all of x:
    ~940 MB through L2 at M = 128) is what the model exists to catch."""
    device = h200()
    sms, l2 = device["sm_count"], device["l2_cache_bytes"]
    old = LaunchPlan("gemm", 128, N, K, block_m=128, block_n=16, block_k=64, split_k=1, num_warps=4, num_stages=4)
    planned = traffic(old, sms, l2)
    assert 900e6 < planned.l2_bytes < 1100e6
    assert planned.l2_bytes > BOUND * traffic(replace(old, block_n=128), sms, l2).l2_bytes
    # and at M = 16 the old tile (16 wide, 256 programs) read x 256 times: three times the counted bytes
    old16 = replace(old, m=16, block_m=16)
    assert traffic(old16, sms, l2).l2_bytes > 2.5 * counted_bytes(16)
