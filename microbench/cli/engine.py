"""The engine side of the serving commands: ``gpubench profile`` measured on this device (``--analytic`` is
handed to the simulator side's analytic profile) and ``gpubench validate``.  Thin: build the command's config,
call, print.  ``microbench/cli/app.py`` registers both (``engine.register(main, analytic_profile=serving.profile)``):
the one ``profile`` command measures, and hands ``--analytic`` to the analytic command of ``serving``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from microbench.cli.edges import BadInput, bad_input, declare, given, interrupted_by
from microbench.cli.guard import writing_folder, writing_to
from microbench.serving.profile_config import FLAGS as PROFILE_FLAGS
from microbench.serving.validate_options import FLAGS as VALIDATE_FLAGS


def register(main: click.Group) -> None:
    """``profile`` (measured, or the analytic profile for ``--analytic``) and ``validate``."""
    main.add_command(profile)
    main.add_command(validate)


@click.command(help="Everything one engine step of a model costs, as kernel-time tables: measured on this device "
                    "with the sweep's timers (or --analytic from a spec sheet, or --reference from a reference "
                    "database's kernel times); for simulate.")
@declare(PROFILE_FLAGS)
@click.pass_context
def profile(ctx, **options) -> None:
    from microbench.serving.profile_config import ProfileConfig

    with bad_input():
        config = ProfileConfig.from_options(options, given(ctx))
    if config.reference is not None:
        from microbench.cli.reference import write_reference_profile

        write_reference_profile(config)
    elif config.analytic:
        from microbench.cli.serving import write_analytic_profile

        write_analytic_profile(config)
    else:
        measure_profile_command(config)


def measure_profile_command(config) -> None:
    """Measure a checked config's profile on the device (resumable), and save it to ``-o``."""
    from microbench.cli.render import terminal_observer
    from microbench.serving.profile_run import partial_path, prepare_profile, run_profile
    from microbench.timing.interrupt import Abandon, stop_on_signals
    from microbench.timing.observer import Interrupted

    output = config.output
    try:
        with bad_input(), writing_to(output, kept_on_full_disk=lambda failed: _profile_saved(output)):
            _set_threads(config.threads)
            with terminal_observer() as observer:
                run = prepare_profile(config.plan(), output, observer, argv=tuple(sys.argv), resume=config.resume)
                with stop_on_signals(run.session.stop, observer.on_notice):
                    profile = run_profile(run, observer.on_start, item_reporter(observer))
    except (Interrupted, Abandon) as exc:
        click.echo(f"gpubench: {interrupted_by(exc.signum)}; what was measured is saved in "
                   f"{partial_path(Path(output))}; resume with: gpubench profile --resume -o {output} (the plan is "
                   "read from the partial file)", err=True)  # one line (click: never folded at the terminal's width)
        raise SystemExit(128 + exc.signum) from None
    click.echo(f"step profile of {profile.model['name']} ({profile.basis}, {profile.dtype}) saved to {output}")
    power = profile.power or {}
    if run.plan.energy and run.session.choice.kind != "cpu" and power.get("watts_per_gpu") is None:
        click.echo(f"note: --energy: the profile has no power table: {power.get('why_none')}", err=True)


def _profile_saved(output) -> str:
    from microbench.serving.profile_run import partial_path

    partial = partial_path(Path(output))
    if not partial.exists():
        return f"nothing was measured into {partial}; free space and run the profile again"
    return f"what was measured is saved in {partial}; free space and run gpubench profile --resume -o {output}"


def item_reporter(observer):
    """Progress through the observer's bar: one tick per kernel measured, named by what it is ("linear o_proj
    T=12", "decode attention B=4 ctx=512") with its median (no interval here: the default digits)."""
    from roofline.core.units import seconds

    def on_item(item, measured):
        observer.on_item(f"{item.label}  {seconds(measured['time_s'])}")

    return on_item


def _set_threads(threads: int | None) -> None:
    """The config checked ``threads`` (torch fails past int32 with a ValueError, a traceback)."""
    if threads is None:
        return
    import torch

    torch.set_num_threads(threads)


@click.command()
@declare(VALIDATE_FLAGS)
@click.pass_context
def validate(ctx, **options) -> None:
    """Run a real engine (transformers, random weights) on a workload and check the simulator against it."""
    from microbench.serving.validate_options import ValidateConfig

    with bad_input():
        config = ValidateConfig.from_options(options, given(ctx))  # before the terminal display starts
    run_validate_command(config)


def run_validate_command(config) -> None:
    """Validate a checked config (``writing_folder`` checks the folder, ``run_validate`` the inputs and the device,
    both before measuring), print the comparison, write validate.json and each path's calibrated profile into the
    folder, whole, and apply ``--fail-above``."""
    from microbench.cli.render import stderr, terminal_observer
    from microbench.serving.validate_calibrated import VALIDATE_FOLDER, calibrated_profiles
    from microbench.serving.validate_compare import impossible_share
    from microbench.serving.validate_run import run_validate
    from roofline.result.io import write_output_file
    from roofline.serving.profile_doc import save_profile

    out_dir = config.out_dir
    # Written whole: a signal mid-run removes the staging folder, the profile's partial file with it (the passes'
    # times live in memory until the end: nothing there to resume).
    with bad_input(), writing_folder(out_dir, VALIDATE_FOLDER) as staging:
        with terminal_observer() as observer:
            observer.on_phase = lambda message: stderr.print(message)
            document = run_validate(config, out_dir, observer, item_reporter(observer), argv=tuple(sys.argv),
                                    written_in=staging)
        write_output_file(staging / "validate.json", json.dumps(document, indent=1, allow_nan=False) + "\n")
        # Kernels longer than the steps that ran them: the runs are kept, no overhead is fitted into a profile.
        refused = impossible_share(document)
        calibrated = calibrated_profiles(document, out_dir, written_in=staging) if refused is None else {}
        for path, profile in calibrated.items():
            save_profile(profile, staging / path.name)
    _print_validation(document)
    click.echo(f"saved {out_dir / 'validate.json'}")
    for path in calibrated:
        click.echo(f"saved {path} (simulate with it: the engine's overhead included)")
    if refused is not None:
        raise BadInput(refused)
    if config.fail_above is not None:
        _gate(document, config.fail_above)


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
    from microbench.serving.validate_compare import comparison_lines, kernel_share_line, overhead_line

    engine = document["engine"]
    click.echo(f"engine: {engine['name']} {document['runs']['static']['measured']['settings'].get('transformers')}, "
               f"{engine['model']['name']} {engine['dtype']}, {engine['torch_threads']} torch thread(s); "
               f"{engine['weights']}")
    if engine.get("experts"):
        experts = engine["experts"]
        click.echo(f"experts: transformers {experts['implementation']} ({experts['kernel']}), profiled under "
                   f"{experts['routing']} routing")
    for path, fit in document["calibration"].items():
        click.echo(overhead_line(path, fit["overhead"]))
    mode = document["setup"].get("engine_mode", "eager")
    for path, run in document["runs"].items():
        click.echo(f"{path}: engine {run['measured']['policy']}, simulated as {run['predicted']['policy']['policy']}")
    for path, run in document["runs"].items():
        click.echo(kernel_share_line(path, mode, run.get("kernel_share")))
    for line in comparison_lines(document["comparison"], document["ratio"]):
        click.echo(line)


def _worst_error(document: dict) -> float | None:
    ratio = [] if document["ratio"].get("why_none") else [document["ratio"]["rel_err"]]
    errors = [c["total_s"]["rel_err"] for c in document["comparison"].values()] + ratio
    if any(e is None or not math.isfinite(e) for e in errors):
        return None
    return max(abs(e) for e in errors)
