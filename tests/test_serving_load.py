"""The load options a published serving benchmark is compared with: a closed loop of C clients (``--concurrency``),
mean latencies beside the percentiles, TTFT split into queueing and prefill, full KV reservation at admission,
a spec sheet of one's own (``--gpu-spec``) and length presets and files."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from serving_helpers import constant_profile

from microbench.cli.app import main
from roofline.serving.capacity import concurrency_capacity
from roofline.serving.metrics import Slo, summarize
from roofline.serving.policies import PolicyError, parse_policy
from roofline.serving.simulate import SimulationError, simulate
from roofline.serving.workload import Request, load_lengths, make_workload
from roofline.specs.gpus import profiles_dir
from roofline.specs.length_presets import PERCENTILES, PRESETS

TINY = ["--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b", "--efficiency", "flat", "--requests", "12"]


def _requests(outputs, prompt=5, arrival=0.0):
    return [Request(i, arrival, prompt, o) for i, o in enumerate(outputs)]


def _invoke(*args):
    return CliRunner().invoke(main, list(args))


def _one_line_refusal(run, *words):
    assert run.exit_code == 2, run.output
    line = run.output.strip()
    assert line.startswith("gpubench: error:") and "\n" not in line, line
    for word in words:
        assert word in line, line


# --- closed loop ----------------------------------------------------------------------------------------------

def test_one_client_sends_each_request_when_the_one_before_it_ends():
    # Every step costs 1 s: a request's prefill step emits its first token, then one decode per further token.
    outputs = (3, 1, 4, 2)
    run = simulate(constant_profile(), _requests(outputs, arrival=100.0), "continuous", concurrency=1)
    ends = np.cumsum(outputs).tolist()
    assert [r.finish_s for r in run.requests] == ends
    assert [r.arrival_s for r in run.requests] == [0.0, *ends[:-1]]
    assert all(r.ttft_s == 1.0 for r in run.requests)  # nothing ever waits: one request in flight


def test_c_clients_keep_exactly_c_requests_in_flight_until_the_requests_run_out():
    requests = make_workload(40, "poisson:1000", "uniform:4:40", "uniform:1:30", seed=3)
    run = simulate(constant_profile(), requests, "continuous", concurrency=3)
    assert sum(r.arrival_s == 0.0 for r in run.requests) == 3
    finishes = sorted(r.finish_s for r in run.requests)
    # Each request after the first three is sent at some request's finish (the one its client was waiting on).
    later = sorted(r.arrival_s for r in run.requests)[3:]
    assert later == finishes[:len(later)]
    # In flight at the start of each step (arrived, not finished) never exceeds the clients.
    for step in run.steps:
        in_flight = sum(r.arrival_s <= step.start_s < r.finish_s for r in run.requests)
        assert in_flight <= 3
    assert max(s.sequences for s in run.steps) == 3


def test_the_requests_own_arrival_times_do_not_matter_in_a_closed_loop():
    burst = make_workload(30, "burst", "uniform:4:40", "uniform:1:30", seed=5)
    spread = make_workload(30, "poisson:0.01", "uniform:4:40", "uniform:1:30", seed=5)
    a = simulate(constant_profile(), burst, "continuous", concurrency=4)
    b = simulate(constant_profile(), spread, "continuous", concurrency=4)
    assert [(r.arrival_s, r.finish_s) for r in a.requests] == [(r.arrival_s, r.finish_s) for r in b.requests]


def test_a_closed_loop_sends_in_id_order_even_against_the_arrival_order():
    """The engine sorts a closed loop's requests by id, not by arrival (it once sorted by arrival, then re-sorted
    by id): needed whenever the two orders differ, which no workload of the commands makes (drawn arrivals grow
    with the id, a trace and a benchmark are numbered in sending order) but simulate() takes.  One client, every
    step 1 s: request 0 (3 tokens) ends at 3, then 1 (1 token) at 4, then 2 (4 tokens) at 8."""
    requests = [Request(0, 5.0, 5, 3), Request(1, 0.0, 5, 1), Request(2, 2.0, 5, 4)]
    run = simulate(constant_profile(), requests, "continuous", concurrency=1)
    assert [(r.id, r.arrival_s, r.finish_s) for r in run.requests] == [(0, 0.0, 3.0), (1, 3.0, 4.0), (2, 4.0, 8.0)]


def test_calibrate_replays_a_closed_loop_through_the_simulators_own():
    """A benchmark of C clients (vLLM's max_concurrency) is replayed by simulate(concurrency=C): the same requests
    in sending order, the first C at once, each later one when a simulated one ends (measured sends unused)."""
    from roofline.calibrate.bench import BenchRun
    from roofline.calibrate.replay import replay
    from roofline.serving.latency import ServedRequest

    outputs = (3, 1, 4, 2)
    measured = tuple(ServedRequest(Request(i, 9.0 * i, 5, o), 9.0 * i + 1, 9.0 * i + o) for i, o in enumerate(outputs))
    bench = BenchRun("b.json", "vllm", measured, "concurrency:1", "synthetic")
    replayed = replay(constant_profile(), bench, "continuous", overhead=None)
    ends = np.cumsum(outputs).tolist()
    assert [r.finish_s for r in replayed.run.requests] == ends
    assert [r.arrival_s for r in replayed.run.requests] == [0.0, *ends[:-1]]
    direct = simulate(constant_profile(), bench.workload(), "continuous", concurrency=1)
    assert [(r.arrival_s, r.finish_s) for r in direct.requests] == [(r.arrival_s, r.finish_s)
                                                                   for r in replayed.run.requests]


def test_a_closed_loop_beside_conversations_is_refused():
    requests = make_workload(6, "burst", "fixed:4", "fixed:2", sessions="3:0")
    with pytest.raises(SimulationError, match="conversations"):
        simulate(constant_profile(), requests, "continuous", concurrency=2)


def test_simulate_concurrency_writes_the_clients_into_the_workload_record(tmp_path):
    run = _invoke("simulate", *TINY, "--concurrency", "2", "--slo", "ttft_p90=5", "--no-report",
                  "-o", str(tmp_path / "sim"))
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "sim" / "simulation.json").read_text())
    assert document["workload"]["concurrency"] == 2 and "arrivals" not in document["workload"]
    assert document["runs"][0]["capacity"]["capacity_concurrency"] is not None  # the clients searched, not a rate
    assert "slo" in document["runs"][0]["summary"]
    with (tmp_path / "sim" / "requests.csv").open() as stream:
        arrivals = [float(row["arrival_s"]) for row in csv.DictReader(stream)]
    assert arrivals.count(0.0) == 2


@pytest.mark.parametrize(("extra", "words"), [
    (["--concurrency", "0"], ["--concurrency", "from 1"]),
    (["--concurrency", "2", "--arrivals", "poisson:3"], ["--arrivals", "--concurrency"]),
    (["--concurrency", "2", "--rates", "1,2"], ["--rates"]),
    (["--concurrency", "2", "--sweep-load", "1,2"], ["--sweep-load", "open-loop"]),
    (["--concurrency", "2", "--replicas", "2"], ["fleet"]),
    (["--concurrency", "2", "--sessions", "3:1"], ["--sessions"]),
])
def test_simulate_refuses_what_a_closed_loop_cannot_mean(tmp_path, extra, words):
    _one_line_refusal(_invoke("simulate", *TINY, *extra, "-o", str(tmp_path / "sim")), *words)


def test_plan_refuses_a_closed_loop_naming_what_to_run_instead(tmp_path):
    profile = tmp_path / "p.json"
    assert _invoke("profile", *TINY[:-2], "-o", str(profile)).exit_code == 0
    run = _invoke("plan", str(profile), "--rate", "1", "--slo", "ttft_p90=1", "--concurrency", "4",
                  "-o", str(tmp_path / "plan"))
    _one_line_refusal(run, "--concurrency", "simulate --concurrency")
    assert not (tmp_path / "plan").exists()


def test_trace_with_poisson_arrivals_is_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,4\n1,8,4\n")
    run = _invoke("simulate", *TINY[:-2], "--trace", str(trace), "--arrivals", "poisson:5", "-o", str(tmp_path / "s"))
    _one_line_refusal(run, "--arrivals", "--trace")


# --- means, and TTFT's queueing and prefill ------------------------------------------------------------------

def test_ttft_splits_into_queueing_until_admission_and_prefill_after_it():
    # One slot, every step 1 s: request 1 waits for request 0's two steps, request 2 for four.
    run = simulate(constant_profile(), _requests((2, 2, 2)), "continuous:max-batch=1")
    assert [(r.queue_s, r.prefill_s) for r in run.requests] == [(0, 1), (2, 1), (4, 1)]
    # A prompt of 10 tokens chunked 4 at a time is admitted at once and prefilled over three steps.
    run = simulate(constant_profile(device_bytes=10**6), _requests((1,), prompt=10), "chunked:budget=4")
    assert (run.requests[0].queue_s, run.requests[0].prefill_s) == (0, 3)


def test_summary_means_are_the_means_of_each_request_and_queue_plus_prefill_is_ttft(tmp_path):
    run = _invoke("simulate", *TINY[:-2], "--requests", "60", "--arrivals", "poisson:40", "--policy", "paged",
                  "--no-report", "-o", str(tmp_path / "sim"))
    assert run.exit_code == 0, run.output
    summary = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]["summary"]
    with (tmp_path / "sim" / "requests.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    column = {name: np.array([float(r[f"{name}_s"]) for r in rows if r[f"{name}_s"]])
              for name in ("ttft", "tpot", "e2e", "queue", "prefill")}
    for name, values in column.items():
        assert summary[name]["mean_s"] == pytest.approx(values.mean(), rel=1e-6), name
    assert column["queue"].max() > 0  # some request waited: the split is not all prefill
    np.testing.assert_allclose(column["queue"] + column["prefill"], column["ttft"], rtol=1e-6, atol=1e-9)
    assert "mean TTFT" in run.output and "queueing" in run.output


def test_itl_mean_is_the_mean_of_every_pooled_gap():
    run = simulate(constant_profile(), _requests((2, 3, 5)), "continuous:max-batch=2")
    gaps = np.concatenate([np.diff(r.token_times_s) for r in run.requests])
    assert summarize(run, constant_profile(), 0.9)["itl"]["mean_s"] == pytest.approx(gaps.mean())


def test_an_slo_on_queueing_or_prefill_checks_that_part_of_ttft():
    run = simulate(constant_profile(), _requests((2, 2, 2)), "continuous:max-batch=1")
    checks = summarize(run, constant_profile(), 0.9, Slo.parse("queue_p50=1.5,prefill_p99=1"))["slo"]["checks"]
    assert checks["queue_p50"] == {"value_s": 2.0, "limit_s": 1.5, "met": False}
    assert checks["prefill_p99"]["met"] and checks["prefill_p99"]["value_s"] == 1.0
    # Goodput's rule per request: only request 0 waits no more than 1.5 s.
    assert Slo.parse("queue_p50=1.5").requests_meeting(run.requests).tolist() == [True, False, False]


def test_a_request_preempted_keeps_the_queueing_of_its_first_admission():
    # Three blocks of 4 tokens: both prompts fit, and the two requests need four blocks: one is preempted.
    requests = _requests((6, 6), prompt=3)
    run = simulate(constant_profile(device_bytes=13, weight_bytes=1), requests, "paged:block=4", mem_fraction=1.0)
    assert any(r.preemptions for r in run.requests)
    for r in run.requests:
        assert r.queue_s == 0 and r.queue_s + r.prefill_s == pytest.approx(r.ttft_s)


# --- full KV reservation at admission ------------------------------------------------------------------------

def test_full_reservation_admits_a_request_only_when_its_whole_length_fits_and_never_preempts():
    # Three blocks of 4 tokens; each request is 3 + 6 tokens, three blocks reserved whole: one at a time, each
    # sent on when the one before it frees its blocks.  Reserving prompts only, all three start and two are
    # preempted.
    requests = _requests((6, 6, 6), prompt=3)
    profile = constant_profile(device_bytes=13)
    full = simulate(profile, requests, "paged:block=4:reserve=full", mem_fraction=1.0)
    assert [(r.queue_s, r.first_token_s, r.finish_s, r.preemptions) for r in full.requests] == \
        [(0, 1, 6, 0), (6, 7, 12, 0), (12, 13, 18, 0)]
    assert full.policy["kv_reserve"] == "full"
    prompt = simulate(profile, requests, "paged:block=4", mem_fraction=1.0)
    assert sum(r.preemptions for r in prompt.requests) == 2


@pytest.mark.parametrize("policy", ["paged:block=4:reserve=full", "chunked:budget=64:block=4:reserve=full"])
def test_full_reservation_holds_every_running_request_whole_within_the_cache(policy):
    requests = make_workload(60, "poisson:5", "uniform:4:60", "uniform:1:60", seed=11)
    profile = constant_profile(device_bytes=401)  # 100 blocks of 4 tokens
    run = simulate(profile, requests, policy, mem_fraction=1.0)
    total = run.kv_blocks_total
    assert total == 100 and sum(r.preemptions for r in run.requests) == 0
    assert all((s.kv_blocks_used or 0) <= total and not s.preempted for s in run.steps)
    # Between admission and finish each request holds its whole length's blocks: at every step the requests
    # admitted and not yet finished fit together.
    for step in run.steps:
        held = sum(-(-(r.prompt_tokens + r.output_tokens) // 4) for r in run.requests
                   if r.scheduled_s <= step.start_s < r.finish_s)
        assert held <= total
    assert sum(r.preemptions for r in simulate(profile, requests, "paged:block=4", mem_fraction=1.0).requests)


@pytest.mark.parametrize(("text", "words"), [("paged:reserve=half", "prompt or full"),
                                             ("continuous:reserve=full", "unknown option")])
def test_reserve_is_a_block_cache_option_of_two_words(text, words):
    with pytest.raises(PolicyError, match=words):
        parse_policy(text)


# --- a spec sheet of one's own, and the link between GPUs ---------------------------------------------------

def _own_sheet(tmp_path, name, link_bytes_per_s=None, drop=None):
    """A copy of the shipped A100 PCIe sheet under another name, its link (bytes/s each way) replaced, or with
    one line dropped."""
    text = (profiles_dir() / "gpus" / "a100-pcie-80gb.toml").read_text()
    if link_bytes_per_s is not None:
        text = text.replace('kind = "PCIe Gen4 x16"\nlink_bytes_per_s = 32e9',
                            f'kind = "NVLink bridge"\nlink_bytes_per_s = {link_bytes_per_s!r}')
        assert "NVLink bridge" in text
    if drop is not None:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(drop))
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def _comm_table(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    run = _invoke("profile", "--analytic", "--model", "llama-3-8b", "--tp", "2", "--efficiency", "flat", *args,
                  "-o", str(out))
    assert run.exit_code == 0, run.output
    return json.loads(out.read_text())


def test_an_own_spec_sheet_is_read_as_a_shipped_one_and_its_link_is_what_the_all_reduces_cross(tmp_path):
    shipped = _comm_table(tmp_path, "shipped", "--gpu", "a100-pcie-80gb")
    copy = _comm_table(tmp_path, "copy", "--gpu-spec", str(_own_sheet(tmp_path, "my-a100")))
    assert copy["device"]["sku"] == "my-a100"
    assert copy["comm"]["time_s"] == shipped["comm"]["time_s"] and copy["linears"] == shipped["linears"]
    bridged = _comm_table(tmp_path, "bridged", "--gpu-spec", str(_own_sheet(tmp_path, "a100-nvl", 300e9)))
    assert all(b < s for b, s in zip(bridged["comm"]["time_s"], shipped["comm"]["time_s"], strict=True))
    # The same link given on the command line: 300 GB/s each way is 2400 Gb/s.
    override = _comm_table(tmp_path, "override", "--gpu", "a100-pcie-80gb", "--interconnect-gbps", "2400")
    assert override["comm"]["time_s"] == bridged["comm"]["time_s"]
    assert "--interconnect-gbps 2400" in override["comm"]["source"]


@pytest.mark.parametrize(("args", "words"), [
    (["--gpu", "h200-sxm", "--gpu-spec", "x.toml"], ["one spec sheet"]),
    (["--gpu-spec", "SHIPPED"], ["shipped SKU"]),
    (["--gpu-spec", "MALFORMED"], ["--gpu-spec", "malformed"]),
    (["--gpu-spec", "MISSING"], ["cannot read"]),
    (["--gpu", "h200-sxm", "--interconnect-gbps", "0"], ["--interconnect-gbps"]),
    (["--gpu", "h200-sxm", "--interconnect-gbps", "800"], ["--tp 1"]),
])
def test_spec_sheet_options_refuse_what_they_cannot_use(tmp_path, args, words):
    shipped = tmp_path / "h200-sxm.toml"
    shipped.write_text((profiles_dir() / "gpus" / "h200-sxm.toml").read_text())
    paths = {"SHIPPED": str(shipped), "MISSING": str(tmp_path / "none.toml"),
             "MALFORMED": str(_own_sheet(tmp_path, "broken", drop="bandwidth_bytes_per_s"))}
    args = [paths.get(a, a) for a in args]
    run = _invoke("simulate", "--analytic", "--model", "llama-3-8b", *args, "--requests", "4",
                  "-o", str(tmp_path / "sim"))
    _one_line_refusal(run, *words)
    assert not (tmp_path / "sim").exists()


def test_a_measured_profile_takes_no_spec_sheet(tmp_path):
    run = _invoke("profile", "--model", "llama-3-8b", "--gpu-spec", "x.toml", "-o", str(tmp_path / "p.json"))
    _one_line_refusal(run, "--gpu-spec", "--analytic")


# --- lengths from a file -----------------------------------------------------------------------------------

def _lengths_csv(tmp_path, rows, header="prompt_tokens,output_tokens,source"):
    path = tmp_path / "lengths.csv"
    path.write_text(header + "\n" + "".join(f"{row}\n" for row in rows))
    return path


def test_lengths_are_drawn_as_the_files_pairs_each_prompt_with_its_own_output(tmp_path):
    path = _lengths_csv(tmp_path, ["100,20,a", "7,300,b", "2000,5,c"])
    requests = make_workload(300, "burst", "fixed:1", "fixed:1", seed=2, lengths=load_lengths(path))
    pairs = [(r.prompt_tokens, r.output_tokens) for r in requests]
    assert set(pairs) == {(100, 20), (7, 300), (2000, 5)}  # drawn whole, never mixed across rows
    again = make_workload(300, "poisson:3", "fixed:1", "fixed:1", seed=2, lengths=load_lengths(path))
    assert [(r.prompt_tokens, r.output_tokens) for r in again] == pairs  # the arrivals leave the lengths alone


def test_simulate_lengths_keeps_the_file_in_the_workload_record(tmp_path):
    path = _lengths_csv(tmp_path, ["100,20,a", "7,30,b"])
    run = _invoke("simulate", *TINY, "--lengths", str(path), "--no-report", "-o", str(tmp_path / "sim"))
    assert run.exit_code == 0, run.output
    workload = json.loads((tmp_path / "sim" / "simulation.json").read_text())["workload"]
    assert workload["lengths"] == str(path) and "prompt" not in workload and "output" not in workload


@pytest.mark.parametrize(("rows", "header", "extra", "words"), [
    (["5,0"], "prompt_tokens,output_tokens", [], ["line 2", "from 1"]),
    (["5,x"], "prompt_tokens,output_tokens", [], ["line 2"]),
    (["5"], "prompt_tokens", [], ["lacks column(s) output_tokens"]),
    ([], "prompt_tokens,output_tokens", [], ["no rows"]),
    (["5,5"], "prompt_tokens,output_tokens", ["--output", "fixed:3"], ["--output", "--lengths"]),
])
def test_lengths_refuses_a_file_it_cannot_use_and_specs_beside_it(tmp_path, rows, header, extra, words):
    path = _lengths_csv(tmp_path, rows, header)
    run = _invoke("simulate", *TINY, "--lengths", str(path), *extra, "-o", str(tmp_path / "sim"))
    _one_line_refusal(run, *words)
    assert not (tmp_path / "sim").exists()


def test_lengths_beside_a_trace_is_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,4\n")
    path = _lengths_csv(tmp_path, ["5,5,a"])
    run = _invoke("simulate", *TINY[:-2], "--trace", str(trace), "--lengths", str(path), "-o", str(tmp_path / "s"))
    _one_line_refusal(run, "--lengths", "--trace")


def test_plan_refuses_length_specs_beside_lengths(tmp_path):
    path = _lengths_csv(tmp_path, ["5,5,a"])
    run = _invoke("plan", "p.json", "--rate", "1", "--slo", "ttft_p90=1", "--lengths", str(path), "--prompt",
                  "fixed:3", "-o", str(tmp_path / "plan"))
    _one_line_refusal(run, "--prompt", "--lengths")


# --- the most clients meeting an SLO ---------------------------------------------------------------------------

def _one_slot(clients):
    # One slot, 1 s a step, two steps a request: with C clients a request queues behind the C - 1 others sent
    # before it, 2 (C - 1) s once the loop is full.
    return simulate(constant_profile(), _requests((2,) * 20), "continuous:max-batch=1", concurrency=clients)


def test_the_concurrency_search_finds_the_most_clients_whose_queueing_meets_the_slo():
    found = concurrency_capacity(_requests((2,) * 20), Slo.parse("queue_p99=4.5"), _one_slot)
    assert found.concurrency == 3 and not found.lower_bound  # 3 clients queue 4 s at most, 4 clients 6 s
    assert [p["concurrency"] for p in found.tried] == [1, 2, 3, 4]
    assert [p["met"] for p in found.tried] == [True, True, True, False]
    assert found.capacity_requests_per_s == pytest.approx(0.5)  # one slot: a request every two steps
    assert found.to_dict()["capacity_concurrency"] == 3


def test_the_concurrency_search_answers_none_and_lower_bounds_in_words():
    none = concurrency_capacity(_requests((2,) * 20), Slo.parse("prefill_p50=0.5"), _one_slot)
    assert none.concurrency is None and "even one client" in none.reason
    every = concurrency_capacity(_requests((2,) * 20), Slo.parse("e2e_p99=100"), _one_slot)
    assert every.concurrency == 20 and every.lower_bound


def test_simulate_concurrency_with_an_slo_searches_the_clients(tmp_path):
    run = _invoke("simulate", *TINY, "--concurrency", "2", "--slo", "ttft_p90=5", "--no-report",
                  "-o", str(tmp_path / "sim"))
    assert run.exit_code == 0, run.output
    capacity = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]["capacity"]
    assert capacity["capacity_concurrency"] == 12 and capacity["capacity_is_lower_bound"]  # 12 requests
    assert "clients" in run.output


# --- the ShareGPT length preset ----------------------------------------------------------------------------

SHAREGPT_TRACE = (Path(__file__).resolve().parents[2] / "shared" / "traces"
                  / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")


def test_the_sharegpt_preset_draws_its_tables_quantiles():
    preset = PRESETS["sharegpt"]
    for role in ("prompt", "output"):
        draws = preset.sample(role, 200_000, np.random.default_rng(3))
        table = dict(zip(PERCENTILES, preset.quantiles(role), strict=True))
        for p in (10.0, 25.0, 50.0, 75.0, 90.0):
            assert np.percentile(draws, p) == pytest.approx(table[p], rel=0.03), (role, p)
        assert table[0.0] <= draws.min() and draws.max() <= table[100.0]


def test_sharegpt_prompts_and_outputs_keep_the_traces_cut_on_a_request():
    requests = make_workload(20_000, "burst", "sharegpt", "sharegpt", seed=1)
    totals = np.array([r.prompt_tokens + r.output_tokens for r in requests])
    assert totals.max() <= 8192
    assert np.median([r.prompt_tokens for r in requests]) == pytest.approx(1730, rel=0.05)
    assert np.median([r.output_tokens for r in requests]) == pytest.approx(415, rel=0.05)


def test_sharegpt_for_one_role_draws_that_roles_table():
    requests = make_workload(5_000, "burst", "fixed:10", "sharegpt", seed=1)
    outputs = [r.output_tokens for r in requests]
    assert {r.prompt_tokens for r in requests} == {10}
    assert max(outputs) <= 1024 and np.median(outputs) == pytest.approx(415, rel=0.05)


def test_simulate_describes_the_preset_with_its_source(tmp_path):
    run = _invoke("simulate", *TINY, "--prompt", "sharegpt", "--output", "sharegpt", "-o", str(tmp_path / "sim"))
    assert run.exit_code == 0, run.output
    assert json.loads((tmp_path / "sim" / "simulation.json").read_text())["workload"]["prompt"] == "sharegpt"
    report = (tmp_path / "sim" / "report.md").read_text()
    assert "sharegpt_8k_filtered_stats_llama2_tokenizer.csv" in report and "median 415 tokens" in report


def test_a_length_spec_it_does_not_know_names_the_presets(tmp_path):
    run = _invoke("simulate", *TINY, "--prompt", "sharegpt:3", "-o", str(tmp_path / "sim"))
    _one_line_refusal(run, "sharegpt:3", "the preset sharegpt takes no fields")
    run = _invoke("simulate", *TINY, "--prompt", "gauss:3", "-o", str(tmp_path / "sim"))
    _one_line_refusal(run, "gauss:3", "or sharegpt")


def test_lengths_reads_vidur_and_sarathi_serve_trace_columns(tmp_path):
    path = _lengths_csv(tmp_path, ["74,918,992,0.08", "290,905,1195,0.32"],
                        "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio")
    assert load_lengths(path) == [(74, 918), (290, 905)]


def _fit(path):
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, str(root / "scripts" / "fit_length_preset.py"), str(path)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}, check=True)


def test_the_fit_script_tables_a_files_quantiles(tmp_path):
    rows = [f"{p},{o},x" for p, o in zip(range(1, 1001), range(1000, 0, -1), strict=True)]
    out = _fit(_lengths_csv(tmp_path, rows)).stdout
    prompt = tuple(int(round(v)) for v in np.percentile(np.arange(1, 1001), PERCENTILES))
    assert f"prompt={prompt}," in out and "1,000 requests" in out and "matches no preset" in out


@pytest.mark.skipif(not SHAREGPT_TRACE.exists(), reason=f"Sarathi-Serve's ShareGPT trace is not at {SHAREGPT_TRACE} "
                    "(github.com/microsoft/sarathi-serve, data/processed_traces/, commit 72339db)")
def test_the_sharegpt_preset_is_the_fit_of_sarathi_serves_trace():
    assert "matches the preset 'sharegpt'" in _fit(SHAREGPT_TRACE).stdout
