"""A mixture of experts' grouped GEMM on torch: ``experts`` N×K matrices, ``batch`` tokens each routed to ``topk``
of them (``roofline.step.routing``, seeded), every assignment's activation row multiplied by its expert.

The routing is drawn once per point; the tokens' rows are laid out sorted by expert (what an engine's permute
kernel does before the grouped GEMM, not timed here), and one launch multiplies each expert's rows by it:

- ``torch.nn.functional.grouped_mm`` (torch >= 2.10; ``torch._grouped_mm`` before), jagged by the routing's
  ``offs``.  Which kernel that is depends on the operands (torch 2.11, read in its sources): on CUDA,
  ``_grouped_mm_cuda`` (``aten/src/ATen/native/cuda/GroupedBlas.cpp``) runs its fused CUTLASS kernel only when both
  operands and the output are bf16 on compute capability 9.x or 10.x; every other dtype or GPU, and the CPU, run
  ``_grouped_mm_fallback`` (``ATen/native/GroupedMMUtils.h``, shipped in the wheel): ``offs`` copied to the host,
  then one ``at::mm_out`` per expert.  That copy synchronises, which a CUDA graph cannot capture, so a fallback
  point on CUDA is timed eagerly (one launch per event pair) and its ``kernel`` says both;
- otherwise a loop of ``torch.matmul`` per touched expert over the same inputs, as an engine without a grouped
  kernel runs.

Which one ran is the point's ``kernel``.  The choice is made once, by running it before any timing (a kernel that
refuses the shapes or dtype is never met inside a timed sample).  Only the touched experts' weights are read, so
the rotation copies are sized from those bytes.  Correctness: every output row at sampled columns against float64,
computed where the operands live (only those outputs and their reference reach the host).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import PLAIN_DTYPES, count_work, matrix_weight_bytes
from roofline.step.routing import Routing

GROUPED_KERNEL = "torch.nn.functional.grouped_mm"
PRIVATE_GROUPED_KERNEL = "torch._grouped_mm"
LOOP_KERNEL = "torch.matmul per expert"
# What a grouped kernel's name gains where torch runs its fallback rather than the fused kernel.
FALLBACK = "torch's fallback: torch.mm per expert after copying offs to the host"
EAGER = "timed eagerly: that copy synchronises, which a CUDA graph cannot capture"
# The GPUs torch 2.11's fused grouped kernel runs on (``_scaled_mm_allowed_device(sm90_only, sm100_only)``).
FUSED_MAJORS = (9, 10)
# The dtypes a grouped point runs in: the plain ones torch multiplies directly (fp8 and the quantized formats
# need their own grouped kernels).
GROUPED_DTYPES = ("fp32", "fp16", "bf16")


def support_problem(dtype: str, topk: int, experts: int) -> str | None:
    if dtype not in GROUPED_DTYPES:
        what = "fp8" if dtype in PLAIN_DTYPES else "a quantized format"
        return f"a grouped GEMM in {dtype} needs a grouped kernel for {what}, which is not timed here"
    if not 0 < topk <= experts:
        return f"top-{topk} of {experts} experts is not a routing"
    return None


@dataclass(frozen=True)
class Assignment:
    """One routing's layout: the expert of each assignment row (sorted by expert), each expert's row count, the
    token each row comes from."""

    rows_expert: list[int]
    counts: list[int]
    token_of_row: list[int]

    @property
    def touched(self) -> int:
        return sum(1 for c in self.counts if c)

    @classmethod
    def draw(cls, routing: Routing, experts: int, topk: int, tokens: int, seed: int) -> Assignment:
        chosen = routing.assign(experts, topk, tokens, seed)  # [tokens, topk]
        flat = [(int(e), t) for t, row in enumerate(chosen) for e in row]
        flat.sort()
        counts = [0] * experts
        for e, _ in flat:
            counts[e] += 1
        return cls([e for e, _ in flat], counts, [t for _, t in flat])


def grouped_kernel(torch):
    """The grouped GEMM this torch has, and its name; (None, loop) without one."""
    public = getattr(getattr(torch.nn, "functional", None), "grouped_mm", None)
    if public is not None:
        return public, GROUPED_KERNEL
    private = getattr(torch, "_grouped_mm", None)
    return (private, PRIVATE_GROUPED_KERNEL) if private is not None else (None, LOOP_KERNEL)


def runs_fused(dtype: str, capability_major: int | None) -> bool:
    """Whether torch's grouped GEMM runs its fused kernel on ``dtype`` operands on a GPU of this compute capability
    (None: the CPU), rather than its synchronising fallback: torch 2.11's rule (module docstring)."""
    return dtype == "bf16" and capability_major in FUSED_MAJORS


def kernel_label(name: str, dtype: str, capability_major: int | None) -> tuple[str, bool]:
    """What a grouped launch of ``name`` runs on ``dtype`` operands, as a point names it, and whether it must be timed
    eagerly (torch's fallback on a GPU)."""
    if name == LOOP_KERNEL or runs_fused(dtype, capability_major):
        return name, False
    if capability_major is None:
        return f"{name} ({FALLBACK})", False
    return f"{name} ({FALLBACK}; {EAGER})", True


def capability_major(torch, device) -> int | None:
    """The compute capability's major version of a CUDA device; None for the CPU."""
    return torch.cuda.get_device_capability(device)[0] if device.type == "cuda" else None


def expert_ranges(counts: list[int]) -> list[tuple[int, int, int]]:
    """(expert, first row, end row) of every expert with rows, in the rows' sorted-by-expert layout."""
    ranges, start = [], 0
    for expert, count in enumerate(counts):
        if count:
            ranges.append((expert, start, start + count))
        start += count
    return ranges


class GroupedWorkload:
    """Rotation copies of one grouped point's operands; ``launch(i)`` multiplies copy ``i``."""

    def __init__(self, torch, spec, device: str, copies: int, seed: int, random_tensor, seed_for):
        self.torch, self.spec, self.copies = torch, spec, copies
        experts, topk = spec.experts, spec.topk
        self.assignment = Assignment.draw(Routing.parse(spec.routing), experts, topk, spec.batch,
                                          seed_for(seed, "routing", spec.label))
        rows = len(self.assignment.rows_expert)
        index = torch.tensor(self.assignment.token_of_row, device=device, dtype=torch.long)
        self.weights = [random_tensor(torch, (experts, spec.n, spec.k), spec.dtype, device,
                                      seed_for(seed, "w", spec.dtype, (experts, spec.n, spec.k), i))
                        for i in range(copies)]
        tokens = [random_tensor(torch, (spec.batch, spec.k), spec.dtype, device, seed_for(seed, "x", spec.label, i))
                  for i in range(copies)]
        self.inputs = [x.index_select(0, index).contiguous() for x in tokens]  # one row per assignment
        # What the kernels are given: each expert's rows (the loop), the end offset of every expert (grouped_mm).
        self.bounds = expert_ranges(self.assignment.counts)
        ends = [sum(self.assignment.counts[: e + 1]) for e in range(experts)]
        self.offs = torch.tensor(ends, device=device, dtype=torch.int32)
        self.outputs = [torch.empty((rows, spec.n), device=device, dtype=tokens[0].dtype) for _ in range(copies)]
        self.fn, name = grouped_kernel(torch)
        self.kernel, self.eager_only = kernel_label(name, spec.dtype, capability_major(torch, tokens[0].device))

    def _grouped(self, i: int) -> None:
        assert self.fn is not None  # launch() takes the loop without one
        self.outputs[i] = self.fn(self.inputs[i], self.weights[i].transpose(-2, -1), offs=self.offs)

    def _loop(self, i: int) -> None:
        x, w, y = self.inputs[i], self.weights[i], self.outputs[i]
        for expert, start, end in self.bounds:
            self.torch.matmul(x[start:end], w[expert].t(), out=y[start:end])

    def launch(self, i: int) -> None:
        if self.fn is not None:
            self._grouped(i)
        else:
            self._loop(i)

    def choose_kernel(self) -> None:
        """Run the grouped kernel once, before any timing; where it refuses these operands, the loop times them."""
        if self.fn is None:
            return
        try:
            self._grouped(0)
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            self.fn, self.kernel, self.eager_only = None, LOOP_KERNEL, False
            self.outputs[0] = self.torch.empty_like(self.outputs[1 % self.copies])

    def check(self, seed: int) -> dict[str, Any]:
        """Choose the kernel, poison the output, launch once, and compare every row at sampled columns with float64.

        Every row, not a sample of them: the grouped kernel returns a tensor of its own, so a row it leaves unwritten
        holds whatever that memory held (not the poison), and only its values can show it; the loop writes into the
        poisoned output, where a row it skips stays NaN.  The columns are taken, and the reference computed, on the
        operands' device: the host receives the sampled outputs and their reference only."""
        from microbench.timing.ops import CHECK_COLS, TOLERANCES

        torch, spec = self.torch, self.spec
        self.choose_kernel()
        self.outputs[0].fill_(float("nan"))
        self.launch(0)
        y = self.outputs[0]
        written = bool(torch.isfinite(y).all().item())  # reduced where y lives: one bool reaches the host
        generator = torch.Generator().manual_seed(seed)
        cols = torch.randperm(spec.n, generator=generator)[: min(CHECK_COLS, spec.n)].to(y.device)
        x, w = self.inputs[0], self.weights[0]
        ref = torch.zeros((y.shape[0], cols.shape[0]), dtype=torch.float64, device=y.device)
        for expert, start, end in expert_ranges(self.assignment.counts):  # the routing's rows, not the kernel's
            ref[start:end] = x[start:end].double() @ w[expert].index_select(0, cols).double().T
        got = y.index_select(1, cols).cpu().double()
        ref = ref.cpu()
        norm = float(torch.linalg.vector_norm(ref))
        rel_err = float(torch.linalg.vector_norm(got - ref)) / norm if norm > 0 else float("inf")
        rel_err = rel_err if math.isfinite(rel_err) else None
        tolerance = TOLERANCES[spec.dtype]
        return {"rel_err": rel_err, "tolerance": tolerance, "outputs_written": written,
                "passed": written and rel_err is not None and rel_err <= tolerance,
                "reference": "float64 on every row at sampled columns"}


def touched_bytes(spec, touched: int) -> int:
    """The weight bytes one launch reads: the experts the routing touched."""
    return count_work("grouped", spec.dtype, spec.batch, spec.n, spec.k, spec.experts, spec.topk, touched).weight_bytes


def bytes_per_copy(spec) -> int:
    """One copy's operands: every expert's weights (all are allocated), the assignment rows and their outputs."""
    work = count_work("grouped", spec.dtype, spec.batch, spec.n, spec.k, spec.experts, spec.topk)
    return matrix_weight_bytes(spec.dtype, spec.n, spec.k) * spec.experts + work.activation_bytes + work.output_bytes
