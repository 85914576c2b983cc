#!/usr/bin/env python3
"""Benchmark of the timer itself, printed and written to -o (never asserted in tests).

(a) GEMV bandwidth over the copy and read bandwidths measured in the same run;
(b) this timer's median over a reference timer's median on the same op and inputs:
    torch.utils.benchmark on the CPU, triton.testing.do_bench on a GPU (when triton is installed);
(c) wall time of ``gpubench sweep --quick`` (a subprocess, the real command).

    python scripts/bench_timer.py [--device cpu|cuda] [--shape NxK] [--dtype fp32] [-o bench.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from microbench.points.config import SweepConfig  # noqa: E402
from microbench.points.plan import PointSpec, parse_shape  # noqa: E402
from microbench.sweep.ceilings import measure_stream, reference_bandwidth, stream_source  # noqa: E402
from microbench.timing import ops  # noqa: E402
from microbench.timing.measure import measure_point  # noqa: E402
from microbench.timing.observer import SweepObserver  # noqa: E402
from microbench.timing.session import open_session  # noqa: E402


def session_for(device: str, l2_policy: str, budget_s: float):
    config = SweepConfig(device=device, ops=(), budget_s=budget_s, l2_policy=l2_policy, save=False)
    return open_session(config, SweepObserver())


def reference_median(session, spec: PointSpec) -> tuple[str, float | None, str]:
    """The reference timer's median on the same op (one copy of the inputs)."""
    torch = session.torch
    workload = ops.build_workload(torch, spec, session.choice.torch_name, 1, session.seed, ops.WeightCache())
    if session.choice.kind == "cpu":
        from torch.utils import benchmark

        timer = benchmark.Timer(stmt="launch(0)", globals={"launch": workload.launch},
                                num_threads=torch.get_num_threads())
        return "torch.utils.benchmark blocked_autorange", timer.blocked_autorange(min_run_time=2.0).median, ""
    try:
        from triton.testing import do_bench
    except ImportError:
        return "triton.testing.do_bench", None, "triton is not installed"
    # do_bench flushes the L2 between calls and times each call with events (eager launches).
    milliseconds = do_bench(lambda: workload.launch(0), warmup=100, rep=1000, return_mode="median")
    return "triton.testing.do_bench (median)", milliseconds * 1e-3, ""


def quick_sweep_wall_s(device: str) -> float:
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "microbench.cli", "sweep", "--device", device, "--quick",
                        "-o", str(Path(folder) / "q.json")], cwd=ROOT, check=True, capture_output=True)
        return time.perf_counter() - start


def formatted(key: str, value) -> str:
    """A value with its unit and significant digits: ``110 µs``, ``4.289 TB/s``, ``0.9036``."""
    from roofline.core.units import seconds, si

    if not isinstance(value, float):
        return str(value)
    if key.endswith("_bytes_per_s"):
        return si(value, "B/s", 4)
    if key.endswith("_s"):
        return seconds(value)
    return f"{value:.4g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", default=None, help="GEMV weight NxK [CPU 4096x8192, GPU 8192x28672]")
    parser.add_argument("--dtype", default=None, help="[CPU fp32, GPU bf16]")
    parser.add_argument("--budget", type=float, default=2.0)
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args()

    session = session_for(args.device, "rotate", args.budget)
    gpu = session.choice.kind == "cuda"
    n, k = parse_shape(args.shape or ("8192x28672" if gpu else "4096x8192"))
    spec = PointSpec("gemv", args.dtype or ("bf16" if gpu else "fp32"), 1, n, k)
    src = stream_source(session)  # one stream buffer for both, as the ceilings do
    copy, read = measure_stream(session, "copy", src), measure_stream(session, "read", src)
    # The one reference every percentage of measured bandwidth uses (the copy is timed eagerly on a GPU).
    reference = reference_bandwidth({"torch copy": copy, "torch read": read})
    cold = measure_point(session, spec)
    session.weights.clear()
    if not cold.ok:
        print(f"GEMV failed: {cold.status}: {cold.reason}", file=sys.stderr)
        return 1
    gemv_bw = cold.bytes / cold.stats.median_s
    reference_name, reference_s, why = reference_median(session, spec)
    # The reference reuses one copy of the weights; time ours the same way too, so like meets like.
    same_inputs = measure_point(session_for(args.device, "warm", args.budget), spec)
    report = {
        "device": session.device.get("name"),
        "sku": session.device.get("sku"),
        "op": spec.label,
        "gemv_bytes_per_s": gemv_bw,
        "copy_bytes_per_s": copy["bytes_per_s"],
        "read_bytes_per_s": read["bytes_per_s"],
        "copy_timer": copy["timer"],
        "gemv_over_copy": gemv_bw / copy["bytes_per_s"],
        "gemv_over_read": gemv_bw / read["bytes_per_s"],
        "reference_bandwidth_bytes_per_s": reference["bytes_per_s"],
        "reference_bandwidth_name": reference["name"],
        "gemv_over_reference_bandwidth": gemv_bw / reference["bytes_per_s"],
        "ours_median_s_rotated": cold.stats.median_s,
        "ours_median_s_one_copy": same_inputs.stats.median_s,
        "ours_eager_median_s_rotated": cold.eager_stats.median_s if cold.eager_stats else None,
        "reference_timer": reference_name,
        "reference_median_s": reference_s,
        "reference_missing_because": why or None,
        "ours_over_reference": same_inputs.stats.median_s / reference_s if reference_s else None,
        "quick_sweep_wall_s": quick_sweep_wall_s(args.device),
    }
    if gpu and reference_s:
        report["ours_rotated_over_reference"] = cold.stats.median_s / reference_s
    if gpu:
        # Telemetry overhead: the same GEMV with the NVML sampler running at its default interval.
        sampled = session_for(args.device, "rotate", args.budget)
        sampled.start_telemetry(True, 0.05)
        try:
            with_sampler = measure_point(sampled, spec)
        finally:
            sampled.stop_telemetry()
        report["telemetry_source"] = sampled.telemetry.get("source")
        report["median_s_with_telemetry"] = with_sampler.stats.median_s
        report["telemetry_overhead_rel"] = with_sampler.stats.median_s / cold.stats.median_s - 1
        counters = with_sampler.telemetry or {}
        report["timer_over_dram_counter"] = counters.get("timer_over_counter")
    if report["gemv_over_reference_bandwidth"] > 1:
        print(f"warning: the GEMV moved {report['gemv_over_reference_bandwidth']:.1%} of the reference bandwidth "
              f"({reference['name']}): above the measured ceiling", file=sys.stderr)
    for key, value in report.items():
        print(f"{key:36s} {formatted(key, value)}")
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
