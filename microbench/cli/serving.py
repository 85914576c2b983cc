"""The serving commands of the simulator side: ``gpubench simulate`` and the analytic ``gpubench profile``
(``--analytic``; the profile command itself, measured on the device otherwise, is the engine side's).  Thin:
build the config, call ``roofline.serving``, print.  Never imports torch.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import click

from microbench.cli.edges import bad_input, declare, given
from microbench.cli.guard import writing_folder, writing_to
from roofline.serving.simulate_config import FLAGS, MODEL_FLAGS


def tool_and_host() -> tuple[dict[str, Any], dict[str, Any]]:
    from microbench.device.provenance import host_info, tool_info

    return tool_info(), host_info()


def build_analytic_profile(config):
    """The analytic step profile of a config's model options (the achievable ceilings of ``--gpu``, its spec sheet
    with ``--ideal``, or the fits of ``--from``): a ``SimulateConfig`` or a ``ProfileConfig`` with ``--analytic``."""
    from microbench.sweep.plan import PlanError
    from roofline.core.options import resolved_kv_dtype
    from roofline.result.io import load_result
    from roofline.serving.analytic import analytic_profile
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.hf_config import load_hf_config
    from roofline.specs.models import load_model

    if bool(config.model) == bool(config.hf_config):
        raise PlanError("give one of --model NAME or --hf-config PATH")
    if not config.sku and config.from_result is None:
        raise PlanError("--analytic needs --gpu SKU (or --from RESULT.json)")
    profile = load_model(config.model) if config.model else load_hf_config(config.hf_config)
    result = load_result(config.from_result) if config.from_result is not None else None
    sku = config.sku or (result.device.get("sku") if result is not None else None)
    dtype = config.dtype or MODEL_FLAGS["dtype"].default
    tool, host = tool_and_host()
    return analytic_profile(profile, tp=config.tp, dtype=dtype, kv_dtype=resolved_kv_dtype(dtype, config.kv_dtype),
                            max_tokens=config.max_tokens, max_context=config.max_context,
                            gpu=load_gpu_spec(sku) if sku else None, result=result,
                            result_name=config.from_result.name if config.from_result else "", tool=tool, host=host,
                            argv=tuple(sys.argv), ideal=config.ideal, ep=config.ep, routing=config.routing,
                            efficiency=_efficiency(config))


def _efficiency(config) -> str:
    """``--efficiency`` as typed; its default ``auto`` means the reference's curves only for a SKU's own profile
    (``--from`` carries a sweep's measured curves, ``--ideal`` the datasheet)."""
    if config.efficiency == "auto" and (config.from_result is not None or config.ideal):
        return "flat"
    return config.efficiency


def write_analytic_profile(config) -> None:
    """``gpubench profile --analytic``: the analytic step profile of a ``ProfileConfig``, saved to ``-o``."""
    from roofline.serving.profile_doc import check_profile_output, save_profile

    with bad_input(), writing_to(config.output):
        check_profile_output(config.output)
        document = build_analytic_profile(config)
        save_profile(document, config.output)
    click.echo(f"step profile of {document.model['name']} ({document.basis}) saved to {config.output}")


def load_workload(trace, requests, arrivals, prompt, output_lengths, seed):
    from roofline.serving.workload import load_trace, make_workload

    if trace is not None:
        return load_trace(trace), {"trace": str(trace)}
    spec = {"requests": requests, "arrivals": arrivals, "prompt": prompt, "output": output_lengths, "seed": seed}
    return make_workload(requests, arrivals, prompt, output_lengths, seed), spec


def _overhead(profile, given: dict[str, float]):
    """The profile's calibrated overhead with the terms given on the command line replaced (the rest kept)."""
    from dataclasses import replace

    from roofline.serving.profile_doc import EngineOverhead

    if not given:
        return profile.engine_overhead
    base = profile.engine_overhead or EngineOverhead(0.0, 0.0, "")
    flags = ", ".join(FLAGS[term].spelled for term in given)
    fitted_on = f"{base.fitted_on}; {flags} given on the command line" if base.fitted_on else f"{flags} given"
    return replace(base, **given, fitted_on=fitted_on)


def probe_line(subject: str, probe) -> str:
    """One line for one simulation of a capacity search (or a plan's fleet), e.g. ``capacity of continuous: 12.5
    requests/s met (TTFT p90 812 ms ≤ 1 s)``: printed to stderr as each ends, so a long search is visibly alive."""
    from roofline.core.units import significant
    from roofline.serving.capacity import describe_checks

    rate = probe.rate_requests_per_s
    what = {"alone": "every request served alone",
            "burst": f"a burst of them all ({significant(rate or 0)} requests/s)"}.get(
        probe.arrivals, f"{significant(rate or 0)} requests/s")
    fleet = f"{probe.fleet} at " if probe.fleet else ""
    return f"{subject}: {fleet}{what} {'met' if probe.met else 'missed'} ({describe_checks(probe.checks)})"


def run_policies(profile, requests, policies, overhead, mem_fraction, slo, rates, seed,
                 layout=None) -> list[dict[str, Any]]:
    """Simulate each policy; with an SLO, also search its capacity (a line to stderr per rate tried); with rates,
    draw its curve.  With a fleet's ``layout`` every simulation is of the whole fleet (``roofline.fleet``): its
    capacity is the fleet's."""
    from roofline.serving.capacity import capacity_under, rate_point
    from roofline.serving.metrics import summarize
    from roofline.serving.simulate import simulate
    from roofline.serving.workload import with_arrivals

    entries = []
    for policy in policies:
        # Only the run the table summarises logs its steps; the curve's and the search's runs are read for their
        # requests' latencies alone (a step log of every request decoding alone at a low rate is gigabytes).
        def run_at(workload, policy=policy, log_steps=False):
            if layout is not None:
                from roofline.fleet.replicas import simulate_fleet

                return simulate_fleet(profile, workload, policy, layout, overhead, mem_fraction, log_steps)
            return simulate(profile, workload, policy, overhead, mem_fraction, log_steps)

        run = run_at(requests, log_steps=True)
        entry: dict[str, Any] = {"run": run, "summary": summarize(run, profile, mem_fraction, slo), "rates": []}
        if layout is not None:
            from roofline.fleet.replicas import FleetRun
            from roofline.fleet.summary import fleet_section

            assert isinstance(run, FleetRun)  # a layout's run_at simulates the fleet
            entry["fleet"] = fleet_section(run, profile, mem_fraction)
        for rate in rates:
            entry["rates"].append(rate_point(rate, run_at(with_arrivals(requests, f"poisson:{rate!r}", seed))))
        if slo is not None:
            def progress(probe, subject=f"capacity of {policy.text}"):
                click.echo(probe_line(subject, probe), err=True)

            entry["capacity"] = capacity_under(requests, slo, run_at, seed, progress)
            entry["rates"] += [{k: v for k, v in p.items() if k != "checks"} for p in entry["capacity"].tried]
        entries.append(entry)
    return entries


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
    """Simulate a checked config, print the table (or JSON), and write the folder whole (``writing_to``: the
    default folder, named from the profile, is held from when it is named)."""
    from roofline.serving.document import SIMULATION_FOLDER
    from roofline.serving.profile_doc import load_profile

    with bad_input(), writing_to(folder=config.out_dir, kind=SIMULATION_FOLDER) as given_staging:
        step_profile = load_profile(config.profile_file) if config.profile_file else build_analytic_profile(config)
        if given_staging is not None:
            folder = config.out_dir
            _simulate_into(config, step_profile, given_staging)
        else:  # the default folder is named only now, from the profile: held and staged from here
            folder = Path("results") / (f"sim-{step_profile.model.get('id') or 'model'}-"
                                        f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}")
            with writing_folder(folder, SIMULATION_FOLDER) as staging:
                _simulate_into(config, step_profile, staging)
    click.echo(f"saved {folder / 'simulation.json'}, requests.csv" + ("" if config.no_report else " and the report"),
               err=config.as_json)


def fleet_layout(config, profile):
    """The fleet of a ``SimulateConfig``: its replicas and router, or its prefill:decode split with the KV link
    (``--kv-link-gbps``, else the spec sheet of the profile's GPU)."""
    from roofline.fleet.handover import kv_link
    from roofline.fleet.replicas import FleetLayout

    if config.disaggregate is None:
        return FleetLayout(config.replicas, config.router)
    return FleetLayout(router=config.router, split=config.disaggregate, link=kv_link(profile, config.kv_link_gbps))


def _simulate_into(config, step_profile, folder: Path) -> None:
    """Simulate, print, and write the run's files into ``folder`` (the staging folder of the output)."""
    from roofline.serving.document import save_simulation, simulation_document, write_requests_csv
    from roofline.serving.workload import check_fits_in_memory

    profile_file, mem_fraction, seed = config.profile_file, config.mem_fraction, config.seed
    requests, workload = load_workload(config.trace, config.requests, config.arrivals, config.prompt,
                                        config.output_lengths, seed)
    check_fits_in_memory(requests, len(config.policy_list))
    overhead = _overhead(step_profile, config.overhead_given)
    layout = fleet_layout(config, step_profile) if config.fleet else None
    entries = run_policies(step_profile, requests, config.policy_list, overhead, mem_fraction, config.slo,
                           list(config.rates), seed, layout)
    tool, host = tool_and_host()
    fleet = None
    if layout is not None:
        from roofline.fleet.summary import layout_record

        fleet = layout_record(layout)
    document = simulation_document(entries, step_profile, str(profile_file) if profile_file else None, workload,
                                   mem_fraction, tool, host, tuple(sys.argv), fleet)
    if config.as_json:
        click.echo(json.dumps([{"policy": e["policy"], "summary": e["summary"], "capacity": e["capacity"]}
                               for e in document["runs"]], indent=1, allow_nan=False))
    else:
        _print_table(document)
    runs = [e["run"] for e in entries]
    save_simulation(document, folder / "simulation.json")
    write_requests_csv(runs, folder / "requests.csv", [run.placement for run in runs] if fleet else None)
    if not config.no_report:
        from roofline.serving.report import write_report

        write_report(document, runs, folder)
