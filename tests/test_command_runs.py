"""``simulate`` and ``plan`` are each one library run in the analysing package (``roofline.fleet.simulate_run``,
``roofline.fleet.plan_run``): a caller without the CLI gets the command's document, and the CLI modules only
parse, hold the output, call and print (they never reach the simulator's own modules)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from test_imports import ROOT, imported_modules

from microbench.cli.app import main
from roofline.fleet.plan_config import PlanConfig
from roofline.fleet.plan_run import prepare_plan
from roofline.fleet.simulate_run import prepare_simulation
from roofline.result.sections import Provenance
from roofline.serving.simulate_config import SimulateConfig

ANALYTIC = ["--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--max-tokens", "8192",
            "--max-context", "2048"]
WHO = Provenance({"name": "gpubench"}, {"hostname": "here"}, ("a", "test"))
# What differs between two runs of one command: when, who and how it was asked.
STAMPS = ("created_at", "tool", "host", "argv")


def _same(document: dict) -> dict:
    return {key: value for key, value in document.items() if key not in STAMPS}


def test_the_simulate_command_is_one_library_run(tmp_path):
    """A fleet of two with a rate curve and a capacity search: the library's run is the command's, document and
    files, and each probe of the search reaches the caller with what was searched."""
    args = [*ANALYTIC, "--requests", "12", "--replicas", "2", "--rates", "2", "--slo", "ttft_p90=5",
            "--policy", "paged", "--no-report"]
    out = tmp_path / "cli"
    run = CliRunner().invoke(main, ["simulate", *args, "-o", str(out)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    config = SimulateConfig.from_options({"analytic": True, "sku": "h100-sxm", "model": "llama-3-8b",
                                          "max_tokens": 2048, "max_context": 2048, "requests": 12, "replicas": 2,
                                          "rates": "2", "slo": "ttft_p90=5", "policies": ("paged",)})
    probes = []
    simulation = prepare_simulation(config, WHO)
    outcome = simulation.run(progress=lambda subject, probe: probes.append((subject, probe.met)))
    cli_document = json.loads((out / "simulation.json").read_text(encoding="utf-8"))
    assert _same(outcome.document) == _same(json.loads(json.dumps(cli_document)))
    assert outcome.document["argv"] == ["a", "test"] and outcome.document["host"] == {"hostname": "here"}
    assert probes and {subject for subject, _ in probes} == {"capacity of paged"}
    assert run.output.count("capacity of paged: ") == len(probes)  # the CLI printed each probe the library handed
    library = tmp_path / "library"
    library.mkdir()
    outcome.write(library, report=False)
    assert sorted(p.name for p in library.iterdir()) == ["requests.csv", "simulation.json"]
    assert (library / "requests.csv").read_text() == (out / "requests.csv").read_text()
    assert simulation.default_folder().parent == Path("results")
    assert simulation.default_folder().name.startswith("sim-llama-3-8b-")


def test_the_plan_command_is_one_library_run(tmp_path):
    profile = tmp_path / "h100.json"
    made = CliRunner().invoke(main, ["profile", *ANALYTIC, "-o", str(profile)], catch_exceptions=False)
    assert made.exit_code == 0, made.output
    out = tmp_path / "plan"
    run = CliRunner().invoke(main, ["plan", str(profile), "--rate", "5", "--slo", "tpot_p99=0.05", "--requests", "20",
                                    "--no-report", "-o", str(out)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    config = PlanConfig.from_options({"profile_files": (profile,), "rates": "5", "slo": "tpot_p99=0.05",
                                      "requests": 20})
    probes = []
    outcome = prepare_plan(config, WHO).run(progress=lambda subject, probe: probes.append(subject))
    assert _same(outcome.document) == _same(json.loads((out / "plan.json").read_text(encoding="utf-8")))
    assert probes and set(probes) == {"h100.json, continuous"}
    assert run.output.count("h100.json, continuous: ") == len(probes)


# The simulator's own modules: the engine loop, workloads, metrics, fleets and the planner.  The commands reach
# them through the one library run (a probe of a search is worded with the capacity module's own words).
SIMULATOR = {"roofline.serving.simulate", "roofline.serving.workload", "roofline.serving.metrics",
             "roofline.fleet.replicas", "roofline.fleet.summary",
             "roofline.fleet.handover", "roofline.fleet.planner", "roofline.fleet.plan_report"}


def test_the_simulate_and_plan_commands_only_parse_hold_call_and_print():
    for module in ("serving.py", "fleet.py"):
        reached = imported_modules(ROOT / "microbench" / "cli" / module) & SIMULATOR
        assert reached == set(), f"microbench/cli/{module} reaches {sorted(reached)}"
