"""The CuPy back end: our own STREAM and GEMV kernels (``microbench/timing/kernels/*.cu``) and cuBLAS through
CuPy's ``gemmEx`` / ``gemmStridedBatchedEx`` (``microbench.timing.cupy_cublas``), on the same torch-allocated
inputs and the same CUDA stream as the torch back end, so the same correctness checks apply and the two
back ends see identical data.  Our kernels are graph-timed like torch's; cuBLAS through CuPy cannot be
captured (CuPy refuses it) and is timed eagerly on purpose, which every point records in ``timer``.

Without CuPy (or without a GPU) the back end is unavailable with a one-line reason; nothing else needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microbench.timing import ops
from roofline.core.counting import DTYPE_SIZES

KERNELS = Path(__file__).resolve().parent / "kernels"
SUFFIX = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}
WARPS_PER_BLOCK = 8
# GEMV variants tried per shape; the faster one (timed right here) is kept.
VARIANT_TRIALS = 20


def unavailable_reason(device: dict[str, Any]) -> str | None:
    """Why ``--backend cupy`` cannot run here, or None."""
    if device["kind"] != "cuda":
        return "the CuPy back end needs a CUDA GPU"
    try:
        # CuPy: GPU hosts only, no stubs on PyPI
        import cupy  # noqa: F401  # pyright: ignore[reportMissingImports]
    except ImportError:
        return "CuPy is not installed (pip install 'gpubench-roofline[cupy-cuda12x]' or '[cupy-cuda13x]')"
    except Exception as exc:  # noqa: BLE001 - a broken CuPy install says why in one line
        return f"CuPy does not load: {exc}"
    return None


def kernel_source() -> str:
    """All kernels as one translation unit, common.cuh inlined (NVRTC then needs no include path)."""
    common = (KERNELS / "common.cuh").read_text()
    bodies = [(KERNELS / name).read_text().replace('#include "common.cuh"', "") for name in ("gemv.cu", "stream.cu")]
    return common.replace("#pragma once", "") + "\n".join(bodies)


_MODULES: dict[int, Any] = {}


def module(device_index: int):
    """The compiled RawModule for this device (NVRTC, built for its architecture by CuPy)."""
    if device_index not in _MODULES:
        # CuPy: GPU hosts only, no stubs on PyPI
        import cupy  # pyright: ignore[reportMissingImports]

        with cupy.cuda.Device(device_index):
            _MODULES[device_index] = cupy.RawModule(code=kernel_source(), options=("--std=c++14",))
    return _MODULES[device_index]


_STREAMS: dict[int, Any] = {}


def current_stream(torch):
    """CuPy's view of torch's current stream (cached: one object per stream, made once)."""
    import warnings

    # CuPy: GPU hosts only, no stubs on PyPI
    import cupy  # pyright: ignore[reportMissingImports]

    pointer = torch.cuda.current_stream().cuda_stream
    if pointer not in _STREAMS:
        with warnings.catch_warnings():
            # CuPy 14 deprecates ExternalStream for Stream.from_external, which wants the CUDA stream
            # protocol; a raw pointer from torch works with ExternalStream on every CuPy we support.
            warnings.simplefilter("ignore", DeprecationWarning)
            _STREAMS[pointer] = cupy.cuda.ExternalStream(pointer)
    return _STREAMS[pointer]


def support_problem(spec) -> str | None:
    if spec.op == "gemv":
        if spec.dtype not in SUFFIX:
            return f"our GEMV kernel has no {spec.dtype} variant (fp32, fp16, bf16)"
        if (spec.k * DTYPE_SIZES[spec.dtype][0]) % 16:
            return "our GEMV kernel needs rows of whole 16-byte vectors (K × element size divisible by 16)"
        return None
    from microbench.timing.cupy_cublas import TYPES, UNSUPPORTED

    if spec.dtype not in TYPES:
        return UNSUPPORTED.get(spec.dtype, f"no cuBLAS type for {spec.dtype} through CuPy")
    return None


@dataclass
class CupyWorkload(ops.Workload):
    """The torch back end's operands, launched through CuPy: our GEMV kernel, or cuBLAS (gemmEx)."""

    device_index: int = 0
    variant: str = "warp"
    splits: int = 1
    partial: Any = None
    calls: list = field(default_factory=list)  # one cupy_cublas.GemmCall per rotation copy
    scalars: Any = None

    @property
    def kernel(self) -> str:
        if self.spec.op == "gemv":
            return f"gpubench gemv_{self.variant} ({SUFFIX[self.spec.dtype]}, splits={self.splits})"
        from microbench.timing.cupy_cublas import kernel_name

        return kernel_name(self.spec.op, self.spec.dtype)

    @property
    def eager_only(self) -> bool:
        return self.spec.op != "gemv"  # CuPy refuses cuBLAS calls during stream capture

    def prepare_cublas(self) -> None:
        """Build every copy's call once: the pointers are the tensors' own, checked for layout and dtype."""
        from microbench.timing.cupy_cublas import Scalars, gemm_call

        self.scalars = Scalars()
        self.calls = [gemm_call(self.spec.op, self.spec.dtype, self.weights[i], self.inputs[i], self.outputs[i])
                      for i in range(self.copies)]

    def _gemv(self, i: int, variant: str, splits: int) -> None:
        import numpy as np

        mod, spec = module(self.device_index), self.spec
        sfx = SUFFIX[spec.dtype]
        k16 = np.int64(spec.k * self.weights[i].element_size() // 16)
        blocks = (math.ceil(spec.n / WARPS_PER_BLOCK), splits)
        args_w = (self.weights[i].data_ptr(), self.inputs[i].data_ptr())
        # RawKernel launches on CuPy's current stream: make it torch's (the one being timed or captured).
        with current_stream(self.torch):
            if variant == "warp":
                mod.get_function(f"gemv_warp_{sfx}")(blocks[:1], (32 * WARPS_PER_BLOCK,),
                                                     (*args_w, self.outputs[i].data_ptr(), np.int32(spec.n), k16))
            else:
                mod.get_function(f"gemv_splitk_{sfx}")(blocks, (32 * WARPS_PER_BLOCK,),
                                                       (*args_w, self.partial.data_ptr(), np.int32(spec.n), k16))
                mod.get_function(f"splitk_finish_{sfx}")((math.ceil(spec.n / 256),), (256,),
                                                         (self.partial.data_ptr(), self.outputs[i].data_ptr(),
                                                          np.int32(spec.n), np.int32(splits)))

    def launch(self, i: int) -> None:
        if self.spec.op == "gemv":
            self._gemv(i, self.variant, self.splits)
            return
        from microbench.timing.cupy_cublas import launch

        with current_stream(self.torch):
            launch(self.calls[i], self.scalars)

    def choose_variant(self, sm_count: int) -> None:
        """Time warp-per-row against split-K on this shape and keep the faster (memory-bound either way)."""
        if self.spec.op != "gemv":
            return
        torch = self.torch
        splits = max(2, min(16, math.ceil(2 * 32 * sm_count / max(self.spec.n, 1))))
        self.partial = torch.empty(splits * self.spec.n, device=self.weights[0].device, dtype=torch.float32)
        timings = {}
        for variant, count in (("warp", 1), ("splitk", splits)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._gemv(0, variant, count)
            start.record()
            for n in range(VARIANT_TRIALS):
                self._gemv(n % self.copies, variant, count)
            end.record()
            end.synchronize()
            timings[(variant, count)] = start.elapsed_time(end)
        self.variant, self.splits = min(timings, key=timings.__getitem__)


def build_workload(torch, spec, device: dict[str, Any], copies: int, seed: int, cache: ops.WeightCache,
                   limit_bytes: int | None = None) -> CupyWorkload:
    base = ops.build_workload(torch, spec, f"cuda:{device['index']}", copies, seed, cache, limit_bytes)
    workload = CupyWorkload(base.torch, base.spec, base.weights, base.inputs, base.outputs, base.copies,
                            device_index=device["index"])
    if spec.op == "gemv":
        workload.choose_variant(device.get("sm_count") or 1)
    else:
        workload.prepare_cublas()
    return workload


# --- STREAM kernels for the ceilings ---
STREAM_KERNELS = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "read": 1}  # arrays moved per element


def stream_launcher(torch, kind: str, arrays: list, device_index: int):
    """A launch() for one STREAM kernel over fp32 buffers (each a multiple of 16 bytes)."""
    import numpy as np

    mod = module(device_index)
    n4 = np.int64(arrays[0].numel() // 4)
    sm_blocks = (torch.cuda.get_device_properties(device_index).multi_processor_count * 4,)
    threads = (256,)
    ptr = [a.data_ptr() for a in arrays]
    scalar = np.float32(3.0)
    launches = {
        "copy": ("stream_copy", (ptr[0], ptr[1], n4)),
        "scale": ("stream_scale", (ptr[1], ptr[0], scalar, n4)),
        "add": ("stream_add", (ptr[0], ptr[1], ptr[2], n4)),
        "triad": ("stream_triad", (ptr[2], ptr[0], ptr[1], scalar, n4)),
        "read": ("read_sum", (ptr[0], ptr[3], n4)),
    }
    name, args = launches[kind]
    kernel = mod.get_function(name)

    def launch(i: int) -> None:
        with current_stream(torch):
            kernel(sm_blocks, threads, args)

    return launch
