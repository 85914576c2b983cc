"""The Slurm path for real: a one-node Slurm on localhost, the array script with CPU sweeps as tasks, and
the comparison job that waits for them.  CI installs Debian's slurm-wlm and munge (.ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roofline.result.io import load_result

pytestmark = pytest.mark.slow  # a whole real run: the slow tier (pytest -m slow)

ROOT = Path(__file__).resolve().parent.parent
SLURM = ROOT / "scripts" / "slurm"


@pytest.fixture
def local_slurm(tmp_path):
    if shutil.which("sbatch") is None or shutil.which("slurmctld") is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs slurm-wlm and munge; sbatch/slurmctld are missing")
        pytest.skip("Slurm is not installed here (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld, slurmd and munged needs root")
    state = tmp_path / "slurm"
    started = subprocess.run([str(SLURM / "local-cluster.sh"), "start", str(state)], capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0, started.stderr
    env = {**os.environ, "SLURM_CONF": started.stdout.strip().splitlines()[-1]}
    try:
        yield env
    finally:
        subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True)
        subprocess.run([str(SLURM / "local-cluster.sh"), "stop", str(state)], capture_output=True)


def test_array_of_cpu_sweeps_then_compare(local_slurm, tmp_path):
    results = tmp_path / "fleet"
    env = {**local_slurm, "GPUBENCH_RESULTS": str(results), "GPUBENCH_DEVICE": "cpu",
           "GPUBENCH": f"{sys.executable} -m microbench.cli", "PYTHONPATH": str(ROOT),
           "GPUBENCH_ARGS": "--op gemv,gemm --dtype fp32 --shape 256x256 --batch 1,2,4 --budget 0.02 --no-ceilings "
                            "--l2 warm"}
    submitted = subprocess.run([str(SLURM / "submit-fleet.sh"), "2", "--gres=none", "--cpus-per-task=1"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    array_id, compare_id = submitted.stdout.split()
    deadline = time.time() + 300
    while time.time() < deadline:
        queue = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout
        if not queue.strip():
            break
        time.sleep(1)
    else:
        pytest.fail(f"jobs still queued after 300 s: {queue}")
    files = sorted(results.glob("*.json"))
    assert [f.name for f in files] == [f"{os.uname().nodename.split('.')[0]}-job{array_id}-task{i}.json"
                                       for i in range(2)]
    for file in files:
        assert all(p.ok for p in load_result(file).points)
    compare = results / "compare"
    assert (compare / "compare.md").exists(), list(tmp_path.glob("*.out"))
    text = (compare / "compare.md").read_text()
    assert "fp32 256x256" in text and "## Fleet" in text
    assert (tmp_path / f"gpubench-compare-{compare_id}.out").exists()
