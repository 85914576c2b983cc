"""gpubench calibrate without an engine: the benchmark formats as their writers write them, the closed loop, the
fit recovering an overhead it was given, the command on a real run's files (tests/data/engine-bench/: GuideLLM
0.8.1 against transformers serve on this CPU, tests/engine_bench.py), bad input, and no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.calibrate.bench import BenchError, BenchRun, closed_loop_sends, read_bench
from roofline.calibrate.replay import calibrate, next_fit
from roofline.serving.latency import ServedRequest
from roofline.serving.profile_doc import EngineOverhead, load_profile
from roofline.serving.simulate import simulate
from roofline.serving.workload import Request

DATA = Path(__file__).parent / "data" / "engine-bench"
PROFILE = DATA / "profile.json"
POLICY = "chunked:budget=256:max-batch=64"


def vllm_result(**extra) -> dict:
    """A ``vllm bench serve --save-result --save-detailed`` document of three requests, its keys as serve.py
    writes them (the middle request failed)."""
    return {"backend": "vllm", "model_id": "m", "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
            "num_prompts": 3, "duration": 1.0, "input_lens": [10, 20, 30], "output_lens": [4, 0, 3],
            "ttfts": [0.05, 0.0, 0.07], "itls": [[0.01, 0.02, 0.01], [], [0.03, 0.01]], "errors": ["", "boom", ""],
            **extra}


def write(tmp_path: Path, document: dict, name: str = "bench.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def test_a_vllm_result_is_read_with_every_token_time_and_its_failures_left_out(tmp_path):
    (run,) = read_bench(write(tmp_path, vllm_result()))
    assert run.format == "vllm" and run.arrivals == "burst" and run.dropped == 1
    first, second = run.requests
    assert (first.prompt_tokens, first.output_tokens, second.prompt_tokens) == (10, 4, 30)
    assert first.token_times_s == pytest.approx((0.05, 0.06, 0.08, 0.09)) and first.finish_s == pytest.approx(0.09)
    assert second.arrival_s == 0 and second.first_token_s == pytest.approx(0.07)


def test_a_vllm_rate_is_drawn_again_and_ends_where_vllm_ends_it(tmp_path):
    """vLLM rescales its gaps so the last request is sent at num_prompts / rate: the replay does too."""
    document = vllm_result(request_rate=2.0, errors=["", "", ""], output_lens=[4, 2, 3],
                           itls=[[0.01] * 3, [0.01], [0.01] * 2])
    (run,) = read_bench(write(tmp_path, document), seed=3)
    arrivals = [r.arrival_s for r in run.requests]
    assert 0 < arrivals[0] and arrivals == sorted(arrivals) and arrivals[-1] == pytest.approx(3 / 2)
    assert run.arrivals.startswith("poisson:2 (seed 3")


def test_a_closed_loop_sends_each_request_when_the_earliest_in_flight_ends():
    assert closed_loop_sends([1.0, 3.0, 1.0, 1.0], 2) == [0.0, 0.0, 1.0, 2.0]


def test_a_vllm_max_concurrency_run_replays_as_a_closed_loop(tmp_path):
    document = vllm_result(max_concurrency=1, errors=["", "", ""], output_lens=[4, 2, 3],
                           itls=[[0.01] * 3, [0.01], [0.01] * 2])
    (run,) = read_bench(write(tmp_path, document))
    assert run.concurrency == 1
    # each sent when the one before ends: 0.05 + 3 x 0.01, then 0.0 + 0.01 (ttfts, itls)
    assert [r.arrival_s for r in run.requests] == pytest.approx([0.0, 0.08, 0.09])


@pytest.mark.parametrize("change, words", [({"itls": None}, "--save-detailed"),
                                           ({"input_lens": [1, 2]}, "same requests"),
                                           ({"ttfts": ["x", 0.0, 0.2]}, "ttfts[0]"),
                                           ({"errors": ["a", "b", "c"]}, "every request failed"),
                                           ({"request_rate": 2.0, "max_concurrency": 4}, "max_concurrency")])
def test_a_vllm_result_that_cannot_be_replayed_is_one_line(tmp_path, change, words):
    with pytest.raises(BenchError, match=words.replace("[", r"\[").replace("]", r"\]")):
        read_bench(write(tmp_path, vllm_result(**change)))


@pytest.mark.parametrize("change, words", [
    ({"max_concurrency": 2.5}, "max_concurrency must be a whole number of requests in flight (1 or more), got 2.5"),
    ({"itls": [[0.01, 1e308, 0.01], [], [0.03, 0.01]]},
     "itls[0] must be a finite number from 0 to 1e+09, got 1e+308"),
    ({"ttfts": [0.05, 0.0, 9e8], "itls": [[0.01] * 3, [], [9e8, 0.01]]},
     "request 2's ttfts and itls add up to 1.8e+09 s"),
    ({"request_rate": 2.0, "burstiness": 1e-300}, "burstiness 1e-300 is gaps of coefficient of variation 1e+150; "
                                                  "the replay draws burstiness 0.01 to 10,000 (CV 10 to 0.01)"),
    ({"request_rate": 2.0, "burstiness": [[1]]}, "burstiness must be a finite number >= 0, got [[1]]")])
def test_a_vllm_result_with_nonsense_settings_or_times_is_one_line_naming_the_field(tmp_path, change, words):
    """Issue 37's edges: each was a traceback, numpy warnings, or inf written to calibrate.json."""
    with pytest.raises(BenchError) as caught:
        read_bench(write(tmp_path, vllm_result(**change)))
    message = str(caught.value)
    assert words in message and "bench.json" in message and "\n" not in message, message


def test_a_vllm_burstiness_is_replayed_as_the_simulators_gamma_arrivals(tmp_path):
    """vLLM's burstiness is the gamma shape: named in --arrivals' terms, CV = 1/sqrt(burstiness)."""
    document = vllm_result(request_rate=2.0, burstiness=0.25, errors=["", "", ""], output_lens=[4, 2, 3],
                           itls=[[0.01] * 3, [0.01], [0.01] * 2])
    (run,) = read_bench(write(tmp_path, document))
    assert run.arrivals.startswith("gamma:2:2 (vLLM's burstiness 0.25")
    assert [r.arrival_s for r in run.requests][-1] == pytest.approx(3 / 2)


@pytest.mark.parametrize("info, words", [({"timings": "fast"}, ".info.timings must be an object of the tokens' "
                                                              "times"),
                                         ("fast", ".info must be an object")])
def test_a_guidellm_request_whose_timings_are_not_an_object_is_one_line(tmp_path, info, words):
    document = json.loads((DATA / "guidellm-calibration.json").read_text())
    document["benchmarks"][0]["requests"]["successful"][3]["info"] = info
    with pytest.raises(BenchError, match=r"requests.successful\[3\]" + words.replace(".", r"\.")):
        read_bench(write(tmp_path, document))


def test_a_guidellm_report_of_two_benchmarks_gives_two_runs_or_the_one_asked():
    runs = read_bench(DATA / "guidellm-calibration.json")
    assert [r.label for r in runs] == ["concurrent@1", "concurrent@4"]
    for run in runs:
        assert run.format == "guidellm" and run.arrivals == "measured" and len(run.requests) == 12
        assert run.requests[0].arrival_s == 0 and all(r.output_tokens == 32 for r in run.requests)
        assert all(r.arrival_s < r.first_token_s <= r.finish_s for r in run.requests)
    (second,) = read_bench(DATA / "guidellm-calibration.json", run=1)
    assert second.label == "concurrent@4"
    with pytest.raises(BenchError, match="--run 2 is not one of its 2"):
        read_bench(DATA / "guidellm-calibration.json", run=2)


def measured_from(run, path: str, every_token: bool) -> BenchRun:
    """The simulator's own run as a benchmark would report it: the fit must find the overhead it ran with."""
    requests = tuple(ServedRequest(r.request, r.first_token_s, r.finish_s, tuple(r.token_times_s) if every_token
                                   else ()) for r in run.requests)
    return BenchRun(path, "vllm" if every_token else "guidellm", requests, "measured", "synthetic")


TRUTH = EngineOverhead(per_step_s=3e-3, per_sequence_s=6e-4, per_cached_token_s=2e-6, per_prefill_step_s=4e-3)


def simulated_benches(arrivals: tuple[str, ...], every_token: bool) -> list[BenchRun]:
    from roofline.serving.workload import make_workload

    profile = load_profile(PROFILE)
    return [measured_from(simulate(profile, make_workload(n, spec, "uniform:4:60", "uniform:8:48", seed), POLICY,
                                   TRUTH), f"run{seed}", every_token)
            for seed, (n, spec) in enumerate(zip((24, 8), arrivals, strict=True))]


@pytest.mark.parametrize("every_token", [True, False])
def test_the_fit_finds_the_overhead_the_requests_were_run_with(every_token):
    """Bursts of 24 and 8 requests of varied lengths simulated with a known overhead: each gap, or each decode
    span, less the kernels fits back every term the steps were charged."""
    fit = calibrate(load_profile(PROFILE), simulated_benches(("burst", "burst"), every_token), POLICY)
    for name in EngineOverhead.TERMS:
        assert getattr(fit.overhead, name) == pytest.approx(getattr(TRUTH, name), rel=1e-6, abs=1e-12), name
    assert fit.settled and fit.rounds[-1]["rms_residual_s"] < 1e-9


def test_with_arrivals_over_time_the_fit_settles_on_a_schedule_that_reproduces_the_run():
    """Poisson arrivals: the schedule depends on the overhead, so the fit is iterated; where it settles, the
    replay reproduces the measured TPOT and throughput (the terms themselves may trade off)."""
    from roofline.calibrate.fit import compare_runs

    benches = simulated_benches(("poisson:6", "poisson:3"), every_token=False)
    fit = calibrate(load_profile(PROFILE), benches, POLICY)
    for bench, replayed in zip(benches, fit.replayed, strict=True):
        comparison = compare_runs(replayed.run.requests, bench.requests)
        assert abs(comparison["tpot_p50_s"]["rel_err"]) < 0.05 and abs(comparison["tokens_per_s"]["rel_err"]) < 0.05


def test_calibrate_on_a_real_run_writes_the_calibrated_profile_and_the_comparison(tmp_path):
    """The committed GuideLLM files: every request replayed, the overhead in calibrated.json with where it was
    fitted, and the prediction of the second benchmark beside its measurement."""
    out = tmp_path / "cal"
    result = CliRunner().invoke(main, ["calibrate", "--bench", str(DATA / "guidellm-calibration.json"),
                                       "--predict", str(DATA / "guidellm-prediction.json"), "--profile", str(PROFILE),
                                       "--policy", POLICY, "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "calibrate.json").read_text())
    assert document["kind"] == "gpubench-calibration"
    assert [r["bench"]["label"] for r in document["calibration"]["runs"]] == ["concurrent@1", "concurrent@4"]
    (prediction,) = document["predictions"]
    assert prediction["bench"]["requests"] == 16 and prediction["bench"]["lengths"].endswith("output 64")
    tpot = prediction["comparison"]["tpot_p50_s"]
    assert tpot["rel_err"] == pytest.approx((tpot["predicted"] - tpot["measured"]) / tpot["measured"])
    calibrated = load_profile(out / "calibrated.json")
    overhead = calibrated.engine_overhead
    assert overhead is not None and overhead.to_dict() | {"fitted_on": "", "fitted_from": None} == \
        EngineOverhead.from_dict(document["calibration"]["overhead"]).to_dict() | {"fitted_on": "",
                                                                                  "fitted_from": None}
    assert overhead.fitted_from["runs"] == ["concurrent@1", "concurrent@4"]
    assert "tpot_p50_s" in result.output and "predicted" in result.output


@pytest.mark.parametrize("args, words", [(["--policy", "nonsense"], "nonsense"),
                                         (["--bench", "/nonexistent.json"], "cannot read"),
                                         (["--mem-fraction", "2"], "--mem-fraction"),
                                         (["--policy", POLICY, "--policy", "continuous"],
                                          f"--policy given 2 times ({POLICY}, continuous): the overhead is fitted "
                                          "on the schedule of the one scheduler the engine ran")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    base = [("--bench", str(DATA / "guidellm-prediction.json")), ("--profile", str(PROFILE)), ("--policy", POLICY),
            ("-o", str(tmp_path / "out"))]
    typed = list(zip(args[::2], args[1::2], strict=True))
    line = [x for flag, value in [*(p for p in base if p[0] not in dict(typed)), *typed] for x in (flag, value)]
    result = CliRunner().invoke(main, ["calibrate", *line])
    assert result.exit_code == 2 and words in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_calibrate_does_not_import_torch(tmp_path):
    code = ("import sys; from click.testing import CliRunner; from microbench.cli.app import main; "
            f"r = CliRunner().invoke(main, ['calibrate', '--bench', {str(DATA / 'guidellm-prediction.json')!r}, "
            f"'--profile', {str(PROFILE)!r}, '--policy', {POLICY!r}, '-o', {str(tmp_path / 'o')!r}]); "
            "print(r.exit_code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "False"]


def test_several_benches_are_fitted_together_and_repeated_predictions_are_pooled(tmp_path):
    """--bench twice fits on every run of both files; the same --predict file twice pools to that file's own
    throughput (its tokens twice over twice its time; percentiles of a sample taken twice need not be its own)."""
    out = tmp_path / "cal"
    result = CliRunner().invoke(main, ["calibrate", "--bench", str(DATA / "guidellm-calibration.json"), "--bench",
                                       str(DATA / "guidellm-prediction.json"), "--predict",
                                       str(DATA / "guidellm-prediction.json"), "--predict",
                                       str(DATA / "guidellm-prediction.json"), "--profile", str(PROFILE),
                                       "--policy", POLICY, "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "calibrate.json").read_text())
    assert [r["bench"]["label"] for r in document["calibration"]["runs"]] == ["concurrent@1", "concurrent@4",
                                                                               "poisson@2.00"]
    assert document["setup"]["bench"] == [str(DATA / "guidellm-calibration.json"),
                                          str(DATA / "guidellm-prediction.json")]
    together, (one, _) = document["predictions_together"], document["predictions"]
    assert together["runs"] == 2 and together["requests"] == 32
    for metric in ("tokens_per_s", "requests_per_s"):
        assert together["comparison"][metric]["predicted"] == pytest.approx(one["comparison"][metric]["predicted"])
        assert together["comparison"][metric]["measured"] == pytest.approx(one["comparison"][metric]["measured"])
    assert "the 2 --predict runs together" in result.output


def test_pooled_runs_add_their_times_and_pool_their_latencies():
    from roofline.calibrate.fit import pooled_summary

    first = [ServedRequest(Request(0, 0.0, 4, 11), 0.5, 1.5), ServedRequest(Request(1, 1.0, 4, 11), 1.5, 3.5)]
    second = [ServedRequest(Request(0, 0.0, 4, 21), 1.0, 7.0)]  # TPOT 0.1 and 0.2, then 0.3
    summary = pooled_summary([first, second])
    assert summary["total_s"] == pytest.approx(3.5 + 7.0)
    assert summary["tokens_per_s"] == pytest.approx((11 + 11 + 21) / 10.5)
    assert summary["requests_per_s"] == pytest.approx(3 / 10.5)
    assert summary["tpot_p50_s"] == pytest.approx(0.2)


@pytest.mark.slow
def test_the_committed_rounds_of_a_real_engine_run_are_predicted_within_20_percent(tmp_path):
    """tests/test_calibrate_engine.py's design replayed on one real run it made (twelve rounds, GuideLLM's raw
    reports gzipped, the profile measured with them): fitted on every round's calibration, every round's
    prediction together within the test's 20% on TPOT p50 and throughput."""
    rounds = DATA / "rounds"
    runs = [arg for name, flag in (("calibration", "--bench"), ("prediction", "--predict")) for index in range(12)
            for arg in (flag, str(rounds / f"guidellm-{name}-{index}.json.gz"))]
    out = tmp_path / "cal"
    result = CliRunner().invoke(main, ["calibrate", *runs, "--profile", str(rounds / "profile.json"), "--policy",
                                       POLICY, "-o", str(out)])
    assert result.exit_code == 0, result.output
    together = json.loads((out / "calibrate.json").read_text())["predictions_together"]
    assert together["runs"] == 12 and together["requests"] == 192
    for metric in ("tpot_p50_s", "tokens_per_s"):
        assert abs(together["comparison"][metric]["rel_err"]) <= 0.20, metric


def test_a_gz_file_that_is_not_gzip_is_one_line_and_exit_2(tmp_path):
    fake = tmp_path / "bench.json.gz"
    fake.write_text("{}")
    result = CliRunner().invoke(main, ["calibrate", "--bench", str(fake), "--profile", str(PROFILE), "--policy",
                                       POLICY, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "cannot read" in result.output and len(result.output.strip().splitlines()) == 1


def test_an_unsettled_fit_moves_halfway_from_the_last_one():
    raw, last = np.array([2e-3, 1e-4, 0.0, 4e-3]), np.array([1e-3, 3e-4, 2e-6, 0.0])
    assert next_fit(raw, last, settled=False).tolist() == pytest.approx([1.5e-3, 2e-4, 1e-6, 2e-3])
    assert next_fit(raw, last, settled=True).tolist() == raw.tolist()  # settled: as fitted
    assert next_fit(raw, None, settled=False).tolist() == raw.tolist()  # the first fit: nothing to move from
