"""``gpubench sweep --device all``: one process per GPU (in parallel, or ``--serial``), one result each,
then a combined summary (the fleet comparison).  A machine without GPUs runs one CPU sweep the same way.

Each child gets the parent's config as its record (``SweepConfig.to_record``, passed as ``--record JSON``)
with its own device and output: what the children measure is the plan the parent validated, not argv
rebuilt from the options.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
from pathlib import Path

from microbench.device.discovery import cuda_status
from microbench.points.config import CHILD_FIELDS, SweepConfig
from roofline.result.io import check_output


def child_commands(config: SweepConfig, folder: Path) -> list[tuple[str, list[str], Path]]:
    count, _ = cuda_status()
    devices = [f"cuda:{i}" for i in range(count)] or ["cpu"]
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    record = json.dumps(config.to_record(CHILD_FIELDS), separators=(",", ":"))
    commands = []
    for device in devices:
        output = folder / f"{device.replace(':', '')}-{stamp}.json"
        argv = [sys.executable, "-m", "microbench.cli", "sweep", "--device", device, "--record", record,
                "-o", str(output)]
        commands.append((device, argv, output))
    return commands


def _stop_children(running, signum: int | None) -> None:
    """Pass a SIGTERM sent to this process on to each child still measuring (Ctrl-C reaches the whole process
    group already: a second signal would abandon a child's point in flight), and wait for each to save."""
    for _, process, _, _ in running:
        if signum == signal.SIGTERM and process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for _, process, _, log in running:
        process.wait()
        log.close()


def run_all(config: SweepConfig, notice) -> tuple[Path, list[Path], list[str]]:
    """Run the sweeps into ``config.output`` (a folder; ``results`` by default); return the folder, the
    results written and one line per failed device."""
    folder = Path(config.output) if config.output is not None else Path("results")
    check_output(folder, folder=True)
    folder.mkdir(parents=True, exist_ok=True)
    commands = child_commands(config, folder)
    if commands[0][0] == "cpu":
        notice("No CUDA GPU: --device all measures the CPU, in one process.")
    else:
        notice(f"{len(commands)} GPU(s), one process each, {'one at a time' if config.serial else 'in parallel'}")
    failures, written = [], []
    running = []
    for device, argv, output in commands:
        log = open(folder / f"{output.stem}.log", "w")  # noqa: SIM115 - closed below, after the process ends
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        running.append((device, process, output, log))
        if config.serial:
            process.wait()
    try:
        codes = [process.wait() for _, process, _, _ in running]
    except BaseException as stop:  # a signal the CLI turns into an exception: the children save, then we end
        _stop_children(running, getattr(stop, "signum", None))
        raise
    for (device, _, output, log), code in zip(running, codes, strict=True):
        log.close()
        if code == 0 and output.exists():
            written.append(output)
        else:
            failures.append(f"{device}: exit {code}, see {folder / (output.stem + '.log')}")
    return folder, written, failures
