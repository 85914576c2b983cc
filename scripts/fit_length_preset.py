"""Fit a length preset (``roofline/specs/length_presets.py``) to a dataset's prompt and output lengths.

    PYTHONPATH=. python scripts/fit_length_preset.py TRACE.csv [--draws 200000] [--seed 0]

TRACE.csv has columns ``prompt_tokens,output_tokens`` or ``num_prefill_tokens,num_decode_tokens`` (Vidur's and
Sarathi-Serve's processed traces, e.g. Sarathi-Serve's ``data/processed_traces/
sharegpt_8k_filtered_stats_llama2_tokenizer.csv``, which ``sharegpt`` was fitted on). Prints the file's sha256,
the quantile tables to paste into a ``LengthPreset``, and how well the table, and for comparison the
maximum-likelihood log-normal, reproduce the data: each one's Kolmogorov-Smirnov distance (the largest gap
between the data's cumulative distribution and that of seeded draws from the fit) and its quantiles beside the
data's. A table the module already holds under the same numbers is reported as matching.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

from roofline.serving.workload import load_lengths
from roofline.specs.length_presets import PERCENTILES, PRESETS, LengthPreset


def quantile_table(lengths: np.ndarray) -> tuple[int, ...]:
    return tuple(int(round(v)) for v in np.percentile(lengths, PERCENTILES))


def ks_distance(data: np.ndarray, draws: np.ndarray) -> float:
    """The largest gap between the two samples' empirical cumulative distributions (both rounded to tokens)."""
    grid = np.union1d(data, draws)
    cdf_data = np.searchsorted(np.sort(data), grid, side="right") / len(data)
    cdf_draws = np.searchsorted(np.sort(draws), grid, side="right") / len(draws)
    return float(np.max(np.abs(cdf_data - cdf_draws)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--draws", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    pairs = np.asarray(load_lengths(args.trace), dtype=float)
    print(f"{args.trace}: {len(pairs):,} requests, sha256 {hashlib.sha256(args.trace.read_bytes()).hexdigest()}")
    tables = {role: quantile_table(pairs[:, i]) for i, role in enumerate(("prompt", "output"))}
    fitted = LengthPreset("fitted", str(args.trace), tables["prompt"], tables["output"])
    rng = np.random.default_rng(args.seed)
    shown = (10.0, 25.0, 50.0, 75.0, 90.0, 99.0)
    for i, role in enumerate(("prompt", "output")):
        data = pairs[:, i]
        logs = np.log(data)
        lognormal = np.maximum(1, np.round(rng.lognormal(logs.mean(), logs.std(), args.draws)))
        table = np.maximum(1, np.round(fitted.sample(role, args.draws, rng)))
        print(f"\n{role}: mean {data.mean():,.1f} tokens")
        print(f"  {'percentile':>12}" + "".join(f"{p:>9g}" for p in shown))
        for name, values in (("data", data), ("table", table), ("log-normal", lognormal)):
            print(f"  {name:>12}" + "".join(f"{v:>9,.0f}" for v in np.percentile(values, shown)))
        print(f"  KS distance: table {ks_distance(data, table):.4f}, log-normal (median "
              f"{np.exp(logs.mean()):,.0f}, sigma {logs.std():.3f}) {ks_distance(data, lognormal):.4f}")
    print(f"\ncorrelation of log prompt and log output lengths: "
          f"{np.corrcoef(np.log(pairs[:, 0]), np.log(pairs[:, 1]))[0, 1]:.3f}")
    print("\nquantiles at PERCENTILES:")
    for role, table in tables.items():
        print(f"    {role}={table},")
    same = [name for name, preset in PRESETS.items() if (preset.prompt, preset.output) == tuple(tables.values())]
    print(f"\nmatches the preset {same[0]!r}" if same else "\nmatches no preset in length_presets.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
