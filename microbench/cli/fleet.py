"""``gpubench plan``: how many GPUs of each candidate serve a rate within an SLO, and what their output costs.
Thin: build the ``PlanConfig``, hold the output folder, call ``roofline.fleet.plan_run``, print.  Never imports
torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from microbench.cli.edges import bad_input, declare, given
from microbench.cli.guard import writing_folder
from microbench.cli.serving import print_columns, print_probe, provenance
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


def run_plan(config) -> None:
    """Plan a checked config, print the table (or JSON) and write the folder whole (``writing_folder``)."""
    from roofline.fleet.plan_document import PLAN_FOLDER, plan_header, plan_rows, plan_sentences
    from roofline.fleet.plan_run import default_plan_folder, prepare_plan

    folder = config.out_dir or default_plan_folder()
    with bad_input(), writing_folder(folder, PLAN_FOLDER) as staging:
        outcome = prepare_plan(config, provenance()).run(progress=print_probe)
        document = outcome.document
        if config.as_json:
            click.echo(json.dumps(document["candidates"], indent=1, allow_nan=False))
        else:
            print_columns(plan_header(document), plan_rows(document))
            for line in plan_sentences(document):
                click.echo(line)
        outcome.write(staging, report=not config.no_report)
    click.echo(f"saved {folder / 'plan.json'}" + ("" if config.no_report else " and the report"),
               err=config.as_json)
