"""What a CPU sweep costs: wall time of `gpubench sweep --device cpu` (every default dtype), of the same sweep in its
plain dtypes only (fp32, bf16), and of `--quick`, each run once, one after another, in this checkout.

    PYTHONPATH=. python scripts/bench_cpu_sweep.py [--runs N] [--sweeps default,plain,quick]

Prints the machine's core count and load average first, one line per run, and, when both ran, the ratio of the
default sweep to the plain-dtype sweep (the weight-only formats' share of its time).  The README's sweep times come
from `--sweeps default,quick`.  The sweeps write into a temporary folder; nothing in results/ is touched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = {
    "default": ("default", []),
    "plain": ("plain dtypes (fp32,bf16)", ["--dtype", "fp32,bf16"]),
    "quick": ("quick", ["--quick"]),
}


def timed_sweep(extra: list[str], output: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "microbench.cli", "sweep", "--device", "cpu", "-o", str(output), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def machine() -> str:
    """The cores this process may run on (of all the machine's) and the load averages over 1, 5 and 15 minutes."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{usable} core(s) usable of {os.cpu_count()}, load average {load}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each sweep (the median is reported)")
    parser.add_argument("--sweeps", default=",".join(RUNS),
                        help=f"which sweeps, comma-separated, of {', '.join(RUNS)} (default: all)")
    args = parser.parse_args()
    chosen = [name.strip() for name in args.sweeps.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in RUNS]
    if unknown or not chosen:
        parser.error(f"--sweeps takes {', '.join(RUNS)}; not {', '.join(unknown) or 'nothing'}")
    print(f"before: {machine()}", flush=True)
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            label, extra = RUNS[name]
            times = [timed_sweep(extra, Path(tmp) / f"sweep-{name}-{i}.json") for i in range(args.runs)]
            medians[name] = statistics.median(times)
            print(f"{label:26s} {medians[name]:6.1f} s  ({', '.join(f'{t:.1f}' for t in times)})", flush=True)
    print(f"after: {machine()}")
    if "default" in medians and "plain" in medians:
        ratio = medians["default"] / medians["plain"]
        print(f"default / plain dtypes: {ratio:.2f}x (the weight-only formats add {100 * (ratio - 1):.0f}%)")


if __name__ == "__main__":
    main()
