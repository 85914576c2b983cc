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


# --- the time plan (scripts/gpu_check_plan.py): read from the first H200 run's fixtures, no torch ---------------

def _plan_module():
    import importlib.util
    import sys

    if "gpu_check_plan" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_check_plan", ROOT / "scripts" / "gpu_check_plan.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_check_plan"] = module  # before it runs: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["gpu_check_plan"]


def test_the_estimate_reads_the_first_h200_runs_fixtures():
    """Per-point costs are what the first H200 run measured, with the floor each sweep point's timed phase has now
    (0.4 s with GPM, 0.25 s then: microbench/telemetry/sampler.py) in place of the old one."""
    import sys

    torch_before = "torch" in sys.modules
    plan = _plan_module()
    costs = plan.Costs.now()
    first = costs.first
    assert first.step_s["sweep"] == 58 and first.step_s["tests"] == 19 and first.step_s["decode"] == 10
    assert first.floor_s == 0.25 and costs.floor_s == 0.4
    assert 0.25 <= first.window_s < 0.26  # every point then stopped at its floor
    assert 4 < first.startup_s < 6  # the sweep step's 58 s less its points' 52.9 s
    assert 0.35 < first.point_s[("gemm", "torch")] < 0.45
    from microbench.points.plan import PointSpec

    gemm = PointSpec("gemm", "bf16", 16, 4096, 14336)
    assert costs.point_s(gemm) == first.point_s[("gemm", "torch")] + 0.4 - 0.25
    # A grouped point pays for its host check: Mixtral's experts in float64 cross to the host.
    mixtral = PointSpec("grouped", "bf16", 256, 14336, 4096, "torch", 8, 2)
    assert costs.point_s(mixtral) > costs.point_s(gemm) + 2
    if not torch_before:
        assert "torch" not in sys.modules


def _check_fits(plan, budget_s: int) -> None:
    module = _plan_module()
    serving = plan.serving
    assert serving.name == "serving" and [p.name for p in serving.parts][:2] == ["profile", "validate"]
    assert plan.steps[-1] is serving and plan.budget_s == budget_s
    # Expected: every step, then the summary, inside the budget.
    assert plan.expected_s <= budget_s
    # And the serving check starts by its deadline with its own timeouts whole, before the budget ends.
    assert module.PLAN_S + plan.before_s / module.BEFORE_SHARE <= plan.serving_deadline_s
    assert plan.serving_deadline_s + serving.timeout_s + module.SLACK_S == budget_s
    for step in plan.steps:
        assert step.timeout_s > step.estimate_s, step.name
    table = plan.table()
    assert "serving" in table and "profile" in table and "validate" in table and f"budget {budget_s} s" in table


def test_the_default_plan_on_an_h200_puts_the_serving_check_inside_8_minutes():
    plan = _plan_module().make_plan("default", cupy=True)
    _check_fits(plan, 480)
    names = [step.name for step in plan.steps]
    for name in ("cupy-tests", "moe", "formats", "fp8-block", "serving"):
        assert name in names
    # What was trimmed is named in the printed plan.
    assert plan.trims and all(f"trimmed: {trim}" in plan.table() for trim in plan.trims)


def test_the_quick_plan_runs_the_five_checks_inside_5_minutes():
    module = _plan_module()
    plan = module.make_plan("quick", cupy=True)
    _check_fits(plan, 300)
    steps = {step.name: step for step in plan.steps}
    assert set(steps) == {"env", "formats", "moe", "cupy-tests", "fp8-block", "serving"}
    formats = module.sweep_config(steps["formats"].argv[4:]).points("cuda")
    assert {(p.dtype, p.batch) for p in formats} == {(d, b) for d in ("bf16", "w8a16", "w4a16")
                                                     for b in (1, 16, 128, 512)}
    assert {(p.n, p.k) for p in formats} == {(4096, 14336)}
    assert "tests/test_cupy_backend.py" in steps["cupy-tests"].argv
    assert steps["fp8-block"].points == 1
    # One grouped point each for Mixtral (8 of 14336x4096, top-2) and Qwen3-30B-A3B (128 of 768x2048, top-8) at 1
    # and 256 tokens, and experts that get no token among them.
    from microbench.timing.grouped import Assignment
    from microbench.timing.ops import seed_for
    from roofline.step.routing import Routing

    grouped = module.sweep_config(steps["moe"].argv[4:]).points("cuda")
    assert {(p.experts, p.topk, p.n, p.k, p.batch) for p in grouped} == {
        (8, 2, 14336, 4096, 1), (8, 2, 14336, 4096, 256), (128, 8, 768, 2048, 1), (128, 8, 768, 2048, 256)}
    idle = {p.label: p.experts - Assignment.draw(Routing.parse(p.routing), p.experts, p.topk, p.batch,
                                                 seed_for(0, "routing", p.label)).touched for p in grouped}
    assert all(idle[p.label] > 0 for p in grouped if p.batch == 1), idle
    assert any(idle[p.label] > 0 for p in grouped if p.batch == 256), idle


def test_a_tighter_budget_trims_more_and_never_the_serving_check(monkeypatch):
    module = _plan_module()
    full = module.make_plan("default", cupy=True)
    monkeypatch.setitem(module.BUDGET_S, "default", 400)
    tight = module.make_plan("default", cupy=True)
    _check_fits(tight, 400)
    assert len(tight.trims) > len(full.trims)
    monkeypatch.setitem(module.BUDGET_S, "default", 200)
    with pytest.raises(module.PlanError, match="does not fit 200 s"):
        module.make_plan("default", cupy=True)


def test_the_plan_as_bash_runs_the_same_steps_with_their_timeouts(tmp_path):
    module = _plan_module()
    plan = module.make_plan("quick", cupy=True)
    for device in ("cuda", "cpu"):
        (tmp_path / "plan.sh").write_text(plan.shell(device))
        read = subprocess.run(["bash", "-c", 'OUT=/o DEVICE=d; source plan.sh; echo "${PLAN_NAMES[*]}"; '
                               'echo "${PLAN_TIMEOUTS[*]}"; echo "${PLAN_CMD_1[*]}"; echo "$PLAN_SERVING_DEADLINE_S"'],
                              capture_output=True, text=True, cwd=tmp_path, timeout=30)
        names, timeouts, formats, deadline = read.stdout.splitlines()
        assert names.split() == [step.name for step in plan.steps]
        limit = "cpu_timeout_s" if device == "cpu" else "timeout_s"
        assert timeouts.split() == [str(getattr(step, limit)) for step in plan.steps]
        assert "--device d " in formats and "-o /o/formats.json" in formats
        assert int(deadline) == plan.serving_deadline_s


@pytest.mark.slow
def test_a_cpu_dry_run_with_a_step_made_to_fail_exits_non_zero_and_names_it(tmp_path):
    """The whole --quick check on the CPU (about a minute on two cores) with its grouped step made to fail: the H200's
    plan first, the step table last, the failed step named there, exit 1."""
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GPUBENCH_CHECK_NESTED"}
    env.update(GPUBENCH_DEVICE="cpu", GPUBENCH_CHECK_FAIL="moe",
               PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}")
    done = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), "--quick", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=1800)
    lines = done.stdout.splitlines()
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert lines[0].startswith("--- time plan on an H200 (quick, budget 300 s")
    assert lines[-1] == "--- FAILED: 1 of 5 steps failed, were cut or were skipped: moe ---", done.stdout[-3000:]
    table = lines[lines.index("--- steps (rc, seconds) ---"):]
    assert any(line.startswith("moe        rc=1 ") and "gpu_check.log lines" in line for line in table), table
    assert any(line.startswith("serving    rc=0 ") for line in table), table
    assert "--- FAILED" in (tmp_path / "out" / "summary.txt").read_text()
