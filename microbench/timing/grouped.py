"""A mixture of experts' grouped GEMM on torch: ``experts`` N×K matrices, ``batch`` tokens each routed to ``topk``
of them (``roofline.step.routing``, seeded), every assignment's activation row multiplied by its expert.

The routing is drawn once per point; the tokens' rows are laid out sorted by expert (what an engine's permute
kernel does before the grouped GEMM, not timed here), and one launch multiplies each expert's rows by it:

- ``torch.nn.functional.grouped_mm`` (torch >= 2.10; ``torch._grouped_mm`` before) where this torch has it for the
  dtype on this device: one kernel over every expert, jagged by the routing's ``offs`` (CUTLASS on Hopper);
- otherwise a loop of ``torch.matmul`` per touched expert over the same inputs, as an engine without a grouped
  kernel runs.

Which one ran is the point's ``kernel``.  The choice is made once, by running it before any timing (a kernel that
refuses the shapes or dtype is never met inside a timed sample).  Only the touched experts' weights are read, so
the rotation copies are sized from those bytes.  Correctness: sampled outputs against float64.
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
        offsets = [0]
        for count in self.assignment.counts:
            offsets.append(offsets[-1] + count)
        self.bounds = [(e, offsets[e], offsets[e + 1]) for e in range(experts) if self.assignment.counts[e]]
        self.offs = torch.tensor(offsets[1:], device=device, dtype=torch.int32)
        self.outputs = [torch.empty((rows, spec.n), device=device, dtype=tokens[0].dtype) for _ in range(copies)]
        self.fn, self.kernel = grouped_kernel(torch)

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
            self.fn, self.kernel = None, LOOP_KERNEL
            self.outputs[0] = self.torch.empty_like(self.outputs[1 % self.copies])

    def check(self, seed: int) -> dict[str, Any]:
        """Choose the kernel, poison the output, launch once, compare sampled rows with float64."""
        from microbench.timing.ops import CHECK_COLS, CHECK_ROWS, TOLERANCES

        torch, spec = self.torch, self.spec
        self.choose_kernel()
        self.outputs[0].fill_(float("nan"))
        self.launch(0)
        y = self.outputs[0]
        written = bool(torch.isfinite(y).all().item())
        generator = torch.Generator().manual_seed(seed)
        rows = torch.randperm(y.shape[0], generator=generator)[: min(CHECK_ROWS, y.shape[0])]
        cols = torch.randperm(spec.n, generator=generator)[: min(CHECK_COLS, spec.n)]
        experts = [self.assignment.rows_expert[int(r)] for r in rows]
        x = self.inputs[0].double().cpu()[rows]
        w = self.weights[0].double().cpu()[experts][:, cols, :]  # [rows, cols, K]
        ref = torch.einsum("rk,rck->rc", x, w)
        got = y.double().cpu()[rows][:, cols]
        norm = float(torch.linalg.vector_norm(ref))
        rel_err = float(torch.linalg.vector_norm(got - ref)) / norm if norm > 0 else float("inf")
        rel_err = rel_err if math.isfinite(rel_err) else None
        tolerance = TOLERANCES[spec.dtype]
        return {"rel_err": rel_err, "tolerance": tolerance, "outputs_written": written,
                "passed": written and rel_err is not None and rel_err <= tolerance,
                "reference": "float64 on sampled outputs"}


def touched_bytes(spec, touched: int) -> int:
    """The weight bytes one launch reads: the experts the routing touched."""
    return count_work("grouped", spec.dtype, spec.batch, spec.n, spec.k, spec.experts, spec.topk, touched).weight_bytes


def bytes_per_copy(spec) -> int:
    """One copy's operands: every expert's weights (all are allocated), the assignment rows and their outputs."""
    work = count_work("grouped", spec.dtype, spec.batch, spec.n, spec.k, spec.experts, spec.topk)
    return matrix_weight_bytes(spec.dtype, spec.n, spec.k) * spec.experts + work.activation_bytes + work.output_bytes
