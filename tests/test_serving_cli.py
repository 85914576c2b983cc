"""``gpubench profile --analytic`` and ``gpubench simulate`` end to end: files, report, exit codes, and the
OPT-13B result the README quotes (the continuous-over-static gain grows with the output cap)."""

from __future__ import annotations

import csv
import json
import os

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.core.units import seconds, significant
from roofline.serving.profile_doc import load_profile

# The flat achievable ceilings: the same numbers whether or not the [reference] extra is installed (its per-matrix
# efficiencies, the default where it is, have their own tests: tests/test_analytic_basis.py).
ANALYTIC = ["--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b", "--efficiency", "flat"]


def _simulate(tmp_path, *args):
    return CliRunner().invoke(main, ["simulate", *args, "-o", str(tmp_path / "sim")])


def test_profile_analytic_writes_a_profile_that_simulate_reads(tmp_path):
    path = tmp_path / "p.json"
    run = CliRunner().invoke(main, ["profile", *ANALYTIC, "-o", str(path)])
    assert run.exit_code == 0, run.output
    profile = load_profile(path)
    assert (profile.source, profile.model["mlp"]) == ("analytic", "gated")
    assert profile.basis.startswith("achievable ceilings of h200-sxm: 4.39 TB/s")
    ideal = tmp_path / "ideal.json"
    # The datasheet's peaks (--ideal) instead of the achievable ceilings (--efficiency flat): one or the other.
    assert CliRunner().invoke(main, ["profile", *ANALYTIC[:-2], "--ideal", "-o", str(ideal)]).exit_code == 0
    assert load_profile(ideal).basis.startswith("spec sheet h200-sxm (--ideal)")
    assert load_profile(ideal).roof["bandwidth_bytes_per_s"] == 4.8e12
    run = _simulate(tmp_path, str(path), "--requests", "40", "--policy", "continuous", "--no-report")
    assert run.exit_code == 0, run.output
    assert "continuous" in run.output and "binds" in run.output


def test_simulate_compares_policies_and_writes_every_file(tmp_path):
    run = _simulate(tmp_path, *ANALYTIC, "--requests", "60", "--arrivals", "poisson:20", "--policy", "static:batch=8",
                    "--policy", "paged", "--policy", "chunked:budget=256",
                    "--slo", "ttft_p90=5,tpot_p99=0.2,itl_p99=0.5")
    assert run.exit_code == 0, run.output
    assert "ITL p50/p99" in run.output
    folder = tmp_path / "sim"
    document = json.loads((folder / "simulation.json").read_text())
    assert (document["kind"], document["schema_version"]) == ("gpubench-simulation", 1)
    assert [r["policy"]["policy"] for r in document["runs"]] == ["static:batch=8", "paged", "chunked:budget=256"]
    for entry in document["runs"]:
        assert entry["capacity"]["capacity_requests_per_s"] is not None
        assert entry["summary"]["slo"]["goodput_requests_per_s"] <= entry["summary"]["requests_per_s"]
        assert entry["summary"]["binding_sentence"]
        assert set(entry["summary"]["itl"]) == {"p50_s", "p90_s", "p99_s", "mean_s", "max_s"}
        assert entry["summary"]["slo"]["checks"]["itl_p99"]["value_s"] == entry["summary"]["itl"]["p99_s"]
        assert all(p["itl_p99_s"] is not None for p in entry["rates"])
    with (folder / "requests.csv").open() as stream:
        assert len(list(csv.DictReader(stream))) == 3 * 60
    for name in ("report.html", "report.md", "timeline.png", "latency.png", "itl.png", "composition.png",
                 "throughput_latency.png"):
        assert (folder / name).stat().st_size > 0, name


@pytest.mark.parametrize("args, message", [
    (["--policy", "fifo"], "unknown policy"),
    (["--arrivals", "poisson:-1"], "positive"),
    (["--slo", "ttft=3"], "--slo"),
    (["--mem-fraction", "2"], "mem-fraction"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    run = _simulate(tmp_path, *ANALYTIC, "--requests", "5", *args)
    assert run.exit_code == 2
    assert message in run.output and run.output.count("\n") == 1


def test_an_output_folder_that_is_a_file_is_refused_before_simulating(tmp_path):
    (tmp_path / "sim").write_text("not a folder")
    run = _simulate(tmp_path, *ANALYTIC, "--requests", "5")
    assert run.exit_code == 2 and "is a file" in run.output


def test_a_profile_and_analytic_together_or_a_bad_profile_file_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "gpubench-result"}')
    runs = {f"{bad}: not a step profile (kind is not 'gpubench-step-profile')": _simulate(tmp_path, str(bad)),
            "give a PROFILE.json or --analytic (with --gpu SKU --model NAME), not both":
                _simulate(tmp_path, str(bad), *ANALYTIC),
            f"{bad} exists and is not a step profile: not overwriting it":
                CliRunner().invoke(main, ["profile", "--model", "llama-3-8b", "-o", str(bad)])}
    for message, run in runs.items():
        assert run.exit_code == 2 and run.output == f"gpubench: error: {message}\n", run.output
    assert not (tmp_path / "sim").exists() and bad.read_text() == '{"kind": "gpubench-result"}'


def test_requests_longer_than_the_context_window_are_refused(tmp_path):
    run = _simulate(tmp_path, "--analytic", "--gpu", "a100-sxm-40gb", "--model", "opt-13b", "--requests", "5",
                    "--prompt", "fixed:2000", "--output", "fixed:100")
    assert run.exit_code == 2 and "context window" in run.output


@pytest.mark.parametrize("key", ["max_position_embeddings", "n_positions"])
def test_an_hf_configs_context_window_refuses_longer_requests_as_a_model_file_does(tmp_path, key):
    from roofline.specs.hf_config import load_hf_config

    config = json.loads(open("tests/data/tiny-llama-config.json").read())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, key: 16}))
    assert load_hf_config(path).max_positions == 16
    assert load_hf_config(path).to_record()["max_positions"] == 16  # every profile keeps it
    run = _simulate(tmp_path, "--analytic", "--gpu", "h100-sxm", "--hf-config", str(path), "--policy", "paged",
                    "--requests", "3", "--prompt", "fixed:30", "--output", "fixed:4")
    assert run.exit_code == 2 and "a request of 34 tokens is longer than the 16-token context window" in run.output
    assert len(run.output.strip().splitlines()) == 1
    run = _simulate(tmp_path, "--analytic", "--gpu", "h100-sxm", "--hf-config", str(path), "--policy", "paged",
                    "--requests", "3", "--prompt", "fixed:12", "--output", "fixed:4", "--no-report")
    assert run.exit_code == 0, run.output


def _gain(tmp_path, cap: int) -> float:
    batch = 15837 // (512 + cap)  # the static batch whose full-length KV fits (README: the 23x setup)
    run = CliRunner().invoke(main, [
        "simulate", "--analytic", "--gpu", "a100-sxm-40gb", "--model", "opt-13b", "--dtype", "fp16",
        "--requests", "300", "--prompt", "fixed:512", "--output", f"exp:128:{cap}", "--arrivals", "burst",
        "--policy", f"static:batch={batch}", "--policy", "paged", "--no-report", "--json",
        "-o", str(tmp_path / str(cap))])
    assert run.exit_code == 0, run.output
    runs = json.loads(run.output[:run.output.rindex("]") + 1])
    return runs[1]["summary"]["tokens_per_s"] / runs[0]["summary"]["tokens_per_s"]


def test_opt13b_on_an_a100_40gb_gains_more_from_continuous_batching_as_the_cap_grows(tmp_path):
    gains = [_gain(tmp_path, cap) for cap in (32, 512, 1536)]
    assert gains[0] < gains[1] < gains[2]
    assert gains[2] > 2


def _constant_profile_file(tmp_path, overhead_s, per_prefill_step_s=0.0):
    from dataclasses import replace

    from serving_helpers import constant_profile

    from roofline.serving.profile_doc import EngineOverhead, save_profile

    path = tmp_path / "const.json"
    overhead = EngineOverhead(overhead_s, 0.0, "test", per_prefill_step_s=per_prefill_step_s)
    save_profile(replace(constant_profile(), engine_overhead=overhead), path)
    return path


@pytest.mark.parametrize("extra, tokens_per_s", [([], 12 / 4.5), (["--overhead-s", "0"], 12 / 3),
                                                  (["--overhead-s", "1", "--overhead-per-seq-s", "0.25"], 12 / 9)])
def test_the_profile_calibrated_overhead_applies_unless_one_is_given(tmp_path, extra, tokens_per_s):
    path = _constant_profile_file(tmp_path, 0.5)
    run = _simulate(tmp_path, str(path), "--requests", "4", "--prompt", "fixed:5", "--output", "fixed:3",
                    "--policy", "static:batch=4", "--json", "--no-report", *extra)
    assert run.exit_code == 0, run.output
    summary = json.loads(run.output[:run.output.rindex("]") + 1])[0]["summary"]
    assert summary["tokens_per_s"] == pytest.approx(tokens_per_s)


@pytest.mark.parametrize("extra, seconds", [
    ([], 3 + 3 * 0.5 + 2), (["--overhead-s", "0"], 3 + 2), (["--overhead-per-prefill-s", "0"], 3 + 3 * 0.5),
    (["--overhead-per-prefill-s", "1", "--overhead-per-seq-s", "0.25"], 3 + 3 * (0.5 + 4 * 0.25) + 1),
])
def test_each_overhead_flag_replaces_its_own_term_and_keeps_the_others(tmp_path, extra, seconds):
    # 4 requests of 3 tokens as one static batch: 3 steps of 1 s of kernels, the first of them with the prefill.
    path = _constant_profile_file(tmp_path, 0.5, per_prefill_step_s=2.0)
    run = _simulate(tmp_path, str(path), "--requests", "4", "--prompt", "fixed:5", "--output", "fixed:3",
                    "--policy", "static:batch=4", "--json", "--no-report", *extra)
    assert run.exit_code == 0, run.output
    summary = json.loads(run.output[:run.output.rindex("]") + 1])[0]["summary"]
    assert summary["tokens_per_s"] == pytest.approx(12 / seconds)
    saved = (tmp_path / "sim" / "simulation.json").read_text()
    assert ("given on the command line" in saved) == bool(extra)  # the document says where the overhead came from


@pytest.mark.parametrize("value", ["-1e-6", "nan", "inf", "1e308"])
def test_a_negative_or_infinite_overhead_is_one_line_and_exit_2(tmp_path, value):
    run = _simulate(tmp_path, str(_constant_profile_file(tmp_path, 0.5)), "--overhead-per-cached-token-s", value)
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert run.output.startswith("gpubench: error: --overhead-per-cached-token-s"), run.output


def test_a_trace_drives_the_simulation(tmp_path):
    path = _constant_profile_file(tmp_path, 0.0)
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,2\n10,5,1\n")
    run = _simulate(tmp_path, str(path), "--trace", str(trace), "--no-report")
    assert run.exit_code == 0, run.output
    with (tmp_path / "sim" / "requests.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    assert [(float(r["first_token_s"]), float(r["finish_s"])) for r in rows] == [(1, 2), (11, 11)]


TINY = ["--analytic", "--gpu", "h100-sxm", "--hf-config", "tests/data/tiny-llama-config.json"]


def _special_outputs(tmp_path):
    """A FIFO, a symlink to a file, a folder and a non-profile file: never /dev/null or another real device."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    folder = tmp_path / "adir"
    folder.mkdir()
    other = tmp_path / "existing.json"
    other.write_text('{"kind": "gpubench-result"}')
    return {fifo: "FIFO", link: "symbolic link", folder: "directory", other: "not a step profile"}


def test_profile_analytic_refuses_special_links_folders_and_other_files(tmp_path):
    for path, message in _special_outputs(tmp_path).items():
        before = os.lstat(path)
        run = CliRunner().invoke(main, ["profile", *TINY, "-o", str(path)])
        assert run.exit_code == 2 and message in run.output and run.output.count("\n") == 1, (path, run.output)
        after = os.lstat(path)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), path
    assert (tmp_path / "target.json").read_text() == "{}"
    assert json.loads((tmp_path / "existing.json").read_text()) == {"kind": "gpubench-result"}


def test_profile_analytic_replaces_an_earlier_profile(tmp_path):
    path = tmp_path / "p.json"
    for _ in range(2):
        run = CliRunner().invoke(main, ["profile", *TINY, "-o", str(path)])
        assert run.exit_code == 0, run.output
    assert load_profile(path).source == "analytic"


def test_simulate_refuses_a_linked_folder_or_linked_file_before_simulating(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "dirlink").symlink_to(real)
    run = CliRunner().invoke(main, ["simulate", *TINY, "--requests", "3", "-o", str(tmp_path / "dirlink")])
    assert run.exit_code == 2 and "not a folder" in run.output and run.output.count("\n") == 1, run.output
    assert list(real.iterdir()) == []
    folder = tmp_path / "sim"
    folder.mkdir()
    (folder / "simulation.json").symlink_to(real / "kept.json")
    run = CliRunner().invoke(main, ["simulate", *TINY, "--requests", "3", "-o", str(folder)])
    assert run.exit_code == 2 and "symbolic link" in run.output and run.output.count("\n") == 1, run.output
    assert (folder / "simulation.json").is_symlink() and list(real.iterdir()) == []


def test_simulate_refuses_an_unwritable_folder_before_simulating(tmp_path, monkeypatch):
    import roofline.serving.simulate as simulate_module

    def never(*args, **kwargs):
        raise AssertionError("simulated before checking the output folder")

    monkeypatch.setattr(simulate_module, "simulate", never)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = CliRunner().invoke(main, ["simulate", *TINY, "--requests", "3", "-o", str(blocker / "sub")])
    assert run.exit_code == 2 and "cannot write there" in run.output and run.output.count("\n") == 1, run.output


@pytest.mark.parametrize("workload", [["--requests", "5", "--prompt", "fixed:100000", "--output", "fixed:8"],
                                      ["--trace", "TRACE"]])
def test_requests_past_the_profiles_max_context_are_refused(tmp_path, workload):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,99999999999999999999,8\n")
    workload = [str(trace) if w == "TRACE" else w for w in workload]
    run = _simulate(tmp_path, "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", *workload)
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert "max context of 8192 tokens" in run.output and "--max-context" in run.output
    longest = "100008" if "fixed:100000" in workload else "100000000000000000007"
    assert longest in run.output.replace(",", "")


def test_an_slo_a_burst_already_meets_gives_the_burst_rate_as_a_lower_bound(tmp_path):
    run = _simulate(tmp_path, "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--efficiency", "flat",
                    "--engine", "none", "--requests", "50", "--slo", "ttft_p90=2,tpot_p99=0.1", "--no-report")
    assert run.exit_code == 0, run.output
    entry = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]
    capacity = entry["capacity"]
    assert capacity["capacity_is_lower_bound"] and capacity["tried"] == []
    assert capacity["capacity_requests_per_s"] == entry["summary"]["requests_per_s"]
    assert "SLO met even as a burst: capacity ≥ 15.4 requests/s" in run.output
    assert "e+" not in run.output and "≥15.4" in run.output


def test_an_slo_below_one_requests_own_latency_is_answered_without_searching_rates(tmp_path):
    """A TTFT limit of 1 µs is missed by every request served alone (its own prefill takes ms): no rate can meet it,
    so the answer comes from one lone request's simulation, not from replaying the workload at ever lower rates,
    and a line on stderr says why as it is found."""
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.serving.simulate import simulate
    from roofline.serving.workload import Request
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_model

    run = _simulate(tmp_path, "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--efficiency", "flat",
                    "--engine", "none", "--requests", "5", "--prompt", "fixed:16", "--output", "fixed:4",
                    "--slo", "ttft_p90=0.000001", "--no-report")
    assert run.exit_code == 0, run.output
    capacity = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]["capacity"]
    assert capacity["capacity_requests_per_s"] is None and capacity["tried"] == []
    profile = analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                               max_context=8192, gpu=load_gpu_spec("h100-sxm"))
    alone = simulate(profile, [Request(0, 0.0, 16, 4)], "continuous").requests[0].ttft_s
    line = f"capacity of continuous: every request served alone missed (TTFT p90 {seconds(alone)} > 1 µs)"
    assert line in run.stderr
    assert capacity["reason"] == ("no rate meets the SLO: even served alone, with no other request queued or "
                                  f"batched beside them, the requests miss it (TTFT p90 {seconds(alone)} > 1 µs)")


def test_the_capacity_search_prints_a_line_to_stderr_for_each_simulation_as_it_ends(tmp_path):
    run = _simulate(tmp_path, *ANALYTIC, "--engine", "none", "--requests", "30", "--policy", "paged",
                    "--slo", "ttft_p90=0.5,tpot_p99=0.004", "--no-report")
    assert run.exit_code == 0, run.output
    tried = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]["capacity"]["tried"]
    assert len(tried) >= 5
    lines = [line for line in run.stderr.splitlines() if line.startswith("capacity of paged: ")]
    assert "capacity of paged" not in run.stdout and len(lines) == 2 + len(tried)
    assert lines[0].startswith("capacity of paged: every request served alone met (TTFT p90 10 ms ≤ 500 ms, TPOT p99 ")
    assert lines[1].startswith("capacity of paged: a burst of them all (") and " missed (TTFT p90 " in lines[1]
    said = sorted(line.split(" (")[0] for line in lines[2:])
    assert said == sorted(f"capacity of paged: {significant(p['rate_requests_per_s'])} requests/s "
                          f"{'met' if p['met'] else 'missed'}" for p in tried)


def test_the_tiny_models_table_reads_in_significant_digits_with_units(tmp_path):
    path = tmp_path / "p.json"
    assert CliRunner().invoke(main, ["profile", *TINY, "-o", str(path)]).exit_code == 0
    # A table as wide as a pipe gets (pytest-xdist's workers set COLUMNS=80, which would split it)
    run = CliRunner().invoke(main, ["simulate", str(path), "--requests", "50", "--no-report", "-o",
                                    str(tmp_path / "sim")], env={"COLUMNS": "150"})
    assert run.exit_code == 0, run.output
    row = next(line for line in run.output.splitlines() if line.startswith("continuous"))
    assert "µs" in row and "0.0/" not in row and " 0.00 " not in row and "." not in row.split()[2], run.output


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "--seed -1: give an integer, 0 or more"),
    (["--prompt", "uniform:1:1e308"], "lengths reach past 1,000,000,000 tokens"),
    (["--prompt", "exp:1e300"], "lengths reach past 1,000,000,000 tokens"),
    (["--arrivals", "poisson:1e-300"], "give a higher rate"),
    (["--slo", "ttft_p90=inf"], "--slo"),
    (["--overhead-s", "1e308"], "--overhead-s 1e+308: give seconds from 0 to 3600"),
])
def test_absurd_workloads_slos_and_overheads_are_one_line_before_any_file(tmp_path, args, message):
    run = _simulate(tmp_path, *TINY, "--requests", "5", *args)
    assert run.exit_code == 2 and message in run.output and run.output.count("\n") == 1, run.output
    assert not (tmp_path / "sim" / "simulation.json").exists()


def test_a_trace_row_arriving_after_a_billion_seconds_is_refused_naming_its_line(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,8\n1e308,8,8\n")
    run = _simulate(tmp_path, *TINY, "--trace", str(trace))
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert "line 3" in run.output and "arrival_s must be a number from 0 to 1e+09 s" in run.output


def test_a_trace_written_with_a_byte_order_mark_is_read(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_bytes("\ufeffarrival_s,prompt_tokens,output_tokens\n0,8,4\n0.5,16,4\n".encode())
    run = _simulate(tmp_path, *TINY, "--trace", str(trace), "--no-report")
    assert run.exit_code == 0, run.output
    with (tmp_path / "sim" / "requests.csv").open() as stream:
        assert [row["prompt_tokens"] for row in csv.DictReader(stream)] == ["8", "16"]


def test_a_policy_option_given_twice_is_refused(tmp_path):
    run = _simulate(tmp_path, *TINY, "--requests", "3", "--policy", "continuous:max-batch=1:max-batch=2")
    assert run.exit_code == 2 and "max-batch is given twice" in run.output and run.output.count("\n") == 1


@pytest.mark.parametrize("extra, named", [(["--tp", "2"], "--tp"), (["--max-tokens", "1"], "--max-tokens"),
                                          (["--gpu", "h100-sxm", "--dtype", "fp16"], "--dtype, --gpu")])
def test_model_options_beside_a_profile_file_are_refused(tmp_path, extra, named):
    path = tmp_path / "p.json"
    assert CliRunner().invoke(main, ["profile", *TINY, "-o", str(path)]).exit_code == 0
    run = _simulate(tmp_path, str(path), "--requests", "3", *extra)
    assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
    assert f"{named}: these build an --analytic profile" in run.output


def test_neither_a_profile_nor_analytic_is_worded_for_that_case(tmp_path):
    run = _simulate(tmp_path, "--requests", "3")
    assert run.exit_code == 2 and "not both" not in run.output
    assert "give a PROFILE.json, or --analytic with --gpu SKU --model NAME" in run.output


def test_a_simulation_that_refuses_its_input_leaves_no_empty_output_folder(tmp_path):
    run = _simulate(tmp_path, *TINY, "--requests", "3", "--prompt", "fixed:100000")
    assert run.exit_code == 2 and "max context" in run.output
    assert not (tmp_path / "sim").exists()


def test_goodput_under_an_slo_is_printed_and_in_the_report(tmp_path):
    run = _simulate(tmp_path, *TINY, "--requests", "40", "--arrivals", "poisson:50", "--slo", "ttft_p90=1,itl_p99=1")
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "sim" / "simulation.json").read_text())
    summary = document["runs"][0]["summary"]
    share = summary["slo"]["goodput_requests_per_s"] / summary["requests_per_s"]
    assert "goodput req/s" in run.output and "meet SLO" in run.output
    sentence = f"continuous: goodput {significant(summary['slo']['goodput_requests_per_s'])} req/s: {share:.0%} of " \
               "the requests meet every limit (TTFT p90 ≤ 1 s, ITL p99 ≤ 1 s)."
    assert sentence in run.output
    report = (tmp_path / "sim" / "report.md").read_text()
    assert sentence in report and "| goodput req/s | meet SLO |" in report
    # Two tables that each fit a page (seventeen columns in one ran off it), the policy first in both.
    policies = report.split("## Policies", 1)[1].split("\n## ", 1)[0]
    assert policies.count("| policy | ") == 2 and "| policy | batch mean/max |" in policies
    # The workload in words, as a reader would say it (it was printed as a Python dict).
    assert "Workload: 40 requests, Poisson arrivals at 50 requests/s; prompts " in report and "{'" not in report
    plain = _simulate(tmp_path / "plain", *TINY, "--requests", "5", "--no-report")
    assert plain.exit_code == 0 and "goodput req/s" not in plain.output  # no SLO, no goodput columns


def test_weights_that_overflow_the_gpu_are_written_with_a_warning_and_never_simulated(tmp_path):
    """Llama-3-70B in bf16 on one H100: 139 GB of weights on 85.5 GB. The profile asked for is written and says
    so; simulate refuses it under every policy (continuous keeps no KV blocks, and ran it before)."""
    profile = tmp_path / "p.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-70b",
                                    "--efficiency", "flat", "-o", str(profile)])
    assert run.exit_code == 0 and profile.exists()
    assert "warning: its weights (139.0 GB a GPU) do not fit in 0.9 of 85.5 GB" in run.stderr
    assert "simulate and plan refuse it" in run.stderr
    for policy in ("continuous", "static:batch=8", "paged"):
        run = CliRunner().invoke(main, ["simulate", str(profile), "--requests", "4", "--policy", policy,
                                        "--no-report", "-o", str(tmp_path / policy.replace(":", "-"))])
        assert run.exit_code == 2 and run.output.count("\n") == 1, run.output
        assert "do not fit in 0.9 of 85.5 GB" in run.output
