"""Trim a recorded H200 run (the OUTDIR of ``scripts/gpu_check.sh``) into small replay fixtures under tests/data/h200/.

Each point keeps 41 of its samples, chosen at evenly spaced ranks (so the median, quartiles and extremes
of the recorded samples are kept exactly) and in their recorded order; warm-up samples are dropped and
eager samples thinned the same way.  The NVML timeline is kept whole (it is what attribution replays),
with floats rounded to 6 significant digits.  Run: python scripts/trim_h200_fixture.py RUN_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _thin(samples: list[float], keep: int) -> list[float]:
    if len(samples) <= keep:
        return samples
    ranked = sorted(range(len(samples)), key=lambda i: samples[i])
    chosen = {ranked[round(j * (len(samples) - 1) / (keep - 1))] for j in range(keep)}
    return [samples[i] for i in sorted(chosen)]


def _round(value):
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list):
        return [_round(v) for v in value]
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    return value


def trim(document: dict) -> dict:
    for point in document.get("points") or []:
        point["samples_s"] = _thin(point.get("samples_s") or [], 41)
        point["warmup_samples_s"] = []
        point["eager_samples_s"] = _thin(point.get("eager_samples_s") or [], 17)
        point.pop("stats", None), point.pop("eager_stats", None)
    measured = (document.get("ceilings") or {}).get("measured") or {}
    for entry in [measured.get("copy"), measured.get("read")]:
        if isinstance(entry, dict) and entry.get("samples_s"):
            entry["samples_s"] = _thin(entry["samples_s"], 41)
    timeline = (document.get("telemetry") or {}).get("timeline")
    if timeline:
        document["telemetry"]["timeline"] = _round(timeline)
    return document


def main(source: str) -> None:
    out = Path(__file__).resolve().parents[1] / "tests" / "data" / "h200"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("sweep.json", "ceilings.json"):
        document = trim(json.loads((Path(source) / name).read_text()))
        (out / f"first-run-{name}").write_text(json.dumps(document, separators=(",", ":")) + "\n")
    for name in ("bench.json", "summary.txt", "decode.json"):
        (out / f"first-run-{name}").write_text((Path(source) / name).read_text())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/trim_h200_fixture.py RUN_DIR")
    main(sys.argv[1])
