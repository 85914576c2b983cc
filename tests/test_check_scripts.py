"""The check scripts' step runner (scripts/check_common.sh): a step cut by its timeout ends everything it started,
also when the step is itself a check with steps of its own (serving_check.sh inside gpu_check.sh)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.conftest import ROOT

COMMON = ROOT / "scripts" / "check_common.sh"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by an orphan's new parent) counts as ended.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc"), reason="reads /proc to see whether a process is still running")
def test_a_nested_check_cut_by_its_callers_timeout_leaves_nothing_running(tmp_path):
    """The outer step allows 2 s; the inner check's step would run 60 s.  GNU timeout gives each step a process
    group of its own and signals that group: an inner check's steps used to escape into groups of their own, so
    the outer timeout ended the inner bash and left its timeout and command running."""
    pid_file = tmp_path / "inner.pid"
    inner = tmp_path / "inner.sh"
    inner.write_text(f'source "{COMMON}" "{tmp_path / "inner"}" inner.log\n'
                     f"step inner 60 bash -c 'echo $$ > \"{pid_file}\"; exec sleep 60'\n")
    outer = tmp_path / "outer.sh"
    outer.write_text(f'source "{COMMON}" "{tmp_path / "outer"}" outer.log\n'
                     f'step outer 2 bash "{inner}"\n'
                     'cat "$STEPS"\n')
    env = {k: v for k, v in os.environ.items() if k != "GPUBENCH_CHECK_NESTED"}
    started = time.monotonic()
    done = subprocess.run(["bash", str(outer)], capture_output=True, text=True, env=env, timeout=120)
    assert "outer      rc=124" in done.stdout, (done.stdout, done.stderr)
    assert time.monotonic() - started < 30
    pid = int(pid_file.read_text())
    try:
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the inner step's command outlived the outer step's timeout"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_check_run_alone_still_times_out_its_step(tmp_path):
    script = tmp_path / "alone.sh"
    script.write_text(f'source "{COMMON}" "{tmp_path / "out"}" alone.log\n'
                      "step slow 1 sleep 30\n"
                      'cat "$STEPS"\n')
    env = {k: v for k, v in os.environ.items() if k != "GPUBENCH_CHECK_NESTED"}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert "slow       rc=124" in done.stdout, done.stdout
