"""Faults injected for real: signals into a running CPU sweep, resume, a memory cap, a busy CPU, throttling
through the telemetry seam, hostile result files (fuzzed), and determinism."""

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microbench.cli.app import main
from roofline.result.io import ResultError, load_result, result_from_json, result_to_json

ROOT = Path(__file__).resolve().parent.parent
# --l2 warm: one weight copy a point.  Rotating them past the last-level cache builds up to 500 MB of copies a
# point here, which made these plans minutes long; what these tests check is the signals, saves and resumes.
SLOW_PLAN = ["--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "512x1024", "--batch", "1:32:+1",
             "--budget", "0.05", "--no-ceilings", "--l2", "warm"]


def start_sweep(output: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "microbench.cli", "sweep", *SLOW_PLAN, "-o", str(output), *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def wait_for_points(output: Path, count: int, timeout_s: float = 120) -> int:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            points = len(load_result(output).points)
            if points >= count:
                return points
        except ResultError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} points after {timeout_s} s")


# SIGINT only: SIGTERM reaches the same handler (microbench.timing.interrupt.signal_handlers installs both), and a
# real SIGTERM to a sweep is test_guard's fleet test; each real sweep-and-resume costs seconds.
@pytest.mark.slow
def test_a_signal_saves_and_resume_completes_without_remeasuring(tmp_path):
    signum, code = signal.SIGINT, 130
    output = tmp_path / "run.json"
    process = start_sweep(output)
    wait_for_points(output, 3)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert f"resume with: gpubench sweep --resume {output}" in stderr
    before = load_result(output)
    assert 3 <= len(before.points) < 32
    run = CliRunner().invoke(main, ["sweep", "--resume", str(output)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    after = load_result(output)
    assert sorted(p.batch for p in after.points) == list(range(1, 33))
    assert after.points[:len(before.points)] == before.points  # nothing re-measured
    assert after.settings["resumed"][0]["remaining_points"] == 32 - len(before.points)


def _sweep_signalled_at_its_second_point(tmp_path, monkeypatch, signals: int):
    """A real sweep of three points in this process, sent real SIGINTs while its second point is measured: the
    first as the point starts, a second (when ``signals`` is 2) from the session clock a few samples into it."""
    from microbench.sweep import loop

    real_measure_point = loop.measure_point

    class SignallingClock:
        def __init__(self):
            self.reads = 0

        def now_s(self):
            self.reads += 1
            if self.reads == 5:
                os.kill(os.getpid(), signal.SIGINT)  # the second signal, mid-measurement
            return time.perf_counter()

    def second_point_signalled(session, spec, **how):
        if spec.batch == 2:
            os.kill(os.getpid(), signal.SIGINT)
            if signals == 2:
                session.clock = SignallingClock()
        return real_measure_point(session, spec, **how)

    monkeypatch.setattr(loop, "measure_point", second_point_signalled)
    output = tmp_path / "run.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape",
                                    "256x256", "--batch", "1,2,4", "--budget", "0.02", "--no-ceilings", "--l2",
                                    "warm", "-o", str(output)])
    return run, output


def test_a_first_signal_finishes_the_point_in_flight(tmp_path, monkeypatch):
    run, output = _sweep_signalled_at_its_second_point(tmp_path, monkeypatch, signals=1)
    assert run.exit_code == 130, run.output
    assert "finishing the point in flight" in run.output
    assert [p.batch for p in load_result(output).points] == [1, 2]  # the point in flight kept, no third


def test_a_second_signal_abandons_the_point_in_flight(tmp_path, monkeypatch):
    run, output = _sweep_signalled_at_its_second_point(tmp_path, monkeypatch, signals=2)
    assert run.exit_code == 130, run.output
    assert f"resume with: gpubench sweep --resume {output}" in run.output
    assert [p.batch for p in load_result(output).points] == [1]  # a valid file, the point in flight dropped


def small_result(tmp_path) -> Path:
    output = tmp_path / "small.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "256x256",
                                    "--batch", "1,2", "--budget", "0.02", "--no-ceilings", "--l2", "warm",
                                    "-o", str(output)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return output


def test_resume_refuses_other_settings_unless_forced(tmp_path):
    output = small_result(tmp_path)
    document = json.loads(output.read_text())
    document["settings"]["budget_s"] = 9.0
    document["points"] = document["points"][:1]
    output.write_text(json.dumps(document))
    refused = CliRunner().invoke(main, ["sweep", "--resume", str(output)])
    assert refused.exit_code == 2 and "not the same sweep" in refused.output and "budget_s" in refused.output
    assert len(load_result(output).points) == 1
    forced = CliRunner().invoke(main, ["sweep", "--resume", str(output), "--force"], catch_exceptions=False)
    assert forced.exit_code == 0, forced.output
    result = load_result(output)
    assert len(result.points) == 2 and result.settings["resumed"][0]["forced_over"]


def test_resume_takes_no_plan_options(tmp_path):
    output = small_result(tmp_path)
    run = CliRunner().invoke(main, ["sweep", "--resume", str(output), "--batch", "4"])
    assert run.exit_code == 2 and "--resume takes the plan" in run.output
    run = CliRunner().invoke(main, ["sweep", "--force", "--device", "cpu"])
    assert run.exit_code == 2 and "--force only goes with --resume" in run.output


def test_max_memory_forces_an_oom_point_and_the_sweep_finishes(tmp_path):
    output = tmp_path / "oom.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32",
                                    "--shape", "1024x1024", "--shape", "256x256", "--batch", "1,2,4096",
                                    "--budget", "0.05", "--no-ceilings", "--max-memory", "10M", "-o", str(output)],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.output
    points = [(p.n, p.batch, p.status) for p in load_result(output).points]
    assert points == [(1024, 1, "ok"), (1024, 2, "ok"), (1024, 4096, "oom"),
                      (256, 1, "ok"), (256, 2, "ok"), (256, 4096, "ok")]  # the sweep went on after the oom
    oom = load_result(output).points[2]
    assert "--max-memory" in oom.reason
    assert load_result(output).points[0].rotation_copies * 1024 * 1024 * 4 <= 10e6


def test_bad_max_memory(tmp_path):
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--max-memory", "lots", "-o", str(tmp_path / "x.json")])
    assert run.exit_code == 2 and "is not a size" in run.output


def test_all_cores_busy_makes_require_idle_refuse(tmp_path):  # the warning: tests/test_busy.py
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        time.sleep(0.5)
        refused = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--quick", "--require-idle",
                                            "-o", str(tmp_path / "x.json")])
        assert refused.exit_code == 2 and "busy" in refused.output
        assert not (tmp_path / "x.json").exists()
        from microbench.device.busy import busy_state

        assert busy_state({"kind": "cpu"})["busy"]
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def _recorded_telemetry(monkeypatch, reasons_until_pause: int):
    """Telemetry through the reader seam: ``reasons_until_pause`` in every reading until the sweep's retry
    pause (a seam too), none after it.  Driven by the sweep's own events, not by wall time, so a busy
    machine changes nothing; the sweep itself is real."""
    from microbench.sweep import loop as sweep
    from microbench.telemetry import nvml_reader
    from microbench.telemetry.sampler import Sampler

    state = {"reasons": reasons_until_pause, "pauses": 0}

    class RecordedReader:
        source = "nvml-basic"
        power_note = "recorded"

        def read(self):
            return {"sm_clock_hz": 1.98e9, "clock_event_reasons": state["reasons"], "power_w": 100.0}

        def gpm(self):
            return None

    def fake_start(device, interval_s):
        sampler = Sampler(RecordedReader(), interval_s=0.01)
        sampler.start()
        return sampler, {"source": "nvml-basic", "interval_s": 0.01, "reason": "recorded readings (test)",
                         "min_point_window_s": 0.3}  # long against a starved sampler thread

    def cooled_down(session, seconds):
        state["reasons"], state["pauses"] = 0, state["pauses"] + 1

    monkeypatch.setattr(nvml_reader, "start_telemetry", fake_start)
    monkeypatch.setattr(sweep, "pause", cooled_down)
    return state


def _small_sweep(output):
    return CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape",
                                     "512x512", "--batch", "1,2", "--budget", "0.1", "--no-ceilings", "--l2", "warm",
                                     "-o", str(output)], catch_exceptions=False)


def test_a_throttled_point_is_measured_again_and_both_are_kept(tmp_path, monkeypatch):
    """Thermal slowdown in every reading until the retry pause: the first point is measured again."""
    state = _recorded_telemetry(monkeypatch, 0x20)
    output = tmp_path / "hot.json"
    run = _small_sweep(output)
    assert run.exit_code == 0, run.output
    points = load_result(output).points
    first = [p for p in points if p.batch == 1]
    assert [(p.attempt, p.superseded) for p in first] == [(1, True), (2, False)]
    assert state["pauses"] == 1 and [p.attempt for p in points if p.batch == 2] == [1]
    assert first[0].telemetry["throttled"] and not first[1].telemetry["throttled"]
    assert "sw_thermal_slowdown" in first[0].telemetry["clock_event_reasons"]
    assert "throttled (thermal or hardware slowdown)" not in run.output  # the kept attempts are clean
    from roofline.report.result_report import write_report

    write_report(load_result(output), tmp_path / "report")
    assert "the fit used the second" in (tmp_path / "report" / "report.md").read_text()


def test_a_power_capped_point_is_recorded_and_not_measured_again(tmp_path, monkeypatch):
    state = _recorded_telemetry(monkeypatch, 0x4)  # sw_power_cap: how Hopper runs under sustained load
    output = tmp_path / "capped.json"
    run = _small_sweep(output)
    assert run.exit_code == 0, run.output
    points = load_result(output).points
    assert state["pauses"] == 0 and [(p.batch, p.attempt) for p in points] == [(1, 1), (2, 1)]
    assert all(p.telemetry["power_capped"] and not p.telemetry["throttled"] for p in points)
    assert "2 point(s) power-capped" in run.output and "gemm fp32 512x512 B=1,2" in run.output


# --- hostile files ---

def test_truncated_and_corrupted_files_exit_2(tmp_path):
    good = small_result(tmp_path)
    text = good.read_text()
    cases = {"truncated.json": text[: len(text) // 2], "corrupt.json": text.replace('"points"', '"po\x00ints"', 1),
             "binary.bin": "\udcff"}
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
        for command in (["fit", str(path)], ["report", str(path)]):
            run = CliRunner().invoke(main, command)
            assert run.exit_code == 2, (name, run.output)
            assert run.output.count("\n") == 1 and "gpubench: error:" in run.output


def test_a_huge_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "huge.json"
    with open(path, "wb") as stream:
        stream.truncate(600 * 1024 * 1024)  # sparse: no disk used
    run = CliRunner().invoke(main, ["fit", str(path)])
    assert run.exit_code == 2 and "larger than any result" in run.output


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_loader_fuzz_random_documents(value):
    try:
        result_from_json(json.dumps(value))
    except ResultError as exc:
        assert "\n" not in str(exc)


GOLDEN = json.loads((ROOT / "tests" / "golden" / "result_v1.json").read_text())


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, prefix + (key,))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, prefix + (index,))


PATHS = [p for p in _paths(GOLDEN) if p]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), json_values)
def test_loader_fuzz_mutated_valid_documents(path, replacement):
    document = json.loads(json.dumps(GOLDEN))
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = replacement
    try:
        result = result_from_json(json.dumps(document))
    except ResultError as exc:
        assert "\n" not in str(exc)
        return
    # Whatever loads must save again and load to the same thing.
    assert result_from_json(result_to_json(result)) == result


# --- determinism ---

def test_same_seed_same_plan_and_inputs():
    import torch

    from microbench.points.plan import PointSpec, build_plan
    from microbench.timing import ops

    assert build_plan(["gemm"], ["fp32"], [(64, 32)], [(8, 8)], [1, 4]) == \
        build_plan(["gemm"], ["fp32"], [(64, 32)], [(8, 8)], [1, 4])
    spec = PointSpec("gemm", "fp32", 4, 64, 32)
    first = ops.build_workload(torch, spec, "cpu", 2, 7, ops.WeightCache())
    again = ops.build_workload(torch, spec, "cpu", 2, 7, ops.WeightCache())
    other = ops.build_workload(torch, spec, "cpu", 2, 8, ops.WeightCache())
    assert all(torch.equal(a, b) for a, b in zip(first.weights + first.inputs, again.weights + again.inputs,
                                                 strict=True))
    assert not torch.equal(first.weights[0], other.weights[0])
    assert not torch.equal(first.weights[0], first.weights[1])  # copies differ: no accidental sharing
