"""validate refuses a comparison whose profile was not timed as the engine was: a given CPU profile timed on
another clock or with other torch threads (before anything runs), and a result whose profile kernels take longer
than the engine steps that ran them (a CPU run on a busy 2-core machine printed "kernels are 1386% of the
measured step time" and predicted 13x the measured time: its profile was timed on the wall clock with two torch
threads, each parallel kernel waiting milliseconds for its second thread's turn)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.serving.validate_compare import KERNEL_SHARE_LIMIT, impossible_share, kernel_share_line

TINY = Path(__file__).parent / "data" / "tiny-llama-config.json"


def document(static_share: float, continuous_share: float = 0.6) -> dict:
    """The parts of validate.json the refusal and the printed summary read."""
    def run(path: str, share: float) -> dict:
        policy = "static:batch=16" if path == "static" else "chunked:budget=256:max-batch=64"
        return {"kernel_share": share, "measured": {"policy": policy, "settings": {"clock": "wall"}},
                "predicted": {"policy": {"policy": policy}}}

    entry = {"predicted": 1.0, "measured": 1.0, "rel_err": 0.0}
    return {"engine": {"name": "transformers", "model": {"name": "tiny"}, "dtype": "bf16", "torch_threads": 2,
                       "weights": "random"},
            "device": {"kind": "cpu", "threads": 2},
            "profile": {"path": "/tmp/p.json", "basis": "torch timers on cpu (cpu), cache-warm weights",
                        "created_at": "2026-12-02T17:49:41.051Z"},
            "setup": {"engine_mode": "eager"}, "calibration": {},
            "runs": {"static": run("static", static_share), "continuous": run("continuous", continuous_share)},
            "comparison": {"static": {"total_s": entry}, "continuous": {"total_s": entry}},
            "ratio": {"predicted": 1.0, "measured": 1.0, "rel_err": 0.0}}


def test_kernels_longer_than_their_steps_are_refused_naming_how_each_side_was_timed():
    message = impossible_share(document(13.86, 6.67))
    assert message is not None
    assert "static 1386%, continuous 667%" in message and "no evidence" in message
    assert "cache-warm weights, 2 torch thread(s), measured 2026-12-02T17:49:41.051Z (/tmp/p.json)" in message
    assert "engine: wall clock, 2 torch thread(s)" in message and "--clock thread-cpu" in message
    assert impossible_share(document(0.8)) is None
    assert impossible_share(document(KERNEL_SHARE_LIMIT)) is None  # noise between two measurements: allowed
    assert "the rest is engine overhead" in kernel_share_line("static", "eager", 0.8)
    over = kernel_share_line("static", "eager", 13.86)
    assert "1386%" in over and "engine overhead" not in over and "longer than the steps that ran them" in over


def test_the_command_keeps_the_runs_but_gives_no_verdict_and_no_calibrated_profile(tmp_path, monkeypatch):
    import microbench.serving.validate_run

    out = tmp_path / "out"

    def measured(setup, folder, *args, **kwargs):  # what run_validate returns after a real run, folder and all
        folder.mkdir()
        return document(13.86)

    monkeypatch.setattr(microbench.serving.validate_run, "run_validate", measured)
    result = CliRunner().invoke(main, ["validate", "--hf-config", str(TINY), "--device", "cpu", "--fail-above",
                                       "0.1", "-o", str(out)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("gpubench: error:")]
    assert len(errors) == 1 and "1386%" in errors[0]
    assert json.loads((out / "validate.json").read_text())["runs"]["static"]["kernel_share"] == 13.86
    assert not list(out.glob("calibrated-*.json"))


@pytest.fixture
def wall_two_thread_profile(tmp_path):
    """A step profile as ``gpubench profile --device cpu`` writes it with torch's default 2 threads on the wall
    clock (the tiny Llama's shapes; constant times: only how it was timed matters here)."""
    from serving_helpers import constant_profile

    from microbench.device.discovery import resolve_device
    from microbench.device.provenance import describe_device
    from roofline.serving.profile_doc import save_profile

    device = {**describe_device(resolve_device("cpu")), "threads": 2}
    config = json.loads(TINY.read_text())
    model = {"name": "tiny-llama-test", "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64,
             "intermediate": config["intermediate_size"], "vocab": 1024, "mlp": "gated"}
    profile = replace(constant_profile(1e-4), source="measured", device=device, model=model, dtype="bf16",
                      kv_dtype="bf16", basis="torch timers on cpu (cpu), cache-warm weights")
    path = tmp_path / "profile.json"
    save_profile(profile, path)
    return path


def test_a_cpu_profile_timed_otherwise_than_the_engine_is_refused_before_anything_runs(
        tmp_path, monkeypatch, wall_two_thread_profile):
    from microbench.serving.engine import transformers_engine

    def reached(*args, **kwargs):
        raise AssertionError("validate began measuring before refusing its input")

    monkeypatch.setattr(transformers_engine, "build_model", reached)
    base = ["validate", "--profile", str(wall_two_thread_profile), "--device", "cpu", "--requests", "4",
            "--calibration-requests", "4", "--prompt", "fixed:8", "--output", "fixed:4"]
    # The CPU's default: one torch thread on its CPU clock, against a wall-clock profile of two threads.
    result = CliRunner().invoke(main, [*base, "-o", str(tmp_path / "a")])
    assert result.exit_code == 2, result.output
    assert "timed on the wall clock with 2 torch thread(s), the engine here runs on the thread-cpu clock with 1" \
        in " ".join(result.output.split())
    assert not (tmp_path / "a" / "validate.json").exists()
    # The same clock and threads get past the check (and reach the engine, stopped here).
    result = CliRunner().invoke(main, [*base, "--clock", "wall", "--threads", "2", "-o", str(tmp_path / "b")])
    assert isinstance(result.exception, AssertionError) and "began measuring" in str(result.exception)
