"""gpubench calibrate against a real engine on this CPU: transformers' own OpenAI-compatible server
(``transformers serve --continuous-batching``) with a tiny random-weight model made here, benchmarked by
GuideLLM (tests/engine_bench.py); the overhead fitted on one workload (closed loops of 1, 4 and 12 requests, 36
each, prompts of 4-64 tokens, 32 out), a second predicted (Poisson at 4 requests/s, 48 requests, prompts of 32-64
tokens, 64 out) within 20% on TPOT p50 and output throughput.  The times are wall-clock over HTTP: the server and
GuideLLM each run pinned to a core of their own, at raised priority where allowed.  Skipped, saying why, without
the ``calibrate`` extra, and unless GPUBENCH_ENGINE_BENCH=1: on this 2-core machine a plain Python loop ran 1.7x
slower for stretches of 0.2-1 s, the server's single-sequence token gap moved 1.96-3.69 ms between runs minutes
apart, and five runs of this test predicted TPOT p50 off by +5, +35, +15, -23 and +11% (throughput within 1%), so
it is run by hand on a quiet machine, not by every CI run."""

from __future__ import annotations

import json
import os

import engine_bench
import pytest
from click.testing import CliRunner

from microbench.cli.app import main

TOLERANCE = 0.20
reason = engine_bench.missing_packages()
if reason is None and os.environ.get("GPUBENCH_ENGINE_BENCH") != "1":
    reason = "set GPUBENCH_ENGINE_BENCH=1 on a quiet machine (wall-clock over HTTP)"
pytestmark = pytest.mark.skipif(reason is not None, reason=f"real engine benchmark: {reason}")


def test_calibrated_on_one_workload_predicts_another_within_20_percent(tmp_path):
    runner = CliRunner()
    files = engine_bench.benchmark_both(tmp_path)
    profile = tmp_path / "profile.json"
    measured = runner.invoke(main, ["profile", "--hf-config", str(tmp_path / "tiny" / "config.json"), "--device",
                                    "cpu", "--dtype", "fp32", "--max-tokens", "256", "--max-context", "256",
                                    "--max-batch", "16", "--budget", "0.01", "--threads", "1", "-o", str(profile)])
    assert measured.exit_code == 0, measured.output
    out = tmp_path / "calibrated"
    result = runner.invoke(main, ["calibrate", "--bench", str(files["calibration"]), "--predict",
                                  str(files["prediction"]), "--profile", str(profile), "--policy",
                                  engine_bench.POLICY, "-o", str(out)])
    assert result.exit_code == 0, result.output
    print(result.output)
    (prediction,) = json.loads((out / "calibrate.json").read_text())["predictions"]
    assert prediction["bench"]["requests"] == engine_bench.PREDICTION["requests"]
    for metric in ("tpot_p50_s", "tokens_per_s"):
        error = prediction["comparison"][metric]["rel_err"]
        assert abs(error) <= TOLERANCE, f"{metric}: predicted off by {100 * error:+.1f}%\n{result.output}"
