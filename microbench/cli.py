"""The ``gpubench`` command.  Thin: parse, call a library function, print.

Commands that only read results never import torch; measuring commands import it when they run.
Exit codes: 0 ok, 1 a requested gate failed, 2 bad usage or bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from microbench.cli_edges import (
    BadInput,
    Number,
    check_output_or_exit,
    parse_bytes,
    refuse_what_cannot_run,
    write_outputs,
)
from roofline.errors import BadInputError
from roofline.profiles import ProfileError
from roofline.results import ResultError


def _bad_input_errors():
    """What the library raises for the user's input; anything else (a ValueError too) is a bug."""
    from microbench.devices import DeviceError

    return (BadInputError, DeviceError, ProfileError)


def _split(values: tuple[str, ...]) -> list[str]:
    """Options given several times or as comma lists: ``--dtype bf16,fp16 --dtype fp32``."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpubench-roofline", prog_name="gpubench")
def main() -> None:
    """Measure where LLM decode (GEMV -> batched GEMM) stops being memory-bound on this machine."""


PLAN_OPTIONS = ("device", "ops", "backends", "dtypes", "shapes", "batches", "budget", "target_ci", "seed", "quick",
                "timer",
                "l2_policy", "no_ceilings", "telemetry_interval", "no_telemetry", "max_memory")


@main.command()
@click.option("--device", default="auto", show_default=True,
              help="auto | cpu | cuda | cuda:N | all (one process per GPU, one result each in the -o folder)")
@click.option("--op", "ops", multiple=True, help="gemv, gemm, bmm (repeatable or comma list) [all]")
@click.option("--backend", "backends", multiple=True,
              help="torch, cupy (our kernels + cuBLAS via CuPy), or both: torch,cupy [torch]")
@click.option("--dtype", "dtypes", multiple=True, help="fp32, tf32, fp16, bf16, fp8 [GPU: bf16; CPU: fp32,bf16]")
@click.option("--shape", "shapes", multiple=True, help="weight NxK, e.g. 8192x28672 (repeatable)")
@click.option("--batch", "batches", default=None, help="list and ranges: 1,2,24 or 1:4096:x2")
@click.option("--budget", type=Number(low=0), default=None, help="seconds of sampling per point [GPU 0.5, CPU 0.5]")
@click.option("--target-ci", type=Number(low=0, high=1, below_high=True), default=0.01, show_default=True,
              help="stop when the 95% CI of the median is within this fraction")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="result file [results/<sku or cpu>-<UTC time>.json]")
@click.option("--quick", is_flag=True, help="a small plan: under 30 s on a 2-core CPU")
@click.option("--timer", type=click.Choice(["graph", "eager"]), default="graph", show_default=True,
              help="GPU timer: CUDA graph of rotated launches, or one launch per event pair")
@click.option("--l2", "l2_policy", type=click.Choice(["rotate", "warm"]), default="rotate", show_default=True,
              help="rotate weight copies so every launch reads DRAM, or reuse one copy (cache-warm)")
@click.option("--no-ceilings", is_flag=True, help="skip measuring copy/read bandwidth and matmul peak")
@click.option("--report", "with_report", is_flag=True, help="write the report folder beside the result at the end")
@click.option("--telemetry-interval", type=Number(low=0), default=0.05, show_default=True,
              help="seconds between NVML readings")
@click.option("--no-telemetry", is_flag=True, help="do not sample NVML while measuring")
@click.option("--max-memory", default=None, help="cap on what the sweep allocates: 8G, 512Mi, bytes")
@click.option("--require-idle", is_flag=True, help="refuse to start (exit 2) when the device is busy")
@click.option("--resume", type=click.Path(path_type=Path), default=None,
              help="continue the plan recorded in this result file, skipping its points")
@click.option("--force", is_flag=True,
              help="replace an existing -o result; with --resume: resume even if the device or settings differ")
@click.option("--serial", is_flag=True, help="with --device all: one GPU at a time instead of in parallel")
@click.pass_context
def sweep(ctx, device, ops, backends, dtypes, shapes, batches, budget, target_ci, seed, output, quick, timer, l2_policy,
          no_ceilings, with_report, telemetry_interval, no_telemetry, max_memory, require_idle, resume,
          force, serial) -> None:
    """Time GEMV, GEMM and batched GEMV across batch sizes and save a result document.

    --device all runs one process per GPU and writes one result each into the -o folder."""
    if device.strip().lower() == "all":
        _sweep_all(ctx, output, serial)
        return
    from microbench import plan
    from microbench.interrupt import Abandon, stop_on_signals
    from microbench.progress import print_sweep_summary, terminal_observer
    from microbench.resume import prepare_resume
    from microbench.sweep import Interrupted, SweepConfig, prepare_sweep, run_sweep
    from roofline.results import check_output

    prepared = None
    try:
        if resume is not None:
            given = [name for name in PLAN_OPTIONS + ("output",)
                     if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
            if given:
                flags = {param.name: max(param.opts, key=len) for param in ctx.command.params}
                raise plan.PlanError(f"--resume takes the plan from {resume}; do not also give "
                                     + ", ".join(flags[name] for name in given))
        elif force and output is None:
            raise plan.PlanError("--force only goes with --resume or with -o FILE (to replace it)")
        elif output is not None:
            check_output(output, overwrite=force)
        config = SweepConfig(
            device=device,
            ops=tuple(_split(ops)) or ("gemv", "gemm", "bmm"),
            backends=tuple(plan.check_choices(_split(backends), plan.BACKENDS, "backend")) or ("torch",),
            dtypes=tuple(_split(dtypes)) or None,
            shapes=tuple(plan.parse_shape(s) for s in _split(shapes)) or None,
            batches=tuple(plan.parse_batches(batches)) if batches is not None else None,
            budget_s=budget, target_rel_ci=target_ci, seed=seed, quick=quick, timer=timer,
            l2_policy=l2_policy, output=output, with_ceilings=not no_ceilings, argv=tuple(sys.argv),
            telemetry=not no_telemetry, telemetry_interval_s=telemetry_interval,
            max_memory_bytes=parse_bytes(max_memory), require_idle=require_idle,
        )
        plan.check_gemv_batches(config.ops, config.batches)
        with terminal_observer() as observer:
            if resume is not None:
                prepared = prepare_resume(resume, force, observer, argv=tuple(sys.argv))
                observer.on_notice(f"resuming {resume}: {len(prepared.points)} point(s) left")
            else:
                prepared = prepare_sweep(config, observer)
            ceilings = None
            if prepared.config.with_ceilings:
                from microbench.ceilings import measure_ceilings

                dtypes_measured = sorted({p.dtype for p in prepared.points} or set(prepared.config.dtypes or ()))
                quick_ceilings = prepared.config.quick

                def ceilings(session):
                    return measure_ceilings(session, dtypes_measured, quick=quick_ceilings,
                                            backends=prepared.config.backends)

            with stop_on_signals(prepared.session.stop, observer.on_notice):
                result = run_sweep(prepared, observer, ceilings)
    except _bad_input_errors() as exc:
        raise BadInput(str(exc)) from None
    except (Interrupted, Abandon) as exc:
        where = prepared.output if prepared else None
        click.echo(f"gpubench: interrupted; everything measured is saved in {where}", err=True)
        if where is not None:
            click.echo(f"resume with: gpubench sweep --resume {where}", err=True)
        ctx.exit(128 + exc.signum)
    print_sweep_summary(result, prepared.output)
    if with_report:
        from roofline.report import default_report_dir, write_report

        folder = default_report_dir(prepared.output)
        write_report(result, folder)
        click.echo(f"report: {folder / 'report.html'}")


def _forwarded_options(ctx) -> list[str]:
    """The options given on the command line, as arguments for each per-GPU child sweep."""
    args = []
    for param in ctx.command.params:
        name = param.name
        if name in ("device", "output", "serial", "resume", "force") or \
                ctx.get_parameter_source(name) != click.core.ParameterSource.COMMANDLINE:
            continue
        value, flag = ctx.params[name], param.opts[-1] if param.opts[-1].startswith("--") else param.opts[0]
        if getattr(param, "is_flag", False):
            args += [flag] if value else []
        elif isinstance(value, tuple):
            for item in value:
                args += [flag, str(item)]
        elif value is not None:
            args += [flag, str(value)]
    return args


def _sweep_all(ctx, output, serial) -> None:
    from microbench.multi import run_all
    from roofline.compare import collect, compare_results, fleet

    folder = Path(output) if output is not None else Path("results")
    if folder.suffix == ".json":
        raise BadInput("--device all writes one result per GPU: give -o a folder, not a .json file")
    check_output_or_exit(folder, folder=True)
    written, failures = run_all(_forwarded_options(ctx), folder, serial, lambda m: click.echo(m, err=True))
    for line in failures:
        click.echo(f"gpubench: failed: {line}", err=True)
    if written:
        from microbench.progress import print_compare

        loaded, skipped = collect(written)
        print_compare(compare_results(loaded), fleet(loaded))
        click.echo(f"{len(written)} result(s) in {folder}: " + ", ".join(p.name for p in written))
    if failures:
        ctx.exit(1)


@main.command()
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda | cuda:N")
@click.option("--dtype", "dtypes", multiple=True, help="dtypes for the matmul peak [GPU: all it runs; CPU: fp32,bf16]")
@click.option("--backend", "backends", multiple=True, help="torch, cupy or torch,cupy [torch]")
@click.option("--quick", is_flag=True, help="fewer matmul shapes")
@click.option("--budget", type=Number(low=0), default=None, help="seconds of sampling per measurement")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="also save as a result file")
@click.pass_context
def ceilings(ctx, device, dtypes, backends, quick, budget, output) -> None:
    """Measure copy and read bandwidth and the best matmul FLOP/s per dtype (burst and sustained)."""
    from microbench.ceilings import measure_ceilings
    from microbench.interrupt import Abandon, stop_on_signals
    from microbench.progress import print_ceilings, terminal_observer
    from microbench.sweep import Interrupted, SweepConfig, prepare_sweep, run_sweep
    from roofline.results import check_output

    try:
        if output is not None:
            check_output(output)
        with terminal_observer() as observer:
            from microbench import plan

            chosen = tuple(plan.check_choices(_split(backends), plan.BACKENDS, "backend")) or ("torch",)
            config = SweepConfig(device=device, ops=(), backends=chosen, dtypes=tuple(_split(dtypes)) or None,
                                 budget_s=budget, quick=quick, output=output, save=False, argv=tuple(sys.argv))
            prepared = prepare_sweep(config, observer)
            wanted = _split(dtypes) or (["fp32", "tf32", "fp16", "bf16", "fp8"]
                                        if prepared.session.choice.kind == "cuda" else ["fp32", "bf16"])
            with stop_on_signals(prepared.session.stop, observer.on_notice):
                result = run_sweep(prepared, observer,
                                   lambda s: measure_ceilings(s, wanted, quick=quick, backends=chosen))
    except _bad_input_errors() as exc:
        raise BadInput(str(exc)) from None
    except (Interrupted, Abandon) as exc:
        click.echo("gpubench: interrupted; the ceilings were abandoned", err=True)
        ctx.exit(128 + exc.signum)
    print_ceilings(result.ceilings, result.device)
    if output is not None:
        click.echo(f"saved {output}")


@main.command()
@click.argument("result_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the analysis as JSON")
def fit(result_file, as_json) -> None:
    """Fit a roofline per series: bandwidth, peak, ridge, critical batch B* with its 95% CI, knees, cliffs."""
    from microbench.progress import print_fit
    from roofline.analysis import analyse

    try:
        from roofline.results import load_result

        analysis = analyse(load_result(result_file))
    except _bad_input_errors() as exc:
        raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(analysis, indent=1, allow_nan=False))
    else:
        print_fit(analysis)


@main.command()
@click.argument("result_file", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="report folder [beside the result: <name>-report/]")
def report(result_file, output) -> None:
    """Write report.html (self-contained), report.md with PNGs, and analysis.json for a result."""
    from roofline.report import default_report_dir, write_report
    from roofline.results import load_result

    try:
        result = load_result(result_file)
    except ResultError as exc:
        raise BadInput(str(exc)) from None
    folder = output or default_report_dir(Path(result_file))
    try:
        check_output_or_exit(folder, folder=True)
        write_report(result, folder)
    except OSError as exc:
        raise BadInput(f"{folder}: cannot write the report ({exc.strerror or exc})") from None
    click.echo(f"report: {folder / 'report.html'} (and report.md, analysis.json, PNGs)")


@main.command(name="import")
@click.argument("csv_file", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="result file to write")
@click.option("--device-name", required=True, help="the device the data was measured on")
@click.option("--sku", default=None, help="SKU id from profiles/gpus (matched by name if omitted)")
@click.option("--device-kind", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True)
def import_(csv_file, output, device_name, sku, device_kind) -> None:
    """Import samples measured elsewhere: CSV with columns op,dtype,batch,n,k,time_s (one row per sample)."""
    from roofline.importer import import_csv
    from roofline.results import check_output, save_result

    try:
        check_output(output)
        result = import_csv(csv_file, device_name, sku, device_kind, argv=tuple(sys.argv))
    except _bad_input_errors() as exc:
        raise BadInput(str(exc)) from None
    save_result(result, output)
    ok = sum(p.ok for p in result.points)
    click.echo(f"imported {ok} point(s) ({len(result.points) - ok} without valid samples) "
               f"for {device_name} ({result.device['sku'] or 'no SKU'}) into {output}")
    for warning in result.settings["import_warnings"]:
        click.echo(f"warning: {warning}", err=True)


@main.command()
@click.option("--model", default=None, help="model id from profiles/models (llama-3-70b, mixtral-8x7b, ...)")
@click.option("--hf-config", type=click.Path(path_type=Path), default=None, help="a Hugging Face config.json on disk")
@click.option("--tp", type=int, default=1, show_default=True, help="tensor-parallel GPUs")
@click.option("--context", type=int, default=4096, show_default=True, help="tokens in each sequence's KV cache")
@click.option("--dtype", default="bf16", show_default=True, help="weights and activations")
@click.option("--kv-dtype", default=None, help="KV cache dtype [--dtype]")
@click.option("--batch", "batches", default="1:1024:x2", show_default=True, help="batches: list and ranges")
@click.option("--mem-fraction", type=Number(low=0, high=1), default=0.9, show_default=True,
              help="share of device memory for weights + KV cache")
@click.option("--analytic", is_flag=True, help="from the spec sheet only (needs --gpu), no measuring")
@click.option("--gpu", "sku", default=None, help="SKU for the analytic side [the matched SKU]")
@click.option("--from", "from_result", type=click.Path(path_type=Path), default=None,
              help="take launch times from this sweep result instead of measuring")
@click.option("--device", default="auto", show_default=True)
@click.option("--budget", type=Number(low=0), default=None, help="seconds of sampling per launch measured")
@click.option("--json", "as_json", is_flag=True, help="print the whole document as JSON")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="folder for decode.json and decode.png")
def decode(model, hf_config, tp, context, dtype, kv_dtype, batches, mem_fraction, analytic, sku, from_result,
           device, budget, as_json, output) -> None:
    """A whole model's decode step: tokens/s against batch, MBU/MFU, the crossover, and the KV-cache cap."""
    from microbench.decode_job import run_decode

    try:
        if output is not None:
            check_output_or_exit(output, folder=True)
        document = run_decode(model=model, hf_config=hf_config, tp=tp, context=context, dtype=dtype,
                              kv_dtype=kv_dtype, batches=batches, mem_fraction=mem_fraction, analytic=analytic,
                              sku=sku, from_result=from_result, device=device, budget=budget)
    except _bad_input_errors() as exc:
        raise BadInput(str(exc)) from None
    from microbench.progress import print_decode

    if as_json:
        click.echo(json.dumps(document, indent=1, allow_nan=False))
    else:
        print_decode(document)
    if output is not None:
        from roofline.decode_plot import decode_figure

        write_outputs(output, {"decode.json": json.dumps(document, indent=1, allow_nan=False) + "\n",
                                "decode.png": decode_figure(document)})
        click.echo(f"saved {output / 'decode.json'} and {output / 'decode.png'}", err=as_json)
    refuse_what_cannot_run(document, tp, context, mem_fraction)


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--baseline", default=None, help="the result others are compared to [the first]")
@click.option("--spec", "specs", default=None, help="add spec-only rows for these SKUs: h200-sxm,b200")
@click.option("--format", "fmt", type=click.Choice(["table", "md", "json"]), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="folder for compare.md, compare.json and overlaid figures")
@click.option("--mad-k", type=Number(low=0), default=3.0, show_default=True,
              help="fleet: flag units more than k robust sd (1.4826 MAD) from their SKU's median")
@click.option("--fail-on-outlier", is_flag=True, help="exit 1 when any unit is flagged")
def compare(inputs, baseline, specs, fmt, output, mad_k, fail_on_outlier) -> None:
    """Compare results (files or folders): SKUs side by side, speed against a baseline, fleet outliers."""
    from roofline.compare import collect, compare_results, fleet
    from roofline.compare_view import markdown, overlay_figures

    try:
        if output is not None:
            check_output_or_exit(output, folder=True)
        loaded, skipped = collect(list(inputs))
        if not loaded:
            raise ResultError("no usable result among the inputs: " + "; ".join(skipped))
        sku_list = [s.strip() for s in (specs or "").split(",") if s.strip()]
        comparison = compare_results(loaded, baseline, sku_list)
    except _bad_input_errors() as exc:
        raise BadInput(str(exc)) from None
    units = fleet(loaded, mad_k)
    for note in skipped:
        click.echo(note, err=True)
    document = {"comparison": comparison, "fleet": units, "skipped": skipped}
    if fmt == "json":
        click.echo(json.dumps(document, indent=1, allow_nan=False, default=str))
    elif fmt == "md":
        click.echo(markdown(comparison, units))
    else:
        from microbench.progress import print_compare

        print_compare(comparison, units)
    if output is not None:
        files = {"compare.md": markdown(comparison, units),
                 "compare.json": json.dumps(document, indent=1, allow_nan=False, default=str) + "\n"}
        files.update((f"{name}.png", figure) for name, figure in overlay_figures(comparison).items())
        write_outputs(output, files)
    if fail_on_outlier and any(unit["outlier"] for unit in units["units"]):
        raise SystemExit(1)


@main.command()
def devices() -> None:
    """List the GPUs (with matched SKU, clocks, power, ECC, MIG) or, without one, the CPU."""
    from microbench.progress import print_devices

    print_devices()

__import__("microbench.serving_cli").serving_cli.register(main)  # profile, simulate, validate: their own module

if __name__ == "__main__":  # pragma: no cover
    main()
