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


def test_the_step_table_names_each_failed_cut_or_skipped_step_and_sets_the_exit_status(tmp_path):
    """check_common.sh's table: a failed step points at its lines in the log and shows their last line, a cut one
    says its timeout, a skipped one fails the check, a step left out by design does not; the last line names the
    failures and finish_steps returns 1.  GPUBENCH_CHECK_FAIL (the test hook) fails a step without running it."""
    script = tmp_path / "table.sh"
    script.write_text(f'source "{COMMON}" "{tmp_path / "out"}" table.log\n'
                      "step fine 10 true\n"
                      "step broken 10 bash -c 'echo the reason it broke; exit 3'\n"
                      "step slow 1 sleep 30\n"
                      "step forced 10 bash -c 'touch ran'\n"
                      'skip_step late "10s left, 20s expected"\n'
                      'note_step trimmed "not planned"\n'
                      "finish_steps\n"
                      'echo "rc=$?"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("GPUBENCH_CHECK_NESTED", "GPUBENCH_CHECK_FAIL")}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**env, "GPUBENCH_CHECK_FAIL": "forced"})
    lines = done.stdout.splitlines()
    assert lines[-1] == "rc=1", done.stdout
    assert lines[-2] == "--- FAILED: 4 of 5 steps failed, were cut or were skipped: broken slow forced late ---"
    table = "\n".join(lines)
    assert "fine       rc=0 " in table
    assert "broken     rc=3 " in table and "failed: table.log lines" in table and "| the reason it broke" in table
    assert "slow       rc=124" in table and "cut at its 1 s timeout" in table
    assert "| forced failure: GPUBENCH_CHECK_FAIL" in table
    assert not (ROOT / "ran").exists() and not (tmp_path / "ran").exists()  # the forced step's command never ran
    assert "late       skipped     10s left, 20s expected" in table
    assert "trimmed    not run     not planned" in table

    passing = tmp_path / "passing.sh"
    passing.write_text(f'source "{COMMON}" "{tmp_path / "out2"}" p.log\n'
                       'step fine 10 true\nfinish_steps\necho "rc=$?"\n')
    done = subprocess.run(["bash", str(passing)], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.splitlines()[-2:] == ["--- all 1 steps passed ---", "rc=0"], done.stdout
