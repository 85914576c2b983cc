"""gpubench decode: layer shapes and KV bytes by hand, the seed arithmetic from --analytic, a real CPU run."""

import json

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.decode.document import summary_lines
from roofline.decode.step import DecodeSetup
from roofline.specs.gpus import SpecError
from roofline.specs.models import load_model
from roofline.step.launches import StepModel
from roofline.step.memory import kv_bytes_per_token, weight_bytes


def shapes_of(model, tp=1):
    return {lin.name: (lin.n, lin.k, lin.layers) for lin in StepModel.of(model, tp).linears}

TINY = {"_name_or_path": "tiny-llama-test", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1024, "hidden_act": "silu"}


def test_llama_2_70b_shapes_and_kv_by_hand():
    model = load_model("llama-2-70b")
    assert shapes_of(model) == {"qkv_proj": (8192 + 2 * 1024, 8192, 80), "o_proj": (8192, 8192, 80),
                                "gate_up_proj": (2 * 28672, 8192, 80), "down_proj": (8192, 28672, 80),
                                "lm_head": (32000, 8192, 1)}
    step = StepModel.of(model, dtype="fp16")
    assert kv_bytes_per_token(step) == 320 * 1024  # 80 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes
    assert weight_bytes(step) == pytest.approx(137.4e9, rel=0.001)


@pytest.mark.parametrize("tp", [1, 2])
def test_decode_at_context_l_reads_l_tokens_of_kv_per_sequence_by_hand(tp):
    """Llama-3-8B: 32 layers x 8 KV heads x 128 dims x (K, V) x 2 bytes = 131,072 B of KV a token (half a GPU's at
    TP 2).  A decode step of 4 sequences at a context of 1000 tokens reads 4 x 1000 x 131,072 B of KV cache, and
    its attention does 4 FLOP per query head, key and dim (QK^T and PV): 4 x 32 x 128 x 1000 x 32 layers a
    sequence; a sequence's KV at that context is 1000 x 131,072 B."""
    from roofline.decode.step import kv_capacity

    setup = DecodeSetup(StepModel.of(load_model("llama-3-8b"), tp), 1000)
    per_token = 131_072 // tp
    assert kv_bytes_per_token(setup.step) == per_token
    attention = [launch for launch in setup.launches(4) if launch.name == "attention"]
    assert len(attention) == 1
    launch = attention[0]
    assert launch.work.weight_bytes * launch.count == 4 * 1000 * per_token  # the KV cache is attention's "weights"
    assert setup.work(4)[2] == 4 * (4 * (32 // tp) * 128 * 1000 * 32)
    assert kv_capacity(setup, None, 0.9)["kv_bytes_per_sequence"] == 1000 * per_token


def test_tensor_parallel_splits():
    model = load_model("llama-3-70b")
    shapes = {name: (n, k) for name, (n, k, _) in shapes_of(model, tp=4).items()}
    assert shapes["qkv_proj"] == ((64 + 16) * 128 // 4, 8192)  # column split
    assert shapes["o_proj"] == (8192, 64 * 128 // 4)  # row split
    assert shapes["down_proj"] == (8192, 28672 // 4)
    assert shapes["lm_head"] == (128256 // 4, 8192)
    assert kv_bytes_per_token(StepModel.of(model, 4)) == 320 * 1024 // 4
    with pytest.raises(SpecError, match="does not divide"):
        StepModel.of(model, 3)


def test_mixture_of_experts_routing():
    model = load_model("mixtral-8x7b")
    setup = DecodeSetup(StepModel.of(model, routing="uniform"), 1024)
    up = next(launch for launch in setup.launches(64) if launch.name == "experts_gate_up_proj")
    # 64 tokens × top-2 over 8 experts, uniform routing: E·(1 − (1 − k/E)^B) touched, every one of 8 here.
    touched = 8 * (1 - (1 - 2 / 8) ** 64)
    assert up.op == "grouped" and up.tokens == 64 and up.touched == pytest.approx(touched)
    assert up.work.weight_bytes == pytest.approx(touched * 2 * 2 * 14336 * 4096)
    one = next(launch for launch in setup.launches(1) if launch.name == "experts_gate_up_proj")
    assert one.touched == pytest.approx(2)  # batch 1 reads two experts
    # Weights on the GPU hold every expert.
    assert weight_bytes(setup.step) > 80e9


def test_every_shipped_model_loads():
    for model_id in ("llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b", "mixtral-8x7b",
                     "qwen2.5-72b"):
        model = load_model(model_id)
        assert model.source and shapes_of(model)


def test_seed_arithmetic_from_the_analytic_model():
    # On the datasheet (--ideal): the seed arithmetic of the spec sheet's 3.35 TB/s and 989 TFLOP/s.
    run = CliRunner().invoke(main, ["decode", "--model", "llama-2-70b", "--analytic", "--gpu", "h100-sxm", "--ideal",
                                    "--dtype", "fp16", "--batch", "1,64,1024", "--json"])
    # One H100 cannot hold Llama-2-70B: the numbers come, then the stated "does not fit", exit 2.
    assert run.exit_code == 2
    assert "does not fit" in run.output
    document = json.loads(run.output[: run.output.rindex("}") + 1])
    first = document["analytic"]["rows"][0]
    assert 138e9 <= first["bytes"] <= 140e9
    assert first["step_time_s"] >= 0.041
    assert f"{100 * first['mfu_linear']:.2f}" == "0.34"
    assert document["analytic"]["crossing"]["ridge_flop_per_byte"] == pytest.approx(295, abs=1)
    assert document["analytic"]["kv"]["fits"] is False
    assert any("0.34% of peak FLOP/s" in line for line in document["summary"])


def test_analytic_crossover_and_kv_cap_when_it_fits():
    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h200-sxm", "--ideal",
                                    "--context", "128", "--json"])
    assert run.exit_code == 0, run.output
    analytic = json.loads(run.output)["analytic"]
    assert analytic["crossing"]["crossover_batch"] == 512  # the datasheet's ridge, 206 FLOP/byte
    assert analytic["kv"]["max_batch"] > 1000
    long = json.loads(CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu",
                                                "h200-sxm", "--context", "32768", "--json"]).output)
    assert long["analytic"]["crossing"]["never"] is True  # attention keeps it memory-bound


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt-9"], "unknown model"),
    (["--model", "llama-2-70b", "--tp", "3"], "does not divide"),
    (["--model", "llama-2-70b", "--context", "0"], "--context must be positive"),
    (["--model", "llama-2-70b", "--analytic"], "needs --gpu"),
    (["--model", "llama-2-70b", "--analytic", "--gpu", "h900"], "unknown SKU"),
    ([], "one of --model"),
])
def test_bad_decode_input(args, message):
    run = CliRunner().invoke(main, ["decode", *args])
    assert run.exit_code == 2 and message in run.output


@pytest.mark.slow
def test_measured_decode_on_the_cpu_with_a_small_model(measured_decode):
    """The real run (conftest.measured_decode): a tiny Llama measured on the CPU at batches 1, 4 and 16."""
    folder, printed = measured_decode
    document = json.loads((folder / "decode.json").read_text())
    rows = document["measured"]["rows"]
    assert [r["batch"] for r in rows] == [1, 4, 16]
    # Which batch is faster depends on the machine's load (a 0.03 s budget on a shared CPU); what the
    # document must get right whatever the load is its arithmetic: counts from the shapes, rates from the times.
    assert [r["flop"] for r in rows] == sorted(r["flop"] for r in rows) and rows[0]["flop"] < rows[-1]["flop"]
    assert rows[0]["intensity_flop_per_byte"] < rows[-1]["intensity_flop_per_byte"]
    for row in rows:
        assert row["tokens_per_s"] == pytest.approx(row["batch"] / row["step_time_s"])
        assert row["intensity_flop_per_byte"] == pytest.approx(row["flop"] / row["bytes"])
    warnings = " ".join(document["measured"]["warnings"])
    # Batching raises throughput; when a loaded CI machine says otherwise, the document must say so.
    for small, large in zip(rows, rows[1:], strict=False):
        if large["tokens_per_s"] <= small["tokens_per_s"] or large["step_time_s"] < small["step_time_s"]:
            assert f"batch {large['batch']} takes" in warnings, (rows, warnings)
    assert all(r["step_time_s"] > 0 and r["mbu"] and r["mfu"] for r in rows)
    assert document["measured"]["kv"]["max_batch"] > 16
    assert (folder / "decode.png").stat().st_size > 10_000
    assert "measured on" in printed and "tokens/s" in printed
    # What ran each launch is named (a format's time is its kernel's): the step's fp32 matmuls and attention bmm.
    kernels = document["measured"]["kernels"]
    assert list(kernels) == ["fp32"] and "torch.bmm" in kernels["fp32"] and "torch.matmul" in kernels["fp32"]
    assert "kernels measured: fp32 torch." in " ".join(printed.split())


@pytest.mark.slow
def test_a_decode_measured_on_the_cpu_never_says_per_gpu(measured_decode):
    """The weights are a CPU's to hold: the measured part says which device it ran on, and the answer counts the
    weights on it, per TP rank at TP > 1, never "per GPU"; the spec sheet's side is a GPU's and says so."""
    folder, printed = measured_decode
    document = json.loads((folder / "decode.json").read_text())
    assert document["measured"]["device_kind"] == "cpu"
    assert "per GPU" not in " ".join(document["summary"]) and "per GPU" not in printed
    assert "The weights take " in " ".join(document["summary"])
    split = {**document, "setup": {**document["setup"], "tp": 2}}
    assert "per TP rank (embeddings aside)" in summary_lines(split)[0]
    on_a_gpu = {**document, "measured": {**document["measured"], "device_kind": "cuda"}}
    assert "per GPU (embeddings aside)" in summary_lines(on_a_gpu)[0]


def test_decode_from_a_sweep_result(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    sweep = tmp_path / "sweep.json"
    # Without the step's shapes the result cannot stand in for a measurement: it says which are missing.
    CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "64x64",
                              "--batch", "1", "--budget", "0.02", "--no-ceilings", "-o", str(sweep)])
    run = CliRunner().invoke(main, ["decode", "--hf-config", str(config), "--batch", "1", "--dtype", "fp32",
                                    "--from", str(sweep)])
    assert run.exit_code == 2 and "lacks" in run.output


def test_no_peak_for_a_dtype_the_device_lacks():
    # An A100 has no fp8 tensor cores: the step must not borrow the bf16 peak for MFU or a ridge.
    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "a100-sxm-80gb",
                                    "--dtype", "fp8", "--batch", "1,64", "--context", "128", "--json"])
    assert run.exit_code == 0, run.output
    document = json.loads(run.output[: run.output.rindex("}") + 1])
    part = document["analytic"]
    assert part["peak_flop_per_s"] is None and part["crossing"] is None
    assert all(row["mfu"] is None and row["bound"] == "memory" for row in part["rows"])
    assert any("no peak for fp8 on NVIDIA A100" in line for line in document["summary"])


def test_a_kv_cap_far_off_the_axis_is_said_to_be(tmp_path):
    from roofline.decode.plot import decode_figure

    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h200-sxm",
                                    "--context", "128", "--batch", "1,2,4", "--json"])
    document = json.loads(run.output[: run.output.rindex("}") + 1])
    assert document["analytic"]["kv"]["max_batch"] > 8
    figure = decode_figure(document)
    labels = figure.axes[0].get_legend_handles_labels()[1]
    assert any("beyond this axis (not drawn)" in label for label in labels), labels
    assert not [line for line in figure.axes[0].get_lines() if list(line.get_xdata()) and
                line.get_linestyle() == ":" and max(line.get_xdata()) > 8]


def test_analytic_with_from_is_refused_not_ignored(tmp_path):
    # --analytic reads nothing: a --from beside it (even a file that does not exist) was silently dropped.
    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h100-sxm",
                                    "--from", str(tmp_path / "nonexistent.json"), "--batch", "1"])
    assert run.exit_code == 2 and run.output.count("\n") == 1 and "--from" in run.output, run.output


def test_more_batches_than_a_table_shows_are_refused_before_computing():
    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h100-sxm",
                                    "--batch", "1:1000000:+1"])
    assert run.exit_code == 2 and run.output.count("\n") == 1 and "1000000 batches" in run.output, run.output


@pytest.mark.slow
def test_energy_per_token_is_charged_at_the_tdp_analytically_and_absent_on_a_cpu(measured_decode):
    """Analytic: every GPU at its TDP for the whole step (an upper bound), J/token = W × step / tokens; a CPU run
    says why it has none."""
    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h100-sxm", "--batch",
                                    "1,64", "--context", "128", "--json"])
    analytic = json.loads(run.output)["analytic"]
    assert "700 W" in analytic["energy"]["basis"]
    for row in analytic["rows"]:
        assert row["joules_per_token"] == pytest.approx(700 * row["step_time_s"] / row["batch"])
    folder, _ = measured_decode
    measured = json.loads((folder / "decode.json").read_text())["measured"]
    assert measured["energy"]["basis"] is None and "CPU has no energy counter" in measured["energy"]["why_none"]
    assert all(row["joules_per_token"] is None for row in measured["rows"])
