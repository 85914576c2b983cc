"""Throughput against interactivity and energy per token: the Pareto front of a load sweep, ``simulate
--sweep-load`` end to end, tokens per joule and per dollar on a hand-checkable run, and a profile without a power
figure saying why."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from click.testing import CliRunner
from serving_helpers import constant_profile

from microbench.cli.app import main
from microbench.serving.profile_power import measured_power
from roofline.analysis.frontier import pareto_front
from roofline.serving.capacity import Fleet, load_point, load_sweep
from roofline.serving.metrics import energy_figures
from roofline.serving.profile_doc import ProfileDocError, StepProfile, no_power, power_record, save_profile
from roofline.serving.profiles.analytic import sku_power
from roofline.serving.simulate import simulate
from roofline.serving.workload import Request
from roofline.specs.gpus import load_gpu_spec

ANALYTIC = ["--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--efficiency", "flat"]


def _dominated(point, others) -> bool:
    return any(o[0] >= point[0] and o[1] >= point[1] and o != point for o in others)


def test_the_front_is_exactly_the_points_no_other_dominates():
    points = [(1.0, 10.0), (2.0, 8.0), (2.0, 9.0), (3.0, 5.0), (1.5, 7.0), (3.0, 5.0), (0.5, 10.0), None, (4.0, 1.0)]
    # (2, 8) loses to (2, 9); (1.5, 7) to (2, 8); (0.5, 10) to (1, 10); the two (3, 5) are equal, neither dominates.
    assert pareto_front(points) == [True, False, True, True, False, True, False, None, True]


def test_points_equal_but_for_float_noise_share_the_front():
    """Two runs of the same requests served the same way, their sums differing in the 13th digit: one point."""
    same = (162.91387358062454, 2000.0000000000019)
    noise = (162.91387358062454, 2000.0000000000213)
    assert pareto_front([same, noise, (100.0, 1000.0)]) == [True, True, False]
    assert pareto_front([(1.0, 2.0), (1.0, 2.0 + 1e-6)]) == [False, True]  # a real difference still decides


def test_the_front_matches_the_definition_on_random_sets():
    rng = random.Random(7)
    for _ in range(200):
        points = [(float(rng.randint(0, 6)), float(rng.randint(0, 6))) for _ in range(rng.randint(0, 12))]
        assert pareto_front(points) == [not _dominated(p, points) for p in points]


def test_tokens_per_joule_is_output_tokens_over_busy_gpu_seconds_at_the_power():
    # A constant step of 0.5 s: one request of 5 output tokens takes 5 steps (its prefill gives the first token),
    # 2.5 s busy; at 200 W a GPU that is 500 J, so 5 / 500 = 0.01 tokens per joule.
    profile = replace(constant_profile(0.5), power=power_record(200, "a test figure", "this test", upper_bound=True))
    run = simulate(profile, [Request(0, 0.0, 4, 5)], "continuous")
    assert run.busy_s == pytest.approx(2.5)
    energy = energy_figures(5, run.busy_s, run.makespan_s, profile.gpus, 1, profile.power_figure, 3.6)
    assert energy["joules"] == pytest.approx(500.0)
    assert energy["tokens_per_joule"] == pytest.approx(0.01)
    assert energy["upper_bound"] is True
    # 2.5 s of one GPU at 3.6 USD an hour is 0.0025 USD: 2000 tokens per dollar.
    assert energy["tokens_per_usd"] == pytest.approx(5 / (2.5 / 3600 * 3.6))
    # Two GPUs a replica and three replicas: energy on each replica's GPUs over the (summed) busy time, cost on
    # every GPU of the fleet over the makespan.
    fleet = energy_figures(5, 2.5, 4.0, 2, 3, profile.power_figure, 3.6)
    assert fleet["tokens_per_joule"] == pytest.approx(5 / (2.5 * 2 * 200))
    assert fleet["gpu_hours"] == pytest.approx(4.0 * 6 / 3600)


def test_a_profile_without_power_says_why_and_gives_no_tokens_per_joule():
    assert "CPU has no energy counter" in measured_power("cpu")["why_none"]
    assert "without --energy" in measured_power("cuda")["why_none"]
    old = constant_profile()  # written before profiles carried a power figure
    assert old.power is None and "no power figure" in old.power_figure["why_none"]
    energy = energy_figures(10, 1.0, 1.0, 1, 1, measured_power("cpu"), None)
    assert (energy["joules"], energy["tokens_per_joule"], energy["tokens_per_usd"]) == (None, None, None)
    assert energy["why_none"] == measured_power("cpu")["why_none"]
    with pytest.raises(ProfileDocError, match="why_none"):
        replace(old, power={"watts_per_gpu": None})
    with pytest.raises(ProfileDocError, match="positive"):
        replace(old, power={"watts_per_gpu": -5.0, "upper_bound": True})


def test_an_analytic_profile_carries_its_skus_tdp_as_an_upper_bound():
    gpu = load_gpu_spec("h100-sxm")
    power = sku_power(gpu)
    assert power["watts_per_gpu"] == gpu.tdp_w and power["upper_bound"] is True
    assert power["source"] == gpu.tdp_source and "upper bound" in power["basis"]
    assert "no spec sheet" in sku_power(None)["why_none"]
    assert "no [power]" in sku_power(replace(gpu, tdp_w=None))["why_none"]


def test_a_load_point_divides_by_every_gpu_and_reads_tokens_per_user_from_tpot():
    profile = constant_profile(0.5)
    run = simulate(profile, [Request(0, 0.0, 4, 5)], "continuous")
    point = load_point(1.0, run, Fleet(2, 3, no_power("test")))
    # 5 tokens over a 2.5 s makespan on 6 GPUs; TPOT 0.5 s: 2 tokens/s per user.
    assert point["tokens_per_s_per_gpu"] == pytest.approx(5 / 2.5 / 6)
    assert point["tokens_per_s_per_user"] == pytest.approx(2.0)
    assert point["tokens_per_joule"] is None
    sweep = load_sweep([("a", [point])], Fleet(2, 3, no_power("test")))
    assert sweep["gpus"] == 6 and sweep["points"][0]["on_front"] is True


def test_simulate_sweep_load_writes_the_figure_and_the_front(tmp_path):
    out = tmp_path / "sim"
    # Kernels only (--engine none): with the vLLM preset the two static points past saturation come out equal but
    # for the last bit of TPOT, which the front (pareto_front) takes as a tie and the strict check here would not.
    run = CliRunner().invoke(main, ["simulate", *ANALYTIC, "--engine", "none", "--requests", "40", "--policy",
                                    "continuous", "--policy", "static:batch=8", "--sweep-load", "2:32:3",
                                    "--gpu-hour-usd", "2.5", "-o", str(out)])
    assert run.exit_code == 0, run.output
    assert (out / "throughput-interactivity.png").stat().st_size > 0
    document = json.loads((out / "simulation.json").read_text(encoding="utf-8"))
    sweep = document["load_sweep"]
    assert [p["rate_requests_per_s"] for p in sweep["points"]] == pytest.approx([2, 8, 32] * 2)
    assert [p["policy"] for p in sweep["points"]] == ["continuous"] * 3 + ["static:batch=8"] * 3
    placed = [(p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]) for p in sweep["points"]]
    assert [p["on_front"] for p in sweep["points"]] == [not _dominated(q, placed) for q in placed]
    for point in sweep["points"]:
        assert point["tokens_per_s_per_user"] == pytest.approx(1 / point["tpot_p50_s"])
        assert point["tokens_per_s_per_gpu"] == pytest.approx(point["tokens_per_s"])  # TP 1, one replica
    for entry in document["runs"]:
        energy, summary = entry["energy"], entry["summary"]
        assert energy["watts_per_gpu"] == load_gpu_spec("h100-sxm").tdp_w and energy["upper_bound"] is True
        assert energy["tokens_per_joule"] == pytest.approx(summary["output_tokens"] / (summary["busy_s"] * 700))
        gpu_hours = summary["makespan_s"] / 3600
        assert energy["tokens_per_usd"] == pytest.approx(summary["output_tokens"] / (gpu_hours * 2.5))
    on = [p for p in sweep["points"] if p["on_front"]]
    assert "On the throughput-interactivity front (tokens/s per GPU against tokens/s per user): " in run.output
    assert all(f"{p['policy']} at " in run.output for p in on)
    assert "output tokens per joule (700 W a GPU, its TDP, over " in run.output
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Throughput against interactivity" in report and "throughput-interactivity.png" in report
    assert "## Energy and cost" in report and "lower bound" in report


def test_simulate_on_a_profile_without_power_says_why(tmp_path):
    path = tmp_path / "p.json"
    save_profile(replace(constant_profile(0.01, device_bytes=10**9), power=measured_power("cpu")), path)
    out = tmp_path / "sim"
    run = CliRunner().invoke(main, ["simulate", str(path), "--requests", "5", "--policy", "continuous", "-o",
                                    str(out)])
    assert run.exit_code == 0, run.output
    energy = json.loads((out / "simulation.json").read_text(encoding="utf-8"))["runs"][0]["energy"]
    assert energy["tokens_per_joule"] is None and "CPU has no energy counter" in energy["why_none"]
    assert "No tokens per joule: the CPU has no energy counter" in (out / "report.md").read_text(encoding="utf-8")
    assert StepProfile.from_dict(json.loads(path.read_text(encoding="utf-8"))).power == measured_power("cpu")


@pytest.mark.parametrize("value, says", [
    ("4", "at least two rates"), ("1,2,1", "given twice"), ("1,x", "comma list"), ("1,-2", "more than 0"),
    ("1,nan", "finite"), ("8:2:3", "0 < LOW < HIGH"), ("1:8:1", "N from 2"), ("1:8", "comma list"),
    ("1:2:101", "N from 2 to 100"), ("1,,2", "comma list")])
def test_bad_sweep_loads_are_one_line_exit_2(tmp_path, value, says):
    out = tmp_path / "sim"
    run = CliRunner().invoke(main, ["simulate", *ANALYTIC, "--sweep-load", value, "-o", str(out)])
    assert run.exit_code == 2, run.output
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpubench: error: --sweep-load") and says in lines[0]
    assert not out.exists()


@pytest.fixture(scope="module")
def two_skus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("skus")
    for gpu in ("h100-sxm", "h200-sxm"):
        run = CliRunner().invoke(main, ["profile", *ANALYTIC[:1], "--gpu", gpu, "--model", "llama-3-8b",
                                        "--max-tokens", "8192", "--max-context", "2048", "--efficiency", "flat",
                                        "-o", str(folder / f"{gpu}.json")])
        assert run.exit_code == 0, run.output
    return [str(folder / "h100-sxm.json"), str(folder / "h200-sxm.json")]


def _plan(tmp_path, profiles, *extra):
    out = tmp_path / "plan"
    run = CliRunner().invoke(main, ["plan", *profiles, "--rate", "5,20", "--slo", "ttft_p90=1,tpot_p99=0.03",
                                    "--requests", "40", "--policy", "continuous", "--policy", "chunked:budget=512",
                                    *extra, "-o", str(out)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return run.output, json.loads((out / "plan.json").read_text(encoding="utf-8"))


def _met_at(document, rate):
    return [(candidate, plan, point) for candidate in document["candidates"] for plan in candidate["plans"]
            for point in plan["aggregated"] if point["rate_requests_per_s"] == rate and point["met"]]


@pytest.mark.parametrize("prices, axis", [(("--gpu-hour-usd", "h100-sxm=2.5,h200-sxm=3.5"), "tokens_per_usd"),
                                          (("--gpu-hour-usd", "h100-sxm=2.5"), "tokens_per_s_per_gpu")])
def test_plan_answers_each_rate_with_the_cheapest_plan_on_its_front(two_skus, tmp_path, prices, axis):
    output, document = _plan(tmp_path, two_skus, *prices)
    assert [a["rate_requests_per_s"] for a in document["answers"]] == [5, 20]
    for answer in document["answers"]:
        met = _met_at(document, answer["rate_requests_per_s"])
        assert len(met) == 4 and answer["met"]
        placed = [(point["tokens_per_s_per_user"], point[axis]) for _, _, point in met]
        assert [point["on_front"] for _, _, point in met] == [not _dominated(q, placed) for q in placed]
        best = max(placed, key=lambda q: q[1])
        chosen = next(point for _, _, point in met if (point["tokens_per_s_per_user"], point[axis]) == best)
        assert answer["tokens_per_s_per_gpu"] == chosen["tokens_per_s_per_gpu"]
        assert answer["sentence"][0].upper() + answer["sentence"][1:] in output
        assert ("dollar" in answer["front"]) == (axis == "tokens_per_usd")
    for candidate in document["candidates"]:
        watts = candidate["power"]["watts_per_gpu"]
        assert watts == load_gpu_spec(candidate["sku"]).tdp_w and candidate["power"]["upper_bound"] is True
        for _, _, point in _met_at(document, 20):
            # Busy time is at most the makespan on every replica: tokens per joule at least tokens/s per GPU / W.
            assert point["tokens_per_joule"] >= point["tokens_per_s_per_gpu"] / watts * (1 - 1e-9)


def test_plan_on_a_profile_without_power_says_why(tmp_path):
    path = tmp_path / "cpu.json"
    profile = replace(constant_profile(0.001, device_bytes=10**9), power=measured_power("cpu"))
    save_profile(profile, path)
    output, document = _plan(tmp_path, [str(path)])
    point = document["candidates"][0]["plans"][0]["aggregated"][0]
    assert point["met"] and point["tokens_per_joule"] is None and point["tokens_per_usd"] is None
    assert "no tokens per joule: the CPU has no energy counter gpubench reads" in output


def test_a_gpu_hour_price_past_any_real_one_is_refused_in_simulate_and_plan(tmp_path):
    run = CliRunner().invoke(main, ["simulate", *ANALYTIC, "--gpu-hour-usd", "1e300", "-o", str(tmp_path / "s")])
    assert run.exit_code == 2 and run.output.count("\n") == 1 and "'--gpu-hour-usd'" in run.output, run.output
    assert "must be at most 1000000" in run.output
    profile = tmp_path / "p.json"
    assert CliRunner().invoke(main, ["profile", *ANALYTIC, "-o", str(profile)]).exit_code == 0
    run = CliRunner().invoke(main, ["plan", str(profile), "--rate", "1", "--slo", "tpot_p99=1",
                                    "--gpu-hour-usd", "h100-sxm=1e300", "-o", str(tmp_path / "p")])
    assert run.exit_code == 2 and "at most 1e+06 USD per GPU-hour" in run.output, run.output
