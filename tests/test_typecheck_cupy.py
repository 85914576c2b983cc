"""pyright with CuPy's sources present (a GPU host's view of the code): the CuPy back end type-checks there too.
CI installs them for pyright alone (.ci/run: ``pip install --no-deps --target .pyright-cupy cupy-cuda13x``); the
tests never import CuPy, which needs a GPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CUPY_TYPES = ROOT / ".pyright-cupy"


@pytest.mark.skipif(not (CUPY_TYPES / "cupy" / "cuda" / "__init__.py").exists(),
                    reason="CuPy's sources for pyright: pip install --no-deps --target .pyright-cupy cupy-cuda13x")
def test_the_cupy_backend_type_checks_with_cupy_present():
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent)) or shutil.which("pyright")
    if pyright is None:
        pytest.skip("pyright is in the test extra: pip install -e '.[test]'")
    files = ["microbench/timing/cupy_cublas.py", "microbench/timing/cupy_backend.py"]
    done = subprocess.run([pyright, "--outputjson", *files], capture_output=True, text=True, cwd=ROOT, timeout=300)
    report = json.loads(done.stdout)
    errors = [f"{d['file']}:{d['range']['start']['line'] + 1}: {d['message']}"
              for d in report["generalDiagnostics"] if d["severity"] == "error"]
    assert errors == [], "\n".join(errors)
    assert report["summary"]["filesAnalyzed"] >= len(files)
