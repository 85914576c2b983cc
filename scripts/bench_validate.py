"""How far apart runs of the CPU validate checks land: the CI tests' own command (``tests/test_validate_engine.py``
for the tiny Llama, ``tests/test_validate_moe.py`` for the tiny Qwen3-MoE), run again and again, each in a fresh
interpreter, with each run's error on the static and continuous totals and their ratio, and the spread of each.

    PYTHONPATH=. python scripts/bench_validate.py                     # both models, 5 runs each, 15 repeats
    PYTHONPATH=. python scripts/bench_validate.py --model moe --runs 10 --repeats 5

The tests gate each figure at 15%, so what this prints is how much room they leave on this machine: the figures
move with the machine's load (printed before each run), and the spread narrows with ``--repeats`` (rounds of the
engine runs and the profile's kernels, shuffled; ``microbench/serving/validate_run.py``), clearly for the MoE check,
less so for the Llama's.  Each run also prints each path's kernel share, which says how steady the profile was.

Another commit's validate, with these same checks: from a checkout of it, ``PYTHONPATH=. python
/path/to/this/scripts/bench_validate.py`` (the command runs the code of the current folder).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CONFIGS = {"llama": DATA / "tiny-llama-config.json", "moe": DATA / "tiny-qwen3-moe-config.json"}
sys.path.insert(0, str(ROOT / "tests"))

from validate_check import REPEATS, check_args  # noqa: E402  (tests/ holds the checks' command)

FIGURES = ("static", "continuous", "ratio")


def one_run(config: Path, repeats: int) -> dict[str, float]:
    """One ``gpubench validate`` of the tests' form in a fresh interpreter: each figure's relative error, and each
    path's kernel share (the profile's kernel time over the engine's measured step time)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "validate"
        command = [sys.executable, "-m", "microbench.cli.app", *check_args(config, out, repeats)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"validate failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        document = json.loads((out / "validate.json").read_text())
    errors = {path: document["comparison"][path]["total_s"]["rel_err"] for path in ("static", "continuous")}
    shares = {f"{path} kernels": document["runs"][path]["kernel_share"] for path in ("static", "continuous")}
    return {**errors, "ratio": document["ratio"]["rel_err"], **shares}


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return (f"{100 * min(values):+.1f} … {100 * max(values):+.1f}%, mean {100 * statistics.fmean(values):+.1f}%, "
            f"sd {100 * sd:.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--model", choices=[*CONFIGS, "both"], default="both")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    options = parser.parse_args()
    for name in CONFIGS if options.model == "both" else [options.model]:
        print(f"{name}: {options.runs} runs of validate --repeats {options.repeats}", flush=True)
        results = []
        for run in range(options.runs):
            load = os.getloadavg()[0]
            start = time.perf_counter()
            errors = one_run(CONFIGS[name], options.repeats)
            results.append(errors)
            print(f"  run {run + 1}: " + "  ".join(f"{key} {100 * errors[key]:+.1f}%" for key in FIGURES)
                  + f"  (kernel share: static {100 * errors['static kernels']:.0f}%, continuous "
                  f"{100 * errors['continuous kernels']:.0f}%; {time.perf_counter() - start:.0f} s, load average "
                  f"{load:.1f} at its start)", flush=True)
        for key in FIGURES:
            print(f"  {key:<10} {spread([r[key] for r in results])}")
        for path in ("static", "continuous"):
            shares = [100 * r[f"{path} kernels"] for r in results]
            print(f"  {path} kernel share {min(shares):.0f}-{max(shares):.0f}%")
        worst = max(abs(r[key]) for r in results for key in FIGURES)
        print(f"  largest error {100 * worst:.1f}% (the tests' gate: 15%)")


if __name__ == "__main__":
    main()
