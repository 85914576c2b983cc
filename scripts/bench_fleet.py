"""How fast and how large a fleet simulates, and what a second replica buys.

    PYTHONPATH=. python scripts/bench_fleet.py              # both parts
    PYTHONPATH=. python scripts/bench_fleet.py scale        # 16 replicas, 100,000 requests
    PYTHONPATH=. python scripts/bench_fleet.py capacity     # capacity of 2 replicas over 1, same SLO

scale: Llama-3-8B on the H200's achievable ceilings (the analytic default) under ``paged``, 16 replicas behind each
router, 100,000 requests (prompts of 512 tokens, outputs exponential with mean 128 capped at 512) at Poisson 800
requests/s (about 80% of the fleet's capacity under the SLO below) and at 400 requests/s (a lighter load: smaller
batches, so more steps). Target: each simulation under 60 s on 2 CPU cores; peak memory printed (the steps are
logged at 176 bytes each, the requests' token times at 8 bytes a token).

capacity: the highest Poisson rate meeting ttft_p90=0.5,tpot_p99=0.04 for 1 and for 2 replicas (round robin) of
the same profile, over the same 8,000 requests (the capacity search of ``simulate --slo``).  Target: 2 replicas
at least 1.8x one.  The same from the command line (kernels only, as the library's profile here is):

    gpubench simulate --analytic --gpu h200-sxm --model llama-3-8b --requests 8000 --policy paged \\
        --slo ttft_p90=0.5,tpot_p99=0.04 --engine none --no-report -o /tmp/one [--replicas 2]

Times are wall-clock on whatever machine runs this (printed with the load average: a shared machine is slower).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

from roofline.fleet.replicas import FleetLayout, simulate_fleet
from roofline.serving.capacity import capacity_under
from roofline.serving.metrics import Slo, summarize
from roofline.serving.policies import DEFAULT_ROUTER, ROUTERS
from roofline.serving.profiles.analytic import analytic_profile
from roofline.serving.workload import make_workload
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import load_model

SLO = "ttft_p90=0.5,tpot_p99=0.04"


def _profile():
    return analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                            max_context=8192, gpu=load_gpu_spec("h200-sxm"))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def scale() -> None:
    """Each rate and router in a fresh interpreter, so each peak memory is that run's alone."""
    for rate in (800, 400):
        for router in ROUTERS:
            subprocess.run([sys.executable, __file__, "one", str(rate), router], check=True)


def one(rate: str, router: str) -> None:
    profile, slo = _profile(), Slo.parse(SLO)
    requests = make_workload(100_000, f"poisson:{rate}", "fixed:512", "exp:128:512", seed=0)
    start = time.perf_counter()
    run = simulate_fleet(profile, requests, "paged", FleetLayout(16, router))
    elapsed, simulated_mb = time.perf_counter() - start, _peak_mb()
    start = time.perf_counter()
    summary = summarize(run, profile, 0.9, slo)
    counts = [len(r.requests) for r in run.replica_runs]
    print(f"16 x 100,000 requests at {rate}/s, {router}: {elapsed:.1f} s to simulate ({len(run.steps):,} steps, peak "
          f"memory {simulated_mb:.0f} MB), {time.perf_counter() - start:.1f} s to summarize "
          f"(peak {_peak_mb():.0f} MB); "
          f"requests per replica {min(counts)}-{max(counts)}; TTFT p90 {summary['ttft']['p90_s'] * 1e3:.1f} ms, "
          f"TPOT p99 {summary['tpot']['p99_s'] * 1e3:.1f} ms, SLO met: {summary['slo']['met']}", flush=True)


def capacity() -> None:
    profile, slo = _profile(), Slo.parse(SLO)
    requests = make_workload(8000, "burst", "fixed:512", "exp:128:512", seed=0)
    found = {}
    for replicas in (1, 2):
        def run_at(workload, replicas=replicas):
            return simulate_fleet(profile, workload, "paged", FleetLayout(replicas, DEFAULT_ROUTER), log_steps=False)

        start = time.perf_counter()
        result = capacity_under(requests, slo, run_at)
        found[replicas] = result.capacity_requests_per_s
        print(f"{replicas} replica(s): capacity {result.capacity_requests_per_s:.1f} requests/s under {SLO} "
              f"({len(result.tried)} rates tried, {time.perf_counter() - start:.1f} s)", flush=True)
    print(f"2 replicas over 1: {found[2] / found[1]:.2f}x")


def main() -> None:
    if sys.argv[1:2] == ["one"]:
        one(*sys.argv[2:4])
        return
    parts = sys.argv[1:] or ["scale", "capacity"]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for part in parts:
        {"scale": scale, "capacity": capacity}[part]()


if __name__ == "__main__":
    main()
