"""``gpubench search``: which serving configuration of a model meets an SLO at a rate most cheaply on which GPUs,
and how to start it.  Thin: build the ``SearchConfig``, hold the output folder, run ``roofline.search.run`` with a
progress bar, print.  Never imports torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from microbench.cli.edges import bad_input, declare, given
from microbench.cli.guard import writing_folder
from roofline.search.config import FLAGS


@click.command()
@click.pass_context
@declare(FLAGS)
def search(ctx, **options) -> None:
    """Search TP x EP x attention-DP, KV dtype, max-batch, chunk budget, speculation and one pool or P:D for
    --model on each --gpu: the Pareto front of tokens/s per GPU against tokens/s per user at each --rate within
    --slo, the choice per rate and SKU with its binding limit, and deploy/ with each engine's launch script."""
    from roofline.search.config import SearchConfig

    with bad_input():
        config = SearchConfig.from_options(options, given(ctx))
    run_search(config)


def run_search(config) -> None:
    from microbench.cli.render import search_progress
    from microbench.cli.serving import print_columns, provenance
    from roofline.core.units import significant
    from roofline.search.document import (
        FRONT_HEADER,
        SEARCH_FOLDER,
        answer_lines,
        front_rows,
        pruned_lines,
        top_header,
        top_rows,
    )
    from roofline.search.run import default_search_folder, prepare_search

    folder = Path(config.out_dir or default_search_folder())
    journal = folder.with_name(folder.name + ".journal")
    kept = (f"every configuration finished is kept in {journal}; run the same command with -o {folder} --resume "
            "to continue")
    with bad_input(), writing_folder(folder, SEARCH_FOLDER, kept=kept) as staging:
        searching = prepare_search(config, provenance(), folder)
        space = searching.space
        click.echo(f"search: {searching.info.spec.name} on {', '.join(config.skus)}: {space['configurations']} "
                   f"configurations, {len(searching.pruned)} groups pruned before simulating, "
                   f"{searching.total} to simulate"
                   + (f" ({len(searching.kept)} kept from {journal})" if searching.kept else "")
                   + f", on {config.worker_count} worker{'s' if config.worker_count > 1 else ''}", err=True)
        click.echo(f"engine time: {space['engine_time']}", err=True)
        for note in space["not_modelled"][:1]:
            click.echo(f"not searched: {note}", err=True)
        with search_progress() as progress:
            outcome = searching.run(progress=progress)
        document = outcome.document
        if config.as_json:
            click.echo(json.dumps({k: document[k] for k in ("answers", "answers_per_sku", "pruned")}, indent=1,
                                  allow_nan=False))
        else:
            for rate in document["rates_requests_per_s"]:
                click.echo(f"Pareto front at {significant(rate)} requests/s: tokens/s per GPU against tokens/s "
                           "per user, every SKU")
                print_columns(FRONT_HEADER, front_rows(document, rate))
                click.echo(f"\nTop ten at {significant(rate)} requests/s")
                print_columns(top_header(document), top_rows(document, rate))
                click.echo()
            for line in answer_lines(document):
                click.echo(line)
            for answer in document["answers"]:
                for line in answer.get("sentences", []):
                    click.echo("  " + line)
            for line in pruned_lines(document):
                click.echo(line)
            click.echo(f"not searched: {'; '.join(space['not_modelled'])}")
        outcome.write(staging, report=not config.no_report)
    outcome.journal.remove()
    where = ", ".join(str(folder / sub) for sub in outcome.deploy) or "no deploy/ (nothing met the SLO)"
    click.echo(f"saved {folder / 'search.json'}, {where}" + ("" if config.no_report else " and the report")
               + f" ({document['timing']['total_s']:.0f} s)", err=config.as_json)
