"""``gpubench simulate`` as the library runs it: everything between the command's parsed options and what it prints.

``prepare_simulation`` reads and checks every input before anything is simulated: the step profile (a file, or built
from the model options with ``--analytic``: ``roofline.serving.profiles.analytic``), the workload (drawn, or a
trace), that its runs fit in memory, the engine time (``roofline.serving.profiles.engine_time``: a calibrated profile's
terms, else the ``--engine`` preset's, each ``--overhead-*`` replacing its term) and a fleet's layout.
``Simulation.run`` simulates each policy (``roofline.serving.simulate``, or the whole fleet:
``roofline.fleet.replicas``), with its rate curve (``--rates``) and capacity search (``--slo``), and assembles the
document (``roofline.serving.document``); ``SimulationOutcome.write`` writes simulation.json, requests.csv and the
report into a folder. The CLI holds the output folder around them (``microbench.cli.guard``) and prints.

It lives with the fleets because one simulate command may simulate a fleet, and the serving room never reads
the fleet room; one replica is the serving room's engine loop, called directly.

``--sweep-load`` simulates every policy at each of its rates (``roofline.serving.capacity.load_point``) and marks
the Pareto front of tokens/s per GPU against tokens/s per user over all of them (``load_sweep``); each policy's
energy and cost (``roofline.serving.metrics.energy_figures``) are charged on the profile's power figure and
``--gpu-hour-usd``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from roofline.fleet.handover import kv_link
from roofline.fleet.replicas import FleetLayout, FleetRun, simulate_fleet
from roofline.fleet.summary import fleet_section, layout_record
from roofline.result.sections import Provenance
from roofline.serving import document as simulation_doc
from roofline.serving import simulate as engine_loop
from roofline.serving.capacity import (
    Fleet,
    Probe,
    capacity_under,
    concurrency_capacity,
    load_point,
    load_sweep,
    rate_point,
)
from roofline.serving.metrics import energy_figures, summarize
from roofline.serving.policies import Policy
from roofline.serving.profile_doc import EngineOverhead, StepProfile, load_profile
from roofline.serving.profiles.analytic import analytic_profile_of
from roofline.serving.profiles.engine_time import EngineTime, engine_time
from roofline.serving.simulate import SimulationRun, largest_step_tokens
from roofline.serving.simulate_config import FLAGS, SimulateConfig
from roofline.serving.step_cost import drafter_cost_basis
from roofline.serving.workload import (
    Request,
    check_fits_in_memory,
    closed_loop_record,
    read_workload,
    with_arrivals,
)

# Each simulation of a capacity search as it ends, with what was searched ("capacity of continuous"): the command
# prints a line for each, so a long search is visibly alive (the library never prints).
ProbeReport = Callable[[str, Probe], None]
# Each simulation's progress as it runs (what it is, the requests finished, the requests in all): the command shows
# a bar for one that lasts (the library never prints).
Ticker = Callable[[str, int, int], None]


def named_progress(progress: ProbeReport | None, subject: str) -> Callable[[Probe], None] | None:
    """What a search takes as its progress: each probe handed on with ``subject``."""
    if progress is None:
        return None
    report = progress
    return lambda probe: report(subject, probe)


def engine_time_of(config: SimulateConfig, profile: StepProfile) -> EngineTime:
    """Whose engine time the config's steps carry (``roofline.serving.profiles.engine_time``: a calibrated
    profile's terms, else the ``--engine`` preset's, or none), each ``--overhead-*`` typed replacing its term."""
    given = config.overhead_given
    chosen = engine_time(profile, config.engine, config.engine_typed)
    return chosen.given(given, ", ".join(FLAGS[term].spelled for term in given))


def fleet_layout(config: SimulateConfig, profile: StepProfile) -> FleetLayout:
    """The fleet of a config: its replicas and router, or its prefill:decode split with the KV link
    (``--kv-link-gbps``, else the spec sheet of the profile's GPU)."""
    if config.disaggregate is None:
        return FleetLayout(config.replicas, config.router)
    return FleetLayout(router=config.router, split=config.disaggregate, link=kv_link(profile, config.kv_link_gbps))


def prepare_simulation(config: SimulateConfig, provenance: Provenance) -> Simulation:
    """Every input of a checked config read and checked, nothing simulated yet (a refusal is one line)."""
    requests, workload = read_workload(config.trace, config.requests, config.arrivals, config.prompt,
                                       config.output_lengths, config.seed, config.prefix, config.sessions,
                                       config.lengths)
    if config.profile_file:
        profile = load_profile(config.profile_file)
    else:  # the analytic profile's token grid reaches the workload's largest step: never read past it
        needed = max(largest_step_tokens(p, requests) for p in config.policy_list) if requests else 0
        profile = analytic_profile_of(replace(config, max_tokens=max(config.max_tokens, needed)), provenance)
    if config.concurrency is not None:
        workload = closed_loop_record(workload, config.concurrency)
    spec = config.speculation
    check_fits_in_memory(requests, len(config.policy_list), tokens_per_step=max(
        p.max_batch for p in config.policy_list) * (spec.queries if spec is not None else 1))
    chosen = engine_time_of(config, profile)
    return Simulation(config, profile, requests, workload, chosen.overhead,
                      fleet_layout(config, profile) if config.fleet else None, provenance, chosen)


@dataclass(frozen=True)
class SimulationOutcome:
    """A simulate command's answer: the simulation document and each policy's run (its requests and steps)."""

    document: dict[str, Any]
    runs: list[SimulationRun]
    fleet: bool = False

    def write(self, folder: Path, report: bool = True) -> None:
        """simulation.json, requests.csv (a fleet's with each request's replica) and, with ``report``, the report,
        each written into ``folder`` (the output's staging folder)."""
        from roofline.serving.report import write_report

        # Through the modules, looked up as each file is written: the tests' seams (a full disk) replace them there.
        simulation_doc.save_simulation(self.document, folder / "simulation.json")
        placements: list[Sequence[tuple[int, int | None]]] | None = (
            [run.placement for run in self.runs if isinstance(run, FleetRun)] if self.fleet else None)
        simulation_doc.write_requests_csv(self.runs, folder / "requests.csv", placements)
        if report:
            write_report(self.document, self.runs, folder)


@dataclass(frozen=True)
class Simulation:
    """One simulate command, its inputs read and checked."""

    config: SimulateConfig
    profile: StepProfile
    requests: list[Request]
    workload: dict[str, Any]
    overhead: EngineOverhead | None
    layout: FleetLayout | None
    provenance: Provenance
    engine_time: EngineTime | None = None  # whose the overhead is (None: a caller that built the overhead itself)

    def default_folder(self, now: dt.datetime | None = None) -> Path:
        """Where the run is written without ``-o``: ``results/sim-<model id>-<UTC time>``."""
        now = now or dt.datetime.now(dt.timezone.utc)
        return Path("results") / f"sim-{self.profile.model.get('id') or 'model'}-{now:%Y%m%dT%H%M%SZ}"

    def run(self, progress: ProbeReport | None = None, ticker: Ticker | None = None) -> SimulationOutcome:
        """Simulate each policy (with its rate curve and capacity search) and assemble the document; ``progress``:
        each capacity probe as it ends, ``ticker``: each simulation as it runs."""
        config, provenance = self.config, self.provenance
        entries = [self._policy(policy, progress, ticker) for policy in config.policy_list]
        profile_path = str(config.profile_file) if config.profile_file else None
        sweep = load_sweep([(entry["run"].policy["policy"], entry["sweep"]) for entry in entries], self.fleet) \
            if config.sweep_load else None
        document = simulation_doc.simulation_document(
            entries, self.profile, profile_path, self.workload, config.mem_fraction, provenance.tool, provenance.host,
            provenance.argv, layout_record(self.layout) if self.layout else None, sweep, self._spec_decode(),
            self.engine_time.to_dict() if self.engine_time is not None else None)
        return SimulationOutcome(document, [entry["run"] for entry in entries], self.layout is not None)

    @property
    def fleet(self) -> Fleet:
        """What the runs' energy and cost are charged on: the profile's GPUs per replica and power, the replicas,
        ``--gpu-hour-usd``."""
        return Fleet(self.profile.gpus, self.layout.size if self.layout is not None else 1, self.profile.power_figure,
                     self.config.gpu_hour_usd)

    def _spec_decode(self) -> dict[str, Any] | None:
        """The document's record of ``--spec-decode``: the setting and what its drafter was costed on."""
        spec = self.config.speculation
        return None if spec is None else {**spec.to_dict(), "drafter_cost": drafter_cost_basis(spec)}

    def _run_at(self, policy: Policy, workload: list[Request], log_steps: bool = False, label: str = "",
                ticker: Ticker | None = None, clients: int | None = None) -> SimulationRun:
        """One simulation of ``workload`` (``clients``: a closed loop of that many, else the config's): of the
        whole fleet when there is one (its capacity is the fleet's); ``ticker`` told its progress as ``label``."""
        finished = None if ticker is None else (lambda done: ticker(label, done, len(workload)))
        if self.layout is not None:
            return simulate_fleet(self.profile, workload, policy, self.layout, self.overhead,
                                  self.config.mem_fraction, log_steps, self.config.speculation, self.config.seed,
                                  progress=finished)
        return engine_loop.simulate(self.profile, workload, policy, self.overhead, self.config.mem_fraction, log_steps,
                                    self.config.speculation, self.config.seed,
                                    clients if clients is not None else self.config.concurrency, progress=finished)

    def _policy(self, policy: Policy, progress: ProbeReport | None, ticker: Ticker | None = None) -> dict[str, Any]:
        """One policy's entry: its run and summary; with rates its curve; with an SLO its capacity (each probe
        handed to ``progress``, each simulation's progress to ``ticker``)."""
        config, profile = self.config, self.profile

        # Only the run the table summarises logs its steps; the curve's and the search's runs are read for their
        # requests' latencies alone (a step log of every request decoding alone at a low rate is gigabytes).
        def run_at(workload: list[Request], label: str = f"capacity of {policy.text}") -> SimulationRun:
            return self._run_at(policy, workload, label=label, ticker=ticker)

        def at_rate(rate: float) -> SimulationRun:
            return run_at(with_arrivals(self.requests, f"poisson:{rate!r}", config.seed),
                          f"{policy.text} at {rate:g} requests/s")

        run = self._run_at(policy, self.requests, log_steps=True, label=policy.text, ticker=ticker)
        summary = summarize(run, profile, config.mem_fraction, config.slo)
        fleet = self.fleet
        entry: dict[str, Any] = {"run": run, "summary": summary, "rates": [], "energy": energy_figures(
            summary["output_tokens"], run.busy_s, run.makespan_s, fleet.gpus_per_replica, fleet.replicas,
            fleet.power, fleet.usd_per_gpu_hour, run.busy_j)}
        if isinstance(run, FleetRun):
            entry["fleet"] = fleet_section(run, profile, config.mem_fraction)
        for rate in config.rates:
            entry["rates"].append(rate_point(rate, at_rate(rate)))
        entry["sweep"] = [load_point(rate, at_rate(rate), fleet) for rate in config.sweep_load]
        if config.slo is not None and config.concurrency is not None:  # the clients set the rate: search them
            entry["capacity"] = concurrency_capacity(
                self.requests, config.slo, lambda clients: self._run_at(
                    policy, self.requests, label=f"capacity of {policy.text}, {clients} clients", ticker=ticker,
                    clients=clients),
                named_progress(progress, f"capacity of {policy.text}"))
            entry["rates"] += [{k: v for k, v in p.items() if k != "checks"} for p in entry["capacity"].tried]
        elif config.slo is not None:
            entry["capacity"] = capacity_under(self.requests, config.slo, run_at, config.seed,
                                               named_progress(progress, f"capacity of {policy.text}"))
            entry["rates"] += [{k: v for k, v in p.items() if k != "checks"} for p in entry["capacity"].tried]
        return entry
