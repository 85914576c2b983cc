"""A non-editable install carries its data: the spec sheets, the model shapes and the CUDA kernels."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_profiles_and_kernels(tmp_path):
    pytest.importorskip("setuptools")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            str(ROOT), "-w", str(tmp_path)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    wheel = next(tmp_path.glob("gpubench_roofline-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for sku in ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "b200", "l4"):
        assert f"gpubench_profiles/gpus/{sku}.toml" in names
    assert "gpubench_profiles/models/llama-3-70b.toml" in names
    for kernel in ("common.cuh", "gemv.cu", "stream.cu"):
        assert f"microbench/timing/kernels/{kernel}" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("from roofline.specs.gpus import load_gpu_specs, profiles_dir;"
            "from roofline.specs.models import load_model;"
            "from microbench.timing.cupy_backend import kernel_source;"
            "print(len(load_gpu_specs()), load_model('llama-2-70b').layers, 'gemv_warp_' in kernel_source(),"
            " profiles_dir())")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    count, layers, kernels, where = run.stdout.split()
    assert int(count) >= 10 and layers == "80" and kernels == "True" and where.startswith(str(site))
