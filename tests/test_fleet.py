"""Fleets: one replica with any router is the one-replica simulation; the routers' rules and the replica state
they read; prefill and decode apart on a hand-computed request; two replicas' capacity; ``simulate --replicas``
and ``gpubench plan`` end to end (one shared run each), their documents against the schemas."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from serving_helpers import constant_profile, token_linear_profile

from microbench.cli.app import main
from roofline.core.units import seconds
from roofline.fleet.handover import KvLink
from roofline.fleet.planner import smallest_meeting, usd_per_million_output_tokens
from roofline.fleet.replicas import FleetLayout, Member, simulate_fleet
from roofline.fleet.router import Router
from roofline.fleet.summary import fleet_section
from roofline.serving.capacity import capacity_under
from roofline.serving.metrics import Slo, summarize
from roofline.serving.policies import ROUTERS, parse_policy
from roofline.serving.report import replica_rows
from roofline.serving.simulate import Replica, simulate
from roofline.serving.step_log import FIELDS
from roofline.serving.workload import Request, make_workload


def schema_errors(name, document):
    """The schema check of tests/test_document_schemas.py, imported here so that a machine without the test
    extra's jsonschema skips only the tests that validate, not every fleet test."""
    from test_document_schemas import schema_errors as errors

    return errors(name, document)


# The flat achievable ceilings: the same numbers with or without the [reference] extra installed.
ANALYTIC = ["--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b", "--max-tokens", "8192",
            "--max-context", "2048", "--efficiency", "flat"]


@pytest.mark.parametrize("policy", ["paged:block=4", "chunked:budget=32", "static:batch=4"])
def test_one_replica_with_any_router_is_the_one_replica_simulation(policy):
    profile = token_linear_profile(0.01, 0.001)
    requests = make_workload(120, "poisson:20", "uniform:5:50", "exp:20:100", seed=1)
    alone = simulate(profile, requests, policy)
    for router in ROUTERS:
        fleet = simulate_fleet(profile, requests, policy, FleetLayout(1, router))
        assert [(r.id, r.first_token_s, r.finish_s, r.preemptions, list(r.token_times_s)) for r in fleet.requests] \
            == [(r.id, r.first_token_s, r.finish_s, r.preemptions, list(r.token_times_s)) for r in alone.requests]
        for name in FIELDS:
            np.testing.assert_array_equal(fleet.steps.column(name), alone.steps.column(name))
        assert summarize(fleet, profile, 0.9) == summarize(alone, profile, 0.9)


class Load:
    def __init__(self, outstanding, waiting):
        self._outstanding, self._waiting = outstanding, waiting

    def outstanding(self, time_s):
        return self._outstanding

    def waiting(self, time_s):
        return self._waiting


def test_each_router_picks_by_its_own_rule_and_ties_go_to_the_next_in_turn():
    replicas = [Load(3, 0), Load(1, 1), Load(2, 0)]
    picks = {name: [Router(name).choose(replicas, 0.0)] for name in ROUTERS}
    assert picks == {"least-loaded": [1], "shortest-queue": [0], "round-robin": [0]}
    router, idle = Router("least-loaded"), [Load(0, 0)] * 3
    assert [router.choose(idle, 0.0) for _ in range(4)] == [0, 1, 2, 0]  # an idle fleet is spread
    with pytest.raises(ValueError, match="unknown router"):
        Router("fastest")


@pytest.mark.parametrize("name, load", [("least-loaded", lambda n: Load(n, 0)),
                                        ("shortest-queue", lambda n: Load(0, n))])
def test_equal_busy_loads_go_to_the_first_tied_replica_after_the_one_chosen_last(name, load):
    """Not only idle replicas tie: among replicas of one request each, the first after the last choice wins, so
    a fleet of equal loads is also taken in turn."""
    router, busy = Router(name), [load(2), load(1), load(1), load(1)]
    assert [router.choose(busy, 0.0) for _ in range(4)] == [1, 2, 3, 1]


def test_a_tiny_fleet_takes_equally_loaded_replicas_in_turn():
    """Three replicas, every step 1 s: requests 0-2 arrive at 0 (one each), 3-5 at 0.5, when each replica is
    still running its first: every load ties at 1, then the untouched ones tie at 1 below 2."""
    requests = [Request(i, 0.0 if i < 3 else 0.5, 4, 3) for i in range(6)]
    run = simulate_fleet(constant_profile(), requests, "continuous", FleetLayout(3, "least-loaded"))
    assert [replica for replica, _ in run.placement] == [0, 1, 2, 0, 1, 2]


def test_a_replica_counts_what_a_running_step_has_not_finished_yet_and_what_arrived_since():
    """Every step costs 1 s: B (one token) finishes at the end of the first step, at t = 1."""
    member = Member(Replica(constant_profile(), parse_policy("continuous"), None, None))
    member.replica.add(Request(0, 0.0, 4, 3))
    member.replica.add(Request(1, 0.0, 4, 1))
    member.run_until(0.5)  # the step from 0 to 1 has started: B is still outstanding at 0.5
    assert (member.outstanding(0.5), member.waiting(0.5)) == (2, 0)
    member.replica.add(Request(2, 0.5, 4, 1))
    assert member.waiting(0.5) == 1  # arrived mid-step: waits for the next
    member.run_until(1.0)
    assert member.outstanding(1.0) == 2  # B is done at 1.0; A and C are not


def test_two_replicas_serve_well_over_the_capacity_of_one_under_the_same_slo():
    """The capacity search of ``simulate --slo``, on one and on two replicas of the same profile and workload (the
    benchmark, scripts/bench_fleet.py, does it on Llama-3-8B)."""
    profile, slo = token_linear_profile(0.01, 0.0002), Slo.parse("ttft_p90=0.05")
    requests = make_workload(150, "burst", "fixed:50", "exp:20:60", seed=0)
    capacity = {}
    for replicas in (1, 2):
        def run_at(workload, replicas=replicas):
            return simulate_fleet(profile, workload, "continuous:max-batch=16", FleetLayout(replicas, "least-loaded"))

        found = capacity_under(requests, slo, run_at)
        assert not found.lower_bound
        capacity[replicas] = found.capacity_requests_per_s
    assert capacity[2] >= 1.8 * capacity[1]


def test_prefill_and_decode_apart_by_hand():
    """A step of T tokens costs 10 ms + 1 ms per token; the KV cache is 1 B a token, over 1000 B/s with 2 ms of
    latency.  One request of a 100-token prompt and 4 output tokens: prefill 0.110 s (its first token), transfer
    0.102 s, then three decode steps of 0.011 s each.  A one-token request never leaves its prefill replica."""
    profile = token_linear_profile(0.01, 0.001)
    layout = FleetLayout(router="round-robin", split=(1, 1), link=KvLink(1000.0, 0.002, "test link"))
    run = simulate_fleet(profile, [Request(0, 0.0, 100, 4), Request(1, 5.0, 100, 1)], "continuous", layout)
    first, second = run.requests
    assert first.token_times_s[0] == pytest.approx(0.110)
    assert list(first.token_times_s[1:]) == pytest.approx([0.223, 0.234, 0.245])
    assert (first.ttft_s, first.e2e_s) == (pytest.approx(0.110), pytest.approx(0.245))
    assert run.transfer_s == pytest.approx((0.102,))
    assert list(second.token_times_s) == pytest.approx([5.110]) and second.finish_s == pytest.approx(5.110)
    assert run.placement == ((0, 1), (0, None))
    section = fleet_section(run, profile, 0.9)
    assert [(r["role"], r["requests"], r["output_tokens"]) for r in section["replicas"]] == [
        ("prefill", 2, 2), ("decode", 1, 3)]
    assert section["kv_transfer_s"] == {"count": 1, "mean_s": pytest.approx(0.102), "max_s": pytest.approx(0.102)}


def test_the_fewest_replicas_search_finds_the_threshold_from_any_guess():
    for threshold in (1, 2, 7, 100):
        for guess in (1, 3, 50, 4096):
            calls = []

            def met(n, calls=calls, threshold=threshold):
                calls.append(n)
                return n >= threshold

            assert smallest_meeting(met, guess, 1, 4096) == threshold
            assert len(calls) <= 2 * math.log2(4096) + 2
    assert smallest_meeting(lambda n: n >= 5000, 10, 1, 4096) is None
    assert smallest_meeting(lambda n: n >= 3, 1, 4, 10) == 4  # nothing below the floor is tried
    assert usd_per_million_output_tokens(3.6, 2, 1000.0) == pytest.approx(2.0)  # $7.2/h for 3.6M tokens/h


@pytest.fixture(scope="module")
def fleet_simulation(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet") / "sim"
    run = CliRunner().invoke(main, ["simulate", *ANALYTIC, "--requests", "60", "--arrivals", "poisson:40",
                                    "--policy", "paged", "--replicas", "3", "--router", "round-robin",
                                    "--slo", "ttft_p90=0.5", "--no-report", "-o", str(out)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return run.output, out


def test_simulate_replicas_writes_pooled_and_per_replica_figures(fleet_simulation):
    output, out = fleet_simulation
    document = json.loads((out / "simulation.json").read_text(encoding="utf-8"))
    assert schema_errors("simulation", document) == []
    assert document["fleet"] == {"replicas": 3, "router": "round-robin", "prefill_replicas": None,
                                 "decode_replicas": None, "kv_link": None}
    run = document["runs"][0]
    replicas = run["fleet"]["replicas"]
    assert [r["requests"] for r in replicas] == [20, 20, 20] and run["fleet"]["load_imbalance"] == 1.0
    assert run["summary"]["requests"] == 60 and sum(r["output_tokens"] for r in replicas) == \
        run["summary"]["output_tokens"]
    assert run["summary"]["busy_s"] == pytest.approx(sum(r["busy_s"] for r in replicas))
    assert "Fleet: 3 replicas of TP 1 (3 GPUs) behind round-robin." in output
    assert "requests per replica 20–20 (load imbalance 1.00)" in output
    with (out / "requests.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    assert [row["replica"] for row in rows[:4]] == ["0", "1", "2", "0"] and rows[0]["decode_replica"] == ""
    assert [row[:3] for row in replica_rows(run["fleet"])] == [("0", "serving", "20"), ("1", "serving", "20"),
                                                                ("2", "serving", "20")]


def test_simulate_disaggregated_takes_the_spec_sheets_link(tmp_path):
    run = CliRunner().invoke(main, ["simulate", *ANALYTIC, "--requests", "8", "--prompt", "fixed:512",
                                    "--disaggregate", "1:2", "--no-report", "-o", str(tmp_path / "sim")])
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "sim" / "simulation.json").read_text(encoding="utf-8"))
    assert schema_errors("simulation", document) == []
    link = document["fleet"]["kv_link"]
    assert (link["bytes_per_s"], link["latency_s"]) == (450e9, 0.6e-6) and "NVLink 4" in link["source"]
    # Llama-3-8B keeps 128 KiB of bf16 KV a token: 512 tokens cross 450 GB/s in 149 µs, plus one hop.
    transfer = document["runs"][0]["fleet"]["kv_transfer_s"]
    assert transfer["max_s"] == pytest.approx(512 * 131072 / 450e9 + 0.6e-6)


@pytest.fixture(scope="module")
def candidates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("candidates")
    for name, gpu, tp in (("h200.json", "h200-sxm", "1"), ("h100-tp2.json", "h100-sxm", "2")):
        run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", gpu, "--model", "llama-3-8b", "--tp", tp,
                                        "--max-tokens", "8192", "--max-context", "2048", "--efficiency", "flat",
                                        "-o", str(folder / name)])
        assert run.exit_code == 0, run.output
    return [str(folder / "h200.json"), str(folder / "h100-tp2.json")]


@pytest.fixture(scope="module")
def plan_run(candidates, tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plan"
    run = CliRunner().invoke(main, ["plan", *candidates, "--rate", "20,200", "--slo", "ttft_p90=0.3,tpot_p99=0.02",
                                    "--requests", "150", "--policy", "paged", "--gpu-hour-usd", "h100-sxm=2.5",
                                    "--disaggregate", "-o", str(out)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return run.output, json.loads((out / "plan.json").read_text(encoding="utf-8")), out


def test_plan_answers_gpus_per_candidate_and_rate_never_fewer_at_the_higher_rate(plan_run):
    output, document, out = plan_run
    assert schema_errors("plan", document) == []
    assert [c["sku"] for c in document["candidates"]] == ["h200-sxm", "h100-sxm"]
    for candidate in document["candidates"]:
        tp, price = candidate["profile"]["tp"], candidate["gpu_hour_usd"]
        for layout in ("aggregated", "disaggregated"):
            low, high = candidate["plans"][0][layout]
            assert low["met"] and high["met"]
            assert high["gpus"] >= low["gpus"]
            if layout == "aggregated":  # ten times the rate needs more than one replica's worth
                assert high["gpus"] > low["gpus"]
            for point in (low, high):
                assert point["gpus"] == point["replicas"] * tp
                assert point["tokens_per_s_per_gpu"] == pytest.approx(point["tokens_per_s"] / point["gpus"])
                expected = None if price is None else usd_per_million_output_tokens(price, point["gpus"],
                                                                                    point["tokens_per_s"])
                assert point["usd_per_million_output_tokens"] == (None if expected is None else
                                                                   pytest.approx(expected))
                assert [t["met"] for t in point["tried"] if t["replicas"] == point["replicas"]
                        and t["prefill_replicas"] == point["prefill_replicas"]] == [True]
                if layout == "disaggregated":
                    assert point["prefill_replicas"] + point["decode_replicas"] == point["replicas"]
                    smaller = [t for t in point["tried"] if t["replicas"] < point["replicas"]]
                    assert all(not t["met"] for t in smaller if t["decode_replicas"] == point["decode_replicas"])
                else:  # one fewer replica was tried and missed the SLO (or there is none fewer)
                    assert point["replicas"] == 1 or {"replicas": point["replicas"] - 1, "prefill_replicas": None,
                                                      "decode_replicas": None, "met": False} in point["tried"]
    assert "$/M tokens" in output and "Llama 3 8B, h100-sxm, TP 2, bf16" in output
    for name in ("report.html", "report.md", "gpus_rate.png", "cost_rate.png"):
        assert (out / name).stat().st_size > 0, name


def test_the_plan_table_shows_the_percentile_of_the_metric_the_slo_names(candidates, tmp_path):
    """A plan held to a TPOT SLO shows TPOT P99 beside its limit, not another metric's tail (an ITL P99 above
    the TPOT limit read as a violation); the workload and the SLO are words, not a Python dict."""
    out = tmp_path / "p"
    run = CliRunner().invoke(main, ["plan", candidates[0], "--rate", "5", "--slo", "tpot_p99=0.05", "--requests", "30",
                                    "--policy", "paged", "-o", str(out)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    document = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    assert schema_errors("plan", document) == []
    point = document["candidates"][0]["plans"][0]["aggregated"][0]
    assert point["met"] and point["slo_s"] == {"tpot_p99": point["tpot_p99_s"]} and point["tpot_p99_s"] <= 0.05
    report = (out / "report.md").read_text(encoding="utf-8")
    header = next(line for line in report.splitlines() if line.startswith("| candidate |"))
    assert header.endswith("| TPOT p99 (≤ 50 ms) |") and "ITL" not in header and "TTFT" not in header
    row = next(line for line in report.splitlines() if line.startswith("| Llama 3 8B"))
    assert row.endswith(f"| {seconds(point['tpot_p99_s'])} |")
    assert "TPOT p99 (≤ 50 ms)" in run.output and "ITL p99" not in run.output
    assert "{" not in report and "SLO TPOT p99 ≤ 50 ms." in report
    assert "Workload: 30 requests; prompts 512 tokens each; outputs exponential, mean 128 tokens, capped at 512; " \
        "seed 0, at each rate as Poisson arrivals" in report


def test_plan_reports_an_slo_no_fleet_meets_as_not_met_and_exits_0(candidates, tmp_path):
    """300 requests at 5000/s: each alone meets the 12 ms TTFT (10 ms), but two replicas do not (the fleet is
    simulated at the bound and found short); a limit under a request's own prefill is answered without a fleet.
    (300: 20 requests at 5000/s arrive within 4 ms, too short for any fleet to show it keeps up: planner.COVERED.)"""
    run = CliRunner().invoke(main, ["plan", candidates[0], "--rate", "5000", "--slo", "ttft_p90=0.012",
                                    "--requests", "300", "--max-gpus", "2", "--engine", "none", "--no-report",
                                    "-o", str(tmp_path / "p")])
    assert run.exit_code == 0, run.output
    assert "the SLO is not met up to 2 GPUs at 5000 requests/s" in run.stdout
    assert "h200.json, continuous: 2 replicas behind round-robin at 5000 requests/s missed (TTFT p90 " in run.stderr
    point = json.loads((tmp_path / "p" / "plan.json").read_text())["candidates"][0]["plans"][0]["aggregated"][0]
    assert (point["met"], point["replicas"], point["gpus"]) == (False, None, None)
    assert point["tried"] == [{"replicas": 2, "prefill_replicas": None, "decode_replicas": None, "met": False}]
    run = CliRunner().invoke(main, ["plan", candidates[0], "--rate", "5", "--slo", "ttft_p90=0.000001",
                                    "--requests", "5", "--max-gpus", "4", "--engine", "none", "--no-report",
                                    "-o", str(tmp_path / "q")])
    assert run.exit_code == 0, run.output
    assert "no fleet meets the SLO at 5 requests/s: even served alone" in run.output
    assert "(TTFT p90 10 ms > 1 µs)" in run.output
    point = json.loads((tmp_path / "q" / "plan.json").read_text())["candidates"][0]["plans"][0]["aggregated"][0]
    assert (point["met"], point["replicas"], point["tried"]) == (False, None, [])


def test_plan_refuses_a_price_for_a_sku_no_candidate_runs_on(candidates, tmp_path):
    run = CliRunner().invoke(main, ["plan", candidates[0], "--rate", "5", "--slo", "ttft_p90=1",
                                    "--gpu-hour-usd", "h100-pcie=2", "-o", str(tmp_path / "p")])
    assert run.exit_code == 2 and "--gpu-hour-usd prices h100-pcie, which no profile runs on (they run on " \
        "h200-sxm)" in run.output
    assert not (tmp_path / "p").exists()


def test_a_plan_counts_every_gpu_of_an_expert_parallel_replica(tmp_path):
    """A mixture over EP 2 runs each replica on 2 GPUs whatever its TP: the plan's GPUs, tokens/s per GPU and
    cost per token count both, as simulate's energy and load sweep do, and its label says EP."""
    profile = tmp_path / "moe.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--hf-config",
                                    "tests/data/tiny-qwen3-moe-config.json", "--ep", "2", "--max-tokens", "1024",
                                    "--max-context", "256", "--efficiency", "flat", "-o", str(profile)])
    assert run.exit_code == 0, run.output
    run = CliRunner().invoke(main, ["plan", str(profile), "--rate", "4", "--slo", "tpot_p99=1", "--requests", "20",
                                    "--prompt", "fixed:32", "--output", "fixed:8", "--gpu-hour-usd", "h100-sxm=2",
                                    "--no-report", "-o", str(tmp_path / "p")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    (candidate,) = json.loads((tmp_path / "p" / "plan.json").read_text())["candidates"]
    point = candidate["plans"][0]["aggregated"][0]
    assert point["met"] and point["gpus"] == point["replicas"] * 2
    assert point["usd_per_million_output_tokens"] == pytest.approx(
        usd_per_million_output_tokens(2, point["gpus"], point["tokens_per_s"]))
    assert "TP 1, EP 2" in run.output and "(2 GPUs)" in point["sentence"]


def test_a_plan_with_an_unpriced_candidate_never_calls_its_answer_the_cheapest(plan_run):
    """Only the H100 has a price: the answer is the plan on the front with the most tokens/s per GPU, said so."""
    output, document, _ = plan_run
    for answer in document["answers"]:
        assert answer["met"] and "cheapest" not in answer["sentence"]
        assert "the plan on the front with the most tokens/s per GPU (not every plan is priced)" in answer["sentence"]
    assert "cheapest" not in output
