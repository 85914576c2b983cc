"""``gpubench sweep --device all``: one process per GPU (in parallel, or ``--serial``), one result each,
then a combined summary (the fleet comparison).  A machine without GPUs runs one CPU sweep the same way.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

from microbench.devices import cuda_status


def child_commands(option_args: list[str], folder: Path) -> list[tuple[str, list[str], Path]]:
    count, _ = cuda_status()
    devices = [f"cuda:{i}" for i in range(count)] or ["cpu"]
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    commands = []
    for device in devices:
        output = folder / f"{device.replace(':', '')}-{stamp}.json"
        argv = [sys.executable, "-m", "microbench.cli", "sweep", "--device", device, *option_args, "-o", str(output)]
        commands.append((device, argv, output))
    return commands


def run_all(option_args: list[str], folder: Path, serial: bool, notice) -> tuple[list[Path], list[str]]:
    """Run the sweeps; return the results written and one line per failed device."""
    folder.mkdir(parents=True, exist_ok=True)
    commands = child_commands(option_args, folder)
    if commands[0][0] == "cpu":
        notice("No CUDA GPU: --device all measures the CPU, in one process.")
    else:
        notice(f"{len(commands)} GPU(s), one process each, {'one at a time' if serial else 'in parallel'}")
    failures, written = [], []
    running = []
    for device, argv, output in commands:
        log = open(folder / f"{output.stem}.log", "w")  # noqa: SIM115 - closed below, after the process ends
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        running.append((device, process, output, log))
        if serial:
            process.wait()
    for device, process, output, log in running:
        code = process.wait()
        log.close()
        if code == 0 and output.exists():
            written.append(output)
        else:
            failures.append(f"{device}: exit {code}, see {folder / (output.stem + '.log')}")
    return written, failures
