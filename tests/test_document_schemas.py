"""Every document kind typed and versioned, checked by a real JSON Schema validator (``jsonschema``): the schemas
under docs/ are the ones the key declarations generate, every checked-in document and a fresh one of each kind
validate against them, a tampered document does not, and docs/reference/ tabulates every declared key.
(The validation document's own checks run on the validation fixtures of tests/test_validate_engine.py.)"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.result.io import load_result, result_to_json
from roofline.result.json_schema import SCHEMA_PATH, json_schema
from roofline.serving.schemas.registry import (
    document_records,
    documents,
    key_tables,
    schema,
    schema_path,
    schema_texts,
)
from roofline.serving.schemas.simulation import SimulatedPolicy, SimulationDocument, Summary
from roofline.serving.schemas.step_profile import StepProfileDocument
from tests.test_format import result_files

jsonschema = pytest.importorskip("jsonschema", reason="the test extra (jsonschema) is not installed")

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"gpubench-step-profile": "step-profile", "gpubench-simulation": "simulation",
         "gpubench-validation": "validation", "gpubench-plan": "plan"}


def schema_errors(name: str, document: object) -> list[str]:
    """Every way ``document`` breaks the schema of document ``name`` ("result" or a serving document), as
    ``path: message`` lines, checked by the validator of the draft the schema declares."""
    chosen = json_schema() if name == "result" else schema(name)
    validator = jsonschema.validators.validator_for(chosen)
    validator.check_schema(chosen)
    return [f"$.{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
            for error in validator(chosen).iter_errors(document)]


def committed_documents() -> list[tuple[str, Path]]:
    """Every serving document checked in, by its ``kind``."""
    found = []
    for path in sorted([*ROOT.glob("results/**/*.json"), *ROOT.glob("tests/**/*.json")]):
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict) and document.get("kind") in KINDS:
            found.append((KINDS[document["kind"]], path))
    return found


@pytest.mark.parametrize("name", list(documents()))
def test_each_checked_in_schema_is_the_one_its_declarations_generate(name):
    assert schema_path(name).read_text(encoding="utf-8") == schema_texts()[name], \
        "regenerate: python -c 'from roofline.serving.schemas.registry import write_schemas; write_schemas()'"


@pytest.mark.parametrize("name", ["result", *documents()])
def test_each_schema_is_a_valid_draft_2020_12_schema(name):
    chosen = json_schema() if name == "result" else schema(name)
    assert chosen["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert jsonschema.validators.validator_for(chosen) is jsonschema.Draft202012Validator
    jsonschema.Draft202012Validator.check_schema(chosen)
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema()


@pytest.mark.parametrize("path", result_files(), ids=lambda p: p.name)
def test_every_checked_in_result_and_its_resave_validate(path):
    assert schema_errors("result", json.loads(path.read_text())) == []
    assert schema_errors("result", json.loads(result_to_json(load_result(path)))) == []  # as this version saves it


def test_the_checked_in_serving_documents_are_found():
    kinds = [kind for kind, _ in committed_documents()]
    assert kinds.count("simulation") >= 4, kinds  # results/opt13b-a100-40gb/cap-*/simulation.json


@pytest.mark.parametrize("kind,path", committed_documents(), ids=lambda v: v if isinstance(v, str) else v.parent.name)
def test_every_checked_in_serving_document_validates(kind, path):
    assert schema_errors(kind, json.loads(path.read_text(encoding="utf-8"))) == []


@pytest.fixture(scope="module")
def fresh_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "profile.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "-o", str(path)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fresh_simulation(tmp_path_factory):
    """50 requests under three policies, with an SLO tight enough to make the capacity search probe rates and
    a rate curve, a load sweep and a price: every part of the document the schema types."""
    out = tmp_path_factory.mktemp("simulation")
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--requests", "50", "--policy", "static:batch=8", "--policy", "paged",
                                    "--policy", "chunked:budget=512",
                                    "--slo", "ttft_p90=0.05", "--rates", "5", "--overhead-s", "0.001",
                                    "--sweep-load", "2,5", "--gpu-hour-usd", "2", "--no-report", "-o", str(out)],
                         catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return json.loads((out / "simulation.json").read_text(encoding="utf-8"))


# What only a mixture of experts' profile writes.
MOE_KEYS = ("ep", "routing", "grouped", "all_to_all")


def test_a_fresh_step_profile_validates_and_writes_its_keys_in_the_declared_order(fresh_profile):
    assert schema_errors("step-profile", fresh_profile) == []
    # TP 1, dense and of one mixer kind: no all-reduces, no experts, no mixer tables beside the attention's
    assert list(fresh_profile) == [key for key in StepProfileDocument.registry()
                                   if key not in ("comm", "mixers") + MOE_KEYS]


def test_a_tensor_parallel_profile_and_its_speculative_simulation_validate_with_their_comm_and_draft_keys(tmp_path):
    path = tmp_path / "profile.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--tp",
                                    "2", "-o", str(path)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    profile = json.loads(path.read_text(encoding="utf-8"))
    assert schema_errors("step-profile", profile) == []
    assert list(profile) == [key for key in StepProfileDocument.registry() if key not in MOE_KEYS + ("mixers",)]
    run = CliRunner().invoke(main, ["simulate", str(path), "--requests", "20", "--policy", "paged", "--slo",
                                    "ttft_p90=0.05", "--spec-decode", "draft=2,accept=geometric:0.6", "--no-report",
                                    "-o", str(tmp_path / "sim")],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.output
    simulation = json.loads((tmp_path / "sim" / "simulation.json").read_text(encoding="utf-8"))
    assert schema_errors("simulation", simulation) == []
    summary = simulation["runs"][0]["summary"]
    assert list(summary) == list(Summary.registry()) and "comm_s" in simulation["runs"][0]["composition_s"]
    assert "draft_s" in simulation["runs"][0]["composition_s"] and simulation["spec_decode"]["draft"] == 2


def test_a_fresh_simulation_validates_and_writes_its_keys_in_the_declared_order(fresh_simulation):
    assert schema_errors("simulation", fresh_simulation) == []
    # one replica, no speculative decoding
    assert list(fresh_simulation) == [key for key in SimulationDocument.registry()
                                      if key not in ("fleet", "spec_decode")]
    for run in fresh_simulation["runs"]:
        assert list(run) == [key for key in SimulatedPolicy.registry() if key != "fleet"]
        # --slo: every summary key, slo included, but the all-reduces' share (TP 1 has none) and speculation's
        assert list(run["summary"]) == [key for key in Summary.registry()
                                        if key not in ("comm_time_share", "spec_decode")]
    assert any(run["capacity"]["tried"] for run in fresh_simulation["runs"])  # probes with their checks


def test_the_validator_rejects_tampered_documents(fresh_profile, fresh_simulation):
    profile = copy.deepcopy(fresh_profile)
    profile["model"]["mlp"] = "swiglu"
    profile["linears"][0]["time_s"][0] = "fast"
    profile["decode_attention"]["time_s"][0][0] = None
    profile["vendor"] = "x"
    del profile["lm_head"]
    errors = schema_errors("step-profile", profile)
    assert any(e.startswith("$.model.mlp: 'swiglu' is not one of") for e in errors), errors
    assert any(e.startswith("$.linears.0.time_s.0: 'fast' is not of type 'number'") for e in errors), errors
    assert any(e.startswith("$.decode_attention.time_s.0.0: None is not of type 'number'") for e in errors), errors
    assert any("'vendor' was unexpected" in e for e in errors), errors
    assert any("'lm_head' is a required property" in e for e in errors), errors
    simulation = copy.deepcopy(fresh_simulation)
    simulation["kind"] = "gpubench-step-profile"
    simulation["runs"][0]["summary"]["tokens_per_s"] = None
    simulation["runs"][0]["policy"]["kind"] = "fifo"
    errors = schema_errors("simulation", simulation)
    assert len(errors) == 3, errors
    assert schema_errors("step-profile", fresh_simulation) != []  # one kind is not another


def test_the_setup_declared_is_every_option_validate_records():
    from microbench.serving.validate_options import ValidateConfig
    from roofline.serving.schemas.validation import ValidateSettings

    assert list(ValidateSettings.registry()) == list(ValidateConfig().to_record())


def test_each_documents_reference_page_lists_every_declared_key():
    for name in documents():
        page = ROOT / "docs" / "reference" / f"{name}.md"
        text = page.read_text(encoding="utf-8")
        assert key_tables(name) in text, f"docs/reference/{name}.md lacks or has stale key tables: paste " \
                                         f"key_tables({name!r})"
        for record in document_records(name):
            for key in record.registry():
                assert f"| `{key}` |" in text


def test_a_hybrid_models_profile_validates_with_its_mixer_tables_and_layer_kinds(tmp_path):
    path = tmp_path / "profile.json"
    config = ROOT / "tests" / "data" / "hf-configs" / "nemotron-3-super-120b-a12b-fp8.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h200-sxm", "--hf-config", str(config), "--tp",
                                    "2", "--max-tokens", "512", "--max-context", "1024", "-o", str(path)],
                             catch_exceptions=False)
    assert run.exit_code == 0, run.output
    profile = json.loads(path.read_text(encoding="utf-8"))
    assert schema_errors("step-profile", profile) == []
    assert [t["name"] for t in profile["mixers"]] == ["mamba2"] and profile["mixers"][0]["chunk"] is None
    assert {k["kind"] for k in profile["model"]["mixers"]} == {"mamba2", "attention"}
    assert profile["memory"]["fixed_bytes_per_sequence"] == 40 * (64 * 64 * 128 * 4 + (4096 + 8 * 128) * 3 * 2)
