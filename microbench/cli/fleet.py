"""``gpubench plan``: how many GPUs of each candidate serve a rate within an SLO, and what their output costs.
Thin: build the ``PlanConfig``, load the candidates, call ``roofline.fleet.planner``, print, write.  Never
imports torch.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import click

from microbench.cli.edges import BadInput, bad_input, declare, given
from microbench.cli.guard import writing_folder
from microbench.cli.serving import load_workload, print_columns, probe_line, tool_and_host
from roofline.fleet.plan_config import FLAGS


@click.command()
@click.pass_context
@click.argument("profile_files", nargs=-1, type=click.Path(path_type=Path))
@declare(FLAGS)
def plan(ctx, **options) -> None:
    """GPUs (replicas x TP) each candidate profile needs to serve --rate within --slo; tokens/s per GPU and, with
    --gpu-hour-usd, the cost per million output tokens."""
    from roofline.fleet.plan_config import PlanConfig

    with bad_input():
        config = PlanConfig.from_options(options, given(ctx))
    run_plan(config)


def load_candidates(config):
    """Each profile with its SKU, its price and (with --disaggregate) its KV link; a price for a SKU no profile
    runs on is refused (a typo would otherwise leave every cost null)."""
    from roofline.fleet.handover import kv_link
    from roofline.fleet.planner import Candidate
    from roofline.serving.profile_doc import load_profile

    prices = config.price_of
    candidates = []
    for path in config.profile_files:
        profile = load_profile(path)
        sku = profile.device.get("sku")
        candidates.append(Candidate(path, profile, sku, prices.get(sku) if sku else None,
                                    kv_link(profile, config.kv_link_gbps) if config.disaggregate else None))
    skus = sorted({c.sku for c in candidates if c.sku})
    for sku in prices:
        if sku not in skus:
            raise BadInput(f"--gpu-hour-usd prices {sku}, which no profile runs on (they run on "
                           f"{', '.join(skus) or 'no known SKU'})")
    return candidates


def _progress(subject: str):
    """A line to stderr for each simulation of the plan's searches, so a long plan is visibly alive."""
    def report(probe) -> None:
        click.echo(probe_line(subject, probe), err=True)
    return report


def run_plan(config) -> None:
    """Plan a checked config, print the table (or JSON) and write the folder whole (``writing_folder``)."""
    from roofline.fleet.plan_document import PLAN_FOLDER, plan_document, plan_header, plan_rows, plan_sentences
    from roofline.fleet.planner import Target, plan_policy
    from roofline.serving.profile_doc import save_json_atomic
    from roofline.serving.workload import check_fits_in_memory

    folder = config.out_dir or Path("results") / f"plan-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
    with bad_input(), writing_folder(folder, PLAN_FOLDER) as staging:
        candidates = load_candidates(config)
        requests, workload = load_workload(config.trace, config.requests, "burst", config.prompt,
                                           config.output_lengths, config.seed)
        check_fits_in_memory(requests, 1)
        target = Target(requests, config.slo, config.rates, config.router, config.max_gpus, config.mem_fraction,
                        config.seed, config.disaggregate)
        plans = [[plan_policy(c, policy, target, _progress(f"{c.path.name}, {policy.text}"))
                  for policy in config.policy_list] for c in candidates]
        tool, host = tool_and_host()
        document = plan_document(candidates, plans, target, workload, config.price_of, tool, host, tuple(sys.argv))
        if config.as_json:
            click.echo(json.dumps(document["candidates"], indent=1, allow_nan=False))
        else:
            print_columns(plan_header(document), plan_rows(document))
            for line in plan_sentences(document):
                click.echo(line)
        save_json_atomic(document, staging / "plan.json")
        if not config.no_report:
            from roofline.fleet.plan_report import write_report

            write_report(document, staging)
    click.echo(f"saved {folder / 'plan.json'}" + ("" if config.no_report else " and the report"),
               err=config.as_json)
