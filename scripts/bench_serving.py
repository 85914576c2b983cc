"""How fast the serving simulator is: 10,000 requests under each policy, the same opening with shared system
prompts under the prefix cache, and one capacity search.

    PYTHONPATH=. python scripts/bench_serving.py

Times are wall-clock on whatever machine runs this (print them with the load average: a shared machine is
slower).  Targets: each policy's simulation under 5 s on 2 CPU cores, the capacity search under 10 s.
"""

from __future__ import annotations

import os
import time

from roofline.serving.capacity import capacity_under
from roofline.serving.metrics import Slo, summarize
from roofline.serving.profiles.analytic import analytic_profile
from roofline.serving.simulate import simulate
from roofline.serving.workload import make_workload
from roofline.specs.gpus import load_gpu_spec
from roofline.specs.models import load_model

POLICIES = ("static:batch=64", "continuous", "paged", "chunked:budget=512")


def main() -> None:
    profile = analytic_profile(load_model("llama-3-8b"), tp=1, dtype="bf16", kv_dtype="bf16", max_tokens=8192,
                               max_context=8192, gpu=load_gpu_spec("h200-sxm"))
    requests = make_workload(10_000, "poisson:50", "fixed:512", "exp:128:512", seed=0)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for policy in POLICIES:
        start = time.perf_counter()
        run = simulate(profile, requests, policy)
        elapsed = time.perf_counter() - start
        print(f"simulate: 10,000 requests, {policy}, {len(run.steps)} steps: {elapsed:.2f} s")
        start = time.perf_counter()
        summarize(run, profile, 0.9)
        print(f"summarize: {time.perf_counter() - start:.2f} s")

    shared = make_workload(10_000, "poisson:50", "fixed:512", "exp:128:512", seed=0, prefix="shared:2000:8")
    for policy in ("paged", "paged:prefix-cache=off"):
        start = time.perf_counter()
        run = simulate(profile, shared, policy)
        elapsed = time.perf_counter() - start
        hit = summarize(run, profile, 0.9)["prefix_hit_rate"]
        print(f"simulate: 10,000 requests opening with 8 system prompts of 2,000 tokens, {policy}, {len(run.steps)} "
              f"steps: {elapsed:.2f} s" + ("" if hit is None else f" (prefix hit rate {hit:.0%})"))

    workload = make_workload(1000, "burst", "fixed:512", "exp:128:512", seed=0)
    slo = Slo.parse("ttft_p90=1,tpot_p99=0.05")

    def run_at(batch):
        return simulate(profile, batch, "paged", log_steps=False)

    start = time.perf_counter()
    result = capacity_under(workload, slo, run_at)
    elapsed = time.perf_counter() - start
    print(f"capacity search: 1,000 requests, paged, {len(result.tried) + 2} simulations: {elapsed:.2f} s "
          f"-> {result.capacity_requests_per_s:.3g} requests/s under {slo.limits_s}")


if __name__ == "__main__":
    main()
