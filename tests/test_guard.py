"""One writer per output, and one answer to SIGINT/SIGTERM (microbench/cli/guard.py), on real processes.

The processes are real ``gpubench`` commands: the lock is the kernel's (flock) and the signals are real
signals, so nothing here is a stand-in for what a user runs into.  A run is "working" once its lock file
exists (taken before anything is written), which is when these tests act on it.
"""

from __future__ import annotations

import json
import os
import re
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
    """Two runs given one -o: the second is refused (both once said 'saved' and the file held half the points)."""
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
    """Not click's 'Aborted!' and exit 1 on SIGINT, nor an empty folder on SIGTERM."""
    out = tmp_path / "sim"
    code_seen, err = _signalled([*SIMULATE, "--requests", "200000", "-o", str(out)], tmp_path, signum,
                                lock_path(out))
    assert code_seen == code, err
    assert f"gpubench: interrupted by {name}; " in err and "Aborted" not in err and "Traceback" not in err
    assert not out.exists() and not lock_path(out).exists()


# SIGINT only: the guard answers both signals in one place (simulate above takes both for real; validate and
# the fleet sweep below take SIGTERM), and each measured decode costs seconds.
@pytest.mark.slow
@pytest.mark.parametrize("signum, code, name", SIGNALS[:1])
def test_a_signal_mid_measured_decode_leaves_no_folder(tmp_path, signum, code, name):
    out = tmp_path / "decode"
    code_seen, err = _signalled(["decode", "--hf-config", str(TINY), "--context", "128", "--batch", "1,4,16,64",
                                 "--device", "cpu", "--dtype", "fp32", "--budget", "2", "-o", str(out)],
                                tmp_path, signum, lock_path(out), after_s=2.0)
    assert code_seen == code, err
    assert f"gpubench: interrupted by {name}; nothing was written\n" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder, no staging folder, no lock


@pytest.mark.slow  # a real engine in a process of its own
def test_a_signal_mid_validate_removes_its_staging_folder_and_leaves_an_existing_folder_as_it_was(tmp_path):
    """validate measures its profile into the staging folder (the partial file there is only the plan: the
    passes' times live in memory until the end, nothing to resume); a signal removes it whole, and the folder
    given, there before, is as it was."""
    out = tmp_path / "val"
    out.mkdir()
    process = _start(["validate", "--hf-config", str(TINY), "--device", "cpu", "--requests", "4",
                      "--calibration-requests", "4", "--prompt", "fixed:4", "--output", "uniform:2:6", "--repeats",
                      "2", "--profile-budget", "2", "-o", str(out)], tmp_path)
    try:
        _wait_for(tmp_path / f".val.partial-{process.pid}" / "profile.json.partial", process)  # its staging
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert f"gpubench: interrupted by SIGTERM; nothing was written ({out} is as it was)" in err, err
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["val"]


def test_a_refused_decode_leaves_no_folder(tmp_path):
    """A refused --tp leaves no -o NEWDIR behind (it was refused after the folder had been made)."""
    out = tmp_path / "new" / "dir"
    result = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                       "--tp", "3", "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "new").exists()


# --- a full disk -------------------------------------------------------------------------------------------------

SMALL_SWEEP = ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "256x256",
               "--batch", "1:1024:x2", "--budget", "0.01", "--no-ceilings"]


@pytest.fixture
def full_disk(tmp_path):
    """A 200 KB tmpfs with 12 KB left: room for a result document and a few points, not a whole sweep.  Needs
    root and mount rights; skipped with the reason elsewhere (the seam tests below check the same lines)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    filler = disk / "filler"
    try:
        filler.write_bytes(bytes(188 * 1024))
        yield disk, filler
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
def test_a_sweep_on_a_full_disk_says_what_is_saved_and_resume_finishes_it(full_disk):
    from roofline.result.io import load_result

    disk, filler = full_disk
    output = disk / "run.json"
    first = subprocess.run([sys.executable, "-m", "microbench.cli", *SMALL_SWEEP, "-o", str(output)],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert first.returncode == 2, first.stderr
    assert "Traceback" not in first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert last.startswith(f"gpubench: error: no space left on the filesystem at {disk}: "), last
    assert last.endswith(f"point(s) are saved in {output}; free space and run gpubench sweep --resume {output}")
    said = int(last.split(": ")[-1].split(" point(s)")[0])
    before = len(load_result(output).points)
    assert 1 <= said <= before  # nothing said saved is lost
    filler.unlink()
    resumed = subprocess.run([sys.executable, "-m", "microbench.cli", "sweep", "--resume", str(output)],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    left = int(resumed.stderr.split(f"resuming {output}: ")[1].split(" point(s) left")[0])
    assert left >= 1 and len(load_result(output).points) == before + left


def test_simulate_on_a_full_disk_is_one_line_and_leaves_no_folder(full_disk):
    disk, _ = full_disk
    out = disk / "sim"
    result = subprocess.run([sys.executable, "-m", "microbench.cli", *SIMULATE, "--requests", "2000", "-o", str(out)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"gpubench: error: no space left on the filesystem at {disk}: {out} was not written; "
                             "free space and run the command again\n")
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # nor its staging folder


def _no_space():
    import errno

    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_sweep_whose_disk_fills_names_the_points_saved_without_a_real_disk(tmp_path, monkeypatch):
    """The seam version of the tmpfs test, for machines without mount rights: the third journal write fails."""
    from roofline.result import journal
    from roofline.result.io import load_result

    real_append, calls = journal.Journal.append, []

    def append(self, entries):
        calls.append(entries)
        if len(calls) == 3:
            raise _no_space()
        real_append(self, entries)

    monkeypatch.setattr(journal.Journal, "append", append)
    output = tmp_path / "run.json"
    result = CliRunner().invoke(main, [*SMALL_SWEEP, "-o", str(output)])
    assert result.exit_code == 2, result.output
    saved = len(load_result(output).points)
    # The message names the filesystem (its mount point) that holds the output.
    named = re.search(r"gpubench: error: no space left on the filesystem at (\S+): ", result.output)
    assert named and tmp_path.is_relative_to(named.group(1)), result.output
    assert (f": {saved} point(s) are saved in {output}; free space and run gpubench sweep --resume {output}"
            in result.output), result.output
    assert saved >= 2


@pytest.mark.parametrize("command, module, name", [
    ([*SIMULATE, "--requests", "5"], "roofline.serving.document", "save_simulation"),
    (["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b"], "roofline.result.io",
     "write_output_file"),
    (["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b"], "roofline.serving.profile_doc",
     "save_profile"),
])
def test_a_full_disk_is_one_line_for_every_command(tmp_path, monkeypatch, command, module, name):
    import importlib

    def full(*args, **kwargs):
        raise _no_space()

    monkeypatch.setattr(importlib.import_module(module), name, full)
    out = tmp_path / "new"
    result = CliRunner().invoke(main, [*command, "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "gpubench: error: no space left on the filesystem at " in result.output, result.output
    assert f"{out} was not written" in result.output and "free space and run the command again" in result.output
    assert not out.exists()


def test_simulate_replaces_an_earlier_simulation_whole_and_keeps_what_a_person_added(tmp_path):
    """--no-report over an old folder must not leave the old report.md beside the new simulation.json; a file
    the user put there (report.md does not show it) is carried into the new folder."""
    out = tmp_path / "sim"
    first = CliRunner().invoke(main, [*SIMULATE[:-1], "--requests", "5", "-o", str(out)])
    assert first.exit_code == 0, first.output
    old = {p.name for p in out.iterdir()}
    assert {"report.md", "report.html"} <= old and any(name.endswith(".png") for name in old)
    (out / "notes.png").write_bytes(b"mine")  # not the report's: report.md does not show it
    again = CliRunner().invoke(main, [*SIMULATE, "--requests", "5", "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.iterdir()) == ["notes.png", "requests.csv", "simulation.json"]
    assert (out / "notes.png").read_bytes() == b"mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sim"]  # no staging or old folder beside it


@pytest.mark.slow
def test_sigterm_to_a_fleet_sweep_reaches_its_children_and_keeps_what_they_saved(tmp_path):
    """--device all: a SIGTERM sent to the parent alone is passed on to each child, which saves what it
    measured; the parent waits for them, says where, and exits 143 without removing anything."""
    from roofline.result.io import load_result

    out = tmp_path / "fleet"
    process = _start(["sweep", "--device", "all", "--quick", "--no-ceilings", "-o", str(out)], tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("*.json.journal")):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the child never started saving"
            time.sleep(0.05)
        time.sleep(1.0)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert f"interrupted by SIGTERM; each device's sweep saved what it measured in {out}" in err, err
    (result,) = out.glob("*.json")
    assert not list(out.glob("*.journal")) and load_result(result).points  # the child folded and ended


def test_a_read_only_command_ends_on_a_signal_with_its_code_too(tmp_path):
    """Not click's 'Aborted!' and exit 1: fit, interrupted while it reads (the handler is checked directly)."""
    import microbench.cli.app as app

    def slow_fit(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises before this ends

    from roofline.analysis import series

    result_file = ROOT / "results" / "cpu-amd-epyc-2core-20261202.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(series, "analyse", slow_fit)
        run = CliRunner().invoke(app.main, ["fit", str(result_file)])
    assert run.exit_code == 130, run.output
    assert "gpubench: interrupted by SIGINT; nothing was written" in run.output


# --- an output folder is always one run's ------------------------------------------------------------------------

DECODE = ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b"]
PLAN = ["--slo", "ttft_p90=2", "--requests", "20"]
# Each folder command twice into one folder: the first run, then a second that differs from it.
FOLDER_RUNS = {
    "simulate": ([*SIMULATE[:-1], "--requests", "5"], [*SIMULATE[:-1], "--requests", "7"]),
    "plan": (["plan", "{profile}", "--rate", "1", *PLAN], ["plan", "{profile}", "--rate", "2", *PLAN]),
    "decode": ([*DECODE, "--batch", "1,2"], [*DECODE, "--batch", "1,4"]),
    "report": (["report", "{first}"], ["report", "{second}"]),
    "compare": (["compare", "{first}"], ["compare", "{second}"]),
}
# The signal for every command; a full disk and an I/O error take the same path out, shown on two.
STOPS = [(command, "signal") for command in FOLDER_RUNS] + [
    (command, how) for command in ("plan", "decode") for how in ("full disk", "I/O error")]


def _inputs(tmp_path: Path) -> dict[str, Path]:
    """A step profile for plan and two small results (the second slower) for report and compare."""
    from roofline.result.io import save_result
    from tests.conftest import make_point, make_result

    profile = tmp_path / "p.json"
    made = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--hf-config", str(TINY),
                                     "-o", str(profile)])
    assert made.exit_code == 0, made.output
    inputs = {"profile": profile}
    for name, time_s in (("first", 2e-5), ("second", 3e-5)):
        inputs[name] = tmp_path / f"{name}.json"
        save_result(make_result([make_point("gemv", "bf16", 1, 4096, 4096, time_s),
                                 make_point("gemm", "bf16", 8, 4096, 4096, time_s * 1.05)]), inputs[name])
    return inputs


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _second_write_fails(monkeypatch, how: str) -> None:
    """The second file the run saves fails as ``how`` says: a real SIGINT to this process, a full disk, or an
    I/O error; the first was written (into the output folder itself, before it was written whole)."""
    import errno

    from roofline.result import io

    real_write, calls = io._atomic_write, []

    def write(path, data):
        calls.append(path)
        if len(calls) == 2:
            if how == "signal":
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises before this ends
            raise OSError(errno.ENOSPC if how == "full disk" else errno.EIO, os.strerror(errno.ENOSPC if how ==
                          "full disk" else errno.EIO), str(path))
        real_write(path, data)

    monkeypatch.setattr(io, "_atomic_write", write)


@pytest.mark.parametrize("command, how", STOPS)
def test_a_run_that_stops_while_writing_leaves_the_earlier_folder_as_it_was(tmp_path, monkeypatch, command, how):
    """A second run into a folder, stopped after its first file was saved: the folder is still wholly the first
    run's (it held the new simulation.json beside the old report, and said 'nothing was written')."""
    inputs = _inputs(tmp_path)
    out = tmp_path / "out"
    first, second = ([arg.format(**inputs) for arg in run] + ["-o", str(out)] for run in FOLDER_RUNS[command])
    assert CliRunner().invoke(main, first).exit_code == 0
    before, beside = _files(out), sorted(p.name for p in tmp_path.iterdir())
    _second_write_fails(monkeypatch, how)
    result = CliRunner().invoke(main, second)
    assert result.exit_code == (130 if how == "signal" else 2), result.output
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == beside  # no staging folder left beside it
    if how == "signal":
        assert f"gpubench: interrupted by SIGINT; nothing was written ({out} is as it was)\n" in result.output
    else:
        said = result.output.strip().splitlines()[-1]
        assert said.startswith("gpubench: error: ") and "Traceback" not in result.output, result.output
        assert (f"{out} was not written ({out} is as it was); free space" in said if how == "full disk" else
                f"{out}: cannot write there (Input/output error) ({out} is as it was)" in said), said
