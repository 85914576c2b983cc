"""One writer per output, and one answer to SIGINT/SIGTERM (microbench/cli/guard.py), on real processes.

The processes are real ``gpubench`` commands: the lock is the kernel's (flock) and the signals are real
signals, so nothing here is a stand-in for what the issue reproduced.  A run is "working" once its lock file
exists (taken before anything is written), which is when these tests act on it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.cli.guard import lock_path

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "tiny-llama-config.json"
SIMULATE = ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--no-report"]


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "microbench.cli", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _wait_for(path: Path, process: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert process.poll() is None, f"ended before {path} appeared: {process.communicate()[1]}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_writer_of_the_same_output_is_refused_and_the_first_finishes_whole(tmp_path):
    """Issue 23.1: two runs given one -o both said 'saved' and the file held half the points."""
    out = tmp_path / "same"
    first = _start([*SIMULATE, "--requests", "30000", "-o", str(out)], tmp_path)
    try:
        _wait_for(lock_path(out), first)
        second = subprocess.run([sys.executable, "-m", "microbench.cli", *SIMULATE, "--requests", "5",
                                 "-o", str(out)], cwd=tmp_path, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
        _, first_err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 2, second.stderr
    assert f"pid {first.pid}: gpubench simulate" in second.stderr, second.stderr
    assert second.stderr.count("\n") == 1 and "saved" not in second.stdout + second.stderr
    assert first.returncode == 0, first_err
    assert json.loads((out / "simulation.json").read_text())["runs"]
    assert len((out / "requests.csv").read_text().splitlines()) == 30000 + 1  # every request, one run's
    assert not lock_path(out).exists()  # released and removed at the end


def _hold(output: Path):
    """Take ``output``'s lock as another run would (flock excludes another open file, in this process too)."""
    import fcntl

    handle = os.open(lock_path(output), os.O_RDWR | os.O_CREAT)
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(handle, b"4242 gpubench sweep -o elsewhere\n")
    return handle


@pytest.mark.parametrize("command", [
    ["sweep", "--device", "cpu", "--quick", "-o", "{out}"],
    ["ceilings", "--device", "cpu", "-o", "{out}"],
    ["profile", "--hf-config", str(TINY), "--device", "cpu", "-o", "{out}"],
    ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "-o", "{out}"],
    ["validate", "--hf-config", str(TINY), "--device", "cpu", "-o", "{out}"],
    ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "-o", "{out}"],
    [*SIMULATE, "-o", "{out}"],
    ["report", str(ROOT / "results" / "cpu-amd-epyc-2core-20261202.json"), "-o", "{out}"],
], ids=lambda command: command[0] + ("-analytic" if "--analytic" in command else ""))
def test_every_writing_command_refuses_an_output_another_run_holds(tmp_path, command):
    out = tmp_path / "held"
    handle = _hold(out)
    try:
        result = CliRunner().invoke(main, [arg.format(out=out) for arg in command])
    finally:
        os.close(handle)
    assert result.exit_code == 2, result.output
    assert "another gpubench run is writing it (pid 4242: gpubench sweep -o elsewhere)" in result.output
    assert not out.exists()


def _signalled(args: list[str], cwd: Path, signum: int, when: Path, after_s: float = 0.5) -> tuple[int, str]:
    process = _start(args, cwd)
    try:
        _wait_for(when, process)
        time.sleep(after_s)
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    return process.returncode, err


SIGNALS = [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")]


@pytest.mark.parametrize("signum, code, name", SIGNALS)
def test_a_signal_mid_simulate_exits_128_plus_it_and_leaves_no_folder(tmp_path, signum, code, name):
    """Issue 23.2: 'Aborted!' and exit 1 on SIGINT, an empty folder on SIGTERM."""
    out = tmp_path / "sim"
    code_seen, err = _signalled([*SIMULATE, "--requests", "200000", "-o", str(out)], tmp_path, signum,
                                lock_path(out))
    assert code_seen == code, err
    assert f"gpubench: interrupted by {name}; " in err and "Aborted" not in err and "Traceback" not in err
    assert not out.exists() and not lock_path(out).exists()


@pytest.mark.parametrize("signum, code, name", SIGNALS)
def test_a_signal_mid_measured_decode_removes_the_folder_it_made(tmp_path, signum, code, name):
    out = tmp_path / "decode"
    code_seen, err = _signalled(["decode", "--hf-config", str(TINY), "--context", "128", "--batch", "1,4,16,64",
                                 "--device", "cpu", "--dtype", "fp32", "--budget", "2", "-o", str(out)],
                                tmp_path, signum, lock_path(out), after_s=2.0)
    assert code_seen == code, err
    assert f"gpubench: interrupted by {name}; removed the unfinished {out}; nothing was kept" in err, err
    assert not out.exists()


def test_a_signal_mid_validate_removes_its_unfinished_profile_and_keeps_an_existing_folder(tmp_path):
    """The profile validate measures lives in memory until its last pass: the partial file on disk is only
    the plan, nothing to resume, so it goes; a folder that was there before stays, as it was."""
    out = tmp_path / "val"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    code_seen, err = _signalled(["validate", "--hf-config", str(TINY), "--device", "cpu", "--requests", "4",
                                 "--calibration-requests", "4", "--prompt", "fixed:4", "--output", "uniform:2:6",
                                 "--repeats", "2", "--profile-budget", "2", "-o", str(out)],
                                tmp_path, signal.SIGTERM, out / "profile.json.partial")
    assert code_seen == 143, err
    assert f"removed the unfinished {out / 'profile.json.partial'}" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_refused_decode_leaves_no_folder(tmp_path):
    """Issue 23.7: --tp 0 was refused after -o NEWDIR had been made."""
    out = tmp_path / "new" / "dir"
    result = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                       "--tp", "3", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "new").exists()
