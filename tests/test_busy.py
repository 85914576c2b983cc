"""Is the CPU busy before a sweep?  The decision rule on recorded readings (load-independent), the
/proc/stat arithmetic through the seam, the CLI's warning and refusal, and one real busy-loop check."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.device import busy as devices
from microbench.device.busy import busy_state, cpu_busy_cores, cpu_busy_reason

TINY_SWEEP = ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "64x64", "--batch", "1",
              "--budget", "0.02", "--no-ceilings"]


@pytest.mark.parametrize("shares, busy", [
    ([1.0, 0.0], True),  # one of two cores fully busy: only 50% of the machine, but a core torch needs
    ([0.5, 0.5], True),  # one busy loop hopping between two cores
    ([0.3, 0.3], True),
    ([0.05, 0.1], False),  # a quiet machine's background
    ([0.0] * 63 + [0.6], True),
    ([0.005] * 64, False),
    (None, False), ([], False),  # no /proc/stat: unknown, not busy
])
def test_the_decision_counts_busy_cores(shares, busy):
    assert (cpu_busy_reason(shares) is not None) is busy


def test_per_core_shares_from_proc_stat_readings():
    # cpu0 spends all 100 jiffies busy, cpu1 10 of 100; the aggregate "cpu" line is ignored.
    readings = iter(["cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 0 50 0 0 0 0 0 0\ncpu1 0 0 10 40 0 0 0 0 0 0\n",
                     "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 200 0 0 50 0 0 0 0 0 0\ncpu1 0 0 20 130 0 0 0 0 0 0\n"])
    slept = []
    shares = cpu_busy_cores(0.3, read_stat=lambda: next(readings), sleep=slept.append)
    assert shares == pytest.approx([1.0, 0.1]) and slept == [0.3]
    assert "1.1 of 2 core(s)" in cpu_busy_reason(shares)


def test_unreadable_proc_stat_is_unknown():
    def broken():
        raise OSError("no /proc")

    assert cpu_busy_cores(0.0, read_stat=broken, sleep=lambda s: None) is None
    assert busy_state({"kind": "cpu"}, busy_cores=lambda: None) == {"busy": False, "why": None}


def test_one_busy_core_of_two_warns_and_require_idle_refuses(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "cpu_busy_cores", lambda interval_s=0.3: [1.0, 0.02])
    refused = CliRunner().invoke(main, [*TINY_SWEEP, "--require-idle", "-o", str(tmp_path / "x.json")])
    assert refused.exit_code == 2 and "--require-idle" in refused.output and "1.0 of 2 core(s)" in refused.output
    assert not (tmp_path / "x.json").exists()
    warned = CliRunner().invoke(main, [*TINY_SWEEP, "-o", str(tmp_path / "y.json")], catch_exceptions=False)
    assert warned.exit_code == 0, warned.output
    assert "WARNING: the device is busy" in warned.output and "1.0 of 2 core(s)" in warned.output


def test_a_quiet_reading_starts_without_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "cpu_busy_cores", lambda interval_s=0.3: [0.01, 0.02])
    quiet = CliRunner().invoke(main, [*TINY_SWEEP, "--require-idle", "-o", str(tmp_path / "x.json")],
                               catch_exceptions=False)
    assert quiet.exit_code == 0, quiet.output
    assert "busy" not in quiet.output


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
def test_a_real_busy_loop_on_one_core_is_seen():
    """Real end to end: a busy loop pinned to one core makes that core read busy, whatever else runs (more
    load only makes it busier), and the rule calls the machine busy."""
    core = min(os.sched_getaffinity(0))
    loop = f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"
    burner = subprocess.Popen([sys.executable, "-c", loop])
    try:
        time.sleep(0.3)
        shares = cpu_busy_cores(0.5)
        assert shares is not None and shares[core] >= 0.8, shares
        assert cpu_busy_reason(shares) is not None
    finally:
        burner.kill()
        burner.wait()
