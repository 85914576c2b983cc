#!/usr/bin/env python3
"""Turn the peer's decode-GEMM curves (tests/data/vidur-llama2-70b-fp16.json, from microsoft/vidur's
profiles) into gpubench's import CSV, one GPU at a time:

    python scripts/vidur_to_csv.py h100 > h100.csv
    gpubench import h100.csv -o results/reference-vidur-h100-fp16.json --device-name "NVIDIA H100 80GB HBM3" \\
        --sku h100-sxm
"""

import csv
import json
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "tests" / "data" / "vidur-llama2-70b-fp16.json"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    gpu = sys.argv[1]
    document = json.loads(SOURCE.read_text())
    series = [s for s in document["series"] if s["gpu"] == gpu]
    if not series:
        print(f"no series for {gpu!r}; have {sorted({s['gpu'] for s in document['series']})}", file=sys.stderr)
        return 2
    writer = csv.writer(sys.stdout)
    writer.writerow(["op", "dtype", "batch", "n", "k", "time_s"])
    for s in series:
        for batch, micros in s["points_us"]:
            writer.writerow(["gemm", s["dtype"], batch, s["n"], s["k"], f"{micros * 1e-6:.9g}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
