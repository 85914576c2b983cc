"""How long one analytic step profile takes to build, with the reference extra's efficiencies and without.

    PYTHONPATH=. python scripts/bench_analytic_profile.py [--model llama-3-70b] [--gpu h200-sxm] [--repeats 5]

Prints, per basis (``--efficiency flat``: the spec sheet's achievable ceilings; ``--efficiency auto``: per-matrix
efficiencies from aiconfigurator-core's GEMM, attention and kernel tables where the ``[reference]`` extra is
installed), the first profile's time in a fresh process and the median of the next ``--repeats`` in that process
(which find the tables read).  For ``auto`` the fresh process runs twice against an empty cache folder of its own
(``roofline.reference.rows_cache``): cold (it imports pyarrow and reads the tables, then keeps their rows) and warm
(as every later command finds them).  The figures the docs and issue notes quote come from this script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def build(model: str, gpu: str, efficiency: str) -> float:
    from roofline.serving.profiles.analytic import analytic_profile
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_model

    start = time.perf_counter()
    analytic_profile(load_model(model), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192, max_context=8192,
                     gpu=load_gpu_spec(gpu), efficiency=efficiency)
    return time.perf_counter() - start


def child(model: str, gpu: str, efficiency: str, repeats: int) -> None:
    """In a fresh process: the first profile and the next ``repeats``, as JSON on stdout."""
    first = build(model, gpu, efficiency)
    rest = [build(model, gpu, efficiency) for _ in range(repeats)]
    print(json.dumps({"first": first, "rest": rest}))


def measured(args: argparse.Namespace, efficiency: str, cache: str) -> dict:
    env = {**os.environ, "GPUBENCH_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, __file__, "--child", efficiency, "--model", args.model, "--gpu", args.gpu,
                           "--repeats", str(args.repeats)], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--gpu", default="h200-sxm")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.gpu, args.child, args.repeats)
        return
    from roofline.reference.database import installed

    print(f"cores {os.cpu_count()}, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if not installed():
        print("the [reference] extra is not installed: --efficiency auto falls back to flat, timed as flat")
    runs = [("flat", "")] + ([("auto", "cold cache"), ("auto", "warm cache")] if installed() else [])
    with tempfile.TemporaryDirectory() as cache:
        for efficiency, how in runs:
            times = measured(args, efficiency, cache if how else "")
            rest = times["rest"]
            print(f"--efficiency {efficiency:4s} {args.model} on {args.gpu}{f' ({how})' if how else ''}: first "
                  f"{times['first']:.3f} s, then median {statistics.median(rest):.3f} s (max {max(rest):.3f} s) "
                  f"over {args.repeats}")


if __name__ == "__main__":
    main()
