"""How long ``gpubench search`` takes over its default space: Llama-3-70B on the H100 SXM and the H200 SXM at 20
requests/s within TTFT p90 1 s and TPOT p99 50 ms (the issue's command), on the workers given (default 2), its
workload simulate's default (1,000 requests, prompts of 512 tokens, outputs exp:128:512).

    PYTHONPATH=. python scripts/bench_search.py [--workers 2] [--model llama-3-70b] [--hf-config F]

Prints the configurations, how many were pruned before simulating, the seconds the simulations took and the
whole search's, and the load average around it (the machine is shared: the figure is as slow as the load made it).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from roofline.result.sections import Provenance
from roofline.search.config import SearchConfig
from roofline.search.run import prepare_search
from roofline.serving.metrics import Slo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--hf-config", type=Path)
    args = parser.parse_args()
    config = SearchConfig(model=None if args.hf_config else args.model, hf_config=args.hf_config,
                          skus=("h100-sxm", "h200-sxm"), rates=(20.0,), slo=Slo.parse("ttft_p90=1,tpot_p99=0.05"),
                          workers=args.workers)
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        searching = prepare_search(config, Provenance({}, {}, ()), Path(folder) / "out")
        outcome = searching.run()
    total = time.perf_counter() - began
    timing = outcome.document["timing"]
    space = outcome.document["space"]
    print(f"{outcome.document['model']['name']} on h100-sxm and h200-sxm, default space: {space['configurations']} "
          f"configurations, {space['configurations'] - searching.total} pruned before simulating, "
          f"{searching.total} simulated on {args.workers} workers ({os.cpu_count()} cores)")
    print(f"simulations {timing['simulate_s']:.0f} s, whole search {total:.0f} s ({total / 60:.1f} min); "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    for answer in outcome.document["answers_per_sku"]:
        print("  " + answer["sentence"])


if __name__ == "__main__":
    main()
