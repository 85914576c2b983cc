"""``gpubench search`` as the library runs it: everything between the command's parsed options and what it prints.

``prepare_search`` reads and checks every input before anything is simulated (the model, each SKU's spec sheet, the
workload) and prunes the space analytically (``roofline.search.space``); ``Searching.run`` runs the groups in
worker processes (``roofline.search.pool``), each configuration's record journalled beside the output as it ends,
then marks the front, chooses per rate and per SKU (``roofline.search.document``), explains each choice
(``roofline.search.explain``) and writes the launch files (``roofline.search.deploy``); ``SearchOutcome.write``
puts search.json, the report and deploy/ into the folder.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from roofline.fleet.planner import Target
from roofline.result.sections import Provenance
from roofline.search.config import SearchConfig
from roofline.search.deploy import deploy_files
from roofline.search.document import search_document
from roofline.search.evaluate import SearchContext
from roofline.search.explain import explain
from roofline.search.pool import SearchJournal, run_groups
from roofline.search.space import Group, ModelInfo, Pruned, build_space, identity, longest_context, model_info
from roofline.serving.metrics import Slo
from roofline.serving.profile_doc import save_json_atomic
from roofline.serving.workload import check_fits_in_memory, read_workload

# Progress: (configurations done, configurations in all, what just finished).
Progress = Callable[[int, int, str], None]


def default_search_folder(now: dt.datetime | None = None) -> Path:
    return Path("results") / f"search-{(now or dt.datetime.now(dt.timezone.utc)):%Y%m%dT%H%M%SZ}"


def _grid_top(value: int, floor: int = 8192) -> int:
    return max(floor, 1 << math.ceil(math.log2(max(2, value))))


@dataclass
class Searching:
    """One search command, its inputs read and checked and its space pruned."""

    config: SearchConfig
    info: ModelInfo
    context: SearchContext
    groups: list[Group]
    pruned: list[Pruned]
    space: dict[str, Any]
    workload: dict[str, Any]
    provenance: Provenance
    journal: SearchJournal
    kept: list[dict[str, Any]]

    @property
    def total(self) -> int:
        return sum(len(g.settings) for g in self.groups)

    def remaining(self) -> list[Group]:
        done = {r["key"] for r in self.kept}
        return [g for g in self.groups if not all(s.key in done for s in g.settings)]

    def run(self, progress: Progress | None = None, workers: int | None = None) -> SearchOutcome:
        began = time.perf_counter()
        records = list(self.kept)
        progress = progress or (lambda done, total, what: None)
        progress(len(records), self.total, "resumed from the journal" if records else "starting")
        self.journal.start(records)

        def finished(batch: list[dict[str, Any]]) -> None:
            self.journal.append(batch)
            records.extend(batch)
            progress(len(records), self.total, batch[-1]["key"])

        remaining = self.remaining()
        run_groups(remaining, self.context, workers or self.config.worker_count, finished)
        self.journal.close()
        simulated = time.perf_counter() - began
        wanted = {s.key for g in self.groups for s in g.settings}
        records = [r for r in records if r["key"] in wanted]
        document = search_document(
            model=self.info.to_dict(), space=self.space, pruned=[p.to_dict() for p in self.pruned], records=records,
            rates=self.context.plan.rates, slo=dict(self.context.plan.slo.limits_s), workload=self.workload,
            router=self.context.plan.router, mem_fraction=self.context.plan.mem_fraction, prices=self.config.price_of,
            skus=self.config.skus, tool=self.provenance.tool, host=self.provenance.host, argv=self.provenance.argv,
            timing={"simulate_s": simulated, "configurations": self.total, "resumed": len(self.kept),
                    "workers": workers or self.config.worker_count})
        deploy: dict[str, dict[str, str]] = {}
        explained: dict[str, dict[str, Any]] = {}
        for answer in document["answers"] + document["answers_per_sku"]:
            if not answer["met"]:
                continue
            name = f"{answer['key']}@{answer['rate_requests_per_s']!r}"
            if name not in explained:
                explained[name] = explain(answer, self.context)
            answer.update(explained[name])
        folder_of = _deploy_folders(self.context.plan.rates)
        for answer in document["answers"]:
            if answer["met"]:
                memory = next(r["memory"] for r in records if r["key"] == answer["setting"]["key"])
                deploy[folder_of[answer["rate_requests_per_s"]]] = deploy_files(
                    answer, self.info, longest_context(self.context.plan.requests), self.context.plan.mem_fraction,
                    memory["weight_bytes"], memory.get("device_bytes"), self.space["engine_time"])
        document["deploy"] = {folder: sorted(files) for folder, files in deploy.items()}
        document["timing"]["total_s"] = time.perf_counter() - began
        return SearchOutcome(document, deploy, self.journal)


def _deploy_folders(rates: tuple[float, ...]) -> dict[float, str]:
    if len(rates) == 1:
        return {rates[0]: "deploy"}
    return {rate: f"deploy/rate-{rate:g}" for rate in rates}


@dataclass(frozen=True)
class SearchOutcome:
    document: dict[str, Any]
    deploy: dict[str, dict[str, str]]
    journal: SearchJournal

    def write(self, folder: Path, report: bool = True) -> None:
        """search.json, deploy/ and (with ``report``) the report, into ``folder`` (the output's staging folder)."""
        from roofline.result.io import write_output_file

        save_json_atomic(self.document, folder / "search.json")
        for sub, files in self.deploy.items():
            (folder / sub).mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                write_output_file(folder / sub / name, text)
                if name.endswith(".sh"):
                    (folder / sub / name).chmod(0o755)
        if report:
            from roofline.search.report import write_report

            write_report(self.document, folder)


def prepare_search(config: SearchConfig, provenance: Provenance, out_dir: Path) -> Searching:
    """Every input read and checked, the space pruned, the journal beside ``out_dir`` read when resuming."""
    info = model_info(config)
    requests, workload = read_workload(config.trace, config.requests, "burst", config.prompt, config.output_lengths,
                                       config.seed, lengths=config.lengths)
    check_fits_in_memory(requests, 1, tokens_per_step=len(requests))
    groups, pruned, space = build_space(config, info, requests)
    longest = longest_context(requests)
    spec_queries = 1 + max((int(s.spec.split("draft=")[1].split(",")[0]) for g in groups for s in g.settings
                            if s.spec), default=0)
    most_tokens = max(config.budget_values) + max(config.max_batch_values) * spec_queries
    context = SearchContext(
        model=config.model, hf_config=config.hf_config, dtype=config.dtype, routing=config.routing,
        efficiency=config.efficiency, engine=config.engine, max_tokens=_grid_top(most_tokens),
        max_context=_grid_top(longest),
        plan=Target(requests, cast(Slo, config.slo), config.rates, config.router, config.max_gpus, config.mem_fraction,
                    config.seed, disaggregate=not config.aggregated_only),
        prices=config.prices)
    journal = SearchJournal(out_dir, identity(config, info, space))
    kept = journal.read() if config.resume else []
    return Searching(config, info, context, groups, pruned, space, workload, provenance, journal, kept)
