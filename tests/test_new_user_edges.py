"""The edges a new user hit (issue 37, "Edges a new user hit"): each is now one line and exit 2 naming what is
wrong, or a bounded run that shows its progress; a test per class (the calibrate benchmark files' own are in
tests/test_calibrate.py, the nested JSON's in tests/test_jsonfile.py and tests/test_serving_prefix.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.core.errors import BadInputError
from roofline.specs.gpus import SpecError, load_gpu_spec_file, profiles_dir

ANALYTIC = ("--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line_refusal(result, *words: str) -> str:
    """The refusal's line: exit 2, one line, no traceback, each of ``words`` in it."""
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith("gpubench: error:") and "\n" not in line and "Traceback" not in line, result.output
    for word in words:
        assert word in line, line
    return line


# --- speculative decoding: the draft limit before the acceptance list, and no NaN acceptance -----------------

@pytest.mark.parametrize("command", [["decode", *ANALYTIC, "--batch", "1"], ["simulate", *ANALYTIC, "--requests", "4"]])
@pytest.mark.parametrize("spec, words", [
    # a list of 10^23 probabilities was built before the 16-draft limit was checked (killed for memory)
    ("draft=99999999999999999999999,accept=geometric:0.7", "--spec-decode draft=99999999999999999999999: give 1 to 16"),
    # NaN passes `p < 0` and `|sum - 1| > 1e-6` alike: decode printed "nan tokens/s", simulate tracebacked
    ("draft=1,accept=hist:nan/nan", "the acceptance probabilities must be 2 non-negative numbers summing to 1")])
def test_a_draft_past_the_limit_or_a_nan_acceptance_is_one_line(tmp_path, command, spec, words):
    one_line_refusal(run(*command, "--spec-decode", spec, "-o", str(tmp_path / "out")), words)
    assert not (tmp_path / "out").exists()


# --- links and spec sheets: figures no GPU has ----------------------------------------------------------------

def test_an_interconnect_of_1e_300_gbps_is_one_line():
    # It printed every collective's time with 300 digits.
    one_line_refusal(run("profile", *ANALYTIC, "--tp", "2", "--interconnect-gbps", "1e-300", "-o", "p.json"),
                     "--interconnect-gbps 1e-300: give 1 to 1,000,000 Gb/s each way")


def _sheet_with(tmp_path: Path, section: str, key: str, value: str) -> Path:
    """profiles/gpus/a100-pcie-80gb.toml as one's own sheet, ``[section]``'s first ``key`` set to ``value``."""
    text = (profiles_dir() / "gpus" / "a100-pcie-80gb.toml").read_text(encoding="utf-8")
    header = text.index(f"[{section}]\n")
    line = re.compile(rf"^{re.escape(key)} = .*$", re.MULTILINE).search(text, header)
    assert line is not None, (section, key)
    path = tmp_path / "my-gpu.toml"
    path.write_text(text[:line.start()] + f"{key} = {value}" + text[line.end():], encoding="utf-8")
    return path


FIGURES = [("memory", "bandwidth_bytes_per_s"), ("memory", "capacity_bytes"), ("memory", "reported_bytes"),
           ("peak_flop_per_s", "bf16"), ("interconnect", "link_bytes_per_s"), ("interconnect", "hop_latency_s"),
           ("achievable", "bandwidth_bytes_per_s"), ("achievable.peak_flop_per_s", "bf16"), ("power", "tdp_w")]


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1", '"fast"', "true"])
@pytest.mark.parametrize("section, key", FIGURES, ids=[f"{s}.{k}" for s, k in FIGURES])
def test_a_spec_sheet_figure_no_gpu_has_is_refused_at_load_naming_the_file_and_the_key(tmp_path, section, key, value):
    """nan, inf and 1e300 were accepted and failed later naming an internal field (or not at all)."""
    path = _sheet_with(tmp_path, section, key, value)
    with pytest.raises(SpecError) as caught:
        load_gpu_spec_file(path)
    message = str(caught.value)
    assert message.startswith(f"--gpu-spec {path}: {section}.{key} = "), message
    assert "give a number from" in message and "\n" not in message, message


@pytest.mark.parametrize("section, key", [("memory", "bandwidth_bytes_per_s"), ("memory", "capacity_bytes"),
                                          ("interconnect", "link_bytes_per_s"), ("power", "tdp_w")])
def test_a_zero_figure_is_refused_too(tmp_path, section, key):
    with pytest.raises(SpecError, match=rf"{re.escape(section)}\.{key} = 0: give a number from"):
        load_gpu_spec_file(_sheet_with(tmp_path, section, key, "0"))


def test_a_spec_sheet_refusal_is_one_line_and_exit_2_at_the_command(tmp_path):
    path = _sheet_with(tmp_path, "memory", "bandwidth_bytes_per_s", "nan")
    one_line_refusal(run("simulate", "--analytic", "--gpu-spec", str(path), "--model", "llama-3-8b",
                         "--requests", "4", "-o", str(tmp_path / "sim")),
                     f"--gpu-spec {path}: memory.bandwidth_bytes_per_s = nan: give a number from 1e+08 to 1e+16")
    assert not (tmp_path / "sim").exists()


def test_a_spec_error_is_the_one_bad_input_error():
    assert issubclass(SpecError, BadInputError)


# --- workload options: say what is wrong with the option given ------------------------------------------------

def test_a_prefix_too_long_for_any_request_names_the_prefix_not_sessions(tmp_path):
    # It said "session 0: turn 1 resends 1,000,000,512 tokens ... give fewer turns", with no --sessions given.
    line = one_line_refusal(run("simulate", *ANALYTIC, "--prefix", "shared:1000000000:1", "--requests", "10",
                                "-o", str(tmp_path / "sim")),
                            "--prefix shared:1000000000:1: a system prompt of 1,000,000,000 tokens before prompts of "
                            "up to 512 makes 1,000,000,512 tokens a request, past 1,000,000,000")
    assert "session" not in line and "turn" not in line


@pytest.mark.parametrize("args, flag, value", [
    # --requests was taken as --sweep-load's rates and 300 as the PROFILE.json ("give a PROFILE.json or --analytic")
    (["simulate", *ANALYTIC, "--sweep-load", "--requests", "300"], "--sweep-load", "--requests"),
    (["simulate", *ANALYTIC, "-o", "--no-report"], "--out-dir", "--no-report"),  # a folder named --no-report
    (["calibrate", "--bench", "--policy", "paged", "--profile", "p.json", "-o", "out"], "--bench", "--policy"),
    (["plan", "p.json", "--rate", "4", "--slo", "--requests", "-o", "out"], "--slo", "--requests")])
def test_an_option_given_as_another_options_value_is_one_line(tmp_path, args, flag, value):
    one_line_refusal(run(*args), "Invalid value for", f"{value!r} is an option, not {flag}'s value")
    assert not Path("--no-report").exists()


@pytest.mark.parametrize("command", [["profile", "--analytic", "--gpu", "h100-sxm"], ["profile", "--device", "cpu"],
                                     ["simulate", "--analytic", "--gpu", "h100-sxm"]])
def test_a_max_context_past_the_models_window_is_refused_as_decodes_context_is(tmp_path, command):
    """decode refuses --context past the window; profile took --max-context 300000 on a 2,048-token model."""
    words = "longer than the 2048-token context window of OPT-13B"
    decode = run("decode", "--analytic", "--gpu", "h100-sxm", "--model", "opt-13b", "--context", "300000")
    one_line_refusal(decode, f"--context 300000: {words}")
    one_line_refusal(run(*command, "--model", "opt-13b", "--max-context", "300000", "-o", str(tmp_path / "out")),
                     f"--max-context 300000: {words}")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a measured profile, ~13 s on 2 cores
def test_profile_energy_on_the_cpu_says_why_the_profile_has_no_power(tmp_path):
    """It exited 0 without a word, the reason kept only inside the profile."""
    tiny = str(Path(__file__).parent / "data" / "tiny-llama-config.json")
    result = run("profile", "--hf-config", tiny, "--device", "cpu", "--energy", "--budget", "0.01", "--max-context",
                 "64", "--max-tokens", "64", "--max-batch", "2", "-o", str(tmp_path / "p.json"))
    assert result.exit_code == 0, result.output
    assert "--energy: the CPU has no energy counter gpubench reads (NVML reads GPUs); the profile is measured, " \
           "with no power table" in result.output
    import json

    power = json.loads((tmp_path / "p.json").read_text())["power"]
    assert power["watts_per_gpu"] is None and power["why_none"].startswith("the CPU has no energy counter")


# --- what a message blames -------------------------------------------------------------------------------------

def test_a_weight_only_series_above_the_peak_names_bf16s_peak_and_does_not_blame_the_ceiling_search():
    """The CPU sweep said "463% of the measured w8a16 peak ... the ceiling search did not find the fastest kernel";
    the peak a w8a16 series is read against is bf16's (its arithmetic's), which the ceiling search is not about."""
    from roofline.analysis.summary import SeriesSummary, over_ceiling_lines
    from tests.conftest import make_result

    def row(dtype: str, pct: float) -> SeriesSummary:
        return SeriesSummary("gemm", "torch", dtype, 4096, 4096, 3, 3, 0, 1, 1e9, 1e12, None, None, 8, None, None,
                             None, pct)

    lines = over_ceiling_lines(make_result(), [row("w8a16", 463.0), row("bf16", 104.0)])
    assert lines[0] == ("gemm w8a16 4096x4096: 463.0%⚠ of the measured bf16 peak (w8a16's arithmetic runs in bf16), "
                        "above that ceiling (w8a16 ran faster than bf16's own fastest GEMM on this device: a finding "
                        "about the kernels, not a ceiling the search missed)")
    assert lines[1] == ("gemm bf16 4096x4096: 104.0%⚠ of the measured bf16 peak, above that ceiling (the ceiling "
                        "search did not find the fastest kernel, or the clock was higher while it ran)")


# --- a signal's message: one line, as every refusal ------------------------------------------------------------

def _interrupt_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "interrupted" in line or "resume with" in line]


def test_a_signalled_sweep_says_what_was_saved_and_how_to_resume_in_one_line(tmp_path, monkeypatch):
    from tests.test_faults import _sweep_signalled_at_its_second_point

    result, output = _sweep_signalled_at_its_second_point(tmp_path, monkeypatch, signals=2)
    assert result.exit_code == 130, result.output
    assert _interrupt_lines(result.output) == [
        f"gpubench: interrupted by SIGINT; everything measured is saved in {output}; resume with: gpubench sweep "
        f"--resume {output}"]


def test_a_signalled_measured_profile_says_what_was_saved_and_how_to_resume_in_one_line(tmp_path, monkeypatch):
    """It printed two lines ("interrupted; ...", then "resume with: ...")."""
    import signal

    import microbench.serving.profile_run as profile_run
    from microbench.timing.observer import Interrupted

    def stopped(run, on_start, on_item):
        raise Interrupted(signal.SIGTERM, None)

    monkeypatch.setattr(profile_run, "run_profile", stopped)
    tiny = str(Path(__file__).parent / "data" / "tiny-llama-config.json")
    out = tmp_path / "p.json"
    result = run("profile", "--hf-config", tiny, "--device", "cpu", "--max-context", "64", "--max-tokens", "64",
                 "-o", str(out))
    assert result.exit_code == 143, result.output
    assert _interrupt_lines(result.output) == [
        f"gpubench: interrupted by SIGTERM; what was measured is saved in {out}.partial; resume with: gpubench "
        f"profile --resume -o {out} (the plan is read from the partial file)"]


# --- plan: a fleet's throughput must cover the demand it claims -----------------------------------------------

def test_a_plan_does_not_claim_a_rate_its_workload_cannot_show(tmp_path):
    """plan --rate 1e9 answered "10 replicas meet the SLO" for a fleet making 33k of the ~1e11 output tokens/s
    asked: its 100 requests arrived in 100 ns, a burst the fleet served.  No fleet can be seen to keep up with a
    rate whose requests all arrive within a request's own latency: the point says so, and nothing is simulated."""
    import json

    profile = tmp_path / "h100.json"
    assert run("profile", *ANALYTIC, "-o", str(profile)).exit_code == 0
    result = run("plan", str(profile), "--rate", "1e9", "--slo", "ttft_p90=10", "--requests", "100", "--no-report",
                 "-o", str(tmp_path / "plan"))
    assert result.exit_code == 0, result.output
    assert "meet the SLO at 1000000000" not in result.output
    assert re.search(r"at 1000000000 requests/s the 100 requests arrive within [\d.]+ ns, and even served alone a "
                     r"request takes [\d.]+ ms: no fleet can be seen to produce the 132000000000 output tokens/s "
                     r"asked \(at most \d+ on this workload\); no workload of at most 1,000,000 requests can show "
                     r"it", result.output), result.output
    point = json.loads((tmp_path / "plan" / "plan.json").read_text())["candidates"][0]["plans"][0]["aggregated"][0]
    assert (point["met"], point["replicas"], point["tried"]) == (False, None, [])
    # at a rate its 100 requests can show, the plan answers with a fleet as before
    result = run("plan", str(profile), "--rate", "2", "--slo", "ttft_p90=10", "--requests", "100", "--no-report",
                 "-o", str(tmp_path / "plan2"))
    assert result.exit_code == 0 and "1 replica of TP 1 (1 GPU) meets the SLO at 2 requests/s" in result.output, \
        result.output


# --- a long simulation: refused up front when it cannot fit, shown as it runs when it can ----------------------

def test_a_simulation_the_memory_cannot_hold_is_one_line_before_anything_is_simulated(tmp_path, monkeypatch):
    """simulate --requests 1000000 --arrivals poisson:200 took 7.3 GB and 204 s with no word; the measured model
    (roofline.serving.workload.RUN_BYTES, scripts/measure_simulation_memory.py) refuses it up front where the
    memory is short: here 20,000 requests against 50 MB."""
    import roofline.serving.workload as workload

    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 50e6)
    one_line_refusal(run("simulate", *ANALYTIC, "--requests", "20000", "--arrivals", "poisson:200",
                         "-o", str(tmp_path / "sim")),
                     "20,000 requests of", "under 1 policy need at least 0.2 GB (measured: 493 bytes a request and "
                     "48.6 an output token), and 0.1 GB is available: give fewer requests")
    assert not (tmp_path / "sim").exists()


def test_a_simulation_reports_the_requests_finished_as_it_runs():
    """What the command's progress bar reads: every PROGRESS_STEPS steps the requests finished, never falling,
    ending at all of them; a fleet's the same."""
    from roofline.fleet.handover import KvLink
    from roofline.fleet.replicas import FleetLayout, simulate_fleet
    from roofline.serving.simulate import PROGRESS_STEPS, simulate
    from roofline.serving.workload import make_workload
    from tests.serving_helpers import constant_profile

    requests = make_workload(500, "poisson:1000", "fixed:8", "fixed:20", seed=1)
    single, fleet = [], []
    run_single = simulate(constant_profile(1e-3), requests, "continuous:max-batch=2", progress=single.append)
    assert len(run_single.steps) > 2 * PROGRESS_STEPS and len(single) >= 2
    simulate_fleet(constant_profile(1e-3), requests, "continuous:max-batch=2", FleetLayout(2),
                   progress=fleet.append)
    split = []  # prefill and decode apart, with one-token requests (they end at the prefill replica)
    mixed = make_workload(500, "poisson:1000", "fixed:8", "uniform:1:20", seed=1)
    simulate_fleet(constant_profile(1e-3), mixed, "continuous:max-batch=2",
                   FleetLayout(split=(1, 1), link=KvLink(1000.0, 0.002, "test link")), progress=split.append)
    for reports in (single, fleet, split):
        assert reports == sorted(reports) and reports[-1] == len(requests) and reports[0] < len(requests)


def test_the_simulate_command_shows_a_bar_only_for_a_simulation_that_lasts(monkeypatch):
    """SimulationProgress: no bar before SHOW_AFTER_S, then one per simulation, gone when it ends; a line printed
    meanwhile goes above it."""
    import io

    from rich.console import Console

    import microbench.cli.render as render

    clock = {"now": 100.0}
    monkeypatch.setattr("time.monotonic", lambda: clock["now"])
    written = io.StringIO()
    monkeypatch.setattr(render, "stderr", Console(file=written, force_terminal=True, width=120))
    shown = render.SimulationProgress()
    shown.tick("continuous", 0, 1000)
    clock["now"] += 1.0
    shown.tick("continuous", 100, 1000)
    assert shown.progress is None  # a second in: no bar
    clock["now"] += 1.5
    shown.tick("continuous", 400, 1000)
    assert shown.progress is not None and list(shown.tasks) == ["continuous"]
    assert shown.progress.tasks[0].completed == 400 and shown.progress.tasks[0].total == 1000
    shown.echo("capacity of continuous: 3 requests/s met [TTFT p90 1 s ≤ 2 s]")
    shown.tick("continuous", 1000, 1000)
    assert shown.tasks == {} and shown.progress.tasks == []
    shown.close()
    assert "capacity of continuous: 3 requests/s met [TTFT p90 1 s ≤ 2 s]" in written.getvalue()


def test_a_trace_the_memory_cannot_hold_is_one_line_before_anything_is_simulated(tmp_path, monkeypatch):
    """A 1M-row trace took 2.4 GB and 148 s without a word: a trace is weighed as a drawn workload is, once read
    (a request a row, no row's dict kept)."""
    import roofline.serving.workload as workload

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i / 100},128,200\n" for i in range(20_000)))
    monkeypatch.setattr(workload, "available_memory_bytes", lambda: 50e6)
    one_line_refusal(run("simulate", *ANALYTIC, "--trace", str(trace), "-o", str(tmp_path / "sim")),
                     "20,000 requests of 4,000,000 output tokens under 1 policy need at least 0.3 GB",
                     "give fewer requests (--requests, or a shorter trace)")
    assert not (tmp_path / "sim").exists()
