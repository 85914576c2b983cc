"""gpubench calibrate replays what the engine really ran (issue 40, item 8): the shared prefix GuideLLM's data
arguments gave the prompts, another engine configuration's policy for a --predict file (or the engine limits the
file records), a synchronous run as the closed loop of one it was, and vLLM's saved send times as given.

The committed files (tests/data/calibrate/, README.md there): GuideLLM 0.8.1 reports cut from the real run in
tests/data/engine-bench/ (a shared prefix of 128 tokens put in its data arguments; its one-stream benchmark saved
as the synchronous profile), and a ``vllm bench serve --save-detailed`` result made by following
vllm/benchmarks/serve.py at vllm-project/vllm 009e6d4a (request rate 4 with max_concurrency 2, start_times)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from test_reader_fuzz import FUZZ, JSON_VALUES, reads_or_refuses

from microbench.cli.app import main
from roofline.calibrate.bench import BenchError, BenchRun, read_bench
from roofline.calibrate.config import parse_predict, replay_policy
from roofline.calibrate.replay import replay
from roofline.core.options import OptionError
from roofline.serving.latency import ServedRequest
from roofline.serving.metrics import prefix_figures
from roofline.serving.profile_doc import EngineOverhead, load_profile

DATA = Path(__file__).parent / "data"
RAN = DATA / "calibrate"
BENCH = DATA / "engine-bench"
PROFILE = BENCH / "profile.json"
POLICY = "chunked:budget=256:max-batch=64"
OVERHEAD = EngineOverhead(per_step_s=3e-3, per_sequence_s=2e-4)


def write(tmp_path: Path, document: dict, name: str = "bench.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def without_prefix(run: BenchRun) -> BenchRun:
    return replace(run, requests=tuple(ServedRequest(replace(r.request, segments=()), r.first_token_s, r.finish_s,
                                                     r.token_times_s) for r in run.requests), prefix="")


def mean_ttft(replayed) -> float:
    return float(np.mean([r.first_token_s - r.arrival_s for r in replayed.run.requests]))


# --- (a) the shared prefix ----------------------------------------------------------------------------------------

def test_a_guidellm_shared_prefix_is_replayed_and_the_prefix_cache_finds_it():
    """Every prompt opens with the data arguments' 128-token prefix (config.spec.data[0].prefix_buckets): the
    replay's prefix cache finds it (hit rate > 0) and the first tokens come sooner than with the same requests
    prefilled whole."""
    (run,) = read_bench(RAN / "guidellm-prefix.json")
    assert run.prefix.startswith("shared prefix of 128 tokens on every prompt (config.spec.data[0].prefix_buckets)")
    assert all(r.request.segments == ((0, 128),) and r.prompt_tokens > 128 for r in run.requests)
    profile = load_profile(PROFILE)
    shared, whole = (replay(profile, r, POLICY, OVERHEAD) for r in (run, without_prefix(run)))
    assert prefix_figures(shared.run)["prefix_hit_rate"] > 0
    assert prefix_figures(whole.run)["prefix_hit_rate"] == 0
    assert mean_ttft(shared) < mean_ttft(whole)


def _version_1(data: list) -> dict:
    """The prefix file as a report of version 1 (GuideLLM 0.5-0.6: GenerativeBenchmarksReport.args, its --data
    strings as given) with the same benchmark."""
    document = json.loads((RAN / "guidellm-prefix.json").read_text(encoding="utf-8"))
    return {"metadata": {"version": 1, "guidellm_version": "0.6.1", "python_version": "3.11.7", "platform": "Linux"},
            "args": {"data": data, "profile": "concurrent", "backend": "openai_http"},
            "benchmarks": document["benchmarks"]}


@pytest.mark.parametrize("data, tokens", [(["prompt_tokens=32,output_tokens=32,prefix_tokens=128"], 128),
                                          (['{"prompt_tokens": 32, "prefix_tokens": 96, "prefix_count": 1}'], 96),
                                          (["prefix_tokens=128"], None),  # one '=': a dataset name to GuideLLM
                                          (["data/prompts.jsonl"], None)])
def test_a_version_1_reports_data_string_gives_the_prefix_as_guidellm_parses_it(tmp_path, data, tokens):
    """GuideLLM 0.6's _load_config_str: a JSON object, or key=value pairs with more than one '='."""
    (run,) = read_bench(write(tmp_path, _version_1(data)))
    if tokens is None:
        assert run.prefix == "" and all(r.request.segments == () for r in run.requests)
    else:
        assert all(r.request.segments == ((0, tokens),) for r in run.requests)
        assert "args.data[0].prefix_tokens" in run.prefix


def test_a_version_1_shorthand_that_is_no_count_is_one_line_naming_it(tmp_path):
    with pytest.raises(BenchError, match=r"args.data\[0\].prefix_tokens must be a whole number from 0"):
        read_bench(write(tmp_path, _version_1(["prompt_tokens=32,prefix_tokens=lots,output_tokens=32"])))


def test_several_prefixes_are_drawn_by_guidellms_bucket_weights_with_the_seed(tmp_path):
    """Two prefixes of 64 tokens in one bucket and none in another of the same weight: GuideLLM draws each prompt's
    from [a, b, none, none] (weight / count each); which one a prompt had is not saved, so it is drawn again."""
    document = json.loads((RAN / "guidellm-prefix.json").read_text(encoding="utf-8"))
    document["config"]["spec"]["data"][0]["prefix_buckets"] = [
        {"bucket_weight": 100, "prefix_count": 2, "prefix_tokens": 64},
        {"bucket_weight": 100, "prefix_count": 1, "prefix_tokens": 0}]
    path = write(tmp_path, document)
    (run,) = read_bench(path, seed=1)
    assert run.prefix.startswith("2 shared prefixes of 64 tokens on 50% of the prompts")
    assert "drawn again by their weights with seed 1" in run.prefix
    assert {r.request.segments for r in run.requests} <= {((0, 64),), ((1, 64),), ()}
    assert [r.request.segments for r in read_bench(path, seed=1)[0].requests] == \
        [r.request.segments for r in run.requests]


@pytest.mark.parametrize("buckets, words", [
    ([{"prefix_tokens": -1}], "prefix_buckets[0].prefix_tokens must be a whole number from 0"),
    ([{"prefix_tokens": 64, "prefix_count": "two"}], "prefix_buckets[0].prefix_count must be a whole number"),
    ([{"prefix_tokens": 64, "bucket_weight": 0}], "prefix_buckets[0].bucket_weight must be a whole number from 1"),
    (["64"], "prefix_buckets[0] must be a prefix bucket (an object)"),
    ({"prefix_tokens": 64}, "prefix_buckets must be a list of prefix buckets")])
def test_prefix_buckets_that_are_not_guidellms_are_one_line(tmp_path, buckets, words):
    document = json.loads((RAN / "guidellm-prefix.json").read_text(encoding="utf-8"))
    document["config"]["spec"]["data"][0]["prefix_buckets"] = buckets
    with pytest.raises(BenchError) as caught:
        read_bench(write(tmp_path, document))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_two_data_sources_with_prefixes_are_refused(tmp_path):
    document = json.loads((RAN / "guidellm-prefix.json").read_text(encoding="utf-8"))
    data = document["config"]["spec"]["data"]
    data.append(copy.deepcopy(data[0]))
    with pytest.raises(BenchError, match=r"config.spec.data\[0\].prefix_buckets and config.spec.data\[1\]"):
        read_bench(write(tmp_path, document))


def test_a_vllm_random_prefix_recorded_by_its_sweep_is_replayed(tmp_path):
    """vllm bench sweep serve writes its bench parameters beside the result (run=N.json): random_prefix_len is the
    random dataset's one prefix, counted in input_lens."""
    from test_calibrate import vllm_result

    (run,) = read_bench(write(tmp_path, vllm_result(random_prefix_len=8)))
    assert [r.request.segments for r in run.requests] == [((0, 8),), ((0, 8),)]
    (other,) = read_bench(write(tmp_path, vllm_result(random_prefix_len=8, dataset_name="sharegpt"), "b.json"))
    assert other.prefix == "" and all(r.request.segments == () for r in other.requests)


# --- (b) another configuration's policy ---------------------------------------------------------------------------

def test_predict_file_colon_policy_is_replayed_under_that_policy(tmp_path):
    """--predict B.json:chunked:budget=128 replays B under budget 128, whatever --policy the fit ran."""
    out = tmp_path / "cal"
    predicted = f"{BENCH / 'guidellm-prediction.json'}:chunked:budget=128"
    result = CliRunner().invoke(main, ["calibrate", "--bench", str(BENCH / "guidellm-calibration.json"),
                                       "--predict", predicted, "--profile", str(PROFILE), "--policy", POLICY,
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "calibrate.json").read_text(encoding="utf-8"))
    assert [r["policy"] for r in document["calibration"]["runs"]] == [POLICY, POLICY]
    (entry,) = document["predictions"]
    assert (entry["policy"], entry["policy_from"]) == ("chunked:budget=128", "given with the file")
    assert document["setup"]["predict"] == [predicted]
    (bench,) = read_bench(BENCH / "guidellm-prediction.json")
    fitted = EngineOverhead.from_dict(document["calibration"]["overhead"])
    own = replay(load_profile(PROFILE), bench, "chunked:budget=128", fitted)
    assert own.run.policy["budget_tokens"] == 128
    tpot = float(np.median([(r.finish_s - r.first_token_s) / (r.output_tokens - 1) for r in own.run.requests]))
    assert entry["comparison"]["tpot_p50_s"]["predicted"] == pytest.approx(tpot)
    assert "policy chunked:budget=128 (given with the file)" in result.output


@pytest.mark.parametrize("text, path, policy", [("b.json", "b.json", None),
                                                ("b.json:chunked:budget=512", "b.json", "chunked:budget=512"),
                                                ("C:/runs/b.json:paged", "C:/runs/b.json", "paged"),
                                                ("runs:paged.json", "runs:paged.json", None)])
def test_predict_splits_the_file_from_its_policy_at_a_policy_kind(text, path, policy):
    predicted = parse_predict(text)
    assert (str(predicted.path), predicted.policy) == (path, policy)


@pytest.mark.parametrize("text, words", [("b.json:chunked:budget=0", "--predict 'b.json:chunked:budget=0': policy"),
                                         (":paged", "give the benchmark file before its policy")])
def test_a_predict_policy_that_is_no_policy_is_one_line(text, words):
    with pytest.raises(OptionError, match=words):
        parse_predict(text)


def _with_engine(vllm_config: dict) -> dict:
    document = json.loads((BENCH / "guidellm-prediction.json").read_text(encoding="utf-8"))
    document["config"]["spec"]["backend"] = {"kind": "vllm_python_async", "model": "tiny",
                                             "vllm_config": {"model": "tiny", **vllm_config}}
    return document


def test_the_engine_limits_a_guidellm_report_records_make_the_policy_and_say_so(tmp_path):
    """GuideLLM's vllm_python backend saves the AsyncEngineArgs it started vLLM with: max_num_seqs and
    max_num_batched_tokens become the policy's max-batch and budget; a policy given with the file wins, and the
    disagreement is said."""
    (run,) = read_bench(write(tmp_path, _with_engine({"max_num_seqs": 8, "max_num_batched_tokens": 128,
                                                      "enable_prefix_caching": False})))
    assert run.engine == {"max_num_seqs": 8, "max_num_batched_tokens": 128, "enable_prefix_caching": False,
                          "source": "config.spec.backend.vllm_config"}
    policy, whence = replay_policy(POLICY, run)
    assert policy == "chunked:budget=128:max-batch=8:prefix-cache=off"
    assert whence == ("--policy with the file's engine limits: max_num_batched_tokens 128 as budget=128, "
                      "max_num_seqs 8 as max-batch=8, enable_prefix_caching false as prefix-cache=off "
                      "(config.spec.backend.vllm_config)")
    given, said = replay_policy(POLICY, run, "chunked:budget=512")
    assert given == "chunked:budget=512" and "which the given policy does not match" in said
    agreeing = replay_policy("chunked:max-batch=8:budget=128:prefix-cache=off", run)
    assert agreeing[0] == "chunked:max-batch=8:budget=128:prefix-cache=off" and "as the file's" in agreeing[1]
    (plain,) = read_bench(BENCH / "guidellm-prediction.json")  # over HTTP: the server's settings are not saved
    assert plain.engine == {} and replay_policy(POLICY, plain) == (POLICY, "--policy")


def test_a_vllm_sweeps_serve_parameters_are_the_engine_limits(tmp_path):
    from test_calibrate import vllm_result

    (run,) = read_bench(write(tmp_path, vllm_result(**{"max-num-seqs": 4, "max_num_batched_tokens": "96"})))
    assert run.engine == {"max_num_seqs": 4, "max_num_batched_tokens": 96, "source": "the file's top level"}
    assert replay_policy("continuous", run)[0] == "continuous:max-tokens=96:max-batch=4"
    with pytest.raises(BenchError, match="max_num_seqs must be a whole number from 1"):
        read_bench(write(tmp_path, vllm_result(max_num_seqs="lots"), "b.json"))


# --- (c) synchronous runs -----------------------------------------------------------------------------------------

def test_a_synchronous_guidellm_run_is_replayed_as_a_closed_loop_of_one():
    """Each request is sent when the simulated one before it ends: no two overlap in the replay, even where the
    simulated requests take longer than the measured ones (the overhead doubled)."""
    (run,) = read_bench(RAN / "guidellm-synchronous.json")
    assert run.arrivals == "concurrency:1" and run.concurrency == 1 and run.label == "synchronous"
    slow = EngineOverhead(per_step_s=0.02, per_sequence_s=0.0)
    replayed = replay(load_profile(PROFILE), run, POLICY, slow).run.requests
    for before, after in zip(replayed, replayed[1:], strict=False):
        assert after.arrival_s == pytest.approx(before.finish_s)
    # at the measured send times the same requests would have overlapped
    measured = [r.arrival_s for r in run.requests]
    assert any(b.finish_s > a for b, a in zip(replayed, measured[1:], strict=False))


def test_a_vllm_run_of_max_concurrency_1_is_a_closed_loop_of_one_even_with_its_start_times(tmp_path):
    from test_calibrate import vllm_result

    document = vllm_result(max_concurrency=1, start_times=[100.0, 100.2, 100.4])
    (run,) = read_bench(write(tmp_path, document))
    assert run.arrivals == "concurrency:1"
    assert [r.arrival_s for r in run.requests] == pytest.approx([0.0, 0.4])  # the measured records keep them


# --- (d) vLLM's start_times ---------------------------------------------------------------------------------------

def test_vllm_start_times_are_replayed_as_given():
    """A rate of 4 with max_concurrency 2 (refused while vLLM saved no send times): each request arrives at its
    saved start_time, from the first, in the measured records and in the replay."""
    document = json.loads((RAN / "vllm-start-times.json").read_text(encoding="utf-8"))
    (run,) = read_bench(RAN / "vllm-start-times.json")
    assert run.arrivals == "measured" and run.dropped == 1
    kept = [t for t, error in zip(document["start_times"], document["errors"], strict=True) if not error]
    sent = [t - kept[0] for t in kept]
    assert [r.arrival_s for r in run.requests] == pytest.approx(sent, abs=1e-9)
    replayed = replay(load_profile(PROFILE), run, POLICY, OVERHEAD).run.requests
    assert [r.arrival_s for r in replayed] == pytest.approx(sent, abs=1e-9)


@pytest.mark.parametrize("change, words", [
    ({"start_times": [1.0, 2.0]}, "start_times must list the send time of each of the 3 requests"),
    ({"start_times": [1.0, "x", 2.0]}, "start_times[1] must be a finite number"),
    ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 4}, "a ramp-up run ('linear') saved "
                                                                                   "no start_times")])
def test_send_times_that_are_not_vllms_or_a_ramp_up_without_them_are_one_line(tmp_path, change, words):
    from test_calibrate import vllm_result

    with pytest.raises(BenchError) as caught:
        read_bench(write(tmp_path, vllm_result(**change)))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_ramp_up_with_its_start_times_is_replayed_as_measured(tmp_path):
    from test_calibrate import vllm_result

    document = vllm_result(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=4,
                           start_times=[5.0, 5.5, 5.75])
    (run,) = read_bench(write(tmp_path, document))
    assert run.arrivals == "measured" and [r.arrival_s for r in run.requests] == pytest.approx([0.0, 0.75])
    assert "ramp_up=linear:1-4" in run.label


# --- all of it through the command --------------------------------------------------------------------------------

def test_calibrate_on_a_synchronous_run_predicts_a_prefix_run_and_a_start_times_run(tmp_path):
    out = tmp_path / "cal"
    result = CliRunner().invoke(main, ["calibrate", "--bench", str(RAN / "guidellm-synchronous.json"),
                                       "--predict", str(RAN / "guidellm-prefix.json"),
                                       "--predict", f"{RAN / 'vllm-start-times.json'}:chunked:budget=64:max-batch=2",
                                       "--profile", str(PROFILE), "--policy", POLICY, "-o", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "calibrate.json").read_text(encoding="utf-8"))
    (fitted,) = document["calibration"]["runs"]
    assert fitted["bench"]["arrivals"] == "concurrency:1" and fitted["replay"]["prefix_hit_rate"] == 0
    prefixed, timed = document["predictions"]
    assert prefixed["bench"]["prefix"].startswith("shared prefix of 128 tokens")
    assert prefixed["replay"]["prefix_hit_rate"] > 0
    assert (timed["policy"], timed["bench"]["arrivals"]) == ("chunked:budget=64:max-batch=2", "measured")
    assert "replayed prefix hit rate" in result.output


# --- the new keys, fuzzed (tests/test_reader_fuzz.py's contract: read, or one line) ------------------------------

def _fuzzed_guidellm(where: str, value) -> dict:
    document = json.loads((RAN / "guidellm-prefix.json").read_text(encoding="utf-8"))
    spec = document["config"]["spec"]
    if where == "bucket":
        spec["data"][0]["prefix_buckets"][0]["prefix_tokens"] = value
    elif where == "buckets":
        spec["data"][0]["prefix_buckets"] = value
    elif where == "shorthand":
        spec["data"][0].update(prefix_buckets=None, prefix_tokens=value)
    elif where == "data":
        spec["data"] = value
    elif where == "backend":
        spec["backend"] = {"kind": "vllm_python", "vllm_config": value}
    elif where == "limit":
        spec["backend"] = {"kind": "vllm_python", "vllm_config": {"max_num_batched_tokens": value}}
    elif where == "args":
        del document["config"]
        document["args"] = {"data": value}
    return document


def _read_and_choose(path: Path, seed: int) -> None:
    for run in read_bench(path, seed=seed):
        replay_policy(POLICY, run)


@FUZZ
@given(where=st.sampled_from(["bucket", "buckets", "shorthand", "data", "backend", "limit", "args"]),
       value=JSON_VALUES | st.lists(st.text(max_size=40), max_size=2), seed=st.integers(0, 3))
def test_guidellms_new_keys_read_or_refuse_in_one_line_whatever_they_hold(tmp_path, where, value, seed):
    reads_or_refuses(_read_and_choose, write(tmp_path, _fuzzed_guidellm(where, value)), seed)


@FUZZ
@given(key=st.sampled_from(["start_times", "random_prefix_len", "max_num_seqs", "max-num-batched-tokens",
                            "enable_prefix_caching", "ramp_up_strategy", "dataset_name"]),
       value=JSON_VALUES, closed=st.booleans())
def test_vllms_new_keys_read_or_refuse_in_one_line_whatever_they_hold(tmp_path, key, value, closed):
    from test_calibrate import vllm_result

    document = vllm_result(**{key: value, **({"max_concurrency": 1} if closed else {})})
    reads_or_refuses(_read_and_choose, write(tmp_path, document), 0)
