"""The ops on torch: random inputs in rotation copies, one launch, and the correctness check.

Weights are stored as ``nn.Linear`` stores them (W[N, K]) and used as ``x @ W.T``, the layout decode
runs in production.  Outputs are written in place (``out=``) so a launch allocates nothing and can be
captured in a CUDA graph.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import zlib
from dataclasses import dataclass
from typing import Any

from microbench.points.plan import PointSpec
from microbench.timing import block_scaled, weight_only
from roofline.core.counting import count_work, is_weight_only
from roofline.core.units import si_bytes

# Rotation: the weight copies together must be this many times the cache they must not hit.
ROTATION_CACHE_FACTOR = 4
MIN_COPIES = 2
MAX_COPIES = 1024
# Correctness is checked on a sample of outputs against float64: cheap at any batch, exact where it looks.
CHECK_ROWS = 16
CHECK_COLS = 64
CHECK_GROUPS = 8
# Weight-only formats: bf16 activations and output against the exact dequantized weights (measured ~2e-3).
TOLERANCES = {"fp32": 1e-4, "tf32": 2e-3, "fp16": 5e-3, "bf16": 1e-2, "fp8": 1e-2, "w8a16": 1e-2, "w4a16": 1e-2,
              "fp8-block": 1e-2}


class OutOfMemory(MemoryError):
    """A point would go over ``--max-memory`` (the CPU's cap, enforced by this accounting)."""


@contextlib.contextmanager
def matmul_precision(torch, tf32: bool):
    """fp32 points run true fp32 ("ieee"); tf32 points allow TF32 tensor cores.  Restored afterwards.

    Only the ``fp32_precision`` API (torch >= 2.9): once anything in the process (a library, an earlier
    point) has set it, reading the legacy ``allow_tf32`` raises, since torch refuses a mix of the two."""
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = "tf32" if tf32 else "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = previous


def torch_dtype(torch, dtype: str):
    """The element type of a point's activations (and, for plain dtypes, its weights)."""
    if is_weight_only(dtype) or block_scaled.is_block_scaled(dtype):  # activations in, outputs out: bf16
        return torch.bfloat16
    return {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "fp8": getattr(torch, "float8_e4m3fn", None),
    }[dtype]


def support_problem(spec: PointSpec, device: dict[str, Any]) -> str | None:
    """Why this device cannot run the point, or None."""
    if block_scaled.is_block_scaled(spec.dtype):
        return block_scaled.support_problem(spec.dtype, spec.op, spec.n, spec.k, device)
    if is_weight_only(spec.dtype):
        return weight_only.support_problem(spec.dtype, spec.op, spec.n, spec.k, device)
    if spec.dtype == "tf32" and device["kind"] != "cuda":
        return "tf32 is a tensor-core mode of NVIDIA GPUs; the CPU has none"
    if spec.dtype == "fp8":
        if device["kind"] != "cuda":
            return "fp8 e4m3 matmul (torch._scaled_mm) needs a CUDA GPU"
        major, minor = (int(x) for x in device["compute_capability"].split("."))
        if (major, minor) < (8, 9):
            return f"fp8 needs compute capability 8.9 or newer; this GPU is {major}.{minor}"
        if spec.op == "bmm":
            return "no batched fp8 matmul in torch (torch._scaled_mm is 2-D only)"
        if spec.k % 16 or spec.n % 16:
            return "torch._scaled_mm needs N and K divisible by 16"
    return None


def rotation_copies(weight_bytes: int, cache_bytes: int | None, bytes_per_copy: int, memory_cap: float) -> int:
    """Copies so that together they are ``ROTATION_CACHE_FACTOR`` × the cache, within the memory cap."""
    cache = cache_bytes or 0
    wanted = max(MIN_COPIES, math.ceil(ROTATION_CACHE_FACTOR * cache / max(weight_bytes, 1)))
    affordable = int(memory_cap // max(bytes_per_copy, 1))
    return max(1, min(wanted, MAX_COPIES, affordable))


def seed_for(seed: int, *parts: object) -> int:
    """A per-tensor seed from the sweep's seed: the same arguments give the same inputs."""
    return (seed * 1_000_003 + zlib.crc32("/".join(map(str, parts)).encode())) % (2**63)


def random_tensor(torch, shape, dtype: str, device: str, seed: int):
    generator = torch.Generator(device=device).manual_seed(seed)
    if dtype == "fp8":
        values = torch.randn(shape, generator=generator, device=device, dtype=torch.float16)
        return values.to(torch_dtype(torch, "fp8"))
    return torch.randn(shape, generator=generator, device=device, dtype=torch_dtype(torch, dtype))


@dataclass
class Workload:
    """Rotation copies of one point's operands, and how to launch the op on copy ``i``."""

    torch: Any
    spec: PointSpec
    weights: list
    inputs: list
    outputs: list
    copies: int

    def launch(self, i: int) -> None:
        torch, op = self.torch, self.spec.op
        w, x, y = self.weights[i], self.inputs[i], self.outputs[i]
        if isinstance(w, weight_only.QuantizedWeight | block_scaled.BlockScaledWeight):
            self.outputs[i] = w.matmul(torch, x)  # no out= form: the op allocates its output
        elif self.spec.dtype == "fp8":
            one = self._unit_scale
            torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=y)
        elif op == "gemv":
            torch.mv(w, x, out=y)
        elif op == "gemm":
            torch.matmul(x, w.t(), out=y)
        else:
            torch.bmm(x, w.transpose(1, 2), out=y)

    @property
    def _unit_scale(self):
        scale = getattr(self, "_scale", None)
        if scale is None:
            scale = self.torch.ones((), device=self.weights[0].device, dtype=self.torch.float32)
            self._scale = scale
        return scale

    def check(self, seed: int) -> dict[str, Any]:
        """Poison the output, launch once, compare sampled outputs with a float64 reference."""
        torch, spec = self.torch, self.spec
        y = self.outputs[0]
        y.fill_(float("nan"))
        self.launch(0)
        y = self.outputs[0]
        if isinstance(self.inputs[0], tuple):  # a block-scaled GEMM ran on rows padded to a multiple of 4
            y = y[: spec.batch]
        written = bool(torch.isfinite(y).all().item())
        generator = torch.Generator().manual_seed(seed)
        w, x = self.weights[0], self.inputs[0]
        cols = torch.randperm(spec.n, generator=generator)[: min(CHECK_COLS, spec.n)].to(y.device)
        if spec.op == "bmm" and not isinstance(x, tuple):
            groups = torch.randperm(spec.batch, generator=generator)[: min(CHECK_GROUPS, spec.batch)]
            groups = groups.to(w.device)
            ref = torch.einsum(
                "gk,gck->gc", _f64(x[groups, 0, :]), _f64(w[groups][:, cols, :])
            )
            got = _f64(y[groups, 0, :][:, cols])
        else:
            x2 = block_scaled.dequantized_input_f64(x, spec.batch) if isinstance(x, tuple) else x.reshape(-1, spec.k)
            rows = torch.randperm(x2.shape[0], generator=generator)[: min(CHECK_ROWS, x2.shape[0])]
            rows = rows.to(w.device)
            w_rows = w.dequantized_rows_f64(torch, cols) \
                if isinstance(w, weight_only.QuantizedWeight | block_scaled.BlockScaledWeight) \
                else _f64(_take(torch, w, cols))
            ref = _f64(_take(torch, x2, rows.to(x2.device))) @ w_rows.T
            got = _f64(y.reshape(-1, spec.n)[rows][:, cols])
        norm = float(torch.linalg.vector_norm(ref))
        rel_err = float(torch.linalg.vector_norm(got - ref)) / norm if norm > 0 else float("inf")
        if not math.isfinite(rel_err):
            rel_err = None
        tolerance = TOLERANCES[spec.dtype]
        return {
            "rel_err": rel_err,
            "tolerance": tolerance,
            "outputs_written": written,
            "passed": written and rel_err is not None and rel_err <= tolerance,
            "reference": "float64 on sampled outputs" + (", from the dequantized weights"
                                                         if is_weight_only(spec.dtype) else ""),
        }


def _f64(tensor):
    return tensor.float().double().cpu()


def _take(torch, tensor, index):
    """``tensor[index]`` along dim 0; fp8 tensors are indexed through their bytes (no fp8 index kernels)."""
    if tensor.dtype == getattr(torch, "float8_e4m3fn", None):
        return tensor.view(torch.uint8)[index].view(tensor.dtype)
    return tensor[index]


def operand_shapes(spec: PointSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(weight, input, output) tensor shapes of one copy."""
    b, n, k = spec.batch, spec.n, spec.k
    if spec.op == "gemv" and spec.dtype != "fp8" and not is_weight_only(spec.dtype) \
            and not block_scaled.is_block_scaled(spec.dtype):
        return (n, k), (k,), (n,)
    if spec.op == "gemv":  # torch._scaled_mm and the weight-only ops are 2-D only: a GEMV is their M = 1 case
        return (n, k), (1, k), (1, n)
    if spec.op == "gemm":
        return (n, k), (b, k), (b, n)
    return (b, n, k), (b, 1, k), (b, 1, n)


def bytes_per_copy(spec: PointSpec) -> int:
    work = count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k, mixer=spec.mixer)
    return work.weight_bytes + work.activation_bytes + work.output_bytes


class WeightCache:
    """Keeps one series' weight copies alive across its batches: gemv and gemm share them."""

    def __init__(self):
        self.key = None
        self.weights: list = []

    def key_for(self, spec: PointSpec, copies: int, device: str):
        return (spec.dtype, spec.n, spec.k, copies, device) if spec.op != "bmm" else None

    def get(self, torch, spec: PointSpec, copies: int, device: str, seed: int) -> list:
        key = self.key_for(spec, copies, device)
        if key is not None and key == self.key:
            return self.weights
        self.clear()
        shape = operand_shapes(spec)[0]
        if spec.dtype == "fp8-block":
            weights = [block_scaled.make_weight(torch, spec.n, spec.k, device,
                                                seed_for(seed, "w", spec.dtype, shape, i))
                       for i in range(copies)]
        elif is_weight_only(spec.dtype):
            weights = [weight_only.make_weight(torch, spec.dtype, spec.n, spec.k, device,
                                               seed_for(seed, "w", spec.dtype, shape, i), keep_integers=i == 0)
                       for i in range(copies)]
        else:
            weights = [
                random_tensor(torch, shape, spec.dtype, device, seed_for(seed, "w", spec.dtype, shape, i))
                for i in range(copies)
            ]
        if key is not None:
            self.key, self.weights = key, weights
        return weights

    def clear(self) -> None:
        self.key, self.weights = None, []


def build_workload(torch, spec: PointSpec, device: str, copies: int, seed: int, cache: WeightCache,
                   limit_bytes: int | None = None) -> Workload:
    """Allocate the point's operands.  ``limit_bytes`` (CPU ``--max-memory``) is checked before allocating."""
    if limit_bytes is not None and device == "cpu":
        need = copies * bytes_per_copy(spec)
        if is_weight_only(spec.dtype):  # copy 0 keeps its integers, a byte each, for the correctness check
            need += spec.n * spec.k
        if need > limit_bytes:
            raise OutOfMemory(f"needs {si_bytes(need)} for {copies} copies; --max-memory allows "
                              f"{si_bytes(limit_bytes)}")
    _, x_shape, y_shape = operand_shapes(spec)
    weights = cache.get(torch, spec, copies, device, seed)
    # The input seed leaves the back end out: every back end multiplies the same x (a cross-check).
    label = dataclasses.replace(spec, backend="torch").label
    if spec.dtype == "fp8-block":
        inputs = [block_scaled.make_input(torch, spec.batch, spec.k, device, seed_for(seed, "x", label, i))
                  for i in range(copies)]
    else:
        inputs = [random_tensor(torch, x_shape, spec.dtype, device, seed_for(seed, "x", label, i))
                  for i in range(copies)]
    out_dtype = torch.bfloat16 if spec.dtype == "fp8" else torch_dtype(torch, spec.dtype)  # weight-only: bf16
    outputs = [torch.empty(y_shape, device=device, dtype=out_dtype) for _ in range(copies)]
    return Workload(torch, spec, weights, inputs, outputs, copies)
