"""Engine time by default: the overhead presets (profiles/engines) load with every figure sourced; ``simulate`` adds
the default engine's (vLLM's) terms to every step and says whose they are; ``--engine none`` is the kernel-only
answer of before presets, figure for figure; a calibrated profile's fitted terms win over any preset; an unknown
engine is one line, exit 2."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.core.errors import BadInputError
from roofline.serving.profile_doc import EngineOverhead, load_profile, save_profile
from roofline.serving.profiles.engine_time import engine_time, preset_overhead
from roofline.serving.simulate_config import SimulateConfig
from roofline.specs import engines
from roofline.specs.engines import PRESET_TERMS, engine_names, load_engine_presets
from roofline.specs.gpus import SpecError, profiles_dir

# One small case, kernels on flat achievable ceilings (no reference database): Llama-3-8B on an H100 SXM, 8 requests
# at once of 128 prompt and 16 output tokens, continuous (all 8 prefill in one step, then 15 decode steps of 8) and
# static:batch=4 (two batches of 4, each 15 decode steps of 4).
CASE = ["--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--efficiency", "flat", "--requests", "8",
        "--prompt", "fixed:128", "--output", "fixed:16", "--policy", "continuous", "--policy", "static:batch=4",
        "--no-report"]
MODEL = CASE[:7]  # the model options alone, for profile
# What this case answered before engine presets existed (commit 9b3465e, kernels only), by policy: TPOT p50, TTFT
# p50, tokens/s and makespan, s. They rest on profiles/gpus/h100-sxm.toml's achievable ceilings: a change there moves
# them (rerun the case at that commit's parent with the new sheet).
KERNEL_ONLY = {"continuous": (0.004967168183536466, 0.020569995660222457, 1346.2698873105608, 0.09507751841326943),
               "static:batch=4": (0.004929213509743857, 0.05265339428280616, 758.3441739333592, 0.16878879590528537)}
# The vLLM preset's terms, by hand from profiles/engines/vllm.toml (BLIS's beta7, beta5, beta6): Llama-3-8B has 32
# layers, so each step costs 126.024825 + 32 x 32.09546717 = 1153.07977444 us, and 4.41684444 us per sequence in it.
VLLM_STEP_S = 126.024825e-6 + 32 * 32.09546717e-6
VLLM_SEQUENCE_S = 4.41684444e-6


_RUNS = itertools.count()


def _simulate(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / f"sim{next(_RUNS)}"
    run = CliRunner().invoke(main, ["simulate", *args, "-o", str(out)])
    assert run.exit_code == 0, run.output
    document = json.loads((out / "simulation.json").read_text())
    document["printed"] = run.output
    return document


def _runs(document: dict) -> dict[str, dict]:
    return {entry["policy"]["policy"]: entry for entry in document["runs"]}


def test_every_preset_loads_with_every_figure_sourced():
    presets = load_engine_presets()
    assert set(presets) == {path.stem for path in (profiles_dir() / "engines").glob("*.toml")} >= {"vllm", "sglang",
                                                                                                  "trtllm"}
    assert engine_names() == (*presets, "none") and engines.DEFAULT_ENGINE == "vllm"
    for preset in presets.values():
        assert set(preset.seconds) == set(preset.sources) == set(PRESET_TERMS)
        for term in PRESET_TERMS:  # every figure, a zero too, says where it comes from
            assert len(preset.sources[term]) > 30, (preset.name, term)
        for note in ("version_source", "gpu_source", "source_detail"):
            assert len(preset.notes[note]) > 30, (preset.name, note)
        assert preset.engine and preset.version and preset.gpu and preset.source and preset.fitted_on
        assert preset.left_out, f"{preset.name}: say what the sources give that is not used"
    vllm = presets["vllm"]
    assert "inference-sim/inference-sim" in vllm.source and "H100" in vllm.gpu and "v0.15.1" in vllm.version
    assert "alibaba/InferSim" in presets["sglang"].source and presets["trtllm"].charges_nothing


def test_a_preset_resolves_its_per_layer_term_against_the_model():
    overhead = preset_overhead("vllm", 80)
    assert overhead is not None and overhead.preset == "vllm"
    assert overhead.per_step_s == pytest.approx(126.024825e-6 + 80 * 32.09546717e-6, rel=1e-12)
    assert (overhead.per_sequence_s, overhead.per_cached_token_s, overhead.per_prefill_step_s) == \
        pytest.approx((4.41684444e-6, 0.0, 0.0), rel=1e-12)
    sglang = preset_overhead("sglang", 80)  # InferSim: 5 ms a decode step, 30 ms a prefill step
    assert sglang is not None and (sglang.per_step_s, sglang.per_prefill_step_s) == pytest.approx((5e-3, 25e-3))
    assert preset_overhead("none", 80) is None
    assert "126 µs + 32.1 µs x 80 layers a step, 4.42 µs a sequence" in overhead.fitted_on


def test_a_preset_missing_a_source_is_refused_in_one_line():
    data = {"name": "X", "version": "1", "gpu": "G", "source": "s", "fitted_on": "f",
            "version_source": "v" * 31, "gpu_source": "g" * 31, "source_detail": "d" * 31,
            "overhead": {term: 0.0 for term in PRESET_TERMS}}
    with pytest.raises(SpecError, match=r"per_step_source must be a non-empty string"):
        engines._parse("x", data)
    data["overhead"] = {**{term: 0.0 for term in PRESET_TERMS},
                        **{term.removesuffix("_s") + "_source": "why" for term in PRESET_TERMS}, "per_step_s": 5.0}
    with pytest.raises(SpecError, match=r"per_step_s = 5.0: give seconds from 0 to 1"):
        engines._parse("x", data)


def test_engine_none_answers_as_before_presets_existed(tmp_path):
    document = _simulate(tmp_path, *CASE, "--engine", "none")
    assert document["engine_time"] == {"engine": "none", "whose": "none", "words": "none: kernels only (--engine none)"}
    assert "Engine time: none: kernels only (--engine none)." in document["printed"]
    for policy, (tpot, ttft, tokens_per_s, makespan) in KERNEL_ONLY.items():
        entry = _runs(document)[policy]
        summary = entry["summary"]
        assert entry["overhead"] is None and entry["composition_s"]["overhead_s"] == 0
        assert (summary["tpot"]["p50_s"], summary["ttft"]["p50_s"], summary["tokens_per_s"],
                summary["makespan_s"]) == pytest.approx((tpot, ttft, tokens_per_s, makespan), rel=1e-9)


def test_the_default_engine_adds_the_vllm_presets_terms_to_every_step_and_says_whose(tmp_path):
    document = _simulate(tmp_path, *CASE)
    time = document["engine_time"]
    assert (time["engine"], time["whose"], time["preset"]["name"]) == ("vllm", "preset", "vllm")
    assert time["preset"]["gpu"] == "H100 80GB HBM3 SXM" and "v0.15.1" in time["preset"]["version"]
    said = ("Engine time: vllm preset: vLLM v0.15.1 (inference-sim's tracing fork) on H100 80GB HBM3 SXM, BLIS "
            "trained-physics fit (inference-sim/inference-sim f90a1e3a defaults.yaml): 126 µs + 32.1 µs x 32 layers "
            "a step, 4.42 µs a sequence.")
    assert said in document["printed"]
    runs = _runs(document)
    # Every decode step of 8 (continuous) or 4 (static) sequences costs its kernels, as before, plus the preset's
    # terms: TPOT grows by exactly that, 1188.41 us and 1170.75 us (the schedule does not move: a burst).
    for policy, sequences in (("continuous", 8), ("static:batch=4", 4)):
        tpot = runs[policy]["summary"]["tpot"]["p50_s"]
        assert tpot - KERNEL_ONLY[policy][0] == pytest.approx(VLLM_STEP_S + sequences * VLLM_SEQUENCE_S, rel=1e-9)
        assert runs[policy]["overhead"]["preset"] == "vllm"
    # The continuous run's one prefill step (all 8 prompts) carries the same terms: TTFT grows by them too.
    ttft = runs["continuous"]["summary"]["ttft"]["p50_s"]
    assert ttft - KERNEL_ONLY["continuous"][1] == pytest.approx(VLLM_STEP_S + 8 * VLLM_SEQUENCE_S, rel=1e-9)
    assert runs["continuous"]["composition_s"]["overhead_s"] == pytest.approx(
        16 * (VLLM_STEP_S + 8 * VLLM_SEQUENCE_S), rel=1e-9)


def _calibrated_profile(tmp_path: Path) -> Path:
    """The case's profile with an overhead fitted by calibrate (fitted_from set)."""
    run = CliRunner().invoke(main, ["profile", *MODEL, "--engine", "none", "-o", str(tmp_path / "p.json")])
    assert run.exit_code == 0, run.output
    profile = load_profile(tmp_path / "p.json")
    assert profile.engine_overhead is None
    fitted = EngineOverhead(2e-3, 1e-5, "calibrate on bench.json", per_prefill_step_s=3e-3,
                            fitted_from={"calibration": "calibrate.json"})
    path = tmp_path / "calibrated.json"
    save_profile(replace(profile, engine_overhead=fitted), path)
    return path


def test_a_calibrated_profiles_fitted_terms_win_over_any_preset_and_the_answer_says_so(tmp_path):
    path = _calibrated_profile(tmp_path)
    profile = load_profile(path)
    for engine in ("vllm", "sglang", "none"):
        chosen = engine_time(profile, engine, typed=engine != "vllm")
        assert chosen.whose == "calibrated" and chosen.overhead == profile.engine_overhead
    document = _simulate(tmp_path, str(path), "--requests", "8", "--prompt", "fixed:128", "--output", "fixed:16",
                         "--policy", "continuous", "--engine", "sglang", "--no-report")
    time = document["engine_time"]
    assert (time["whose"], "preset" in time) == ("calibrated", False)
    assert time["words"] == ("calibrated: calibrate on bench.json (the sglang preset is not used: the profile's "
                             "terms win over it)")
    overhead = _runs(document)["continuous"]["overhead"]
    assert (overhead["per_step_s"], overhead["per_sequence_s"], overhead["per_prefill_step_s"]) == (2e-3, 1e-5, 3e-3)
    # An --overhead-* typed still replaces its term of the fitted ones, the rest kept.
    document = _simulate(tmp_path, str(path), "--requests", "8", "--prompt", "fixed:128", "--output", "fixed:16",
                         "--policy", "continuous", "--overhead-s", "0.004", "--no-report")
    overhead = _runs(document)["continuous"]["overhead"]
    assert (overhead["per_step_s"], overhead["per_sequence_s"]) == (4e-3, 1e-5)
    assert document["engine_time"]["whose"] == "calibrated"
    assert document["engine_time"]["words"].endswith("--overhead-s given on the command line")


def test_profile_analytic_records_its_engines_preset_which_simulate_keeps_unless_another_is_typed(tmp_path):
    path = tmp_path / "sglang.json"
    run = CliRunner().invoke(main, ["profile", *MODEL, "--engine", "sglang", "-o", str(path)])
    assert run.exit_code == 0, run.output
    said = "engine time: sglang preset: SGLang (version not stated) on H20, InferSim's scheduler constants"
    assert said in run.output
    overhead = load_profile(path).engine_overhead
    assert overhead is not None and overhead.preset == "sglang" and overhead.fitted_from is None
    assert overhead.fitted_on.startswith("sglang preset: ") and "alibaba/InferSim" in overhead.fitted_on
    workload = ["--requests", "8", "--prompt", "fixed:128", "--output", "fixed:16", "--policy", "continuous",
                "--no-report"]
    kept = _simulate(tmp_path, str(path), *workload)["engine_time"]
    assert (kept["engine"], kept["whose"]) == ("sglang", "preset")
    typed = _simulate(tmp_path, str(path), *workload, "--engine", "vllm")["engine_time"]
    assert typed["engine"] == "vllm" and typed["words"].endswith("(replacing the profile's sglang preset)")
    dropped = _simulate(tmp_path, str(path), *workload, "--engine", "none")
    assert dropped["engine_time"]["whose"] == "none" and _runs(dropped)["continuous"]["overhead"] is None


@pytest.mark.parametrize("command", [["simulate", *CASE], ["plan", "p.json", "--rate", "1", "--slo", "ttft_p90=1"],
                                     ["profile", *MODEL, "-o", "p.json"]])
def test_an_unknown_engine_is_refused_in_one_line_exit_2(command, tmp_path):
    run = CliRunner().invoke(main, [*command, "--engine", "tgi"])
    assert run.exit_code == 2, run.output
    assert len(run.output.strip().splitlines()) == 1
    assert "'tgi' is not one of 'sglang', 'trtllm', 'vllm', 'none'" in run.output
    with pytest.raises(BadInputError, match=r"^--engine tgi: unknown engine; choose from sglang, trtllm, vllm, none"):
        SimulateConfig(analytic=True, model="llama-3-8b", sku="h100-sxm", engine="tgi")
