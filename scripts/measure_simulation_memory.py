"""How much memory, and how much time, ``gpubench simulate`` takes per request, per logged step and per output
token: the figures ``roofline.serving.workload`` refuses a workload that cannot fit by, and shows progress by.

    PYTHONPATH=. python scripts/measure_simulation_memory.py            # every case, then the fit
    PYTHONPATH=. python scripts/measure_simulation_memory.py --child N ARRIVALS PROMPT OUTPUT

Each case runs in a fresh process the way the command runs (``prepare_simulation``, ``Simulation.run``,
``SimulationOutcome.write`` with the report) on Llama-3-8B's analytic H100 profile (flat ceilings) under one policy
(continuous), then again under two (the second the same schedule).  Its memory is the process's resident set
(Linux ``/proc/self/statm``), sampled every 5 ms from a thread, at its highest, less the resident set just before
the workload is drawn (after the imports and the profile, which every run pays whatever its size).  The cases vary
the requests, the output tokens and the steps apart (a burst of short outputs: few steps; Poisson arrivals slow
enough that each request decodes alone: a step a token), and least-squares fits give one run's bytes = a constant
+ a x requests + b x logged steps + c x output tokens (what it holds while its figures are computed, the most), and
what each further policy's run adds the same way (what a run keeps to the end).  Those are ``RUN_BYTES`` and
``KEPT_BYTES`` in ``roofline/serving/workload.py``; what ``check_fits_in_memory`` estimates for each case is
printed beside what it took.

Times are wall-clock on whatever machine runs this (printed with the load average: a shared machine is slower).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The policies of a case: the second the same as the first (what a further run keeps, on the same schedule).
POLICIES = ("continuous", "continuous:max-batch=256")

# (requests, arrivals, prompt, output): the requests scale; a burst of short outputs takes few steps; slow Poisson
# arrivals serve each request alone, a step per token; long outputs weigh the tokens.
CASES = [
    (20_000, "poisson:200", "fixed:512", "exp:128:512"),
    (40_000, "poisson:200", "fixed:512", "exp:128:512"),
    (80_000, "burst", "fixed:64", "fixed:4"),
    (40_000, "burst", "fixed:512", "fixed:16"),
    (20_000, "poisson:200", "fixed:512", "fixed:512"),
    (2_000, "poisson:1", "fixed:512", "fixed:512"),
    (4_000, "poisson:1", "fixed:128", "fixed:256"),
]


def resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakSampler(threading.Thread):
    """The resident set's highest value while it runs, sampled every 5 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.running = resident_bytes(), True

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, resident_bytes())
            time.sleep(0.005)

    def stop(self) -> int:
        self.running = False
        self.join()
        return max(self.peak, resident_bytes())


def child(requests: int, arrivals: str, prompt: str, output: str, policies: int = 1) -> dict:
    """One simulate command's run, measured (in this process: the parent starts one per case)."""
    import gc

    from microbench.cli.serving import provenance
    from roofline.fleet.simulate_run import prepare_simulation
    from roofline.serving.policies import parse_policy
    from roofline.serving.profiles.analytic import analytic_profile_of
    from roofline.serving.simulate_config import SimulateConfig
    from roofline.serving.workload import estimated_bytes

    config = SimulateConfig(analytic=True, sku="h100-sxm", model="llama-3-8b", requests=requests, arrivals=arrivals,
                            prompt=prompt, output_lengths=output, efficiency="flat",
                            policies=tuple(parse_policy(p) for p in POLICIES[:policies]))
    analytic_profile_of(config, provenance())  # its imports and tables, paid before the baseline
    gc.collect()
    baseline = resident_bytes()
    sampler = PeakSampler()
    sampler.start()
    start = time.perf_counter()
    simulation = prepare_simulation(config, provenance())
    outcome = simulation.run()
    run_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        outcome.write(Path(folder), report=True)
    total_s = time.perf_counter() - start
    peak = sampler.stop()
    tokens = sum(r.output_tokens for r in outcome.runs[0].requests)
    steps = sum(len(run.steps) for run in outcome.runs)
    return {"requests": requests, "arrivals": arrivals, "prompt": prompt, "output": output, "policies": policies,
            "steps": steps, "tokens": tokens, "bytes": peak - baseline, "run_s": run_s, "total_s": total_s,
            "estimated_bytes": estimated_bytes(requests, tokens, steps, runs=policies)}


def fit(rows: list[dict], key: str, constant: bool) -> list[float]:
    """Non-negative least squares of ``key`` on (requests, steps, tokens), with a constant first if ``constant``."""
    import numpy as np

    from roofline.calibrate.fit import nnls

    a = np.array([[*([1.0] if constant else []), r["requests"], r["steps"], r["tokens"]] for r in rows], dtype=float)
    y = np.array([r[key] for r in rows], dtype=float)
    return [float(v) for v in nnls(a, y)]


def measure(n: int, arrivals: str, prompt: str, output: str, policies: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", str(n), arrivals, prompt, output, str(policies)],
                          check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        n, arrivals, prompt, output, policies = sys.argv[2:7]
        print(json.dumps(child(int(n), arrivals, prompt, output, int(policies))))
        return
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    first, second = [], []
    for n, arrivals, prompt, output in CASES:
        one, two = measure(n, arrivals, prompt, output, 1), measure(n, arrivals, prompt, output, 2)
        first.append(one)
        # What the second policy's run adds: what a run keeps to the end (its requests, token times and steps)
        second.append({**two, "steps": two["steps"] - one["steps"], "bytes": two["bytes"] - one["bytes"]})
        print(f"{n:>7,} requests, {arrivals:<12} {prompt:<10} {output:<12} {one['steps']:>9,} steps "
              f"{one['tokens']:>11,} tokens: {one['bytes'] / 1e6:7.1f} MB (estimated "
              f"{one['estimated_bytes'] / 1e6:7.1f}), a second policy {second[-1]['bytes'] / 1e6:+7.1f} MB; "
              f"{one['run_s']:5.1f} s simulated, {one['total_s']:5.1f} s with the files", flush=True)
    constant, per_request, per_step, per_token = fit(first, "bytes", constant=True)
    print(f"one run: {constant / 1e6:,.0f} MB + {per_request:,.0f} bytes a request + {per_step:,.0f} a logged step + "
          f"{per_token:,.1f} an output token")
    per_request, per_step, per_token = fit(second, "bytes", constant=False)
    print(f"each further policy's run: {per_request:,.0f} bytes a request + {per_step:,.0f} a logged step + "
          f"{per_token:,.1f} an output token")
    per_request, per_step, per_token = fit(first, "run_s", constant=False)
    print(f"time simulated: {per_request * 1e6:,.1f} us a request + {per_step * 1e6:,.2f} us a step + "
          f"{per_token * 1e6:,.3f} us an output token")


if __name__ == "__main__":
    main()
