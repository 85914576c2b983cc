"""The weight-only formats (w8a16, w4a16) in ``decode``, ``profile`` and ``simulate``: the layers' linears in the
format (packed integers plus their scales and zeros), the LM head and embeddings in bf16, the KV cache in a plain
dtype (bf16 unless --kv-dtype), and the documents that say so and validate against their schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.decode.config import DecodeConfig
from microbench.decode.job import run_decode
from microbench.decode.launches import needed_launches
from roofline.decode.step import DecodeSetup
from roofline.serving.profile_doc import ProfileDocError, StepProfile, load_profile
from roofline.serving.step_cost import CostModel
from roofline.specs.models import load_model
from roofline.step.launches import Batch, StepModel
from roofline.step.memory import weight_bytes as step_weight_bytes


def weight_bytes(model, dtype: str) -> int:
    return step_weight_bytes(StepModel.of(model, dtype=dtype))

DOCS = Path(__file__).resolve().parent.parent / "docs"

# Llama-2-70B per layer, N×K as nn.Linear stores them: qkv 10240×8192, o 8192×8192, gate_up 57344×8192,
# down 8192×28672; lm_head 32000×8192.  855,638,016 weights per layer in the linears, 80 layers.
LINEAR_WEIGHTS_PER_LAYER = 10240 * 8192 + 8192 * 8192 + 57344 * 8192 + 8192 * 28672
LM_HEAD_BF16 = 32000 * 8192 * 2
# w4a16: half a byte a weight, and per 128 weights along K a bf16 scale and a bf16 zero (4 bytes) per row:
# K = 8192 has 64 groups, K = 28672 (down) 224.
W4_GROUP_BYTES_PER_LAYER = (10240 * 64 + 8192 * 64 + 57344 * 64 + 8192 * 224) * 4
# w8a16: a byte a weight and one bf16 scale per output channel (row).
W8_SCALE_BYTES_PER_LAYER = (10240 + 8192 + 57344 + 8192) * 2


def test_llama_2_70b_weight_bytes_by_hand_in_each_format():
    model = load_model("llama-2-70b")
    assert LINEAR_WEIGHTS_PER_LAYER == 855_638_016
    w4 = 80 * (LINEAR_WEIGHTS_PER_LAYER // 2 + W4_GROUP_BYTES_PER_LAYER) + LM_HEAD_BF16
    w8 = 80 * (LINEAR_WEIGHTS_PER_LAYER + W8_SCALE_BYTES_PER_LAYER) + LM_HEAD_BF16
    bf16 = 80 * LINEAR_WEIGHTS_PER_LAYER * 2 + LM_HEAD_BF16
    assert weight_bytes(model, "w4a16") == w4 == 36_888_903_680
    assert weight_bytes(model, "w8a16") == w8
    assert weight_bytes(model, "bf16") == bf16
    # The linears alone against bf16: 4 bits plus 4 bytes per 128 weights is 0.2656; 8 bits plus a scale per row 0.5.
    assert (w4 - LM_HEAD_BF16) / (bf16 - LM_HEAD_BF16) == pytest.approx(0.265625)
    assert (w8 - LM_HEAD_BF16) / (bf16 - LM_HEAD_BF16) == pytest.approx(0.5, abs=1e-3)


def test_the_step_launches_the_linears_in_the_format_and_the_lm_head_and_attention_in_bf16():
    model = load_model("llama-3-8b")
    setup = DecodeSetup(StepModel.of(model, dtype="w4a16"), 1024)
    dtypes = {launch.name: launch.dtype for launch in setup.launches(4)}
    assert dtypes == {"qkv_proj": "w4a16", "o_proj": "w4a16", "gate_up_proj": "w4a16", "down_proj": "w4a16",
                      "lm_head": "bf16", "attention": "bf16"}
    # What the measured mode times: one point per distinct launch, each in its own dtype.
    assert {key[1] for key in needed_launches(setup, [1, 4])} == {"w4a16", "bf16"}
    # a plain dtype: everything in it
    assert [lin.dtype for lin in StepModel.of(model, dtype="fp8").linears] == ["fp8"] * 5


def _decode(*args: str) -> dict:
    # On the SKU's flat achievable ceilings (not the reference's per-matrix efficiencies, where that extra is
    # installed): the format's bytes against one bandwidth, so MBU at batch 1 is the bytes alone.
    config = DecodeConfig.from_options({"model": "llama-2-70b", "analytic": True, "sku": "h100-sxm",
                                        "efficiency": "flat", "batches": "1,8",
                                        **dict(zip(args[::2], args[1::2], strict=True))})
    return run_decode(config)


def test_decode_analytic_llama_2_70b_w4a16_fits_one_h100_where_bf16_does_not():
    w4 = _decode("dtype", "w4a16")
    bf16 = _decode("dtype", "bf16")
    assert w4["setup"]["kv_dtype"] == "bf16"  # the default KV dtype of a weight-only format: its compute dtype
    kv = w4["analytic"]["kv"]
    assert kv["weight_bytes"] == weight_bytes(load_model("llama-2-70b"), "w4a16")
    assert 34e9 <= kv["weight_bytes"] <= 39e9 and kv["fits"] and kv["max_batch"] > 0
    assert bf16["analytic"]["kv"]["fits"] is False
    # MBU on the bytes really read: batch 1 reads about 0.28 of bf16's and is as much faster.
    row, row_bf16 = w4["analytic"]["rows"][0], bf16["analytic"]["rows"][0]
    assert row["bytes"] / row_bf16["bytes"] == pytest.approx(0.28, abs=0.01)
    assert row["mbu"] == pytest.approx(1.0, abs=0.01) and row["tokens_per_s"] > 3.4 * row_bf16["tokens_per_s"]
    # The ridge is bf16's (the format multiplies on the bf16 units): w4a16 crosses it no sooner than bf16.
    assert w4["analytic"]["peak_flop_per_s"] == bf16["analytic"]["peak_flop_per_s"]


def test_decode_analytic_cli_reports_the_weights_and_what_stays_bf16():
    run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-2-70b",
                                    "--dtype", "w4a16", "--batch", "1,8"], prog_name="gpubench")
    assert run.exit_code == 0, run.output
    text = " ".join(run.output.split())  # rich wraps the long lines
    assert "w4a16, embeddings and LM head bf16 (KV bf16)" in text
    assert "The weights take 36.9 GB per GPU (embeddings aside)" in text
    assert "the embeddings, the LM head and a router stay bf16, as quantized checkpoints keep them" in text


def test_an_explicit_kv_dtype_is_kept_beside_a_weight_only_format():
    from roofline.specs.models import load_model, step_formats

    model = load_model("llama-3-8b")
    assert step_formats(model, "w8a16", None)[2] == "bf16"
    assert step_formats(model, "w8a16", "fp8")[2] == "fp8"
    assert step_formats(model, "fp16", None)[2] == "fp16"
    assert step_formats(model, None, None)[1:] == ("bf16", "bf16", None)  # no --dtype: bf16, as the file holds


def _simulate_batch_1(tmp_path, dtype: str) -> float:
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--dtype", dtype, "--requests", "8", "--policy", "static:batch=1", "--json",
                                    "--no-report", "-o", str(tmp_path / dtype)])
    assert run.exit_code == 0, run.output
    summaries = json.loads(run.output[run.output.index("["):run.output.rindex("]") + 1])
    return summaries[0]["summary"]["tokens_per_s"]


def test_simulate_analytic_in_w4a16_is_faster_at_batch_1_than_bf16(tmp_path):
    w4, bf16 = _simulate_batch_1(tmp_path, "w4a16"), _simulate_batch_1(tmp_path, "bf16")
    assert w4 > 1.5 * bf16  # decode at batch 1 reads the weights: about 0.4 of bf16's (lm_head and KV stay bf16)
    document = json.loads((tmp_path / "w4a16" / "simulation.json").read_text())
    assert (document["profile"]["dtype"], document["profile"]["kv_dtype"]) == ("w4a16", "bf16")
    assert document["profile"]["lm_head_dtype"] == "bf16"
    _validate(document, "simulation")


def _validate(document: dict, name: str) -> None:
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra (jsonschema) is not installed")
    schema = json.loads((DOCS / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(document)


def test_profile_analytic_w8a16_validates_and_simulates(tmp_path):
    path = tmp_path / "P.json"
    run = CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                    "--dtype", "w8a16", "-o", str(path)])
    assert run.exit_code == 0, run.output
    document = json.loads(path.read_text())
    _validate(document, "step-profile")
    assert (document["dtype"], document["kv_dtype"], document["lm_head"]["dtype"]) == ("w8a16", "bf16", "bf16")
    profile = load_profile(path)
    assert profile.memory["weight_bytes"] == weight_bytes(load_model("llama-3-8b"), "w8a16")
    # The step cost reads every matrix once per step: the same bytes the memory figure holds.
    one = CostModel(profile).step.work(Batch.decode(1, 1))
    assert one.linear.weight_bytes == profile.memory["weight_bytes"]
    run = CliRunner().invoke(main, ["simulate", str(path), "--requests", "20", "--no-report",
                                    "-o", str(tmp_path / "sim")])
    assert run.exit_code == 0, run.output
    assert "w8a16 (embeddings and LM head bf16), KV bf16" in run.output


def test_a_weight_only_kv_dtype_is_refused_by_the_document_and_its_schema(tmp_path):
    path = tmp_path / "P.json"
    CliRunner().invoke(main, ["profile", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                              "--dtype", "w4a16", "-o", str(path)])
    document = {**json.loads(path.read_text()), "kv_dtype": "w4a16"}
    with pytest.raises(ProfileDocError, match="kv_dtype 'w4a16' is not one of fp32"):
        StepProfile.from_dict(document)
    jsonschema = pytest.importorskip("jsonschema", reason="the test extra (jsonschema) is not installed")
    schema = json.loads((DOCS / "step-profile.schema.json").read_text(encoding="utf-8"))
    assert not jsonschema.Draft202012Validator(schema).is_valid(document)
