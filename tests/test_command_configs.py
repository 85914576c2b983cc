"""One frozen config per command (decode, compare, simulate, profile, validate, plan), built from its options and
checked once, before torch is imported: each refused option is one line naming the flag and exit 2, with
nothing created; each command declares its options from its one table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.decode.config import FLAGS as DECODE_FLAGS
from microbench.decode.config import DecodeConfig
from microbench.serving.profile_config import FLAGS as PROFILE_FLAGS
from microbench.serving.profile_config import ProfileConfig
from microbench.serving.validate_options import FLAGS as VALIDATE_FLAGS
from microbench.serving.validate_options import ValidateConfig
from roofline.compare.config import FLAGS as COMPARE_FLAGS
from roofline.compare.config import CompareConfig
from roofline.core.errors import BadInputError
from roofline.core.options import number_refusal
from roofline.fleet.plan_config import FLAGS as PLAN_FLAGS
from roofline.serving.profile_doc import EngineOverhead
from roofline.serving.simulate_config import FLAGS as SIMULATE_FLAGS
from roofline.serving.simulate_config import SimulateConfig

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests" / "data" / "tiny-llama-config.json")
ANALYTIC = ["--analytic", "--gpu", "h100-sxm", "--hf-config", TINY]

REFUSED = [
    (["decode", "--model", "llama-3-8b", "--context", "0"], "--context must be positive, got 0"),
    (["decode", "--model", "llama-3-8b", "--hf-config", TINY], "give one of --model NAME or --hf-config PATH"),
    (["decode", "--model", "llama-3-8b", "--kv-dtype", "int4"], "unknown dtype 'int4'"),
    (["decode", "--model", "llama-3-8b", "--dtype", "w4a16", "--kv-dtype", "w4a16"],
     "--kv-dtype w4a16: a weight-only format stores weights, not a KV cache; choose from fp32, tf32, fp16, bf16, fp8"),
    (["decode", "--model", "llama-3-8b", "--dtype", "int4"], "--dtype int4: unknown dtype 'int4'"),
    (["decode", "--model", "llama-3-8b", "--analytic"], "--analytic needs --gpu SKU"),
    (["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h100-sxm", "--from", "r.json"],
     "--from gives measured launch times; --analytic is the spec sheet only"),
    (["decode", "--model", "llama-3-8b", "--batch", "1:5000:+1"], "5000 batches, more than the 4096"),
    (["decode", "--model", "llama-3-8b", "--batch", "0"], "batch"),
    (["decode", "--model", "llama-3-8b", "--mem-fraction", "0", "-o", "out"], "'--mem-fraction': '0': must be more"),
    (["compare", "a.json", "--mad-k", "nan"], "'--mad-k': 'nan': give a finite number"),
    (["compare", "a.json", "--format", "xml"], "Invalid value for '--format'"),
    (["simulate", "--requests", "3", "-o", "sim"], "give a PROFILE.json, or --analytic with --gpu SKU --model NAME"),
    (["simulate", "p.json", *ANALYTIC, "-o", "sim"], "give a PROFILE.json or --analytic"),
    (["simulate", *ANALYTIC, "--seed", "-1", "-o", "sim"], "--seed -1: give an integer, 0 or more"),
    (["sweep", "--device", "cpu", "--seed", "-1", "-o", "s.json"], "--seed -1: give an integer, 0 or more"),
    (["sweep", "--device", "cpu", "--seed", str(10**23), "-o", "s.json"], f"--seed {10**23}: give an integer"),
    (["simulate", *ANALYTIC, "--seed", str(2**63), "-o", "sim"], f"--seed {2**63}: give an integer"),
    (["simulate", *ANALYTIC, "--mem-fraction", "0", "-o", "sim"], "--mem-fraction must be in (0, 1]"),
    (["simulate", *ANALYTIC, "--overhead-per-seq-s", "nan", "-o", "sim"],
     "--overhead-per-seq-s nan: give seconds from 0 to 3600"),
    (["simulate", *ANALYTIC, "--rates", "0", "-o", "sim"], "--rates 0: must be more than 0"),
    (["simulate", *ANALYTIC, "--rates", "nan", "-o", "sim"], "--rates nan: give a finite number"),
    (["simulate", *ANALYTIC, "--rates", "x", "-o", "sim"], "--rates 'x': give requests/s as a comma list"),
    # A request every nanosecond at most: 1e308 overflowed the figures' axes and printed 300-digit rates.
    (["simulate", *ANALYTIC, "--rates", "1,1e308", "-o", "sim"],
     "--rates 1e+308: must be at most 1000000000 requests/s (a request every nanosecond)"),
    (["simulate", *ANALYTIC, "--policy", "fifo", "-o", "sim"], "unknown policy"),
    (["simulate", *ANALYTIC, "--requests", str(10**10), "-o", "sim"],
     "--requests 10000000000: give an integer from 1 to 1,000,000"),
    (["simulate", *ANALYTIC, "--requests", str(10**22), "-o", "sim"], f"--requests {10**22}: give an integer"),
    (["simulate", *ANALYTIC, "--requests", "0", "-o", "sim"], "--requests 0: give an integer from 1"),
    (["simulate", *ANALYTIC, "--rates", ",".join(map(str, range(1, 102))), "-o", "sim"],
     "--rates: 101 rates, more than 100"),
    (["simulate", *ANALYTIC, "--dtype", "w8a16", "--kv-dtype", "w8a16", "-o", "sim"],
     "--kv-dtype w8a16: a weight-only format stores weights, not a KV cache"),
    (["simulate", *ANALYTIC, "--dtype", "w3a16", "-o", "sim"], "--dtype w3a16: unknown dtype 'w3a16'"),
    (["simulate", *ANALYTIC, "--slo", "ttft=3", "-o", "sim"], "--slo"),
    (["simulate", *ANALYTIC, "--replicas", "0", "-o", "sim"], "--replicas 0: give an integer from 1 to 4096"),
    (["simulate", *ANALYTIC, "--replicas", "-2", "-o", "sim"], "--replicas -2: give an integer from 1 to 4096"),
    (["simulate", *ANALYTIC, "--router", "fastest", "-o", "sim"], "Invalid value for '--router': 'fastest' is not"),
    (["simulate", *ANALYTIC, "--disaggregate", "0:2", "-o", "sim"], "--disaggregate 0:2: give at least one prefill"),
    (["simulate", *ANALYTIC, "--disaggregate", "2", "-o", "sim"], "--disaggregate '2': give P:D"),
    (["simulate", *ANALYTIC, "--disaggregate", "1:1", "--replicas", "2", "-o", "sim"],
     "give --replicas N or --disaggregate P:D"),
    (["simulate", *ANALYTIC, "--disaggregate", "1:1", "--policy", "static:batch=4", "-o", "sim"],
     "--disaggregate: static:batch=4 pads prompts into batches"),
    (["simulate", *ANALYTIC, "--kv-link-gbps", "100", "-o", "sim"], "--kv-link-gbps is the link between"),
    (["simulate", *ANALYTIC, "--disaggregate", "1:1", "--kv-link-gbps", "-5", "-o", "sim"],
     "--kv-link-gbps -5: give 1 to 1,000,000 Gb/s each way"),
    # 1e-300 Gb/s printed every collective's time with 300 digits.
    (["simulate", *ANALYTIC, "--tp", "2", "--interconnect-gbps", "1e-300", "-o", "sim"],
     "--interconnect-gbps 1e-300: give 1 to 1,000,000 Gb/s each way (from gigabit Ethernet"),
    # 1e306 Gb/s in bytes/s overflowed to inf, which simulation.json cannot hold.
    (["simulate", *ANALYTIC, "--disaggregate", "1:1", "--kv-link-gbps", "1e306", "-o", "sim"],
     "--kv-link-gbps 1e+306: give 1 to 1,000,000 Gb/s"),
    (["plan", "p.json", "--slo", "ttft_p90=1", "-o", "out"], "Missing option '--rate'"),
    (["plan", "--rate", "10", "--slo", "ttft_p90=1", "-o", "out"], "give one step profile per candidate"),
    (["plan", "p.json", "--rate", "0", "--slo", "ttft_p90=1", "-o", "out"], "--rate 0: must be more than 0"),
    (["plan", "p.json", "--rate", "1e308", "--slo", "ttft_p90=1", "-o", "out"],
     "--rate 1e+308: must be at most 1000000000 requests/s"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--disaggregate", "--kv-link-gbps", "1e306",
      "-o", "out"], "--kv-link-gbps 1e+306: give 1 to 1,000,000 Gb/s"),
    (["plan", "p.json", "--rate", "10,x", "--slo", "ttft_p90=1", "-o", "out"], "--rate '10,x': give requests/s"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--gpu-hour-usd", "h100-sxm=nan", "-o", "out"],
     "--gpu-hour-usd 'h100-sxm=nan': give SKU=PRICE"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--gpu-hour-usd", "h100-sxm=-2", "-o", "out"],
     "each price a finite, positive number"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--gpu-hour-usd", "h100-sxm=inf", "-o", "out"],
     "--gpu-hour-usd 'h100-sxm=inf'"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--gpu-hour-usd", "a=1,a=2", "-o", "out"],
     "a is priced twice"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--router", "random", "-o", "out"],
     "Invalid value for '--router'"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--max-gpus", "0", "-o", "out"],
     "--max-gpus 0: give 1 to 4096"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--kv-link-gbps", "100", "-o", "out"],
     "--kv-link-gbps is the link between prefill and decode replicas: give it with --disaggregate"),
    (["profile", *ANALYTIC, "--seed", "3", "--threads", "1", "-o", "p.json"],
     "--analytic measures nothing: drop --seed, --threads"),
    (["profile", *ANALYTIC, "--dtype", "w4a16", "--kv-dtype", "w4a16", "-o", "p.json"],
     "--kv-dtype w4a16: a weight-only format stores weights, not a KV cache"),
    (["profile", "--hf-config", TINY, "--kv-dtype", "w8a16", "-o", "p.json"],
     "--kv-dtype w8a16: a weight-only format stores weights, not a KV cache"),
    (["profile", "--hf-config", TINY, "--gpu", "h100-sxm", "-o", "p.json"],
     "--gpu, --ideal and --from belong to --analytic"),
    (["profile", "--hf-config", TINY, "--ideal", "-o", "p.json"], "--gpu, --ideal and --from belong to --analytic"),
    (["profile", "--resume", "--hf-config", TINY, "-o", "p.json"], "--resume takes the plan from OUTPUT.partial"),
    (["profile", "--resume", "--dtype", "fp32", "--tp", "2", "--max-tokens", "64", "-o", "p.json"],
     "--resume takes the plan from OUTPUT.partial; do not also give --tp, --dtype, --max-tokens"),
    (["profile", "--resume", "--kv-dtype", "fp32", "--max-context", "64", "--device", "cpu", "--max-batch", "4",
      "--attention", "bmm", "--budget", "0.1", "--seed", "1", "--clock", "thread-cpu", "-o", "p.json"],
     "do not also give --kv-dtype, --max-context, --device, --max-batch, --attention, --budget, --seed, --clock"),
    (["simulate", *ANALYTIC, "--trace", "t.csv", "--requests", "500", "--arrivals", "poisson:5", "-o", "sim"],
     "--requests, --arrivals: these draw a workload, and --trace t.csv is the workload; drop them"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "--trace", "t.csv", "--prompt", "fixed:8", "-o",
      "out"], "--prompt: these draw a workload, and --trace t.csv is the workload; drop them"),
    (["simulate", *ANALYTIC, "--slo", "ttft_p90=2,itl_p99=0.1,ttft_p90=1", "-o", "sim"],
     "--slo 'ttft_p90=2,itl_p99=0.1,ttft_p90=1': ttft_p90 is given twice; give each objective once"),
    (["plan", "p.json", "--rate", "10", "--slo", "ttft_p90=1,ttft_p90.0=2", "-o", "out"],
     "ttft_p90 is given twice"),
    (["plan", "p.json", "p.json", "--rate", "10", "--slo", "ttft_p90=1", "-o", "out"],
     "p.json: given twice; give each candidate profile once"),
    (["decode", "--model", "opt-13b", "--analytic", "--gpu", "a100-sxm-40gb", "--context", "4096"],
     "--context 4096: longer than the 2048-token context window of OPT-13B"),
    (["sweep", "--device", "cpu", "--dtype", "tf32", "--op", "gemm", "--shape", "256x256", "--batch", "1,2",
      "--no-ceilings", "-o", "s.json"], "nothing in this sweep runs on"),
    (["profile", "--hf-config", TINY, "--seed", "-2", "-o", "p.json"], "--seed -2: give an integer, 0 or more"),
    (["profile", "--hf-config", TINY, "--budget", "inf", "-o", "p.json"], "--budget inf: give a finite number"),
    (["profile", "--hf-config", TINY, "--threads", "0", "-o", "p.json"], "--threads 0: give 1 to"),
    (["validate", "--hf-config", TINY, "--engine", "vllm", "-o", "out"], "unknown engine 'vllm'"),
    (["validate", "-o", "out"], "give --profile PROFILE.json, or one of --model NAME / --hf-config PATH"),
    (["validate", "--hf-config", TINY, "--repeats", "0", "-o", "out"], "--repeats must be positive"),
    (["validate", "--hf-config", TINY, "--seed", "-1", "-o", "out"], "--seed -1: give an integer, 0 or more"),
    (["validate", "--hf-config", TINY, "--clock", "thread-cpu", "--arrivals", "poisson:2", "-o", "out"],
     "--clock thread-cpu counts the engine's CPU time"),
    (["validate", "--hf-config", TINY, "--fail-above", "nan", "-o", "out"], "--fail-above nan: give a finite number"),
    (["validate", "--hf-config", TINY, "--device", "cpu", "--engine-mode", "graphs", "-o", "out"],
     "--engine-mode graphs captures CUDA graphs: the cpu device has none; use --engine-mode eager"),
    (["validate", "--hf-config", TINY, "--engine-mode", "lazy", "-o", "out"], "'lazy' is not one of 'eager', 'graphs'"),
    (["validate", "--hf-config", TINY, "--requests", "100000000000000000000", "-o", "out"],
     "--requests 100000000000000000000: give at most 100,000"),
    (["validate", "--hf-config", TINY, "--calibration-requests", "100001", "-o", "out"],
     "--calibration-requests 100001: give at most 100,000"),
    # What the engine would allocate, against this machine's memory: far past any machine's.
    (["validate", "--hf-config", TINY, "--device", "cpu", "--max-batch", "200000000", "-o", "out"],
     "--max-batch 200000000 --budget-tokens 128: the continuous engine would allocate about"),
    (["validate", "--hf-config", TINY, "--device", "cpu", "--budget-tokens", "10000000000", "-o", "out"],
     "--max-batch 8 --budget-tokens 10000000000: the continuous engine would allocate about"),
    (["validate", "--hf-config", TINY, "--profile-budget", "-1", "-o", "out"], "--profile-budget -1: give a finite"),
]


@pytest.mark.parametrize("args, message", REFUSED, ids=[" ".join(a).replace(TINY, "TINY") for a, _ in REFUSED])
def test_each_refused_option_is_one_line_exit_2_and_creates_nothing(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args, prog_name="gpubench")
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpubench: error: ") and message in lines[0], result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command, table", [("decode", DECODE_FLAGS), ("compare", COMPARE_FLAGS),
                                            ("simulate", SIMULATE_FLAGS), ("profile", PROFILE_FLAGS),
                                            ("validate", VALIDATE_FLAGS), ("plan", PLAN_FLAGS)])
def test_every_option_is_declared_from_its_commands_table(command, table):
    options = [p for p in main.commands[command].params if isinstance(p, __import__("click").Option)]
    declared = {p.name: tuple(p.opts) for p in options if p.name != "help"}
    assert declared == {field: option.flags for field, option in table.items()}


def test_the_overhead_flags_are_one_per_engine_overhead_term():
    overhead = [field for field in SIMULATE_FLAGS if field in EngineOverhead.TERMS]
    assert overhead == list(EngineOverhead.TERMS) == list(EngineOverhead.UNITS)
    assert [SIMULATE_FLAGS[t].spelled for t in overhead] == [
        "--overhead-s", "--overhead-per-seq-s", "--overhead-per-cached-token-s", "--overhead-per-prefill-s"]


def test_library_callers_get_the_same_checks():
    with pytest.raises(BadInputError, match="--context must be positive"):
        DecodeConfig(model="llama-3-8b", context=0)
    with pytest.raises(BadInputError, match="--budget nan: give a finite number"):
        DecodeConfig(model="llama-3-8b", budget_s=float("nan"))
    with pytest.raises(BadInputError, match="--mad-k 0: must be more than 0"):
        CompareConfig(inputs=(Path("a.json"),), mad_k=0.0)
    with pytest.raises(BadInputError, match="--overhead-s inf"):
        SimulateConfig(analytic=True, per_step_s=float("inf"))
    with pytest.raises(BadInputError, match="--seed"):
        SimulateConfig(analytic=True, seed=True)  # a bool is not a seed
    with pytest.raises(BadInputError, match="--budget 0"):
        ProfileConfig(output=Path("p.json"), model="llama-3-8b", budget_s=0.0)
    with pytest.raises(BadInputError, match="--static-batch must be positive"):
        ValidateConfig(static_batch=0)


def test_one_number_rule_for_every_command():
    assert [number_refusal(v, low=0, high=1) for v in (0.5, 1.0, 0.0, float("nan"), float("-inf"), 1.5)] == [
        None, None, "must be more than 0", "give a finite number", "give a finite number", "must be at most 1"]
    assert number_refusal(1.0, high=1, below_high=True) == "must be below 1"


def test_a_config_records_what_the_documents_record():
    config = ValidateConfig.from_options({"hf_config": Path(TINY), "out_dir": Path("out")})
    record = config.to_record()
    assert "out_dir" not in record and record["hf_config"] == TINY and record["seed"] == 0
    decode = DecodeConfig.from_options({"model": "llama-3-8b", "batches": "1:8"})
    assert decode.batches == (1, 2, 4, 8) and decode.dtype is None and decode.kv_dtype is None
    simulate = SimulateConfig.from_options({"analytic": True, "policies": ("static:batch=4", "paged"),
                                            "rates": "0.5,2", "slo": "ttft_p90=2"})
    assert [type(p).__name__ for p in simulate.policy_list] == ["Static", "Paged"] and simulate.rates == (0.5, 2.0)
    assert [type(p).__name__ for p in SimulateConfig(analytic=True).policy_list] == ["Continuous"]
    measured = ProfileConfig.from_options({"output": Path("p.json"), "model": "llama-3-8b", "dtype": "bf16"})
    assert measured.dtype is None and measured.plan().dtype is None  # not typed: the device's own dtype


def test_building_and_refusing_every_config_imports_no_torch():
    """In a fresh interpreter: the config modules, a valid config of each command, and the CLI refusing a bad
    option of each leave torch, transformers and matplotlib unimported."""
    code = f"""
import sys
from pathlib import Path
from click.testing import CliRunner
from microbench.decode.config import DecodeConfig
from microbench.serving.profile_config import ProfileConfig
from microbench.serving.validate_options import ValidateConfig
from roofline.compare.config import CompareConfig
from roofline.serving.simulate_config import SimulateConfig
from roofline.fleet.plan_config import PlanConfig
from microbench.cli.app import main
DecodeConfig.from_options({{'model': 'llama-3-8b', 'batches': '1,2'}})
CompareConfig.from_options({{'inputs': ('a.json',), 'specs': 'h100-sxm'}})
SimulateConfig.from_options({{'analytic': True, 'policies': ('paged',), 'rates': '1'}})
PlanConfig.from_options({{'profile_files': ('p.json',), 'rates': '1,2', 'slo': 'ttft_p90=1', 'prices': 'h100-sxm=2'}})
ProfileConfig.from_options({{'output': Path('p.json'), 'hf_config': Path({TINY!r}), 'threads': 1}})
ValidateConfig.from_options({{'hf_config': Path({TINY!r}), 'out_dir': Path('out')}})
bad = [['decode', '--model', 'x', '--context', '0'], ['compare', 'a.json', '--mad-k', '0'],
       ['simulate', '--analytic', '--seed', '-1'], ['profile', '--hf-config', 'x', '--threads', '0', '-o', 'p'],
       ['validate', '--hf-config', 'x', '--repeats', '0', '-o', 'out'],
       ['plan', 'p.json', '--rate', '0', '--slo', 'ttft_p90=1']]
codes = [CliRunner().invoke(main, args).exit_code for args in bad]
print(codes, [name for name in ('torch', 'transformers', 'matplotlib') if name in sys.modules])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["[2,", "2,", "2,", "2,", "2,", "2]", "[]"], out.stdout + out.stderr


@pytest.mark.parametrize("command", ["fit", "report", "compare"])
def test_a_result_whose_samples_overflow_their_statistics_is_one_line_exit_2(tmp_path, committed_cpu_result,
                                                                          command):
    """Samples of 1e308 s are finite, but their mean is not: the file is refused on load, naming the point."""
    import json

    document = json.loads(committed_cpu_result.read_text())
    point = next(p for p in document["points"] if p.get("samples_s"))
    point["samples_s"] = [1e308] * len(point["samples_s"])
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    args = [command, str(tampered)] + ([str(committed_cpu_result)] if command == "compare" else [])
    result = CliRunner().invoke(main, args, prog_name="gpubench")
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "samples_s must hold seconds per launch up to 3600, found 1e+308" in lines[0], lines
    assert "points[" in lines[0]


def test_a_result_that_measures_one_point_twice_is_one_line_exit_2(tmp_path, committed_cpu_result):
    """Two measurements of one point (a result pasted into another) would count the batch twice in the fit and
    narrow its intervals: the file is refused on load, naming both."""
    import json

    document = json.loads(committed_cpu_result.read_text())
    index = next(i for i, p in enumerate(document["points"]) if p.get("op") == "gemm")
    document["points"].append(document["points"][index])
    doubled = tmp_path / "doubled.json"
    doubled.write_text(json.dumps(document))
    result = CliRunner().invoke(main, ["fit", str(doubled)], prog_name="gpubench")
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    last = len(document["points"]) - 1
    assert len(lines) == 1 and f"points[{last}] repeats points[{index}] (gemm " in lines[0], lines


@pytest.mark.parametrize("command", ["fit", "report", "compare"])
def test_a_result_with_one_impossibly_short_sample_is_one_line_exit_2(tmp_path, committed_cpu_result, command):
    """One 1e-300 s sample among real ones read as an infinite peak: no device moves 1e18 bytes or FLOP a
    second, so the file is refused on load, naming the point and the rate."""
    import json

    document = json.loads(committed_cpu_result.read_text())
    point = next(p for p in document["points"] if p.get("op") == "gemm" and len(p.get("samples_s") or ()) > 3)
    point["samples_s"][0] = 1e-300
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(document))
    args = [command, str(tampered)] + ([str(committed_cpu_result)] if command == "compare" else [])
    result = CliRunner().invoke(main, args, prog_name="gpubench")
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "points[" in lines[0] and "samples_s holds 1e-300 s" in lines[0], lines
    assert "past the 1e+18 no device reaches" in lines[0]
