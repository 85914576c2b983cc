"""gpubench compare: SKUs side by side, spec-only rows, baseline ratios, fleet outliers, bad inputs;
gpubench sweep --device all; the Kubernetes manifest's structure."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.result.document import Point
from roofline.result.io import load_result, save_result
from tests.conftest import make_point, make_result

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cpu_result(committed_cpu_result) -> Path:
    """A real CPU sweep with its ceilings, committed (results/): gemv and gemm fp32 and bf16 at 2048x4096."""
    return committed_cpu_result


def clone(source: Path, target: Path, uuid: str, factor: float = 1.0, jitter: float = 0.0, seed: int = 0) -> Path:
    """A copy of a real result as another unit: its own UUID, its times scaled (and jittered)."""
    result = load_result(source)
    rng = random.Random(seed)
    scale = factor * (1 + rng.uniform(-jitter, jitter))
    points = tuple(Point.from_dict({**p.to_dict(), "samples_s": [t * scale for t in p.samples_s],
                                    "eager_samples_s": [], "flop": None, "bytes": None}
                                   | {"flop": p.flop, "bytes": p.bytes}) for p in result.points)
    save_result(replace(result, device={**result.device, "uuid": uuid}, points=points), target)
    return target


def test_compare_two_results_with_spec_rows_and_baseline(cpu_result, tmp_path):
    other = clone(cpu_result, tmp_path / "slower.json", "GPU-b", factor=1.25)
    run = CliRunner().invoke(main, ["compare", str(cpu_result), str(other), "--spec", "h200-sxm,b200",
                                    "--format", "json", "-o", str(tmp_path / "out")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    document = json.loads(run.output)
    group = next(g for g in document["comparison"]["groups"] if (g["dtype"], g["n"]) == ("fp32", 2048))
    devices = [row["device"] for row in group["rows"]]
    assert sum("spec, not measured" in d for d in devices) == 2
    ratios = group["speed_vs_baseline"][str(other)]
    assert all(0.75 < value < 0.85 for value in ratios.values())  # 1/1.25 at every common batch
    spec = next(row for row in group["rows"] if row["sku"] == "h200-sxm")
    assert spec["measured"] is False and spec["critical_batch"] > 0
    assert (tmp_path / "out" / "compare.md").exists()
    assert list((tmp_path / "out").glob("compare_fp32_2048x4096.png"))
    table = CliRunner().invoke(main, ["compare", str(cpu_result), str(other), "--spec", "h200-sxm"])
    assert "spec, not measured" in table.output and "baseline" in table.output


def test_fleet_flags_a_deliberately_slowed_unit(cpu_result, tmp_path):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    for i in range(5):
        clone(cpu_result, fleet / f"unit{i}.json", f"GPU-{i}", jitter=0.01, seed=i)
    clone(cpu_result, fleet / "sick.json", "GPU-sick", factor=1.4)
    run = CliRunner().invoke(main, ["compare", str(fleet), "--format", "json"], catch_exceptions=False)
    assert run.exit_code == 0
    units = {Path(u["file"]).name: u for u in json.loads(run.output)["fleet"]["units"]}
    assert units["sick.json"]["outlier"] is True
    assert any("gemv_bytes_per_s" in why for why in units["sick.json"]["why"])
    assert not any(units[f"unit{i}.json"]["outlier"] for i in range(5))
    for unit in units.values():
        assert {"file", "device", "sku", "figures", "outlier", "why"} <= set(unit)
    gate = CliRunner().invoke(main, ["compare", str(fleet), "--fail-on-outlier"])
    assert gate.exit_code == 1
    loose = CliRunner().invoke(main, ["compare", str(fleet), "--fail-on-outlier", "--mad-k", "100"])
    assert loose.exit_code == 0


def test_fleet_outliers_are_counted_in_robust_sd_of_1_4826_mads_by_hand():
    """Six units at 98, 99, 100, 101, 102 and 110: median 100.5, distances 2.5, 1.5, 0.5, 0.5, 1.5 and 9.5, MAD 1.5,
    so one robust sd is 1.4826 x 1.5 = 2.22 and 110 is 9.5 / 2.22 = 4.3 of them out (past k = 3)."""
    from roofline.compare.comparison import _robust_flags

    values = {"a": 98.0, "b": 99.0, "c": 100.0, "d": 101.0, "e": 102.0, "f": 110.0}
    assert _robust_flags(values, 3.0) == {"f": "+4.3 robust sd from the median 100.5"}
    assert set(_robust_flags(values, 0.6)) == {"a", "b", "e", "f"}  # 1.5 / 2.22 = 0.67 robust sd: past 0.6
    assert set(_robust_flags(values, 0.7)) == {"a", "f"}  # not past 0.7; 2.5 / 2.22 = 1.1 is


def test_fleet_bad_inputs(cpu_result, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = CliRunner().invoke(main, ["compare", str(empty)])
    assert run.exit_code == 2 and "no result files" in run.output
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    clone(cpu_result, mixed / "a.json", "GPU-same")
    clone(cpu_result, mixed / "b.json", "GPU-same")  # the same GPU twice
    (mixed / "broken.json").write_text("{ not json")
    newer = json.loads((mixed / "a.json").read_text())
    newer["schema_version"] = 2
    (mixed / "future.json").write_text(json.dumps(newer))
    run = CliRunner().invoke(main, ["compare", str(mixed), "--format", "json"])
    assert run.exit_code == 0, run.output
    document = json.loads(run.output[run.output.index("{"):])
    skipped = " ".join(document["skipped"])
    assert "broken.json" in skipped and "not valid JSON" in skipped
    assert "future.json" in skipped and "newer" in skipped
    assert "duplicate device UUID GPU-same" in skipped
    assert len(document["fleet"]["units"]) == 1
    run = CliRunner().invoke(main, ["compare", str(cpu_result), "--baseline", "nope.json"])
    assert run.exit_code == 2 and "--baseline" in run.output
    run = CliRunner().invoke(main, ["compare", str(cpu_result), "--spec", "h900"])
    assert run.exit_code == 2 and "unknown SKU" in run.output


def test_different_shapes_are_said_not_dropped(cpu_result, tmp_path):
    other = tmp_path / "other.json"
    save_result(make_result([make_point("gemm", "fp32", b, 512, 512, 1e-5 * b) for b in (1, 2, 4)],
                            device={"kind": "cpu", "name": "other cpu", "sku": None, "uuid": "CPU-other"}), other)
    run = CliRunner().invoke(main, ["compare", str(cpu_result), str(other), "--format", "md"])
    assert "## Not comparable" in run.output and "512x512: not measured in" in run.output


@pytest.mark.slow
def test_device_all_runs_one_process_per_device(tmp_path):
    run = CliRunner().invoke(main, ["sweep", "--device", "all", "--op", "gemm", "--dtype", "fp32", "--shape",
                                    "256x256", "--batch", "1,2", "--budget", "0.02", "--no-ceilings", "--l2", "warm",
                                    "-o", str(tmp_path / "all")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    results = sorted((tmp_path / "all").glob("*.json"))
    assert len(results) >= 1 and all(load_result(p).ok_points() for p in results)
    # The count it states is the count it wrote, each file named.
    assert f"{len(results)} result(s) in {tmp_path / 'all'}" in run.output
    assert all(p.name in run.output for p in results)
    bad = CliRunner().invoke(main, ["sweep", "--device", "all", "-o", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "give -o a folder" in bad.output


def test_kubernetes_manifest_structure():
    job = yaml.safe_load((ROOT / "scripts" / "k8s" / "gpubench-job.yaml").read_text())
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"]
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["restartPolicy"] == "Never"
    mount = container["volumeMounts"][0]
    assert mount["mountPath"] == "/results"
    assert any(v["name"] == mount["name"] and "persistentVolumeClaim" in v for v in pod["volumes"])
    command = " ".join(container["args"])
    assert "gpubench sweep" in command and "JOB_COMPLETION_INDEX" in command and "/results/" in command
