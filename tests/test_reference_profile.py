"""``gpubench profile --reference``: a step profile from the reference database's kernel times, every table naming
its source, read back by simulate; the times checked against the database's own rows (read here apart from
gpubench's reader), what the database lacks on the analytic basis and said, and the refusals one line each."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import needs_database

from microbench.cli.app import main
from roofline.reference import database
from roofline.serving.profile_doc import load_profile


def _rows(family: str, filename: str, **equal) -> list[dict]:
    """The h200_sxm vllm rows of one table whose columns equal ``equal``, read with pyarrow directly."""
    import pyarrow.parquet as pq

    path, _ = database.open_database().table("h200_sxm", family, "vllm", filename)
    rows = pq.read_table(path).to_pylist()
    return [row for row in rows if all(row[key] == value for key, value in equal.items())]


@pytest.fixture(scope="module")
def llama_70b(tmp_path_factory):
    if not database.installed():
        pytest.skip("the [reference] extra is not installed")
    path = tmp_path_factory.mktemp("reference") / "P.json"
    run = CliRunner().invoke(main, ["profile", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--model",
                                    "llama-3-70b", "--tp", "4", "--max-tokens", "65536", "-o", str(path)])
    assert run.exit_code == 0, run.output
    return path, run.output


@needs_database
def test_a_reference_profile_names_every_tables_source_and_simulate_takes_it(llama_70b, tmp_path):
    path, output = llama_70b
    profile = load_profile(path)
    assert profile.source == "reference" and "aiconfigurator-core" in profile.basis
    document = json.loads(path.read_text())
    tables = [*document["linears"], document["lm_head"], document["decode_attention"], document["prefill_attention"],
              document["other"], document["comm"]]
    assert all(table.get("source") for table in tables), [t for t in tables if not t.get("source")]
    assert all("vllm 0.24.0" in t["source"] for t in [*document["linears"], document["comm"]])
    assert document["comm"]["measured"] is True and "vLLM_custom_graph" in document["comm"]["source"]
    assert "it times no norm, rotary embedding or activation kernel" in document["other"]["source"]
    assert "the launch floor: " in document["other"]["source"]  # each launch at least the database's elementwise
    assert "o_proj: " in output and "decode_attention: " in output  # each table's source printed
    run = CliRunner().invoke(main, ["simulate", str(path), "--requests", "64", "--arrivals", "burst", "--prompt",
                                    "fixed:1024", "--output", "fixed:256", "--policy", "static:batch=64",
                                    "--no-report", "-o", str(tmp_path / "sim")])
    assert run.exit_code == 0, run.output
    summary = json.loads((tmp_path / "sim" / "simulation.json").read_text())["runs"][0]["summary"]
    assert summary["requests_per_s"] > 0


@needs_database
def test_the_reference_profiles_times_are_the_databases_rows(llama_70b):
    path, _ = llama_70b
    profile = load_profile(path)
    o_proj = next(t for t in profile.linears if t.name == "o_proj")
    assert (o_proj.n, o_proj.k) == (8192, 2048)  # Llama-3-70B at TP 4: 64 heads of 128 over 4 GPUs
    [row] = _rows("gemm", "gemm_perf.parquet", gemm_dtype="bfloat16", m=1, n=8192, k=2048)
    assert o_proj.time_s[o_proj.tokens.index(1)] == pytest.approx(row["latency"] * 1e-3, rel=1e-12)
    # Decode attention at context 128: between the rows of 127 and 255 cached tokens (16 heads, 2 KV heads a GPU).
    rows = {r["step"]: r["latency"] * 1e-3 for r in _rows(
        "attention", "generation_attention_perf.parquet", batch_size=1, num_heads=16, num_key_value_heads=2,
        head_dim=128, kv_cache_dtype="bfloat16", window_size=0, kernel_source="vllm_flash_attn_fa3")}
    decode = profile.decode_attention
    cell = decode.time_s[decode.rows.index(1)][decode.cols.index(128)]
    assert cell == pytest.approx(rows[127] + (128 - 127) / (255 - 127) * (rows[255] - rows[127]), rel=1e-9)
    # One token's all-reduce over 4 GPUs: 8192 bf16 elements, vLLM's custom all-reduce in a CUDA graph.
    [row] = _rows("comm", "custom_allreduce_perf.parquet", num_gpus=4, message_size=8192,
                  kernel_source="vLLM_custom_graph")
    assert profile.comm is not None and profile.comm.time_s[profile.comm.tokens.index(1)] == pytest.approx(
        row["latency"] * 1e-3)


@needs_database
def test_a_mixture_of_experts_takes_the_fused_layer_shared_between_its_two_grouped_gemms(tmp_path):
    path = tmp_path / "moe.json"
    run = CliRunner().invoke(main, ["profile", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--model",
                                    "mixtral-8x7b", "--tp", "2", "--max-tokens", "512", "-o", str(path)])
    assert run.exit_code == 0, run.output
    profile = load_profile(path)
    fused = {r["num_tokens"]: r["latency"] * 1e-3 for r in _rows(
        "moe", "moe_perf.parquet", moe_dtype="bfloat16", hidden_size=4096, inter_size=14336, topk=2, num_experts=8,
        moe_tp_size=2, moe_ep_size=1, distribution="balanced")}
    gate_up, down = profile.grouped
    for tokens in (1, 64, 512):
        i = gate_up.tokens.index(tokens)
        assert gate_up.time_s[i] + down.time_s[i] == pytest.approx(fused[tokens], rel=1e-9)
        assert gate_up.time_s[i] > down.time_s[i]  # twice the columns: the larger share
    assert "the fused layer's time shared between gate_up and down" in gate_up.source


@needs_database
def test_what_the_database_lacks_is_on_the_analytic_basis_and_says_why(tmp_path):
    path = tmp_path / "fp16.json"
    run = CliRunner().invoke(main, ["profile", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--model",
                                    "llama-3-8b", "--dtype", "fp16", "--max-tokens", "64", "--max-context", "512",
                                    "-o", str(path)])
    assert run.exit_code == 0, run.output
    profile = load_profile(path)
    assert all(t.source.startswith("not in aiconfigurator-core") and "not fp16" in t.source for t in profile.linears)
    assert profile.decode_attention.source.startswith("not in aiconfigurator-core")
    assert profile.decode_attention.kernel == "roofline"


@pytest.mark.parametrize("args, message", [
    (["--reference", "aiconfigurator", "--model", "llama-3-8b"], "--reference reads the database's kernel times on "
                                                                  "--gpu SKU"),
    (["--reference", "aiconfigurator", "--gpu", "h200-sxm", "--analytic", "--model", "llama-3-8b"],
     "none of --analytic"),
    (["--reference", "aiconfigurator", "--gpu", "h200-sxm", "--model", "llama-3-8b", "--budget", "1"],
     "--reference measures nothing: drop --budget"),
    (["--reference", "aiconfigurator", "--gpu", "h200-sxm", "--model", "llama-3-8b", "--engine", "tgi"],
     "'tgi' is not one of 'sglang', 'trtllm', 'vllm', 'none'"),
    (["--reference", "nvidia", "--gpu", "h200-sxm", "--model", "llama-3-8b"], "--reference nvidia: unknown"),
    (["--model", "llama-3-8b", "--engine", "vllm"], "--engine belongs to --analytic and --reference"),
])
def test_profile_reference_refuses_in_one_line(tmp_path, args, message):
    run = CliRunner().invoke(main, ["profile", *args, "-o", str(tmp_path / "p.json")])
    assert run.exit_code == 2, run.output
    assert len(run.output.strip().splitlines()) == 1 and message in run.output, run.output
    assert not (tmp_path / "p.json").exists()


@needs_database
def test_a_reference_profile_is_a_valid_step_profile_document(llama_70b):
    pytest.importorskip("jsonschema", reason="the test extra (jsonschema) is not installed")
    from test_document_schemas import schema_errors

    path, _ = llama_70b
    assert schema_errors("step-profile", json.loads(path.read_text())) == []
