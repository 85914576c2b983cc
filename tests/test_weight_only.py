"""The weight-only formats on torch's real kernels, on the CPU: layout, bytes, correctness check, support."""

import pytest
import torch

from microbench.points.plan import PointSpec, build_plan
from microbench.timing import ops, weight_only
from roofline.core.counting import count_work

CPU = {"kind": "cpu"}


def _workload(dtype: str, op: str = "gemm", batch: int = 4, n: int = 256, k: int = 512):
    spec = PointSpec(op, dtype, batch, n, k)
    return ops.build_workload(torch, spec, "cpu", copies=2, seed=3, cache=ops.WeightCache())


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16"])
@pytest.mark.parametrize("op, batch", [("gemv", 1), ("gemm", 1), ("gemm", 24)])
def test_the_kernel_matches_float64_from_the_dequantized_weights(dtype, op, batch):
    workload = _workload(dtype, op, batch)
    check = workload.check(seed=7)
    assert check["passed"] and check["outputs_written"], check
    assert check["rel_err"] < 5e-3  # bf16 output rounding, measured ~2e-3
    assert "dequantized" in check["reference"]
    assert workload.outputs[0].dtype == torch.bfloat16 and workload.outputs[0].shape == (batch, 256)


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16"])
def test_the_dequantization_formula_is_what_the_kernel_multiplies_by(dtype):
    """Multiplying by unit vectors reads columns of the weight the kernel used: they must equal our float64
    dequantization (up to bf16), and a formula off by the zero or the offset of 8 would not."""
    weight = weight_only.make_weight(torch, dtype, 32, 256, "cpu", seed=1, keep_integers=True)
    columns = torch.tensor([0, 5, 130, 255])
    x = torch.zeros(len(columns), 256, dtype=torch.bfloat16)
    x[torch.arange(len(columns)), columns] = 1.0
    kernel = weight.matmul(torch, x).double()  # [4, 32]: column c of W for each unit vector
    ours = weight.dequantized_rows_f64(torch, torch.arange(32))[:, columns].T
    assert torch.allclose(kernel, ours, rtol=1e-2, atol=1e-2)
    if dtype == "w4a16":  # the same check with the zero left out fails: it is what the test reads
        no_zero = (weight.integers[:, columns].double() - 8) * weight.scales[0, :, 0].double()[:, None]
        assert not torch.allclose(kernel, no_zero.T, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16"])
def test_a_reference_from_other_weights_fails_the_check(dtype):
    workload = _workload(dtype)
    weight = workload.weights[0]
    weight.integers = (15 - weight.integers) if dtype == "w4a16" else -weight.integers  # the kernel keeps its own
    check = workload.check(seed=7)
    assert not check["passed"] and check["rel_err"] > 0.3


@pytest.mark.parametrize("dtype", ["w8a16", "w4a16"])
def test_the_tensors_hold_exactly_the_bytes_counted(dtype):
    n, k = 256, 512
    weight = weight_only.make_weight(torch, dtype, n, k, "cpu", seed=0, keep_integers=False)
    held = sum(t.numel() * t.element_size() for t in (weight.packed, weight.scales))
    assert held == count_work("gemv", dtype, 1, n, k).weight_bytes
    assert weight.integers is None  # only copy 0 keeps them


def test_support_rules_say_why():
    assert "KV cache" in weight_only.support_problem("w8a16", "bmm", 64, 128, CPU)
    assert "multiple" in weight_only.support_problem("w4a16", "gemm", 64, 200, CPU)
    assert "16" in weight_only.support_problem("w4a16", "gemm", 40, 256, CPU)
    assert weight_only.support_problem("w4a16", "gemm", 48, 256, CPU) is None
    volta = {"kind": "cuda", "compute_capability": "7.0"}
    assert "8.0" in weight_only.support_problem("w4a16", "gemm", 64, 256, volta)
    assert "8.0" in weight_only.support_problem("w8a16", "gemm", 60, 100, volta)  # the Triton kernel: bf16 dot
    assert ops.support_problem(PointSpec("bmm", "w4a16", 2, 64, 128), CPU)


def test_weight_only_bmm_is_planned_only_when_asked_for_alone():
    mixed = build_plan(["gemv", "gemm", "bmm"], ["bf16", "w4a16"], [(64, 128)], [(16, 8)], [1, 2])
    assert not [p for p in mixed if p.op == "bmm" and p.dtype == "w4a16"]
    assert [p for p in mixed if p.op == "bmm" and p.dtype == "bf16"]
    alone = build_plan(["bmm"], ["w4a16"], [(64, 128)], [(16, 8)], [1, 2])
    assert [p.dtype for p in alone] == ["w4a16", "w4a16"]


def test_every_format_of_a_shape_is_planned_before_the_next_shape():
    plan = build_plan(["gemm"], ["bf16", "w8a16"], [(64, 128), (32, 128)], [], [1])
    assert [(p.n, p.dtype) for p in plan] == [(64, "bf16"), (64, "w8a16"), (32, "bf16"), (32, "w8a16")]
