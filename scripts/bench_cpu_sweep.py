"""What a default CPU sweep costs: wall time of `gpubench sweep --device cpu` (every default dtype) against the same
sweep in its plain dtypes only (fp32, bf16), and of `--quick`, each run once, one after another, in this checkout.

    PYTHONPATH=. python scripts/bench_cpu_sweep.py [--runs N]

Prints one line per run and the ratio of the default sweep to the plain-dtype sweep (the weight-only formats'
share of its time).  The sweeps write into a temporary folder; nothing in results/ is touched.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = {
    "default": [],
    "plain dtypes (fp32,bf16)": ["--dtype", "fp32,bf16"],
    "quick": ["--quick"],
}


def timed_sweep(extra: list[str], output: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "microbench.cli", "sweep", "--device", "cpu", "-o", str(output), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each sweep (the median is reported)")
    args = parser.parse_args()
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for number, (name, extra) in enumerate(RUNS.items()):
            times = [timed_sweep(extra, Path(tmp) / f"sweep-{number}-{i}.json") for i in range(args.runs)]
            medians[name] = statistics.median(times)
            print(f"{name:26s} {medians[name]:6.1f} s  ({', '.join(f'{t:.1f}' for t in times)})", flush=True)
    ratio = medians["default"] / medians["plain dtypes (fp32,bf16)"]
    print(f"default / plain dtypes: {ratio:.2f}x (the weight-only formats add {100 * (ratio - 1):.0f}%)")


if __name__ == "__main__":
    main()
