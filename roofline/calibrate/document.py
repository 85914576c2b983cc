"""What ``gpubench calibrate -o DIR`` writes: ``calibrated.json``, the step profile with the engine overhead fitted
on the benchmark as its ``engine_overhead`` (and where it was fitted: ``fitted_from``), for ``gpubench simulate``;
and ``calibrate.json``, the fit and, per benchmark (the one fitted on, and each ``--predict``), the simulated
TTFT, TPOT, ITL, end-to-end latency and throughput against the measured ones (keys: ``docs/serving.md``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from roofline.calibrate.bench import BenchRun, measured_lengths, read_bench
from roofline.calibrate.config import CalibrateConfig, replay_policy
from roofline.calibrate.fit import compare_pooled, compare_runs
from roofline.calibrate.replay import Calibration, Replay, calibrate, replay
from roofline.core.units import seconds
from roofline.result.folders import FolderKind
from roofline.serving.metrics import prefix_figures
from roofline.serving.profile_doc import EngineOverhead, StepProfile, load_profile

CALIBRATION_KIND = "gpubench-calibration"
CALIBRATION_VERSION = 1
CALIBRATED_PROFILE = "calibrated.json"
CALIBRATE_FOLDER = FolderKind("calibrate", "calibrate.json", kind=CALIBRATION_KIND, files=(CALIBRATED_PROFILE,))
# The rows of the printed comparison: what the load generators report, in their order.
SHOWN = ("ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "itl_p50_s", "itl_p90_s", "e2e_p50_s",
         "e2e_p90_s", "tokens_per_s", "requests_per_s")


def bench_record(bench: BenchRun) -> dict[str, Any]:
    return {"path": bench.path, "format": bench.format, "label": bench.label, "arrivals": bench.arrivals,
            "requests": len(bench.requests), "dropped": bench.dropped, "lengths": measured_lengths(bench.requests),
            "prefix": bench.prefix or None, "engine": bench.engine or None, "source": bench.source}


def run_record(bench: BenchRun, policy: tuple[str, str], replayed: Replay) -> dict[str, Any]:
    """One benchmark replayed: what it is, the policy it ran under and whence, the replay's prefix cache, and its
    figures predicted against measured."""
    return {"bench": bench_record(bench), "policy": policy[0], "policy_from": policy[1],
            "replay": prefix_figures(replayed.run),
            "comparison": compare_runs(replayed.run.requests, bench.requests)}


def calibrated_profile(profile: StepProfile, fit: Calibration, benches: list[BenchRun], policies: list[str],
                       config: CalibrateConfig) -> StepProfile:
    """``profile`` with the fitted overhead, which says the engine runs and benchmark it belongs to."""
    source = {"calibration": str(config.out_dir / "calibrate.json"), "bench": [str(p) for p in config.bench],
              "format": benches[0].format, "generator": benches[0].source.get("generator"),
              "runs": [b.label for b in benches], "arrivals": [b.arrivals for b in benches],
              "policy": policies[0] if len(set(policies)) == 1 else policies,
              "requests": sum(len(b.requests) for b in benches)}
    overhead = replace(fit.overhead, fitted_on=f"gpubench calibrate: {fit.overhead.fitted_on}", fitted_from=source)
    return replace(profile, engine_overhead=overhead,
                   basis=f"{profile.basis}; engine overhead calibrated by gpubench calibrate on "
                         f"{', '.join(str(p) for p in config.bench)}")


def run_calibration(config: CalibrateConfig, tool: dict[str, Any], host: dict[str, Any],
                    argv: tuple[str, ...] = ()) -> tuple[dict[str, Any], StepProfile]:
    """Read every input first (the profile, the benchmark, each --predict), fit, predict: the document and the
    calibrated profile."""
    profile = load_profile(config.profile)
    benches = [run for path in config.bench for run in read_bench(path, config.fmt, config.run, config.seed)]
    others = [(run, target.policy) for target in config.predict
              for run in read_bench(target.path, config.fmt, config.run, config.seed)]
    # Each run under the configuration its engine ran: --policy, with the limits the file records put in, or a
    # --predict FILE:POLICY's own.
    policies = [replay_policy(config.policy, bench) for bench in benches]
    predicted = [(other, replay_policy(config.policy, other, given)) for other, given in others]
    fit = calibrate(profile, benches, [p for p, _ in policies], config.mem_fraction)
    predictions, pairs = [], []
    for other, policy in predicted:
        replayed = replay(profile, other, policy[0], fit.overhead, config.mem_fraction)
        pairs.append((replayed.run.requests, other.requests))
        predictions.append(run_record(other, policy, replayed))
    document = {
        "schema_version": CALIBRATION_VERSION, "kind": CALIBRATION_KIND, "tool": tool,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "argv": list(argv),
        "host": host, "setup": config.to_record(),
        "profile": {"path": str(config.profile), "basis": profile.basis, "created_at": profile.created_at,
                    "model": profile.model.get("name"), "device": profile.device.get("name")},
        "calibration": {"overhead": fit.overhead.to_dict(), "rows": fit.rows, "settled": fit.settled,
                        "rounds": list(fit.rounds),
                        "runs": [run_record(bench, policy, replayed)
                                 for bench, policy, replayed in zip(benches, policies, fit.replayed, strict=True)]},
        "predictions": predictions,
        # Several runs of one workload (a benchmark repeated): their requests together, as one longer run.
        **({"predictions_together": {"runs": len(pairs), "requests": sum(len(m) for _, m in pairs),
                                     "comparison": compare_pooled(pairs)}} if len(pairs) > 1 else {}),
    }
    return document, calibrated_profile(profile, fit, benches, [p for p, _ in policies], config)


def overhead_text(overhead: dict[str, Any]) -> str:
    """The fitted terms, each in its own scale: ``3.19 ms/step + 766 µs/sequence + ...``."""
    return " + ".join(f"{seconds(overhead.get(name, 0.0))}/{unit}" for name, unit in EngineOverhead.UNITS.items())


def comparison_lines(title: str, comparison: dict[str, dict[str, Any]]) -> list[str]:
    """One benchmark's table: predicted, measured and the error per metric (latencies in seconds)."""
    lines = [*title.split("\n"), f"  {'metric':<16}{'predicted':>12}{'measured':>12}{'err':>9}"]
    for key in SHOWN:
        entry = comparison.get(key)
        if entry is None:
            continue
        lines.append(f"  {key:<16}{_cell(entry['predicted']):>12}{_cell(entry['measured']):>12}"
                     f"{_pct(entry['rel_err']):>9}")
    return lines


def _title(verb: str, entry: dict[str, Any], note: str = "") -> str:
    """A benchmark's heading: what it ran, its requests and arrivals, then the policy replayed and whence, and
    its shared prefix with the replay's hit rate."""
    bench = entry["bench"]
    lines = [f"{verb} {bench['path']}: {bench['format']} {bench['label']}, {bench['requests']} requests "
             f"({bench['lengths']}), arrivals {bench['arrivals']}{note}",
             f"  policy {entry['policy']} ({entry['policy_from']})"]
    if bench.get("prefix"):
        hit = entry["replay"].get("prefix_hit_rate")
        lines.append(f"  {bench['prefix']}; replayed prefix hit rate "
                     + (f"{100 * hit:.1f}%" if hit is not None else "– (the policy keeps no prefix cache)"))
    return "\n".join(lines)


def summary_lines(document: dict[str, Any]) -> list[str]:
    calibration = document["calibration"]
    lines = [f"engine overhead: {overhead_text(calibration['overhead'])} ({calibration['rows']} measured stretches"
             + ("" if calibration["settled"] else "; the fit did not settle: the mean of its last rounds") + ")"]
    for entry in calibration["runs"]:
        lines += comparison_lines(_title("fitted on", entry, " (time to first token is not fitted)"),
                                  entry["comparison"])
    for entry in document["predictions"]:
        lines += comparison_lines(_title("predicted", entry), entry["comparison"])
    together = document.get("predictions_together")
    if together:
        lines += comparison_lines(f"predicted, the {together['runs']} --predict runs together ({together['requests']} "
                                  "requests; latencies pooled, throughput over their summed time)",
                                  together["comparison"])
    return lines


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.1f}%"
