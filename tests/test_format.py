"""The result format written down (#15.10): typed records with a key registry, the JSON Schema generated from
it (checked in), every checked-in result and a fresh sweep valid against it, and a doc that lists every key."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from roofline.result.io import load_result, result_to_json
from roofline.result.json_schema import (
    SCHEMA_PATH,
    PointDocument,
    json_schema,
    key_table,
    records,
    schema_text,
    validate,
)
from roofline.result.keys import Record
from roofline.result.sections import Ceilings, Device, PointTelemetry, Settings, Telemetry
from tests.conftest import make_point, make_result

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reference" / "result.md"


def result_files() -> list[Path]:
    """Every result document checked in (simulation, analysis and profile documents are other formats)."""
    candidates = [*ROOT.glob("results/*.json"), *ROOT.glob("tests/golden/result_v*.json"),
                  *ROOT.glob("tests/data/h200/first-run-*.json")]
    found = []
    for path in sorted(candidates):
        document = json.loads(path.read_text())
        if isinstance(document, dict) and "schema_version" in document and "points" in document:
            found.append(path)
    return found


def test_there_are_old_results_to_check():
    names = {p.name for p in result_files()}
    assert {"first-run-sweep.json", "first-run-ceilings.json", "result_v1.json",
            "reference-vidur-h100-fp16.json"} <= names, names


def test_the_checked_in_schema_is_the_one_the_registry_generates():
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), \
        "regenerate: python -c 'from roofline.result.json_schema import write_schema; write_schema()'"


@pytest.mark.parametrize("path", result_files(), ids=lambda p: p.name)
def test_every_checked_in_result_is_valid_and_keeps_its_sections(path):
    document = json.loads(path.read_text())
    assert validate(document, json_schema()) == []
    saved = json.loads(result_to_json(load_result(path)))
    for section in ("tool", "host", "device", "settings", "ceilings", "telemetry"):
        assert saved[section] == document[section], section  # nothing added, dropped or rewritten
    assert validate(saved, json_schema()) == []


@pytest.mark.slow
def test_a_fresh_cpu_quick_sweep_is_valid(quick_sweep):
    output, _ = quick_sweep
    document = json.loads(output.read_text())
    assert document["ceilings"]["measured"]["peak"] and document["points"]  # the parts the schema types
    assert validate(document, json_schema()) == []
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra (jsonschema) is not installed")
    jsonschema.Draft202012Validator(json_schema()).validate(document)  # and by a validator that is not ours


def test_the_validator_names_what_breaks_the_format():
    document = json.loads(result_to_json(make_result([make_point()])))
    document["device"]["kind"] = "tpu"
    document["device"]["warp_size"] = 32
    document["settings"]["budget_s"] = "half a second"
    del document["points"][0]["status"]
    errors = validate(document, json_schema())
    assert "$.device.kind: 'tpu' is not one of ['cuda', 'cpu']" in errors
    assert "$.device: warp_size is not a key of this format" in errors
    assert any(e.startswith("$.settings.budget_s: str is not") for e in errors)
    assert "$.points[0]: lacks status" in errors


def test_the_doc_lists_every_key_of_the_registry():
    text = DOC.read_text(encoding="utf-8")
    missing = [r.__name__ for r in records() if key_table(r) not in text]
    assert not missing, f"docs/reference/result.md lacks or has stale key tables for {missing}: paste key_tables()"
    for record in records():
        for name in record.registry():
            assert f"| `{name}` |" in text


def test_the_point_keys_declared_are_the_ones_a_point_writes():
    point = make_point("gemm", "bf16", 8, telemetry={"throttled": False}, correctness={"passed": True})
    grouped = ("experts", "topk", "routing", "touched")  # written by grouped points only
    mixer = ("mixer",)  # written by state_update and sparse_attention points only
    assert [key for key in PointDocument.registry() if key not in grouped + mixer] == list(point.to_dict())


def test_records_are_validated_on_construction():
    with pytest.raises(ValueError, match="device.kind must be one of cuda, cpu"):
        Device.from_dict({"kind": "tpu"})
    with pytest.raises(ValueError, match="device.kind is required"):
        Device.from_dict({"name": "x"})
    with pytest.raises(ValueError, match="settings.budget_s must be number"):
        Settings.from_dict({"budget_s": "0.5"})
    with pytest.raises(ValueError, match="finite"):
        Telemetry.from_dict({"interval_s": math.inf})
    with pytest.raises(ValueError, match="must be integer"):
        Device.from_dict({"kind": "cpu", "sm_count": True})  # a bool is not a count
    with pytest.raises(ValueError, match="timeline\\[1\\] needs a number t_s"):
        Telemetry.from_dict({"timeline": [{"t_s": 0.0}, {"power_w": 1.0}]})
    with pytest.raises(ValueError, match="ceilings.measured.peak.bf16.flop_per_s"):
        Ceilings.from_dict({"measured": {"peak": {"bf16": {"flop_per_s": "fast"}}}})


def test_records_keep_what_older_and_newer_writers_wrote():
    document = {"kind": "cuda", "sku": None, "future_key": {"x": 1}}
    device = Device.from_dict(document)
    assert device.to_dict() == document  # null stays present, an unknown key is kept, nothing is added
    assert device.sku is None and device.extra == {"future_key": {"x": 1}}
    assert device["kind"] == "cuda" and "name" not in device and dict(device) == document


def test_values_print_through_their_key():
    device = Device.from_dict({"kind": "cuda", "l2_cache_bytes": 62914560, "max_sm_clock_hz": 1.98e9})
    assert device.format("l2_cache_bytes") == "62.9 MB" and device.format("max_sm_clock_hz") == "1.98 GHz"
    assert device.format("power_limit_w") == "–"
    assert Device.registry()["power_limit_w"].unit == "W"
    assert Settings.from_dict({"budget_s": 0.5}).format("budget_s") == "0.5 s"


def test_a_result_types_its_sections_and_its_points_telemetry():
    result = make_result([make_point(telemetry={"throttled": True, "window_s": [1.0, 2.0]})])
    assert isinstance(result.device, Device) and isinstance(result.ceilings, Ceilings)
    assert all(isinstance(getattr(result, s), Record) for s in ("tool", "host", "settings", "telemetry"))
    point = result.points[0]
    assert isinstance(point.telemetry, PointTelemetry) and point.throttled and point.window_s == (1.0, 2.0)
    assert load_result_text(result) == result


def load_result_text(result):
    from roofline.result.io import result_from_json

    return result_from_json(result_to_json(result))


@pytest.mark.parametrize("command", ["fit", "report", "compare"])
def test_a_negative_ceiling_is_refused_on_load_not_printed(tmp_path, command):
    """A rate or size below zero is no measurement: one line and exit 2, never "-5 B/s" in a table."""
    from click.testing import CliRunner

    from microbench.cli.app import main

    document = json.loads((ROOT / "results" / "cpu-amd-epyc-2core-20261202.json").read_text())
    document["ceilings"]["measured"]["copy"]["bytes_per_s"] = -5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    args = {"fit": [str(bad)], "report": [str(bad), "-o", str(tmp_path / "r")], "compare": [str(bad), str(bad)]}
    run = CliRunner().invoke(main, [command, *args[command]])
    assert run.exit_code == 2, run.output
    assert "must not be negative" in run.output and len(run.output.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
