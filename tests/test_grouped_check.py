"""The grouped GEMM's correctness check on the CPU: it fails where a kernel leaves output rows unwritten (the
grouped kernel given offsets that stop short, the loop skipping an expert), its float64 work is the sampled
columns of every row and never the experts' weights, and the kernel a point names (torch's fused grouped GEMM, or
its fallback, timed eagerly on a GPU) follows torch 2.11's rule."""

from __future__ import annotations

import pytest

from microbench.points.plan import PointSpec
from microbench.timing import ops
from microbench.timing.grouped import EAGER, FALLBACK, GROUPED_KERNEL, LOOP_KERNEL, GroupedWorkload, kernel_label

torch = pytest.importorskip("torch")

# 16 experts of 96×40, 6 tokens top-2: 12 rows, so the experts' weights (61,440 values) dwarf every row's
# sampled outputs (12 × 64) and any one expert's rows times K.
SPEC = PointSpec("grouped", "fp32", 6, 96, 40, "torch", 16, 2, "balanced")


def workload() -> GroupedWorkload:
    return GroupedWorkload(torch, SPEC, "cpu", 1, seed=5, random_tensor=ops.random_tensor, seed_for=ops.seed_for)


def test_a_correct_launch_passes_with_every_row_written():
    check = workload().check(seed=1)
    assert check["passed"] and check["outputs_written"], check
    assert check["rel_err"] < 1e-6 and check["reference"] == "float64 on every row at sampled columns"


def test_rows_the_grouped_kernel_leaves_unwritten_fail_the_check():
    """torch's grouped GEMM ignores rows past ``offs[-1]`` (its documented contract): given offsets that stop one
    expert short, those rows of the tensor it returns are never written, whatever that memory held."""
    grouped = workload()
    if grouped.fn is None:
        pytest.skip("this torch has no grouped GEMM")
    last_expert, start, _ = grouped.bounds[-1]
    grouped.offs[last_expert] = start  # the last expert's rows are left out of the launch
    check = grouped.check(seed=1)
    assert not check["passed"], check
    assert check["rel_err"] is None or check["rel_err"] > check["tolerance"], check


def test_rows_the_loop_skips_stay_poisoned_and_fail_the_check():
    looped = workload()
    looped.fn, looped.kernel = None, LOOP_KERNEL
    looped.bounds = looped.bounds[:-1]  # a loop that misses its last expert
    check = looped.check(seed=1)
    assert not check["outputs_written"] and not check["passed"], check


def test_the_check_works_in_float64_on_the_sampled_columns_never_on_the_experts_weights():
    """Every float64 tensor the check makes is at most the rows (or the sampled columns of one expert) by K, or
    every row's sampled outputs: never the weights, which it indexes before converting (on a GPU: before any copy to the
    host, which then receives the sampled outputs and their reference only)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    largest = []

    class Float64Sizes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, tuple | list) else (out,):
                if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float64:
                    largest.append(tensor.numel())
            return out

    grouped = workload()
    rows = grouped.inputs[0].shape[0]
    with Float64Sizes():
        check = grouped.check(seed=1)
    assert check["passed"], check
    assert largest and max(largest) <= max(rows, ops.CHECK_COLS) * max(SPEC.k, ops.CHECK_COLS)
    assert max(largest) * 20 < SPEC.experts * SPEC.n * SPEC.k


@pytest.mark.parametrize("dtype, major, fused", [
    ("bf16", 9, True), ("bf16", 10, True),   # Hopper and Blackwell: torch's CUTLASS grouped kernel
    ("fp16", 9, False), ("fp32", 9, False),  # any other dtype: the fallback
    ("bf16", 8, False), ("bf16", 12, False),  # another GPU: the fallback
])
def test_a_gpu_point_names_the_fallback_and_is_timed_eagerly(dtype, major, fused):
    label, eager = kernel_label(GROUPED_KERNEL, dtype, major)
    if fused:
        assert (label, eager) == (GROUPED_KERNEL, False)
    else:
        assert eager and label == f"{GROUPED_KERNEL} ({FALLBACK}; {EAGER})"
        assert "mm per expert" in label and "copying offs to the host" in label and "CUDA graph" in label


def test_the_cpu_runs_the_fallback_and_the_loop_is_named_as_it_is():
    assert kernel_label(GROUPED_KERNEL, "bf16", None) == (f"{GROUPED_KERNEL} ({FALLBACK})", False)
    assert kernel_label(LOOP_KERNEL, "fp16", 9) == (LOOP_KERNEL, False)
    if workload().fn is not None:
        assert workload().kernel.endswith(f"({FALLBACK})") and not workload().eager_only
