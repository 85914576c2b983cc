"""The engine side of the serving commands: ``gpubench profile`` measured on this device (``--analytic`` is
handed to the simulator side's command unchanged) and ``gpubench validate``.  Thin: parse, call, print.

``microbench/cli/app.py`` registers these (``engine.register(main, analytic_profile=serving.profile)``): the one
``profile`` command measures, and hands ``--analytic`` to the analytic command of ``serving``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from roofline.core.errors import BadInputError

MEASURED_ONLY = ("device", "max_batch", "attention", "budget", "seed", "clock", "threads", "resume")


def _bad(exc: Exception):
    from microbench.cli.edges import BadInput

    return BadInput(str(exc))


def _errors():
    from microbench.cli.edges import bad_input_errors

    return bad_input_errors()


def register(main: click.Group, analytic_profile: click.Command) -> None:
    """``profile`` (measured, or the analytic command for ``--analytic``) and ``validate``."""
    command = _profile_command(analytic_profile)
    main.add_command(command, name="profile")
    main.add_command(validate)


def _profile_command(analytic_profile: click.Command) -> click.Command:
    """The analytic command's options, plus what measuring needs."""

    @click.pass_context
    def callback(ctx, **options):
        if options.get("analytic"):
            given = [name for name in MEASURED_ONLY
                     if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
            if given:
                raise _bad(ValueError("--analytic measures nothing: drop " +
                                      ", ".join("--" + g.replace("_", "-") for g in given)))
            for name in MEASURED_ONLY:
                options.pop(name)
            return ctx.invoke(analytic_profile, **options)
        dtype_given = ctx.get_parameter_source("dtype") == click.core.ParameterSource.COMMANDLINE
        return measure_profile_command(options, dtype_given)

    params = list(analytic_profile.params) + [
        click.Option(["--device"], default="auto", show_default=True, help="measured: auto | cpu | cuda | cuda:N"),
        click.Option(["--max-batch"], type=int, default=256, show_default=True, help="measured: largest decode batch"),
        click.Option(["--attention"], type=click.Choice(["sdpa", "bmm"]), default="sdpa", show_default=True,
                     help="measured: torch SDPA (fused where torch has it, GQA-aware) or grouped bmm + softmax"),
        click.Option(["--budget"], type=float, default=None, help="measured: seconds of sampling per kernel"),
        click.Option(["--seed"], type=int, default=0, show_default=True),
        click.Option(["--clock"], type=click.Choice(["wall", "thread-cpu"]), default="wall", show_default=True,
                     help="measured, CPU: wall time, or this thread's CPU time (a shared CPU; needs --threads 1)"),
        click.Option(["--threads"], type=int, default=None, help="measured, CPU: torch threads [torch's default]"),
        click.Option(["--resume"], is_flag=True, help="measured: continue the profile in progress in OUTPUT.partial"),
    ]
    return click.Command("profile", callback=callback, params=params,
                         help="Everything one engine step of a model costs, as kernel-time tables: measured on "
                              "this device with the sweep's timers (or --analytic from a spec sheet); for simulate.")


def measure_profile_command(options: dict, dtype_given: bool) -> None:
    from microbench.cli.render import stderr, terminal_observer
    from microbench.serving.profile_plan import ProfilePlan
    from microbench.serving.profile_run import partial_path, prepare_profile, run_profile
    from microbench.timing.interrupt import Abandon, stop_on_signals
    from microbench.timing.observer import Interrupted

    output = options["output"]
    run = None
    try:
        if options["sku"] or options["from_result"]:
            raise BadInputError("--gpu and --from belong to --analytic; a measured profile times this device")
        if options["resume"] and (options["model"] or options["hf_config"]):
            raise BadInputError("--resume takes the plan from OUTPUT.partial; do not also give --model/--hf-config")
        from microbench.serving.validate_options import check_positive_number, check_seed

        check_seed(options["seed"])
        check_positive_number("--budget", options["budget"], "seconds")  # the plan's own check lets nan through
        _set_threads(options["threads"])
        hf_config = str(options["hf_config"]) if options["hf_config"] else None
        plan = ProfilePlan(model=options["model"], hf_config=hf_config, tp=options["tp"],
                           dtype=options["dtype"] if dtype_given else None,
                           kv_dtype=options["kv_dtype"], max_tokens=options["max_tokens"],
                           max_context=options["max_context"], max_batch=options["max_batch"],
                           attention=options["attention"], device=options["device"], budget_s=options["budget"],
                           seed=options["seed"], clock=options["clock"])
        with terminal_observer() as observer:
            run = prepare_profile(plan, output, observer, argv=tuple(sys.argv), resume=options["resume"])
            with stop_on_signals(run.session.stop, observer.on_notice):
                profile = run_profile(run, observer.on_start, _item_reporter(observer))
    except _errors() as exc:
        raise _bad(exc) from None
    except (Interrupted, Abandon) as exc:
        stderr.print(f"gpubench: interrupted; what was measured is saved in {partial_path(Path(output))}")
        stderr.print(f"resume with: gpubench profile --resume -o {output} (the plan is read from the partial file)")
        raise SystemExit(128 + exc.signum) from None
    click.echo(f"step profile of {profile.model['name']} ({profile.basis}, {profile.dtype}) saved to {output}")


def _item_reporter(observer):
    """Progress through the sweep observer's bar: one tick per kernel measured."""
    from types import SimpleNamespace

    def on_item(item, measured):
        observer.on_point(SimpleNamespace(op=item.kind, dtype=item.name, n=item.a, k=item.b, batch="-", ok=True,
                                          stats=SimpleNamespace(median_s=measured["time_s"])))

    return on_item


def _set_threads(threads: int | None) -> None:
    from microbench.serving.validate_options import check_threads

    if threads is None:
        return
    check_threads(threads)  # torch fails past int32 with a ValueError (a traceback), and more threads than CPUs
    import torch

    torch.set_num_threads(threads)


@click.command()
@click.option("--engine", default="transformers", show_default=True, help="the real engine to run")
@click.option("--profile", "profile_file", type=click.Path(path_type=Path), default=None,
              help="a step profile measured on this device [measure one now, sized to the workload]")
@click.option("--model", default=None, help="without --profile: model id to profile and build")
@click.option("--hf-config", type=click.Path(path_type=Path), default=None, help="without --profile: a config.json")
@click.option("--requests", "n_requests", type=int, default=32, show_default=True)
@click.option("--arrivals", default="burst", show_default=True, help="burst | poisson:RATE")
@click.option("--prompt", default="fixed:16", show_default=True, help="prompt lengths (as simulate)")
@click.option("--output", "output_lengths", default="uniform:4:40", show_default=True, help="output lengths")
@click.option("--seed", type=int, default=0, show_default=True, help="the workload's seed (calibration: seed + 1)")
@click.option("--calibration-requests", type=int, default=16, show_default=True,
              help="requests of the separate calibration workload the engine overhead is fitted on")
@click.option("--static-batch", type=int, default=8, show_default=True, help="static path: generate batch size")
@click.option("--max-batch", type=int, default=8, show_default=True, help="continuous path: sequences per step")
@click.option("--budget-tokens", type=int, default=128, show_default=True, help="continuous path: tokens per step")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="runs of each, interleaved; each step's mean is kept")
@click.option("--device", default="auto", show_default=True)
@click.option("--dtype", default=None, help="without --profile [GPU bf16, CPU fp32]")
@click.option("--threads", type=int, default=None,
              help="torch threads [1 where timed on the thread CPU clock, else torch's default]")
@click.option("--clock", type=click.Choice(["wall", "thread-cpu"]), default=None,
              help="engine timestamps [CPU + burst without --threads N > 1: thread-cpu, the one engine thread's "
                   "CPU time; else wall]")
@click.option("--profile-budget", type=float, default=None, help="seconds of sampling per profiled kernel")
@click.option("--fail-above", type=float, default=None,
              help="exit 1 when a total time or the static/continuous ratio is off by more than this fraction")
@click.option("-o", "--out-dir", type=click.Path(path_type=Path), required=True,
              help="folder for validate.json (and profile.json when measured here)")
def validate(engine, profile_file, model, hf_config, n_requests, arrivals, prompt, output_lengths, seed,
             calibration_requests, static_batch, max_batch, budget_tokens, repeats, device, dtype, threads, clock,
             profile_budget, fail_above, out_dir) -> None:
    """Run a real engine (transformers, random weights) on a workload and check the simulator against it."""
    from microbench.cli.render import stderr, terminal_observer
    from microbench.serving.validate_run import ValidateSetup, run_validate
    from roofline.result.io import write_output_file

    setup = ValidateSetup(engine=engine, profile=profile_file, model=model, hf_config=hf_config, requests=n_requests,
                          arrivals=arrivals, prompt=prompt, output=output_lengths, seed=seed,
                          calibration_requests=calibration_requests, static_batch=static_batch, max_batch=max_batch,
                          budget_tokens=budget_tokens, device=device, dtype=dtype, threads=threads,
                          profile_budget_s=profile_budget, repeats=repeats, clock=clock, fail_above=fail_above)
    try:
        setup.check()  # before the terminal display starts; run_validate checks the rest before measuring
        with terminal_observer() as observer:
            observer.on_phase = lambda message: stderr.print(message)
            document = run_validate(setup, out_dir, observer, _item_reporter(observer), argv=tuple(sys.argv))
        write_output_file(out_dir / "validate.json", json.dumps(document, indent=1, allow_nan=False) + "\n")
    except _errors() as exc:
        raise _bad(exc) from None
    _print_validation(document)
    click.echo(f"saved {out_dir / 'validate.json'}")
    if fail_above is not None:
        _gate(document, fail_above)


def _gate(document: dict, fail_above: float) -> None:
    """Exit 1 when the worst error is past ``fail_above``, or cannot be computed (a measured time of 0)."""
    worst = _worst_error(document)
    if worst is None:
        click.echo("gpubench: a relative error could not be computed (a measured time of 0): --fail-above fails",
                   err=True)
        raise SystemExit(1)
    if worst > fail_above:
        from roofline.core.units import significant

        # Significant digits: --fail-above 0.0001 read "0.0%" with a fixed one decimal.
        click.echo(f"gpubench: prediction off by {significant(100 * worst)}% > --fail-above "
                   f"{significant(100 * fail_above)}% ({fail_above:g})", err=True)
        raise SystemExit(1)


def _print_validation(document: dict) -> None:
    from microbench.serving.validate_compare import comparison_lines, overhead_line

    engine = document["engine"]
    click.echo(f"engine: {engine['name']} {document['runs']['static']['measured']['settings'].get('transformers')}, "
               f"{engine['model']['name']} {engine['dtype']}, {engine['torch_threads']} torch thread(s); "
               f"{engine['weights']}")
    for path, fit in document["calibration"].items():
        click.echo(overhead_line(path, fit["overhead"]))
    for path, run in document["runs"].items():
        click.echo(f"{path}: engine {run['measured']['policy']}, simulated as {run['predicted']['policy']['policy']}")
    for line in comparison_lines(document["comparison"], document["ratio"]):
        click.echo(line)


def _worst_error(document: dict) -> float | None:
    errors = [c["total_s"]["rel_err"] for c in document["comparison"].values()] + [document["ratio"]["rel_err"]]
    if any(e is None or not math.isfinite(e) for e in errors):
        return None
    return max(abs(e) for e in errors)
