"""The CuPy back end: kernels compile for sm_80 and sm_90 with no warning; without CuPy or a GPU it is
unavailable with a one-line reason and nothing else breaks; on a GPU it agrees with torch."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.timing import cupy_backend
from tests.conftest import requires_gpu

NVCC = shutil.which("nvcc")


def _require_nvcc():
    if NVCC is None:
        if os.environ.get("CI"):
            pytest.fail("CI must compile the kernels, and nvcc is not on PATH")
        pytest.skip("nvcc is not installed here")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("source", ["gemv.cu", "stream.cu", "all-in-one"])
def test_kernels_compile_without_warnings(tmp_path, arch, source):
    _require_nvcc()
    if source == "all-in-one":  # what CuPy's RawModule compiles: common.cuh inlined
        path = tmp_path / "all.cu"
        path.write_text(cupy_backend.kernel_source())
    else:
        path = cupy_backend.KERNELS / source
    out = subprocess.run([NVCC, f"-arch={arch}", "-cubin", "-Werror", "all-warnings", "-Xptxas", "-v",
                          str(path), "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr.lower()
    report = out.stderr
    assert " 0 bytes spill stores" in report and "spill stores" in report
    for line in report.splitlines():
        if "spill stores" in line:
            assert "0 bytes spill stores, 0 bytes spill loads" in line, line


def _exported_names(source: str) -> set[str]:
    """The extern "C" symbols of the source, with GEMV_ENTRIES(SUFFIX, KIND) expanded as the preprocessor would."""
    define = re.search(r"#define GEMV_ENTRIES\(SUFFIX, KIND\)(.*?)\n(?!.*\\$)", source, re.S | re.M)
    body = define.group(1) if define else ""
    expanded = re.sub(r"#define GEMV_ENTRIES.*?\n(?=\S)", "", source, flags=re.S)
    for suffix, kind in re.findall(r"^GEMV_ENTRIES\((\w+), (\w+)\)", source, re.M):
        expanded += body.replace("##SUFFIX", suffix).replace("SUFFIX", suffix).replace("KIND", kind)
    return set(re.findall(r'extern "C" __global__ void (\w+)\(', expanded))


class RecordingModule:
    """Stands in for the compiled RawModule: records which kernels the Python side asks for."""

    def __init__(self):
        self.asked = []

    def get_function(self, name):
        self.asked.append(name)
        return lambda *args: None


def test_every_kernel_the_back_end_launches_is_exported(monkeypatch):
    """The names come from running the launch code (every dtype, both GEMV variants, every STREAM kernel),
    the exports from the source with its macro expanded: a kernel renamed on either side fails."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from microbench.points.plan import PointSpec
    from microbench.timing import ops

    recording = RecordingModule()
    monkeypatch.setattr(cupy_backend, "module", lambda index: recording)
    monkeypatch.setattr(cupy_backend, "current_stream", lambda torch: contextlib.nullcontext())
    for dtype in cupy_backend.SUFFIX:
        spec = PointSpec("gemv", dtype, 1, 64, 64, "cupy")
        base = ops.build_workload(torch, spec, "cpu", 1, 0, ops.WeightCache())
        workload = cupy_backend.CupyWorkload(torch, spec, base.weights, base.inputs, base.outputs, 1)
        workload.partial = torch.empty(4 * 64)
        workload._gemv(0, "warp", 1)
        workload._gemv(0, "splitk", 4)
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(
        get_device_properties=lambda index: SimpleNamespace(multi_processor_count=132)))
    arrays = [torch.empty(64) for _ in range(4)]
    for kind in cupy_backend.STREAM_KERNELS:
        cupy_backend.stream_launcher(fake_torch, kind, arrays, 0)(0)
    exported = _exported_names(cupy_backend.kernel_source())
    assert len(recording.asked) == 3 * 3 + 5
    assert set(recording.asked) <= exported, set(recording.asked) - exported
    assert "gemv_warp_bf16" in exported and "gemv_warp_SUFFIX" not in exported


def test_unavailable_with_a_reason():
    assert "CUDA GPU" in cupy_backend.unavailable_reason({"kind": "cpu"})
    try:
        import cupy  # noqa: F401
    except ImportError:
        assert "CuPy is not installed" in cupy_backend.unavailable_reason({"kind": "cuda", "index": 0})


def test_cupy_backend_on_the_cpu_is_a_clear_error_and_torch_still_works(tmp_path):
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--backend", "cupy", "--quick",
                                    "-o", str(tmp_path / "x.json")])
    assert run.exit_code == 2 and "--backend cupy" in run.output
    assert len([line for line in run.output.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "x.json").exists()
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--backend", "numba", "-o", str(tmp_path / "y.json")])
    assert run.exit_code == 2 and "unknown backend" in run.output


def test_support_rules():
    from microbench.points.plan import PointSpec

    assert cupy_backend.support_problem(PointSpec("gemv", "bf16", 1, 64, 64, "cupy")) is None
    assert "16-byte" in cupy_backend.support_problem(PointSpec("gemv", "bf16", 1, 64, 12, "cupy"))
    for dtype in ("bf16", "fp16", "fp32", "tf32"):
        for op in ("gemm", "bmm"):
            assert cupy_backend.support_problem(PointSpec(op, dtype, 4, 64, 64, "cupy")) is None, (op, dtype)
    assert "cublasLt" in cupy_backend.support_problem(PointSpec("gemm", "fp8", 4, 64, 64, "cupy"))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("op, dtype, batch", [("gemv", "bf16", 1), ("gemv", "fp16", 1), ("gemv", "fp32", 1),
                                              ("gemm", "fp16", 16), ("bmm", "fp32", 8), ("gemm", "bf16", 16),
                                              ("gemm", "bf16", 256), ("bmm", "bf16", 8), ("gemm", "fp32", 4)])
def test_cupy_and_torch_agree_on_the_same_inputs(op, dtype, batch):
    pytest.importorskip("cupy")
    import torch

    from microbench.points.config import SweepConfig
    from microbench.points.plan import PointSpec
    from microbench.timing import ops
    from microbench.timing.observer import SweepObserver
    from microbench.timing.session import open_session

    session = open_session(SweepConfig(device="cuda", ops=(), save=False), SweepObserver())
    n, k = (4096, 14336) if op != "bmm" else (1024, 128)
    torch_spec, cupy_spec = PointSpec(op, dtype, batch, n, k), PointSpec(op, dtype, batch, n, k, "cupy")
    ours = cupy_backend.build_workload(torch, cupy_spec, session.device, 1, 0, ops.WeightCache())
    reference = ops.build_workload(torch, torch_spec, "cuda:0", 1, 0, ops.WeightCache())
    assert torch.equal(ours.weights[0], reference.weights[0])  # same seed, same inputs
    assert torch.equal(ours.inputs[0], reference.inputs[0])  # the x seed leaves the back end out
    ours.launch(0)
    reference.launch(0)
    torch.cuda.synchronize()
    a, b = ours.outputs[0].float(), reference.outputs[0].float()
    rel = float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))
    assert rel <= ops.TOLERANCES[dtype], (rel, ours.kernel)
    assert ours.check(1)["passed"]
