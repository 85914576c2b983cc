"""``gpubench calibrate``: a real serving benchmark's per-request results replayed through the simulator on a
step profile, the engine's overhead fitted on them (``roofline.calibrate``).  Thin: build the config, call, print.
Reads documents only: torch is never imported."""

from __future__ import annotations

import json
import sys

import click

from microbench.cli.edges import bad_input, declare, given
from microbench.cli.guard import writing_folder
from roofline.calibrate.config import FLAGS


@click.command()
@declare(FLAGS)
@click.pass_context
def calibrate(ctx, **options) -> None:
    """Fit the engine overhead of a step profile on a real serving benchmark (vLLM's or GuideLLM's per-request
    results) and predict other benchmarks of the same engine with it."""
    from microbench.device.provenance import host_info, tool_info
    from roofline.calibrate.config import CalibrateConfig
    from roofline.calibrate.document import CALIBRATE_FOLDER, CALIBRATED_PROFILE, run_calibration, summary_lines
    from roofline.result.io import write_output_file
    from roofline.serving.profile_doc import save_profile

    with bad_input():
        config = CalibrateConfig.from_options(options, given(ctx))
    out_dir = config.out_dir
    with bad_input(), writing_folder(out_dir, CALIBRATE_FOLDER) as staging:
        document, profile = run_calibration(config, tool_info(), host_info(), argv=tuple(sys.argv))
        write_output_file(staging / "calibrate.json", json.dumps(document, indent=1, allow_nan=False) + "\n")
        save_profile(profile, staging / CALIBRATED_PROFILE)
    for line in summary_lines(document):
        click.echo(line)
    click.echo(f"saved {out_dir / 'calibrate.json'}")
    click.echo(f"saved {out_dir / CALIBRATED_PROFILE} (simulate with it: the engine's overhead included)")
