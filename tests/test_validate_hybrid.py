"""validate on hybrid models, on the CPU: a tiny random Qwen3.5 (three Gated DeltaNet layers to one full attention,
a small mixture of experts) built by transformers' own class from its config.json, predicted against measured
within the same 15% as the dense and MoE checks (tests/validate_check.py's sizes and repeats); a tiny Nemotron-H
(Mamba-2, attention, an MLP and a latent-free MoE block) run once.  transformers' continuous-batching manager holds no
recurrent state, so both run the static path alone and say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the serving extra (transformers) is not installed")

from click.testing import CliRunner  # noqa: E402
from validate_check import check_args  # noqa: E402

from microbench.cli.app import main  # noqa: E402
from microbench.serving.engine.models import CONTINUOUS_REFUSED  # noqa: E402

pytestmark = pytest.mark.slow  # a whole real run: the slow tier (pytest -m slow)

DATA = Path(__file__).parent / "data"
TOLERANCE = 0.15


def _validate(config: Path, out: Path, repeats: int | None = None) -> tuple[dict, str]:
    import torch

    before = torch.get_num_threads()
    try:
        args = check_args(config, out) if repeats is None else check_args(config, out, repeats)
        result = CliRunner().invoke(main, args)
    finally:
        torch.set_num_threads(before)
    assert result.exit_code == 0, result.output
    return json.loads((out / "validate.json").read_text()), result.output


def test_a_tiny_qwen35_is_predicted_within_15_percent_on_its_static_path(tmp_path):
    from tests.test_validate_engine import assert_schema_valid

    document, output = _validate(DATA / "tiny-qwen3.5-config.json", tmp_path / "out")
    assert list(document["comparison"]) == ["static"] and document["ratio"]["why_none"] == CONTINUOUS_REFUSED
    total = document["comparison"]["static"]["total_s"]
    assert abs(total["rel_err"]) <= TOLERANCE, \
        f"static: predicted {total['predicted']:.4f} s, measured {total['measured']:.4f} s ({total['rel_err']:+.1%})"
    assert {k["kind"] for k in document["engine"]["model"]["mixers"]} == {"linear_attention", "attention"}
    profile = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert [t["name"] for t in profile["mixers"]] == ["linear_attention"]
    assert "static/continuous total time: not measured" in output
    assert_schema_valid("validation", document)
    assert_schema_valid("step-profile", profile)


def test_a_tiny_nemotron_h_runs_its_mamba_blocks_on_the_static_path(tmp_path):
    document, _ = _validate(DATA / "tiny-nemotron-h-config.json", tmp_path / "out", repeats=2)
    assert list(document["runs"]) == ["static"]
    assert {k["kind"] for k in document["engine"]["model"]["mixers"]} == {"mamba2", "attention"}
    assert document["runs"]["static"]["measured"]["requests"]  # the engine built and ran it
