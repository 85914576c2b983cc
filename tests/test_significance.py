"""compare says whether a difference is real: the rank test, the decision rule, the issue's imported pair
(one point 10% slower under 1% noise), two quiet CPU sweeps of this machine, and the fleet's own-noise
distance."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.analysis.significance import compare_intervals, compare_samples, mann_whitney_p
from roofline.core.counting import count_work

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def test_mann_whitney_by_hand():
    # Complete separation of 3 vs 3: U = 0, mean 4.5, variance 3*3*7/12 = 5.25, continuity-corrected z.
    z = (4.5 - 0.5) / math.sqrt(5.25)
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert mann_whitney_p([1, 2, 3, 4], [1, 2, 3, 4]) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    same = rng.normal(1, 0.01, 40)
    assert mann_whitney_p(same[:20], same[20:]) > 0.05
    assert mann_whitney_p(same[:20], same[20:] * 1.1) < 1e-6


def test_the_decision_rule():
    rng = np.random.default_rng(1)
    base = 1e-3 * (1 + 0.01 * rng.standard_normal(30))
    assert compare_samples(base, base * 1.10).verdict == "slower"
    assert compare_samples(base, base / 1.10).verdict == "faster"
    assert compare_samples(base, base * 1.01).verdict == "same"  # real, perhaps, but under the minimum effect
    noisy = 1.03e-3 * rng.permutation(np.linspace(0.8, 1.2, 31))  # median +3%, spread ±20%
    decided = compare_samples(base, noisy)
    assert decided.verdict == "inconclusive", decided
    assert compare_samples([1e-3], [1.2e-3]).verdict == "inconclusive"  # one sample each: no noise known
    # Too few for any ordering to reach p < 0.01: never a difference, however far apart; the min-max
    # "intervals" that decided this before are 75% intervals at 3 samples, 50% at 2.
    for few in (compare_samples(base[:3], base[:3] * 1.5), compare_samples([1e-3, 1.01e-3], [2e-3, 2.02e-3]),
                compare_samples(base[:5], base[5:10] * 1.5)):  # 5 v 5 apart: p = 0.012 at best
        assert (few.verdict, few.test, few.p_value) == ("inconclusive", "none", None), few
        assert "too few for the rank test to reach p < 0.01" in few.why
    assert compare_samples(base[:6], base[6:12] * 1.5).verdict == "slower"  # 6 v 6 can: p = 0.005
    assert compare_intervals(200, [195, 205], 250, [245, 255], ("higher", "lower")).verdict == "higher"
    assert compare_intervals(200, [195, 205], 201, [196, 206], ("higher", "lower")).verdict == "same"
    assert compare_intervals(200, [150, 260], 230, [170, 290], ("higher", "lower")).verdict == "inconclusive"
    assert compare_intervals(200, [195, None], 230, [225, 235], ("higher", "lower")).verdict == "inconclusive"


def _import(tmp_path, name, slow_batch=None, seed=0):
    rng = np.random.default_rng(seed)
    rows = ["op,dtype,batch,n,k,time_s"]
    for batch in BATCHES:
        work = count_work("gemm", "bf16", batch, 4096, 4096)
        t = max(work.bytes / 3e12, work.flop / 700e12) * (1.10 if batch == slow_batch else 1.0)
        rows += [f"gemm,bf16,{batch},4096,4096,{t * (1 + 0.01 * rng.standard_normal())}" for _ in range(30)]
    source, output = tmp_path / f"{name}.csv", tmp_path / f"{name}.json"
    source.write_text("\n".join(rows) + "\n")
    run = CliRunner().invoke(main, ["import", str(source), "-o", str(output), "--device-name", name])
    assert run.exit_code == 0, run.output
    return output


def test_one_point_ten_percent_slower_under_one_percent_noise(tmp_path):
    base, other = _import(tmp_path, "a", seed=1), _import(tmp_path, "b", slow_batch=64, seed=2)
    run = CliRunner().invoke(main, ["compare", str(base), str(other), "--format", "json"])
    assert run.exit_code == 0, run.output
    group = json.loads(run.output)["comparison"]["groups"][0]
    decided = group["significance_vs_baseline"][str(other)]
    verdicts = {int(batch): value["verdict"] for batch, value in decided["points"].items()}
    assert verdicts[64] == "slower"
    assert all(v == "same" for b, v in verdicts.items() if b != 64), verdicts
    assert decided["critical_batch"]["verdict"] == "same"
    table = CliRunner().invoke(main, ["compare", str(base), str(other)])
    assert "1 slower, 9 same" in table.output and "B=64 slower" in table.output
    markdown = CliRunner().invoke(main, ["compare", str(base), str(other), "--format", "md"]).output
    assert "B=64 slower (+" in markdown and "Mann-Whitney U" in markdown


def _sweep(path, budget="0.1"):
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape",
                                    "1024x1024", "--batch", "1,2,4,8,16,32", "--budget", budget, "--no-ceilings",
                                    "-o", str(path)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return path


def _decided(base, other):
    run = CliRunner().invoke(main, ["compare", str(base), str(other), "--format", "json"])
    assert run.exit_code == 0, run.output
    return json.loads(run.output)["comparison"]["groups"][0]["significance_vs_baseline"][str(other)]


@pytest.mark.slow
def test_an_a_a_comparison_of_real_cpu_samples_finds_no_difference(tmp_path):
    # A/A: one real sweep's samples split into alternate halves, so both sides saw the same machine at the
    # same moments.  This shared 2-core host is never quiet (CIs of ±5-20%), so the test is that nothing is
    # called different and that anything not "same" is so because the noise exceeds the minimum effect.
    source = json.loads(_sweep(tmp_path / "run.json", budget="0.6").read_text())
    halves = []
    for parity in (0, 1):
        document = json.loads(json.dumps(source))
        for point in document["points"]:
            point["samples_s"] = point["samples_s"][parity::2]
        path = tmp_path / f"half{parity}.json"
        path.write_text(json.dumps(document))
        halves.append(path)
    decided = _decided(*halves)
    verdicts = [value["verdict"] for value in decided["points"].values()]
    assert len(verdicts) == 6
    assert "faster" not in verdicts and "slower" not in verdicts, decided  # no false difference
    for value in decided["points"].values():
        # Not "same" only for a reason it states and the samples bear out: the machine's noise is above the
        # 5% minimum effect, or the halves' medians differ by 5% or more without the rank test finding it
        # significant (two halves of one drifting run can: a CI run saw +5.8% at p=0.21, noise ±4.4%).
        if value["verdict"] == "same" or value["test"] == "none":
            continue  # "none": the budget ran out before there were samples enough for a test (and it says so)
        noise = re.search(r"noise ±([0-9.]+)%", value["why"])
        assert noise, value
        effect = abs(value["ratio"] - 1)
        assert float(noise.group(1)) >= 5 or effect >= 0.05, value
        assert value["p_value"] is None or value["p_value"] >= 0.01, value  # not significant, as it says
        assert f"{100 * (value['ratio'] - 1):+.1f}%" in value["why"], value  # the size it names is the ratio's
    # On quiet data (1% noise) "same" is what it says: test_one_point_ten_percent_slower_under_one_percent_noise.


@pytest.mark.slow
def test_two_real_cpu_sweeps_differ_only_where_the_samples_say_so(tmp_path):
    base, other = _sweep(tmp_path / "first.json"), _sweep(tmp_path / "second.json")
    decided = _decided(base, other)
    samples = {name: {p["batch"]: p["samples_s"] for p in json.loads(path.read_text())["points"]}
               for name, path in (("base", base), ("other", other))}
    for batch, value in decided["points"].items():
        a, b = samples["base"][int(batch)], samples["other"][int(batch)]
        assert value["ratio"] == pytest.approx(float(np.median(b) / np.median(a)))
        if value["verdict"] in ("faster", "slower"):  # called only when real and beyond the minimum effect
            assert abs(value["ratio"] - 1) >= 0.05 and (value["p_value"] is None or value["p_value"] < 0.01)
            assert (value["verdict"] == "slower") == (value["ratio"] > 1)
        elif value["verdict"] == "same":
            assert abs(value["ratio"] - 1) < 0.05


def test_fleet_reports_each_unit_in_its_own_noise(tmp_path):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for i in range(4):
        (fleet / f"u{i}.json").write_bytes(_import(tmp_path, f"u{i}", seed=10 + i).read_bytes())
    sick = _import(tmp_path, "sick", seed=20)
    document = json.loads(sick.read_text())
    for point in document["points"]:
        point["samples_s"] = [t * 1.3 for t in point["samples_s"]]
        point.pop("time_s", None), point.pop("flop_per_s", None), point.pop("bytes_per_s", None)
    (fleet / "sick.json").write_text(json.dumps(document))
    for path in fleet.glob("*.json"):  # one SKU, distinct units
        d = json.loads(path.read_text())
        d["device"].update(sku="h200-sxm", uuid=f"GPU-{path.stem}")
        path.write_text(json.dumps(d))
    run = CliRunner().invoke(main, ["compare", str(fleet), "--format", "json"])
    assert run.exit_code == 0, run.output
    units = {u["file"].rsplit("/", 1)[-1]: u for u in json.loads(run.output)["fleet"]["units"]}
    sick_unit = units["sick.json"]
    assert sick_unit["outlier"]
    distance = sick_unit["distance"]["bf16 4096x4096 peak_flop_per_s"]
    assert distance["rel_from_median"] == pytest.approx(1 / 1.3 - 1, abs=0.03)  # 30% slower: peak / 1.3
    assert distance["in_own_noise"] is not None and abs(distance["in_own_noise"]) > 10
    assert any("its own noise" in why for why in sick_unit["why"])
    assert not any(units[f"u{i}.json"]["outlier"] for i in range(4))


def test_a_single_sample_verdict_says_which_side_had_it():
    assert "the baseline has 1 sample(s)" in compare_samples([1e-3], [1.2e-3, 1.1e-3]).why
    assert "this run has 1 sample(s)" in compare_samples([1e-3, 1.1e-3], [1.2e-3]).why
