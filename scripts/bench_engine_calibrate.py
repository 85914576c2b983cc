"""How well ``gpubench calibrate`` predicts a real engine on this machine, with its calibration and prediction
benchmarks run in rounds (tests/test_calibrate_engine.py's design) against each round taken alone.

    PYTHONPATH=. python scripts/bench_engine_calibrate.py DIR [--rounds 4] [--profile P.json]
    PYTHONPATH=. python scripts/bench_engine_calibrate.py DIR --reuse          # evaluate DIR's files again
    PYTHONPATH=. python scripts/bench_engine_calibrate.py --probe-cpu 20       # this machine's core speed alone

Serves the tiny random-weight model with ``transformers serve`` and runs GuideLLM against it (tests/engine_bench.py:
the ``calibrate`` extra), ROUNDS times the calibration then the prediction benchmark, then measures the model's
step profile here (unless ``--profile``) and prints, for TPOT p50 and output throughput, the prediction's error:
fitted on every round's calibration and compared with every round's prediction together (what the test checks),
and each round's calibration predicting that round's prediction alone.  Wall-clock over HTTP on a shared machine:
the spread between runs is the point.  ``--probe-cpu S`` only times a plain Python loop of 20,000 iterations on
the first core for S seconds and prints its median time per half second: on the 2-core machine the test was
built on it read 0.47 or 0.80 ms by turns, for seconds at a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import engine_bench  # noqa: E402  (tests/ holds the engine set-up the test and this script share)

from roofline.calibrate.bench import read_bench  # noqa: E402
from roofline.calibrate.fit import compare_pooled  # noqa: E402
from roofline.calibrate.replay import calibrate, replay  # noqa: E402
from roofline.serving.profile_doc import load_profile  # noqa: E402


def measure_profile(folder: Path) -> Path:
    result = engine_bench.measure_profile(folder)
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return folder / "profile.json"


def probe_cpu(seconds: float) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    buckets: dict[int, list[float]] = {}
    start = time.perf_counter()
    while (now := time.perf_counter()) < start + seconds:
        for _ in range(20_000):
            pass
        buckets.setdefault(int((now - start) / 0.5), []).append(1e3 * (time.perf_counter() - now))
    print("ms per loop, median of each half second:",
          " ".join(f"{statistics.median(times):.2f}" for _, times in sorted(buckets.items())))


def round_index(path: Path) -> int:
    """``guidellm-prediction-7.json[.gz]`` -> 7."""
    return int(path.name.split(".")[0].rsplit("-", 1)[1])


def errors(comparison: dict) -> str:
    return (f"TPOT p50 {100 * comparison['tpot_p50_s']['rel_err']:+.1f}% (measured "
            f"{1e3 * comparison['tpot_p50_s']['measured']:.2f} ms), throughput "
            f"{100 * comparison['tokens_per_s']['rel_err']:+.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?")
    parser.add_argument("--rounds", type=int, default=engine_bench.ROUNDS)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--reuse", action="store_true", help="evaluate the folder's benchmark files again")
    parser.add_argument("--probe-cpu", type=float, metavar="S", help="only time a Python loop for S seconds")
    args = parser.parse_args()
    if args.probe_cpu:
        probe_cpu(args.probe_cpu)
        return 0
    if args.folder is None:
        parser.error("give the folder for the benchmark files")
    folder = args.folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        files = {name: sorted(folder.glob(f"guidellm-{name}-*.json*"), key=round_index)
                 for name in ("calibration", "prediction")}
    else:
        files = engine_bench.benchmark_rounds(folder, args.rounds)
    profile = load_profile(args.profile or (folder / "profile.json" if args.reuse else measure_profile(folder)))
    policy = engine_bench.POLICY
    calibrations = [[run for run in read_bench(path)] for path in files["calibration"]]
    predictions = [read_bench(path)[0] for path in files["prediction"]]
    fit = calibrate(profile, [run for runs in calibrations for run in runs], policy)
    pairs = [(replay(profile, bench, policy, fit.overhead).run.requests, bench.requests) for bench in predictions]
    print(f"{len(pairs)} rounds together: {errors(compare_pooled(pairs))}")
    for index, (runs, bench) in enumerate(zip(calibrations, predictions, strict=True)):
        alone = calibrate(profile, runs, policy)
        pair = (replay(profile, bench, policy, alone.overhead).run.requests, bench.requests)
        print(f"  round {index} alone: {errors(compare_pooled([pair]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
