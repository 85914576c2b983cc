"""The ``gpubench`` command.  Thin: parse, call a library function, print.

Commands that only read results never import torch; measuring commands import it when they run.
Exit codes: 0 ok, 1 a requested gate failed, 2 bad usage or bad input (an output another run holds, a full
disk), 128 + the signal's number when SIGINT or SIGTERM stops a run (``microbench.cli.guard``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from microbench.cli import calibrate, engine, fleet, search, serving
from microbench.cli.edges import (
    BadInput,
    OneLineGroup,
    bad_input,
    declare,
    given,
    interrupted_by,
    refuse_what_cannot_run,
    write_outputs,
)
from microbench.cli.guard import writing_folder, writing_to
from microbench.decode.config import FLAGS as DECODE_FLAGS
from microbench.points.config import CEILINGS_FLAGS, FLAGS
from roofline.compare.config import FLAGS as COMPARE_FLAGS
from roofline.core.options import Option
from roofline.result.io import ResultError

# The options of the commands that read a file and need no config of their own (fit, report, import), declared
# as every other command's are: one row each, the click option made from it.
FIT_FLAGS: dict[str, Option] = {
    "as_json": Option(("--json",), "flag", help="print the analysis as JSON (the same as --format json)"),
    "output_format": Option(("--format",), "choice", choices=("table", "json", "csv"),
                            help="table (default), the whole analysis as JSON, or one CSV row per series"),
}
REPORT_FLAGS: dict[str, Option] = {
    "output": Option(("-o", "--output"), "path", help="report folder [beside the result: <name>-report/]"),
}
IMPORT_FLAGS: dict[str, Option] = {
    "output": Option(("-o", "--output"), "path", required=True, help="result file to write"),
    "device_name": Option(("--device-name",), help="the device the data was measured on (a CSV import)"),
    "sku": Option(("--sku",), help="SKU id from profiles/gpus (matched by name if omitted)"),
    "device_kind": Option(("--device-kind",), "choice", choices=("cuda", "cpu"), help="cuda or cpu [cuda]"),
    "force": Option(("--force",), "flag", help="replace an existing -o file"),
    "reference": Option(("--reference",), metavar="aiconfigurator",
                        help="import a reference database's GEMM rows instead of a CSV (the [reference] extra)"),
    "gpu": Option(("--gpu",), help="--reference: the SKU whose rows to import"),
    "engine": Option(("--engine",), help="--reference: vllm | sglang | trtllm, whose kernels it timed [vllm]"),
    "dtypes": Option(("--dtype",), multiple=True, help="--reference: bf16, fp8, fp8-block, nvfp4 [bf16]"),
    "shapes": Option(("--shape",), multiple=True, help="--reference: weight NxK (repeatable) [every shape]"),
}


def _measure(ctx: click.Context, job, config, interrupted: str, resumable: bool = False):
    """Run a measuring job with the terminal's progress display.  A signal ends it with ``interrupted`` (and,
    when ``resumable`` and something was saved, how to resume) and exit 128 + the signal's number."""
    from microbench.cli.render import terminal_observer
    from microbench.timing.observer import Interrupted

    try:
        with bad_input(), terminal_observer() as observer:
            return job(config, observer)
    except Interrupted as exc:
        resume = f"; resume with: gpubench sweep --resume {exc.output}" if resumable and exc.output is not None else ""
        click.echo(f"gpubench: {interrupted_by(exc.signum)}; {interrupted.format(output=exc.output)}{resume}",
                   err=True)  # one line, as every refusal and guard.writing_to's own
        ctx.exit(128 + exc.signum)


def _show(document: dict, as_json: bool, printer) -> None:
    if as_json:
        click.echo(json.dumps(document, indent=1, allow_nan=False))
    else:
        printer(document)


def _config(ctx: click.Context, options: dict, **fixed):
    from microbench.points.config import SweepConfig

    with bad_input():
        return SweepConfig.from_options(options, given(ctx), argv=tuple(sys.argv), **fixed)


class GuardedGroup(OneLineGroup):
    """Every command under ``writing_to``: the read-only ones too end on SIGINT/SIGTERM with 130/143 and one
    line, not click's 'Aborted!' and 1 (a writing command's own ``writing_to`` and handlers answer first)."""

    def invoke(self, ctx):
        with writing_to():
            return super().invoke(ctx)


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpubench-roofline", prog_name="gpubench")
def main() -> None:
    """Measure where LLM decode (GEMV -> batched GEMM) stops being memory-bound on this machine."""


@main.command()
@declare(FLAGS)
@click.pass_context
def sweep(ctx, **options) -> None:
    """Time GEMV, GEMM and batched GEMV across batch sizes and save a result document.

    --device all runs one process per GPU and writes one result each into the -o folder."""
    config = _config(ctx, options)
    if config.all_devices:
        _sweep_all(ctx, config)
        return
    from microbench.cli.render import print_sweep_summary
    from microbench.sweep.loop import sweep_job

    named = config.resume or config.output
    if config.report and named is not None:  # a folder the report may not replace is refused before measuring
        _check_report_folder(named)
    with writing_to(named, kept_on_full_disk=_points_saved):
        done = _measure(ctx, sweep_job, config, "everything measured is saved in {output}", resumable=True)
    print_sweep_summary(done.result, done.output)
    if config.report and done.output is not None:
        _report_beside(done.result, done.output)


def _check_report_folder(result_file: Path) -> None:
    from roofline.report.result_report import REPORT_FOLDER, default_report_dir
    from roofline.result.folders import check_output_folder

    with bad_input():
        check_output_folder(default_report_dir(result_file), REPORT_FOLDER)


def _report_beside(result, result_file: Path) -> None:
    """``sweep --report``: the report folder next to the result (``<name>-report/``), written whole like
    ``gpubench report``'s; a signal while it is written leaves the saved result and says how to write it."""
    from roofline.report.result_report import REPORT_FOLDER, default_report_dir, write_report

    folder = default_report_dir(result_file)
    kept = f"{result_file} is saved; its report was not written (gpubench report {result_file} writes it)"
    with bad_input(), writing_folder(folder, REPORT_FOLDER, kept) as staging:
        write_report(result, staging)
    click.echo(f"report: {folder / 'report.html'}")


def _points_saved(result_file: Path) -> str:
    """What a sweep stopped by a full disk kept: the points its result and journal hold (``ResultWriter``
    names the result in the error), and how to continue once space is freed."""
    from roofline.result.io import load_result

    try:
        points = len(load_result(result_file).points)
    except ResultError:
        return f"nothing was saved in {result_file}; free space and run the sweep again"
    return f"{points} point(s) are saved in {result_file}; free space and run gpubench sweep --resume {result_file}"


def _sweep_all(ctx, config) -> None:
    from microbench.sweep.multi import run_all
    from roofline.compare.comparison import collect, compare_results, fleet

    kept = (f"each device's sweep saved what it measured in {config.output or 'results'} "
            "(gpubench sweep --resume FILE continues one)")
    with bad_input(), writing_to(config.output, kept_on_signal=kept):
        folder, written, failures = run_all(config, lambda m: click.echo(m, err=True))
    for line in failures:
        click.echo(f"gpubench: failed: {line}", err=True)
    if written:
        from microbench.cli.render import print_compare

        loaded, skipped = collect(written)
        print_compare(compare_results(loaded), fleet(loaded))
        click.echo(f"{len(written)} result(s) in {folder}: " + ", ".join(p.name for p in written))
    if failures:
        ctx.exit(1)


@main.command()
@declare(CEILINGS_FLAGS)
@click.pass_context
def ceilings(ctx, **options) -> None:
    """Measure copy and read bandwidth and the best matmul FLOP/s per dtype (burst and sustained)."""
    config = _config(ctx, options, ops=(), save=False)
    from microbench.cli.render import print_ceilings
    from microbench.sweep.loop import ceilings_job

    with writing_to(config.output):
        result = _measure(ctx, ceilings_job, config, "the ceilings were abandoned")
    print_ceilings(result.ceilings, result.device)
    if config.output is not None:
        click.echo(f"saved {config.output}")


@main.command()
@click.argument("result_file", type=click.Path(path_type=Path))
@declare(FIT_FLAGS)
def fit(result_file, as_json, output_format) -> None:
    """Fit a roofline per series: bandwidth, peak, ridge, critical batch B* with its 95% CI, knees, cliffs."""
    from microbench.cli.render import print_fit
    from roofline.analysis.series import analyse
    from roofline.report.tables import series_csv
    from roofline.result.io import load_result

    if as_json and output_format not in (None, "json"):
        raise click.UsageError(f"--json and --format {output_format} ask for two formats: give one")
    with bad_input():
        analysis = analyse(load_result(result_file))
    if output_format == "csv":
        click.echo(series_csv(analysis), nl=False)
        return
    _show(analysis, as_json or output_format == "json", print_fit)


@main.command()
@click.argument("result_file", type=click.Path(path_type=Path))
@declare(REPORT_FLAGS)
def report(result_file, output) -> None:
    """Write report.html (self-contained), report.md with PNGs, and analysis.json for a result."""
    from roofline.report.result_report import REPORT_FOLDER, default_report_dir, write_report
    from roofline.result.io import load_result

    folder = output or default_report_dir(Path(result_file))
    with bad_input(), writing_folder(folder, REPORT_FOLDER) as staging:
        write_report(load_result(result_file), staging)
    click.echo(f"report: {folder / 'report.html'} (and report.md, analysis.json, PNGs)")


@main.command(name="import")
@click.argument("csv_file", type=click.Path(path_type=Path), required=False)
@declare(IMPORT_FLAGS)
def import_(csv_file, output, device_name, sku, device_kind, force, reference, gpu, engine, dtypes, shapes) -> None:
    """Import samples measured elsewhere: CSV with columns op,dtype,batch,n,k,time_s (one row per sample), or
    with --reference a reference database's GEMMs on a SKU."""
    from microbench.cli import reference as ref

    if reference is not None:
        ref.refuse_csv_options(csv_file, device_name, sku, device_kind)
        ref.import_reference(reference, gpu, engine, dtypes, shapes, output, force)
        return
    ref.refuse_reference_options(gpu, engine, dtypes, shapes)
    if csv_file is None or device_name is None:
        raise BadInput("give CSV_FILE and --device-name (or --reference aiconfigurator --gpu SKU)")
    _import_csv(csv_file, output, device_name, sku, device_kind or "cuda", force)


def _import_csv(csv_file, output, device_name, sku, device_kind, force) -> None:
    from roofline.result.importer import import_csv
    from roofline.result.io import check_output, save_result

    with bad_input(), writing_to(output):
        check_output(output, overwrite=force, resumable=False)
        if output.exists() and csv_file.exists() and os.path.samefile(output, csv_file):
            raise BadInput(f"-o {output} is the CSV being imported; give another file for the result")
        result = import_csv(csv_file, device_name, sku, device_kind, argv=tuple(sys.argv))
        save_result(result, output)
    ok = sum(p.ok for p in result.points)
    click.echo(f"imported {ok} point(s) ({len(result.points) - ok} without valid samples) "
               f"for {device_name} ({result.device['sku'] or 'no SKU'}) into {output}")
    for warning in result.settings["import_warnings"]:
        click.echo(f"warning: {warning}", err=True)


@main.command()
@declare(DECODE_FLAGS)
@click.pass_context
def decode(ctx, **options) -> None:
    """A whole model's decode step: tokens/s against batch, MBU/MFU, the crossover, and the KV-cache cap."""
    from microbench.decode.config import DecodeConfig

    with bad_input():
        config = DecodeConfig.from_options(options, given(ctx))
    run_decode_command(config)


def run_decode_command(config) -> None:
    from roofline.decode.document import DECODE_FOLDER

    output = config.output
    with writing_to(folder=output, kind=DECODE_FOLDER) as staging:
        document = _decode_into(config, staging)
    if output is not None:
        click.echo(f"saved {output / 'decode.json'} and {output / 'decode.png'}", err=config.as_json)
    # After the numbers are shown and saved: a model that cannot run is still exit 2.
    refuse_what_cannot_run(document, config.tp, config.context, config.mem_fraction)


def _decode_into(config, staging: Path | None) -> dict:
    """Measure (or compute) the step, print it, and write decode.json and decode.png into ``staging``."""
    from microbench.cli.render import print_decode, terminal_observer
    from microbench.decode.job import run_decode

    with bad_input():
        document = run_decode(config, progress=terminal_observer)
    _show(document, config.as_json, print_decode)
    if staging is not None:
        from roofline.decode.plot import decode_figure

        write_outputs(staging, {"decode.json": json.dumps(document, indent=1, allow_nan=False) + "\n",
                                 "decode.png": decode_figure(document)})
    return document


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@declare(COMPARE_FLAGS)
@click.pass_context
def compare(ctx, **options) -> None:
    """Compare results (files or folders): SKUs side by side, speed against a baseline, fleet outliers."""
    from roofline.compare.config import CompareConfig

    with bad_input():
        config = CompareConfig.from_options(options, given(ctx))
    run_compare(config)


def run_compare(config) -> None:
    from roofline.compare.view import COMPARE_FOLDER

    with writing_to(folder=config.output, kind=COMPARE_FOLDER) as staging:
        units = _compare_into(config, staging)
    if config.fail_on_outlier and any(unit["outlier"] for unit in units["units"]):
        raise SystemExit(1)


def _compare_into(config, staging: Path | None) -> dict:
    """Compare, print, and write the comparison into ``staging``; return the fleet's units."""
    from roofline.compare.comparison import collect, compare_results, fleet
    from roofline.compare.view import markdown, overlay_figures

    with bad_input():
        loaded, skipped = collect(list(config.inputs))
        if not loaded:
            raise ResultError("no usable result among the inputs: " + "; ".join(skipped))
        measured = loaded
        if config.reference is not None:
            from roofline.compare.against_reference import reference_items, verdicts

            references, lacking = reference_items(loaded, config.reference, config.engine)
            loaded = references + loaded  # the first reference is the baseline unless --baseline names another
        comparison = compare_results(loaded, config.baseline, list(config.specs))
        if config.reference is not None:  # what the database lacks, said once, with its engine and version
            names = {item.file for item in references}
            comparison["not_comparable"] = [line for line in comparison["not_comparable"]
                                            if not any(line.endswith(f"not measured in {n}") for n in names)]
            comparison["not_comparable"] += lacking
            comparison["reference_verdicts"] = verdicts(comparison, loaded)
    units = fleet(measured, config.mad_k)
    for note in skipped:
        click.echo(note, err=True)
    document = {"comparison": comparison, "fleet": units, "skipped": skipped}
    if config.fmt == "json":
        click.echo(json.dumps(document, indent=1, allow_nan=False, default=str))
    elif config.fmt == "md":
        click.echo(markdown(comparison, units))
    else:
        from microbench.cli.render import print_compare

        print_compare(comparison, units)
    if staging is not None:
        files = {"compare.md": markdown(comparison, units),
                 "compare.json": json.dumps(document, indent=1, allow_nan=False, default=str) + "\n"}
        files.update((f"{name}.png", figure) for name, figure in overlay_figures(comparison).items())
        write_outputs(staging, files)
    return units


@main.command()
def devices() -> None:
    """List the GPUs (with matched SKU, clocks, power, ECC, MIG) or, without one, the CPU."""
    from microbench.cli.render import print_devices

    print_devices()

# The serving commands live in their own modules: simulate and the analytic profile (cli.serving), the measured
# profile and validate (cli.engine), whose profile hands --analytic to the analytic one, and plan (cli.fleet).
main.add_command(serving.simulate)
main.add_command(fleet.plan)
main.add_command(search.search)
engine.register(main)
main.add_command(calibrate.calibrate)

if __name__ == "__main__":  # pragma: no cover
    main()
