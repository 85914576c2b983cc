"""The mixers' GPU paths on a CUDA GPU: the engines' kernels (flash-linear-attention's Gated DeltaNet, mamba-ssm's
Mamba-2, causal-conv1d's convolution) where installed, held against the float64 definition by each workload's own
check, at the real layers' shapes; the torch references and DSA's sparse attention on the GPU; a state_update point
through measure_point (a CUDA graph of rotated launches).  Skipped without a GPU, and each engine kernel without its
package, saying which."""

from __future__ import annotations

import pytest

from microbench.points.plan import PointSpec
from microbench.timing import ops
from microbench.timing.mixers.recurrent import (
    GPU_KERNELS,
    PromptScanWorkload,
    RecurrentLayer,
    StateUpdateWorkload,
    installed,
)
from microbench.timing.mixers.sparse_attention import SparseAttentionWorkload, SparseLayer
from roofline.core.counting import MixerShape
from tests.conftest import requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]

# Qwen3.5-397B-A17B's Gated DeltaNet and Nemotron-3-Super's Mamba-2 at TP 8 (value x key sizes; head x state sizes).
LAYERS = {"gdn": (128, 128, MixerShape("gdn", 8, groups=2, conv_kernel=4, state_dtype="fp32")),
          "mamba2": (64, 128, MixerShape("mamba2", 16, groups=1, conv_kernel=4, state_dtype="fp32"))}


def _needs(what: str) -> None:
    if installed(what, "cuda") is None:
        module, name = GPU_KERNELS[what]
        pytest.skip(f"{module}.{name} is not installed here (the torch reference runs instead)")


@pytest.mark.parametrize("kind", ["gdn", "mamba2"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_engines_state_update_matches_float64(kind, dtype):
    import torch

    _needs(kind)
    n, k, mixer = LAYERS[kind]
    spec = PointSpec("state_update", dtype, 64, n, k, mixer=mixer)
    workload = StateUpdateWorkload(torch, spec, "cuda", 2, 0, ops.random_tensor, ops.seed_for)
    assert workload.kernel.startswith(GPU_KERNELS[kind][1])
    check = workload.check(1)
    assert check["passed"], check


@pytest.mark.parametrize("kind", ["gdn", "mamba2"])
def test_the_engines_chunked_scan_matches_float64(kind):
    import torch

    _needs(f"{kind}_prompt")
    n, k, mixer = LAYERS[kind]
    workload = PromptScanWorkload(torch, RecurrentLayer.of(n, k, mixer), "bf16", 1000, "cuda", 1, 0,
                                  ops.random_tensor, ops.seed_for)
    assert workload.kernel.startswith(GPU_KERNELS[f"{kind}_prompt"][1])
    check = workload.check(1)
    assert check["passed"], check


def test_the_causal_conv_update_matches_the_torch_one():
    import torch

    _needs("conv")
    n, k, mixer = LAYERS["gdn"]
    spec = PointSpec("state_update", "bf16", 16, n, k, mixer=mixer)
    workload = StateUpdateWorkload(torch, spec, "cuda", 1, 0, ops.random_tensor, ops.seed_for)
    assert "causal_conv1d_update" in workload.kernel
    assert workload.check(1)["passed"]


@pytest.mark.parametrize("q_len, kv_len", [(1, 8192), (256, 4096)])
def test_sparse_attention_on_the_gpu_matches_float64(q_len, kv_len):
    import torch

    layer = SparseLayer.of(512, MixerShape("dsa", 8, rope=64, index_heads=32, index_dim=128, topk=2048))
    workload = SparseAttentionWorkload(torch, layer, "bf16", 4 if q_len == 1 else 1, q_len, kv_len, "cuda", 1, 0,
                                       ops.random_tensor, ops.seed_for)
    check = workload.check(1)
    assert check["passed"], check


@pytest.mark.parametrize("op", ["state_update", "sparse_attention"])
def test_a_mixer_point_is_measured_in_a_cuda_graph(op):
    from microbench.points.config import SweepConfig
    from microbench.timing.measure import measure_point
    from microbench.timing.observer import SweepObserver
    from microbench.timing.session import open_session

    session = open_session(SweepConfig(device="cuda", ops=(), budget_s=0.2, save=False, with_ceilings=False),
                           SweepObserver())
    if op == "state_update":
        n, k, mixer = LAYERS["gdn"]
    else:
        n, k, mixer = 8192, 512, MixerShape("dsa", 8, rope=64, index_heads=32, index_dim=128, topk=2048)
    point = measure_point(session, PointSpec(op, "bf16", 32, n, k, mixer=mixer))
    assert point.ok and point.correct, (point.status, point.reason, point.correctness)
    assert point.timer in ("cuda-graph", "cuda-eager") and point.kernel
