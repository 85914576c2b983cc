"""The serving commands of the simulator side: ``gpubench simulate`` and the analytic ``gpubench profile``
(``--analytic``; the profile command itself, measured on the device otherwise, is the engine side's).  Thin: build
the config, hold the output, call ``roofline`` (``roofline.fleet.simulate_run``,
``roofline.serving.profiles.analytic``), print.  Never imports torch.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from microbench.cli.edges import bad_input, declare, given
from microbench.cli.guard import writing_folder, writing_to
from roofline.serving.simulate_config import FLAGS


def provenance():
    """Who is making the document: this tool, this host and the command line (the measuring side describes the
    first two: ``microbench.device.provenance``)."""
    from microbench.device.provenance import host_info, tool_info
    from roofline.result.sections import Provenance

    return Provenance(tool_info(), host_info(), tuple(sys.argv))


def write_analytic_profile(config) -> None:
    """``gpubench profile --analytic``: the analytic step profile of a ``ProfileConfig``, saved to ``-o``."""
    from roofline.serving.profile_doc import check_profile_output, save_profile
    from roofline.serving.profiles.analytic import analytic_profile_of

    with bad_input(), writing_to(config.output):
        check_profile_output(config.output)
        document = analytic_profile_of(config, provenance())
        save_profile(document, config.output)
    click.echo(f"step profile of {document.model['name']} ({document.basis}) saved to {config.output}")
    click.echo(engine_time_line(document))
    warn_if_weights_overflow(document)


def engine_time_line(profile) -> str:
    """What engine time a profile just written carries: its ``--engine`` preset, or none."""
    overhead = profile.engine_overhead
    return f"engine time: {overhead.fitted_on}" if overhead else "engine time: none, kernels only (--engine none)"


def warn_if_weights_overflow(profile) -> None:
    """A profile whose weights alone overflow its GPU is written (it is what was asked), and said: simulate and
    plan refuse it."""
    overflow = profile.weights_overflow(0.9)
    if overflow:
        click.echo(f"warning: {overflow.replace('the weights', 'its weights', 1)}; simulate and plan refuse it",
                   err=True)


def probe_line(subject: str, probe) -> str:
    """One line for one simulation of a capacity search (or a plan's fleet), e.g. ``capacity of continuous: 12.5
    requests/s met (TTFT p90 812 ms ≤ 1 s)``: printed to stderr as each ends, so a long search is visibly alive."""
    from roofline.core.units import significant
    from roofline.serving.capacity import describe_checks

    rate = probe.rate_requests_per_s
    what = {"alone": "every request served alone",
            "burst": f"a burst of them all ({significant(rate or 0)} requests/s)",
            "closed": f"{probe.concurrency} clients ({significant(rate or 0)} requests/s)"}.get(
        probe.arrivals, f"{significant(rate or 0)} requests/s")
    fleet = f"{probe.fleet} at " if probe.fleet else ""
    return f"{subject}: {fleet}{what} {'met' if probe.met else 'missed'} ({describe_checks(probe.checks)})"


def print_probe(subject: str, probe) -> None:
    click.echo(probe_line(subject, probe), err=True)


def _print_table(document: dict[str, Any]) -> None:
    """The policies' table, then the verdict."""
    from roofline.serving.report import summary_table, verdict_lines

    print_columns(*summary_table(document))
    for line in verdict_lines(document):
        click.echo(line)


def print_columns(header, rows) -> None:
    """A table in plain columns, split into parts that each fit the terminal (the first column again in each)."""
    from microbench.cli.render import column_groups, stdout

    header, rows = list(header), [list(r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for part, columns in enumerate(column_groups(widths, stdout.width, frame=2)):
        if part:
            click.echo()
        for line in [header] + rows:
            click.echo("  ".join(line[i].rjust(widths[i]) if i else line[i].ljust(widths[i]) for i in columns))


@click.command()
@click.pass_context
@click.argument("profile_file", type=click.Path(path_type=Path), required=False)
@declare(FLAGS)
def simulate(ctx, **options) -> None:
    """Simulate one replica, or a fleet behind a router, serving a workload under batching policies: throughput,
    latency, the binding limit."""
    from roofline.serving.simulate_config import SimulateConfig

    with bad_input():
        config = SimulateConfig.from_options(options, given(ctx))
    run_simulate(config)


def run_simulate(config) -> None:
    """Simulate a checked config, print the table (or JSON), and write the folder whole (``writing_to``: a given
    ``-o`` is held from the start; the default folder, named from the profile, from when it is named)."""
    from microbench.cli.render import simulation_progress
    from roofline.fleet.simulate_run import prepare_simulation
    from roofline.serving.document import SIMULATION_FOLDER

    with bad_input(), writing_to(folder=config.out_dir, kind=SIMULATION_FOLDER) as given_staging:
        simulation = prepare_simulation(config, provenance())
        folder = config.out_dir or simulation.default_folder()
        held = (contextlib.nullcontext(given_staging) if given_staging is not None
                else writing_folder(folder, SIMULATION_FOLDER))
        with held as staging:
            with simulation_progress() as shown:  # a bar for each simulation that lasts, gone when it ends
                outcome = simulation.run(progress=lambda subject, probe: shown.echo(probe_line(subject, probe)),
                                         ticker=shown.tick)
            _show_simulation(outcome.document, config.as_json)
            outcome.write(staging, report=not config.no_report)
    click.echo(f"saved {folder / 'simulation.json'}, requests.csv" + ("" if config.no_report else " and the report"),
               err=config.as_json)


def _show_simulation(document: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([{"policy": e["policy"], "summary": e["summary"], "capacity": e["capacity"],
                                "energy": e.get("energy")} for e in document["runs"]], indent=1, allow_nan=False))
    else:
        _print_table(document)
