"""The end-to-end check of validate on a mixture of experts, on the CPU: a tiny random Qwen3-MoE (8 experts, top-2)
through transformers, predicted against measured within the same 15% as the dense check
(tests/test_validate_engine.py, whose sizes and repeats it runs), and what that rests on: the engine's experts run
the kernel the profile times, on the profile's clock, under the routing the engine's random router follows; and
what the engine cannot build is refused before anything is measured."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the serving extra (transformers) is not installed")

from click.testing import CliRunner  # noqa: E402
from validate_check import check_args  # noqa: E402

from microbench.cli.app import main  # noqa: E402

pytestmark = pytest.mark.slow  # a whole real run: the slow tier (pytest -m slow)

DATA = Path(__file__).parent / "data"
TINY_MOE = DATA / "tiny-qwen3-moe-config.json"
TINY_MLA = DATA / "tiny-mla-config.json"
TOLERANCE = 0.15


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory):
    """One real validation of the tiny mixture through the command, with the dense check's sizes and repeats,
    shared by the tests below: (output folder, what it printed)."""
    import torch

    before = torch.get_num_threads()
    out = tmp_path_factory.mktemp("validate-moe")
    try:
        result = CliRunner().invoke(main, check_args(TINY_MOE, out))
    finally:
        torch.set_num_threads(before)
    assert result.exit_code == 0, result.output
    return out, result.output


def test_tiny_moe_static_and_continuous_are_predicted_within_15_percent(moe_run):
    document = json.loads((moe_run[0] / "validate.json").read_text())
    for path in ("static", "continuous"):
        total = document["comparison"][path]["total_s"]
        assert abs(total["rel_err"]) <= TOLERANCE, \
            f"{path}: predicted {total['predicted']:.4f} s, measured {total['measured']:.4f} s " \
            f"({total['rel_err']:+.1%})"
    ratio = document["ratio"]
    assert abs(ratio["rel_err"]) <= TOLERANCE, \
        f"static/continuous: predicted {ratio['predicted']:.3f}, measured {ratio['measured']:.3f} " \
        f"({ratio['rel_err']:+.1%})"


def test_the_moe_validation_ran_the_mixture_and_the_kernels_it_profiled(moe_run):
    """The engine built the mixture (not a dense Llama of its shapes), its experts ran the kernel the profile's
    grouped tables timed, and the profile's routing is the engine's (uniform), timed on the engine's clock."""
    from tests.test_validate_engine import assert_schema_valid

    folder, output = moe_run
    document = json.loads((folder / "validate.json").read_text())
    profile = json.loads((folder / "profile.json").read_text())
    assert document["engine"]["model"]["experts"] == 8 and document["engine"]["model"]["experts_per_token"] == 2
    experts = document["engine"]["experts"]
    assert experts["implementation"] == "grouped_mm" and experts["routing"] == "uniform"
    assert [table["name"] for table in profile["grouped"]] == ["experts_gate_up_proj", "experts_down_proj"]
    assert {table["kernel"] for table in profile["grouped"]} == {experts["kernel"]}
    assert profile["routing"] == "uniform" and "thread CPU time" in profile["basis"]
    assert {run["measured"]["settings"]["clock"] for run in document["runs"].values()} == {"thread-cpu"}
    assert "random router" in document["engine"]["weights"]
    assert f"experts: transformers grouped_mm ({experts['kernel']}), profiled under uniform routing" in output
    assert_schema_valid("validation", document)
    assert_schema_valid("step-profile", profile)


def test_a_grouped_item_on_the_cpu_is_timed_on_the_profiles_clock(tmp_path):
    """The experts are timed as the linears are: on --clock thread-cpu, this thread's CPU time (they were timed on
    the wall clock, through the sweep's point, whatever the profile's clock)."""
    import torch

    from microbench.serving.profile_plan import Item, ProfilePlan
    from microbench.serving.profile_run import measure_item, prepare_profile
    from microbench.timing.grouped import FALLBACK, GROUPED_KERNEL, LOOP_KERNEL, PRIVATE_GROUPED_KERNEL
    from microbench.timing.observer import SweepObserver

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plan = ProfilePlan(model=None, hf_config=str(TINY_MOE), routing="uniform", max_tokens=8, max_context=16,
                           max_batch=2, device="cpu", budget_s=0.002, clock="thread-cpu")
        run = prepare_profile(plan, tmp_path / "p.json", SweepObserver())
        model = plan.check()
        measured = {clock: measure_item(run.session, replace(plan, clock=clock), model,
                                        Item("grouped", "experts_gate_up_proj", 8), "fp32")
                    for clock in ("thread-cpu", "wall")}
    finally:
        torch.set_num_threads(before)
    assert measured["thread-cpu"]["timer"].endswith("(thread-cpu)")
    assert measured["wall"]["timer"].endswith("(wall)")
    for entry in measured.values():
        assert entry["kernel"] in (f"{GROUPED_KERNEL} ({FALLBACK})", f"{PRIVATE_GROUPED_KERNEL} ({FALLBACK})",
                                   LOOP_KERNEL)
        assert entry["time_s"] > 0 and entry["rel_err"] is not None and 2 <= entry["touched"] <= 8


def test_the_engines_random_router_routes_as_uniform_routing_says():
    """Why validate profiles a mixture under ``uniform``: counted in the engine's own static decode steps (8
    sequences), the experts each MoE layer's tokens touch average what uniform routing expects (7.2 of 8 for 8
    tokens top-2), well under balanced routing's 8."""
    import torch

    from microbench.serving.engine import transformers_engine as te
    from roofline.serving.workload import make_workload
    from roofline.specs.hf_config import load_hf_config
    from roofline.step.routing import Routing

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lm = te.build_model(torch, load_hf_config(TINY_MOE), "fp32", "cpu", 64, 0)
        touched: dict[int, list[int]] = defaultdict(list)

        def count(module, args):
            hidden, top_k_index = args[0], args[1]
            touched[hidden.shape[0]].append(len(set(top_k_index.flatten().tolist())))

        hooks = [m.register_forward_pre_hook(count) for m in lm.modules() if type(m).__name__ == "Qwen3MoeExperts"]
        assert len(hooks) == 2  # one per MoE layer
        for group in te.static_groups(make_workload(16, "burst", "fixed:8", "uniform:4:24", 1), 8):
            te.run_static_batch(torch, lm, group, "cpu")
    finally:
        torch.set_num_threads(before)
    decode = touched[8]
    assert len(decode) >= 40
    mean = sum(decode) / len(decode)
    uniform, balanced = Routing("uniform").expected_touched(8, 2, 8), Routing("balanced").expected_touched(8, 2, 8)
    assert abs(mean - uniform) < 0.5 and balanced - mean > 0.5, (mean, uniform, balanced)


def test_the_engine_builds_the_mixture_and_refuses_what_it_cannot_build():
    import torch

    from microbench.serving.engine.models import build_model, experts_kernel
    from microbench.serving.engine.settings import EngineError
    from roofline.specs.hf_config import load_hf_config

    moe = load_hf_config(TINY_MOE)
    lm = build_model(torch, moe, "fp32", "cpu", 64, 0)
    assert type(lm).__name__ == "Qwen3MoeForCausalLM" and lm.config._experts_implementation == "grouped_mm"
    layer = lm.model.layers[0]
    assert tuple(layer.mlp.experts.gate_up_proj.shape) == (8, 2 * 256, 256)  # experts × gate_up × hidden
    assert tuple(layer.mlp.experts.down_proj.shape) == (8, 256, 256)
    assert layer.mlp.gate.top_k == 2 and tuple(layer.self_attn.k_proj.weight.shape) == (2 * 64, 256)
    assert experts_kernel(torch, lm) is not None
    # Partly routed: the first layers keep a dense MLP of the dense width.
    partly = build_model(torch, replace(moe, layers=3, moe_layers=2), "fp32", "cpu", 64, 0)
    assert [type(layer.mlp).__name__ for layer in partly.model.layers] == ["Qwen3MoeMLP", "Qwen3MoeSparseMoeBlock",
                                                                            "Qwen3MoeSparseMoeBlock"]
    assert partly.model.layers[0].mlp.gate_proj.weight.shape[0] == moe.intermediate
    for model, words in ((load_hf_config(TINY_MLA), "MLA attention"),
                         (replace(moe, shared_experts=1), "1 shared experts"),
                         (replace(moe, sliding_window=16, sliding_layers=2), "2 sliding-window layers"),
                         (replace(moe, gated_mlp=False), "plain MLP")):
        with pytest.raises(EngineError, match=words):
            build_model(torch, model, "fp32", "cpu", 64, 0)


def test_validate_refuses_a_model_the_engine_cannot_build_before_measuring(tmp_path, monkeypatch):
    """An MLA model (or shared experts) is refused in one line before the profile is measured, not after."""
    import microbench.serving.validate_run

    def reached(*args, **kwargs):
        raise AssertionError("validate began measuring before refusing its input")

    monkeypatch.setattr(microbench.serving.validate_run, "ProfilePasses", reached)
    result = CliRunner().invoke(main, ["validate", "--hf-config", str(TINY_MLA), "--device", "cpu",
                                       "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpubench: error:") and "MLA attention" in lines[0]


def test_a_given_moe_profile_is_built_as_the_mixture_it_was_measured_for(moe_run):
    """validate --profile rebuilt the model from the profile's record without its experts: a dense Llama of the
    mixture's shapes would have run against a profile of experts."""
    from microbench.serving.validate_run import model_from_profile
    from roofline.serving.profile_doc import load_profile
    from roofline.specs.hf_config import load_hf_config

    rebuilt = model_from_profile(load_profile(moe_run[0] / "profile.json"))
    assert (rebuilt.experts, rebuilt.experts_per_token, rebuilt.expert_intermediate) == (8, 2, 256)
    assert rebuilt.to_record() == load_hf_config(TINY_MOE).to_record()
