"""A non-editable install carries every package and its data: the spec sheets, the model shapes and the CUDA kernels.

The wheel is read by an interpreter that cannot see the checkout: ``-S`` skips the site hooks, so the editable
install's finder (which resolves any subpackage from the tree, and hid a package missing from the wheel) is never
loaded; only the extracted wheel and the venv's third-party packages are on its path.
"""

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("setuptools")
    folder = tmp_path_factory.mktemp("wheel")
    # Built from a copy: setuptools builds in the tree and reuses a build/ folder left there, whose stale copy of
    # a package would hide its absence from the package list.
    tree = folder / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv*", ".pyright-cupy", "build", "*.egg-info",
                                                              "__pycache__", "results", "tests", ".ruff_cache",
                                                              ".pytest_cache"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            str(tree), "-w", str(folder)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return next(folder.glob("gpubench_roofline-*.whl"))


def _isolated(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` run on the extracted wheel and the venv's own packages, with no site hooks (no editable finder)."""
    path = f"{site}:{sysconfig.get_paths()['purelib']}:{sysconfig.get_paths()['platlib']}"
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"})


def test_the_wheel_holds_every_package_of_the_tree(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(str(init.parent.relative_to(ROOT)) for top in ("microbench", "roofline")
                      for init in (ROOT / top).rglob("__init__.py") if "__pycache__" not in init.parts)
    assert "roofline/fleet" in packages
    missing = [package for package in packages if f"{package}/__init__.py" not in names]
    assert not missing, f"packages missing from the wheel: {missing}"


def test_the_wheel_holds_profiles_and_kernels(wheel, tmp_path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for sku in ("h100-sxm", "h200-sxm", "a100-sxm-80gb", "b200", "l4"):
        assert f"gpubench_profiles/gpus/{sku}.toml" in names
    assert "gpubench_profiles/models/llama-3-70b.toml" in names
    assert all(f"gpubench_profiles/engines/{engine}.json" in names for engine in ("vllm", "sglang", "trtllm"))
    for kernel in ("common.cuh", "gemv.cu", "stream.cu"):
        assert f"microbench/timing/kernels/{kernel}" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("from roofline.specs.gpus import load_gpu_specs, profiles_dir;"
            "from roofline.specs.models import load_model;"
            "from microbench.timing.cupy_backend import kernel_source;"
            "print(len(load_gpu_specs()), load_model('llama-2-70b').layers, 'gemv_warp_' in kernel_source(),"
            " profiles_dir())")
    run = _isolated(site, code, tmp_path)
    assert run.returncode == 0, run.stderr
    count, layers, kernels, where = run.stdout.split()
    assert int(count) >= 10 and layers == "80" and kernels == "True" and where.startswith(str(site))


def test_every_command_of_the_installed_wheel_starts(wheel, tmp_path):
    """The CLI imports every room at start-up: ``gpubench --help`` from the wheel alone, outside the checkout."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import sys; sys.argv = ['gpubench', '--help'];"
            "from microbench.cli.app import main; main()")
    run = _isolated(site, code, tmp_path)
    assert run.returncode == 0, run.stderr
    for command in ("sweep", "fit", "decode", "profile", "simulate", "plan", "validate", "compare"):
        assert command in run.stdout
