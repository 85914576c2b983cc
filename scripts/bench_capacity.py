"""How long and how large the capacity search of ``gpubench simulate --slo`` runs, each case in a fresh interpreter
(so each peak memory is that command's alone).

    PYTHONPATH=. python scripts/bench_capacity.py                  # both cases, 2,000 requests
    PYTHONPATH=. python scripts/bench_capacity.py 100000 unmeetable

Llama-3-8B on the H200's achievable ceilings (the analytic default), ``continuous``, prompts of 512 tokens,
outputs ``exp:128:512``, burst arrivals:

- unmeetable: ``--slo ttft_p90=0.01``, under the 10.03 ms one 512-token prompt's prefill takes alone, so no rate
  meets it.  The search used to replay the whole workload at rates divided by 4 down to 100 / 10^9 requests/s per
  request: every request decoding alone, millions of steps each logged, minutes and gigabytes without a line of
  output.  Now one lone request's simulation answers it.
- searched: ``--slo ttft_p90=0.5,tpot_p99=0.04``, which the search brackets and bisects (a line per rate tried).

Times are wall-clock on whatever machine runs this (printed with the load average: a shared machine is slower).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

SLOS = {"unmeetable": "ttft_p90=0.01", "searched": "ttft_p90=0.5,tpot_p99=0.04"}


def one(requests: str, case: str) -> None:
    """One ``simulate --slo`` in this interpreter: its wall time, its peak memory and what it found."""
    from microbench.cli.app import main

    with tempfile.TemporaryDirectory() as folder:
        args = ["simulate", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b", "--requests", requests,
                "--policy", "continuous", "--slo", SLOS[case], "--no-report", "--json", "-o", f"{folder}/sim"]
        start = time.perf_counter()
        try:
            main(args, standalone_mode=False)
        finally:
            elapsed = time.perf_counter() - start
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes
    print(f"{case}: {int(requests):,} requests, --slo {SLOS[case]}: {elapsed:.1f} s, peak memory {peak_mb:.0f} MB",
          file=sys.stderr, flush=True)


def main() -> None:
    if sys.argv[1:2] == ["one"]:
        one(*sys.argv[2:4])
        return
    requests = sys.argv[1] if len(sys.argv) > 1 else "2000"
    cases = sys.argv[2:] or list(SLOS)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for case in cases:
        # The command's JSON goes to stdout (dropped); its progress lines and the figures above go to stderr.
        subprocess.run([sys.executable, __file__, "one", requests, case], check=True, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
