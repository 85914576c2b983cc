"""gpubench profile and decode, measured on the CPU, of tiny hybrid models from random weights: a Qwen3.5-like (Gated
DeltaNet and full attention, layer_types), a Nemotron-H-like (Mamba-2, attention, MoE and MLP blocks by pattern) and a
GLM-5-like DSA model.  Each profile carries a measured table per other mixer kind (what StepProfile checks), loads and
simulates; each measured decode times its mixers by their sweep points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.serving.profile_mixers import SPARSE_KERNEL
from microbench.serving.profile_plan import ProfilePlan, plan_items
from microbench.serving.profile_run import prepare_profile, run_profile
from microbench.timing.observer import SweepObserver
from roofline.serving.profile_doc import load_profile
from roofline.serving.simulate import simulate
from roofline.serving.workload import make_workload

DATA = Path(__file__).parent / "data"
# config -> (the other mixer kinds' tables: name, op, decode contexts), or () where every layer is the main one
HYBRIDS = {
    "tiny-qwen3.5-config.json": [("linear_attention", "linear_attention", [1])],
    "tiny-nemotron-h-config.json": [("mamba2", "mamba2", [1])],
    "tiny-dsa-config.json": [],
}


def hybrid_plan(config: str) -> ProfilePlan:
    return ProfilePlan(model=None, hf_config=str(DATA / config), max_tokens=8, max_context=32, max_batch=2,
                       device="cpu", budget_s=0.005)


def test_a_hybrids_plan_has_its_mixers_items():
    items = plan_items(hybrid_plan("tiny-qwen3.5-config.json"), hybrid_plan("tiny-qwen3.5-config.json").check())
    mixer = [(i.kind, i.a, i.b) for i in items if i.name == "linear_attention"]
    # decode over the batch grid (1, 2) at one context; prefill per prompt (8: the token limit)
    assert mixer == [("mixer_decode", 1, 1), ("mixer_decode", 2, 1), ("mixer_prefill", 8, 0)]
    assert [i.label for i in items if i.name == "linear_attention"][0] == "decode linear_attention B=1"


@pytest.mark.slow  # a whole profile each: ~10-20 s on two shared cores
@pytest.mark.parametrize("config", list(HYBRIDS))
def test_a_hybrid_profile_is_measured_on_the_cpu_and_simulates(config, tmp_path):
    output = tmp_path / "P.json"
    run = CliRunner().invoke(main, ["profile", "--hf-config", str(DATA / config), "--device", "cpu", "--max-tokens",
                                    "8", "--max-context", "32", "--max-batch", "2", "--budget", "0.005",
                                    "-o", str(output)])
    assert run.exit_code == 0, run.output
    profile = load_profile(output)  # StepProfile refuses mixer tables that are not its model's other kinds
    assert [(t.name, t.op, list(t.decode.cols)) for t in profile.mixers] == HYBRIDS[config]
    for table in profile.mixers:
        assert all(t > 0 for row in table.decode.time_s for t in row) and all(t > 0 for t in table.prefill.time_s)
        assert table.decode.kernel.startswith("torch reference") and table.chunk is None
    if config == "tiny-dsa-config.json":  # every layer DSA: the main tables time the sparse attention
        assert profile.decode_attention.kernel == SPARSE_KERNEL
    requests = make_workload(8, "burst", "fixed:8", "uniform:2:6", 0)
    # Steps of at most 8 tokens, the profile's grid (a profile is never read past its grid).
    assert simulate(profile, requests, "chunked:budget=8").makespan_s > 0
    simulated = CliRunner().invoke(main, ["simulate", str(output), "--requests", "8", "--prompt", "fixed:8",
                                          "--output", "uniform:2:6", "--policy", "chunked:budget=8",
                                          "-o", str(tmp_path / "sim")])
    assert simulated.exit_code == 0, simulated.output


@pytest.mark.slow
def test_a_hybrid_profile_resumes_with_its_mixer_items(tmp_path):
    from microbench.timing.observer import Interrupted

    output, plan = tmp_path / "P.json", hybrid_plan("tiny-nemotron-h-config.json")
    run = prepare_profile(plan, output, SweepObserver())
    first_mixer = next(i for i, item in enumerate(run.items) if item.kind.startswith("mixer_"))

    def stop_at_the_mixers(item, measured):
        if len(run.measured) == first_mixer + 1:
            run.session.stop.signum = 2
            run.session.stop.set()

    with pytest.raises(Interrupted):
        run_profile(run, lambda n: None, stop_at_the_mixers)
    resumed = prepare_profile(plan, output, SweepObserver(), resume=True)
    import threading

    resumed.session.stop = threading.Event()
    run_profile(resumed, lambda n: None, lambda item, measured: None)
    assert [t.name for t in load_profile(output).mixers] == ["mamba2"]


@pytest.mark.slow  # a measured decode each: ~10-30 s on two shared cores
@pytest.mark.parametrize("config, kernel", [("tiny-qwen3.5-config.json", "gated delta rule"),
                                            ("tiny-nemotron-h-config.json", "selective state update"),
                                            ("tiny-dsa-config.json", "fp8 indexer keys")])
def test_a_measured_decode_of_a_hybrid_times_its_mixers(config, kernel, tmp_path):
    run = CliRunner().invoke(main, ["decode", "--hf-config", str(DATA / config), "--device", "cpu", "--batch", "1,2",
                                    "--context", "32", "--budget", "0.005", "-o", str(tmp_path / "D")])
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "D" / "decode.json").read_text())
    kernels = [name for names in document["measured"]["kernels"].values() for name in names]
    assert any(kernel in name for name in kernels), kernels
    assert all(row["attention_time_s"] > 0 for row in document["measured"]["rows"])
