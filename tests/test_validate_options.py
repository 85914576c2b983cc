"""``gpubench validate``'s options, checked before anything is measured or written: one line and exit 2 for bad
input, defaults that work as they are, and the overhead printed in each term's own scale.  None of these runs
the engine: ``run_validate`` is replaced by a function that fails the test if it is reached, except where the
test stops the real one at its profile (the first thing it would measure)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.points.plan import PlanError
from microbench.serving.validate_options import ValidateConfig as ValidateSetup

TINY = Path(__file__).parent / "data" / "tiny-llama-config.json"


@pytest.fixture
def never_runs(monkeypatch):
    """run_validate fails the test: every refusal below must come before anything runs."""
    import microbench.serving.validate_run

    def reached(*args, **kwargs):
        raise AssertionError("run_validate was reached: the option was not checked up front")

    monkeypatch.setattr(microbench.serving.validate_run, "run_validate", reached)


@pytest.fixture
def measures_nothing(monkeypatch):
    """The first things run_validate measures with (the profile's passes, the engine's model) fail the test:
    refusals after the option checks must still come before them."""
    import microbench.serving.validate_run
    from microbench.serving.engine import transformers_engine

    def reached(*args, **kwargs):
        raise AssertionError("validate began measuring before refusing its input")

    monkeypatch.setattr(microbench.serving.validate_run, "ProfilePasses", reached)
    monkeypatch.setattr(transformers_engine, "build_model", reached)


def validate(args: list[str], out: Path):
    return CliRunner().invoke(main, ["validate", "--hf-config", str(TINY), "--device", "cpu", *args, "-o", str(out)])


def refused(result, *words: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpubench: error:"), result.output
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1"])
def test_fail_above_must_be_a_finite_positive_fraction(tmp_path, never_runs, value):
    """nan turned the gate off (exit 0 at +128.5%); -1 ran everything and then always failed."""
    out = tmp_path / "out"
    refused(validate(["--fail-above", value], out), "--fail-above")
    assert not out.exists()  # refused before the folder was made


@pytest.mark.parametrize("value", ["0", "-0.5", "nan", "inf"])
def test_profile_budget_is_refused_as_the_sweep_refuses_its_budget(tmp_path, never_runs, value):
    out = tmp_path / "out"
    refused(validate(["--profile-budget", value], out), "--profile-budget")
    assert not out.exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--seed", "-1"], ("--seed -1",)),
    (["--seed", str(2**63)], ("--seed",)),
    (["--threads", "0"], ("--threads 0",)),
    (["--threads", "-2"], ("--threads -2",)),
    (["--threads", "10000000000"], ("--threads 10000000000", "CPUs")),  # torch: ValueError past int32
    (["--requests", "0"], ("--requests",)),
    (["--calibration-requests", "-3"], ("--calibration-requests",)),
    (["--budget-tokens", "0"], ("--budget-tokens",)),
    (["--clock", "thread-cpu", "--threads", "2"], ("--clock thread-cpu", "--threads 2")),
])
def test_each_integer_option_is_checked_up_front(tmp_path, never_runs, args, words):
    if args[:2] == ["--clock", "thread-cpu"] and (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: --threads 2 is refused for the machine before the clock")
    out = tmp_path / "out"
    refused(validate(args, out), *words)
    assert not out.exists()


def test_an_output_folder_that_cannot_be_one_is_refused_before_anything_runs(tmp_path, measures_nothing):
    regular = tmp_path / "ok.csv"
    regular.write_text("kept\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    for out in (regular, fifo, link):
        refused(validate([], out), str(out), "not a folder")
    assert regular.read_text() == "kept\n"
    # A folder whose validate.json or profile.json is not a regular file: refused before it is written over.
    os.mkfifo(folder / "validate.json")
    refused(validate([], folder), "validate.json", "FIFO")
    os.unlink(folder / "validate.json")
    (folder / "profile.json").symlink_to(regular)
    refused(validate([], folder), "profile.json", "symbolic link")
    assert regular.read_text() == "kept\n"


@pytest.mark.parametrize(("args", "words"), [
    (["--prompt", "fixed:0"], ("fixed:0",)),
    (["--arrivals", "poisson:nan"], ("poisson:nan",)),
    (["--dtype", "bogus"], ("dtype 'bogus'",)),
    (["--profile", str(TINY)], ("not a step profile",)),
])
def test_input_read_after_the_options_is_refused_before_the_folder_is_made(tmp_path, measures_nothing, args, words):
    """Workloads, the model's dtype and a given profile are read before the output folder is made: a refusal
    leaves nothing behind (they came after the folder's mkdir, which left an empty folder)."""
    out = tmp_path / "out"
    if args[0] == "--profile":  # --profile replaces --hf-config
        result = CliRunner().invoke(main, ["validate", "--device", "cpu", *args, "-o", str(out)])
    else:
        result = validate(args, out)
    refused(result, *words)
    assert not out.exists()


class Reached(Exception):
    pass


def test_the_readme_form_on_a_cpu_times_one_thread_on_its_clock(tmp_path, monkeypatch):
    """No --clock, no --threads on a multi-thread torch: it failed "--clock thread-cpu times one thread".  Now
    the default runs one torch thread on its CPU clock and says so.  Stopped where it would start measuring
    (the profile's passes), so the real option handling and device resolution ran."""
    import torch

    import microbench.serving.validate_run

    seen = {}

    def stop(plan, folder, observer, on_item, passes):
        seen.update(clock=plan.clock, threads=torch.get_num_threads())
        raise Reached

    before = torch.get_num_threads()
    monkeypatch.setattr(microbench.serving.validate_run, "ProfilePasses", stop)
    try:
        torch.set_num_threads(2)  # torch's default on this 2-core machine, whatever the test runner set
        result = validate(["--requests", "2", "--calibration-requests", "2"], tmp_path / "out")
    finally:
        torch.set_num_threads(before)
    assert isinstance(result.exception, Reached), (result.output, result.exception)
    assert seen == {"clock": "thread-cpu", "threads": 1}
    assert "one torch thread's CPU clock" in result.output


def test_engine_timing_defaults_fit_the_options_given():
    from microbench.serving.validate_options import engine_timing

    cpu = "cpu"
    plain = engine_timing(ValidateSetup(), cpu)
    assert (plain.clock, plain.threads) == ("thread-cpu", 1) and "one torch thread" in plain.note
    one = engine_timing(ValidateSetup(threads=1), cpu)
    assert (one.clock, one.threads, one.note) == ("thread-cpu", 1, None)  # exactly what was asked: nothing to say
    many = engine_timing(ValidateSetup(threads=2), cpu)
    assert (many.clock, many.threads) == ("wall", 2) and "wall clock" in many.note
    typed = engine_timing(ValidateSetup(clock="thread-cpu"), cpu)
    assert (typed.clock, typed.threads) == ("thread-cpu", 1)
    wall = engine_timing(ValidateSetup(clock="wall"), cpu)
    assert (wall.clock, wall.threads, wall.note) == ("wall", None, None)  # torch's threads, as asked
    arrivals = engine_timing(ValidateSetup(arrivals="poisson:5"), cpu)
    assert (arrivals.clock, arrivals.threads) == ("wall", None)  # waiting for arrivals is wall time
    gpu = engine_timing(ValidateSetup(), "cuda")
    assert (gpu.clock, gpu.threads, gpu.note) == ("wall", None, None)
    with pytest.raises(PlanError, match="GPU"):
        engine_timing(ValidateSetup(clock="thread-cpu"), "cuda")


def test_overhead_terms_read_each_in_its_own_scale():
    """It printed "0.000 ms/step + 2614.2 µs/sequence": every term in one fixed unit of its own."""
    from microbench.serving.validate_compare import overhead_line

    line = overhead_line("static", {"per_step_s": 3.2e-6, "per_sequence_s": 2.6142e-3,
                                    "per_cached_token_s": 7.5e-10, "per_prefill_step_s": 0.0, "fitted_on": "x"})
    assert line == "static overhead: 3.2 µs/step + 2.61 ms/sequence + 0.75 ns/cached token + 0 ns/prefill step, " \
                   "fitted on x"
    # A document without the later terms (written before they were fitted) reads them as 0.
    older = overhead_line("continuous", {"per_step_s": 1.5, "per_sequence_s": 4e-5, "fitted_on": "y"})
    assert older.startswith("continuous overhead: 1.5 s/step + 40 µs/sequence + 0 ns/cached token")


def test_the_gate_fails_when_an_error_cannot_be_computed(capsys):
    """A relative error of None (a measured time of 0) once raised a TypeError in abs(); the gate asked for
    cannot pass on it."""
    from microbench.cli.engine import _gate

    document = {"comparison": {"static": {"total_s": {"rel_err": 0.05}}, "continuous": {"total_s": {"rel_err": None}}},
                "ratio": {"rel_err": 0.01}}
    with pytest.raises(SystemExit) as stopped:
        _gate(document, 0.5)
    assert stopped.value.code == 1
    document["comparison"]["continuous"]["total_s"]["rel_err"] = -0.2
    _gate(document, 0.5)  # within: returns
    with pytest.raises(SystemExit):
        _gate(document, 0.1)
    assert "off by 20% > --fail-above 10% (0.1)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _gate(document, 0.0001)
    assert "--fail-above 0.01% (0.0001)" in capsys.readouterr().err  # not "0.0%"


@pytest.mark.parametrize(("args", "words"), [(["--seed", "-1"], ("--seed -1",)), (["--budget", "nan"], ("--budget",)),
                                             (["--threads", "10000000000"], ("--threads", "CPUs"))])
def test_the_measured_profile_checks_the_same_options_before_measuring(tmp_path, monkeypatch, args, words):
    """The measured profile shares these options: the seed reached numpy (ValueError), nan passed its budget
    check (and measured for minutes), threads past int32 reached torch (ValueError)."""
    import microbench.serving.profile_run

    def reached(*args, **kwargs):
        raise AssertionError("the profile was prepared: the option was not checked up front")

    monkeypatch.setattr(microbench.serving.profile_run, "prepare_profile", reached)
    out = tmp_path / "p.json"
    result = CliRunner().invoke(main, ["profile", "--hf-config", str(TINY), "--device", "cpu", *args, "-o", str(out)])
    refused(result, *words)
    assert list(tmp_path.iterdir()) == []


def test_the_profile_is_sized_to_what_the_workload_can_fill_not_to_the_flags():
    """--static-batch 1000000 --requests 4: a static batch holds at most the 4 requests, so the profile covers
    batch 4 and 4 padded prompts, not 10^6; a continuous step holds at most the budget, the prompts there are
    and a decode token per sequence."""
    from microbench.serving.validate_options import ValidateConfig
    from microbench.serving.validate_sizes import profile_sizes
    from roofline.serving.workload import make_workload

    setup = ValidateConfig(hf_config=TINY, requests=4, calibration_requests=4, static_batch=1_000_000,
                           max_batch=1_000_000, budget_tokens=10**9, prompt="fixed:16")
    requests = make_workload(4, "burst", "fixed:16", "uniform:4:40", 0) + make_workload(4, "burst", "fixed:16",
                                                                                         "uniform:4:40", 1)
    tokens, batch = profile_sizes(setup, requests)
    assert batch == 4
    assert tokens == 8 * 16 + 4  # every prompt of both workloads in one step, and a decode token per sequence
    default = ValidateConfig(hf_config=TINY)  # the defaults' sizes are what they were: budget and batch as given
    requests = make_workload(32, "burst", "fixed:16", "uniform:4:40", 0)
    assert profile_sizes(default, requests) == (max(128, 8 * 16), 8)


def test_a_manager_that_died_is_reported_as_its_error_in_one_line():
    """transformers records the generation thread's fatal error (a MemoryError for a cache past the memory):
    the one-line refusal names it, instead of a ProcessLookupError from timing a thread that already ended."""
    from types import SimpleNamespace

    from microbench.serving.engine.settings import manager_failure

    died = SimpleNamespace(background_thread_status=SimpleNamespace(fatal_error=MemoryError("no room\nmore")))
    assert manager_failure(died) == ": MemoryError (no room)"
    assert manager_failure(SimpleNamespace(background_thread_status=SimpleNamespace(fatal_error=None))) == ""
    assert manager_failure(object()) == ""
