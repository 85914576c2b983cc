"""How long one analytic step profile takes to build, with the reference extra's efficiencies and without.

    PYTHONPATH=. python scripts/bench_analytic_profile.py [--model llama-3-70b] [--gpu h200-sxm] [--repeats 5]

Prints, per basis (``--efficiency flat``: the spec sheet's achievable ceilings; ``--efficiency auto``: per-matrix
efficiencies from aiconfigurator-core's GEMM tables where the ``[reference]`` extra is installed), the first
profile's time in this process (which reads the tables) and the median of the next ``--repeats`` (which find them
read).  The figures the README and issue notes quote come from this script.
"""

from __future__ import annotations

import argparse
import statistics
import time

from roofline.reference.database import installed
from roofline.serving.profiles.analytic import analytic_profile
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import load_model


def build(model: str, gpu: str, efficiency: str) -> float:
    start = time.perf_counter()
    analytic_profile(load_model(model), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192, max_context=8192,
                     gpu=load_gpu_spec(gpu), efficiency=efficiency)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--gpu", default="h200-sxm")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bases = ["flat"] + (["auto"] if installed() else [])
    if not installed():
        print("the [reference] extra is not installed: --efficiency auto falls back to flat, timed as flat")
    for efficiency in bases:
        first = build(args.model, args.gpu, efficiency)
        rest = [build(args.model, args.gpu, efficiency) for _ in range(args.repeats)]
        print(f"--efficiency {efficiency:4s} {args.model} on {args.gpu}: first {first:.3f} s, then median "
              f"{statistics.median(rest):.3f} s (max {max(rest):.3f} s) over {args.repeats}")


if __name__ == "__main__":
    main()
