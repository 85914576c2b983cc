"""How long the README's test command's `pytest` (the fast tier) takes in this checkout, on this machine.

    python scripts/bench_suite_time.py [PYTEST ARGS ...]

Runs `python -m pytest -n auto` in the checkout's root (pyproject.toml's addopts make it the fast tier, as the
README's `pytest -n auto` is; give `-n 0` to run it in one process), with this interpreter, and prints its wall
time, pytest's last line (passed, skipped, ...), the cores this process may use and the load averages before and
after.  Extra arguments go to pytest.  The README's
figure for the test command comes from this script; `.ci/run` runs the same command.  Exits with pytest's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    """The cores this process may run on (of all the machine's) and the load averages over 1, 5 and 15 minutes."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{usable} core(s) usable of {os.cpu_count()}, load average {load}"


def main() -> int:
    spread = [] if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in sys.argv[1:]) else ["-n", "auto"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *spread, *sys.argv[1:]]
    print(f"before: {machine()}", flush=True)
    print(f"running: {' '.join(command[1:])} (in {ROOT})", flush=True)
    start = time.perf_counter()
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall_s = time.perf_counter() - start
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    print(f"pytest: {lines[-1] if lines else '(no output)'} (exit {run.returncode})")
    print(f"wall time: {wall_s:.0f} s")
    print(f"after: {machine()}")
    if run.returncode:
        sys.stdout.write(run.stdout[-4000:] + run.stderr[-2000:])
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
