"""Compare results: SKUs side by side per (dtype, shape), speed ratios against a baseline, spec-only rows
for SKUs not measured, and fleet mode: units of one SKU whose GEMV bandwidth or peak is an outlier.

Every difference against the baseline says whether it is real (``roofline.analysis.significance``): each pair of
matching points from their samples, and the fitted B*, bandwidth and peak from their bootstrap intervals:
faster / slower / same / inconclusive.  A run measured on a busy device (``roofline.analysis.trust``, the state
``fit`` warns of first) decides nothing: every verdict against it is inconclusive, saying which run and why, and
the samples' own verdict stays in the why.  Percentages of measured bandwidth are of each result's one
reference bandwidth (``roofline.analysis.reference``), named.

Weight-only formats: each result's speed-up over its own bf16 and its break-even batch, per format and layer
(``formats``), side by side.

Outliers use the median and the MAD within a SKU: a unit is flagged when |x − median| > k · 1.4826 · MAD
(``k`` defaults to 3, settable).  The MAD has a floor of 1% of the median so that a handful of nearly
identical units does not flag the smallest difference.  Units measured while throttled are flagged too.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.analysis.reference import reference_bandwidth
from roofline.analysis.series import analyse
from roofline.analysis.significance import Difference, compare_intervals, compare_samples, discounted_for_busy
from roofline.analysis.trust import busy_why
from roofline.core.counting import compute_dtype, critical_intensity_batch
from roofline.core.roof import ridge_flop_per_byte
from roofline.core.stats import robust_sd
from roofline.result.document import Result
from roofline.result.io import ResultError, load_result
from roofline.specs.gpus import load_gpu_spec

MAD_FLOOR_REL = 0.01
DEFAULT_K = 3.0
NOT_RESULTS = {"analysis.json", "decode.json", "bench.json"}


@dataclass(frozen=True)
class Loaded:
    file: str
    result: Result
    analysis: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.result.device.label} [{Path(self.file).name}]"


def collect(paths: list[Path]) -> tuple[list[Loaded], list[str]]:
    """Load every result named, and every one found in a named folder, each file once, in the order given.

    A file the user named must be a usable result (``ResultError`` otherwise: a CI gate must not pass on a
    typo); a file found by scanning a folder that is not one is skipped, and the notes say why and how many.
    """
    files: list[tuple[Path, bool]] = []  # (file, named by the user)
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*.json") if p.name not in NOT_RESULTS)
            if not found:
                raise ResultError(f"{path}: no result files (*.json) in this folder")
            files += [(p, False) for p in found]
        else:
            files.append((path, True))
    loaded, skipped, seen, scanned = [], [], set(), 0
    for file, named in files:
        if file.resolve() in seen:
            continue  # `compare A A`, or A named and found in its folder: one result, one row
        seen.add(file.resolve())
        scanned += not named
        try:
            result = load_result(file)
        except ResultError as exc:
            if named:
                raise
            skipped.append(f"skipped {exc}")
            continue
        loaded.append(Loaded(str(file), result, analyse(result)))
    if skipped:
        skipped.append(f"skipped {len(skipped)} of {scanned} file(s) found in folders")
    loaded, duplicates = _drop_duplicate_units(loaded)
    return loaded, skipped + duplicates


def _drop_duplicate_units(loaded: list[Loaded]) -> tuple[list[Loaded], list[str]]:
    """The same GPU (UUID) measured twice counts once in a fleet: the newest result stays."""
    by_uuid: dict[str, list[Loaded]] = defaultdict(list)
    for item in loaded:
        uuid = item.result.device.uuid
        if uuid:
            by_uuid[uuid].append(item)
    dropped, notes = set(), []
    for uuid, items in by_uuid.items():
        if len(items) > 1:
            items = sorted(items, key=lambda i: i.result.created_at)
            dropped.update(i.file for i in items[:-1])
            notes.append(f"duplicate device UUID {uuid} in {', '.join(i.file for i in items)}: kept the newest, "
                         f"{items[-1].file}")
    return [i for i in loaded if i.file not in dropped], notes


def _series(item: Loaded, op: str, dtype: str, n: int, k: int) -> dict[str, Any] | None:
    return next((s for s in item.analysis["series"] if s["op"] == op and s["dtype"] == dtype and s["n"] == n
                 and s["k"] == k and s["backend"] in ("torch", "imported")), None)


def unit_figures(item: Loaded, dtype: str, n: int, k: int) -> dict[str, Any] | None:
    """One result's row for a (dtype, shape) group, or None when it did not measure that group."""
    gemm, gemv = _series(item, "gemm", dtype, n, k), _series(item, "gemv", dtype, n, k)
    if gemm is None and gemv is None:
        return None
    gemv_bw = gemv["bandwidth_bytes_per_s"] if gemv else None
    if gemv_bw is None and gemm and gemm["points"] and gemm["points"][0]["batch"] == 1:
        gemv_bw = gemm["points"][0]["bytes_per_s"]
    spec = item.analysis.get("spec") or {}
    spec_bw = spec.get("bandwidth_bytes_per_s")
    spec_peak = (spec.get("peak_flop_per_s") or {}).get(compute_dtype(dtype))
    peak = gemm.get("peak_flop_per_s") if gemm else None
    reference = reference_bandwidth(item.result.ceilings)
    ref_bw = reference.bytes_per_s if reference else None
    return {
        "file": item.file, "device": f"{item.result.device.name} [{Path(item.file).stem}]",
        "sku": item.result.device.sku,
        "uuid": item.result.device.uuid, "measured": True, "origin": item.result.origin,
        "busy_at_start": busy_why(item.result),
        "reference_bandwidth_bytes_per_s": ref_bw, "reference_bandwidth_name": reference.name if reference else None,
        "pct_reference_bandwidth": 100 * gemv_bw / ref_bw if gemv_bw and ref_bw else None,
        "gemv_bytes_per_s": gemv_bw, "peak_flop_per_s": peak,
        "gemv_bandwidth_ci95": gemv["bandwidth_ci95"] if gemv else [None, None],
        "bandwidth_bytes_per_s": gemm.get("bandwidth_bytes_per_s") if gemm else None,
        "bandwidth_ci95": gemm.get("bandwidth_ci95", [None, None]) if gemm else [None, None],
        "peak_ci95": gemm.get("peak_ci95", [None, None]) if gemm else [None, None],
        "ridge_flop_per_byte": gemm.get("ridge_flop_per_byte") if gemm else None,
        "critical_batch": gemm.get("critical_batch") if gemm else None,
        "critical_batch_ci95": gemm.get("critical_batch_ci95") if gemm else [None, None],
        "critical_batch_lower_bound": gemm.get("critical_batch_lower_bound") if gemm else None,
        "pct_spec_bandwidth": 100 * gemv_bw / spec_bw if gemv_bw and spec_bw else None,
        "pct_spec_peak": 100 * peak / spec_peak if peak and spec_peak else None,
        "times_s": {p["batch"]: p["time_s"] for p in (gemm or {}).get("points", [])},
    }


def spec_row(sku: str, dtype: str, n: int, k: int) -> dict[str, Any]:
    """A SKU that was not measured, from its spec sheet: marked as such everywhere it appears."""
    profile = load_gpu_spec(sku)
    peak = profile.peak_for(dtype)
    ridge = ridge_flop_per_byte(peak, profile.bandwidth_bytes_per_s)
    batch = critical_intensity_batch(dtype, n, k, ridge) if ridge else None
    return {"file": None, "device": f"{profile.name} (spec, not measured)", "sku": sku, "uuid": None,
            "measured": False, "origin": "spec", "busy_at_start": None, "reference_bandwidth_bytes_per_s": None,
            "reference_bandwidth_name": None, "pct_reference_bandwidth": None, "gemv_bandwidth_ci95": [None, None],
            "bandwidth_bytes_per_s": profile.bandwidth_bytes_per_s, "bandwidth_ci95": [None, None],
            "peak_ci95": [None, None],
            "gemv_bytes_per_s": profile.bandwidth_bytes_per_s, "peak_flop_per_s": peak, "ridge_flop_per_byte": ridge,
            "critical_batch": batch, "critical_batch_ci95": [None, None], "critical_batch_lower_bound": None,
            "pct_spec_bandwidth": 100.0, "pct_spec_peak": 100.0 if peak else None, "times_s": {}}


def groups_of(loaded: list[Loaded]) -> list[tuple[str, int, int]]:
    keys = []
    for item in loaded:
        for s in item.analysis["series"]:
            key = (s["dtype"], s["n"], s["k"])
            if s["op"] in ("gemm", "gemv") and key not in keys:
                keys.append(key)
    return keys


def compare_results(loaded: list[Loaded], baseline: str | None = None, specs: list[str] = ()) -> dict[str, Any]:
    base = _find_baseline(loaded, baseline)
    groups, not_comparable = [], []
    for dtype, n, k in groups_of(loaded):
        rows, missing, items = [], [], {}
        for item in loaded:
            row = unit_figures(item, dtype, n, k)
            (rows.append(row) if row else missing.append(item.file))
            items[item.file] = item
        rows += [spec_row(sku, dtype, n, k) for sku in specs]
        if missing:
            not_comparable.append(f"{dtype} {n}x{k}: not measured in {', '.join(missing)}")
        ratios, significance = {}, {}
        reference = next((r for r in rows if base and r["file"] == base.file), None)
        if reference:
            for row in rows:
                common = sorted(set(reference["times_s"]) & set(row["times_s"]))
                if row is not reference and common:
                    ratios[row["file"]] = {b: reference["times_s"][b] / row["times_s"][b] for b in common}
                if row is not reference and row["measured"]:
                    significance[row["file"]] = differences(base, reference, items[row["file"]], row, (dtype, n, k))
        groups.append({"dtype": dtype, "n": n, "k": k, "rows": rows, "speed_vs_baseline": ratios,
                       "significance_vs_baseline": significance})
    return {"baseline": base.file if base else None, "groups": groups, "not_comparable": not_comparable,
            "formats": format_groups(loaded), "grouped": grouped_groups(loaded, base)}


GROUPED_KEYS = ("status", "critical_tokens_per_expert", "critical_tokens_per_expert_ci95", "critical_batch",
                "critical_batch_ci95", "peak_flop_per_s", "bandwidth_bytes_per_s")


def grouped_groups(loaded: list[Loaded], base: Loaded | None) -> list[dict[str, Any]]:
    """Per mixture-of-experts series (dtype, experts of N×K, top-k, routing): each result's per-expert crossover
    and the global batch it implies, its fitted roof, and its speed against the baseline's at the batches both
    measured (baseline time over this time)."""
    groups: dict[tuple, dict[str, Any]] = {}
    for item in loaded:
        for s in item.analysis["series"]:
            if s["op"] != "grouped" or not s["points"]:
                continue
            key = (s["dtype"], s["experts"], s["n"], s["k"], s["topk"], s["routing"])
            group = groups.setdefault(key, dict(zip(("dtype", "experts", "n", "k", "topk", "routing"), key,
                                                    strict=True)) | {"rows": []})
            group["rows"].append({"file": item.file, "device": f"{item.result.device.name} [{Path(item.file).stem}]",
                                  "sku": item.result.device.sku, "busy_at_start": busy_why(item.result),
                                  "times_s": {p["batch"]: p["time_s"] for p in s["points"]},
                                  **{name: s.get(name) for name in GROUPED_KEYS}})
    for group in groups.values():
        reference = next((r for r in group["rows"] if base and r["file"] == base.file), None)
        for row in group["rows"]:
            common = sorted(set(reference["times_s"]) & set(row["times_s"])) if reference else []
            row["speed_vs_baseline"] = {b: reference["times_s"][b] / row["times_s"][b] for b in common} \
                if reference and row is not reference else {}
    return list(groups.values())


FORMAT_KEYS = ("batches", "speedup_batch1", "speedup_batch1_ci95", "speedup", "speedup_ci95", "status",
               "break_even_batch", "break_even_ci95", "kernel", "baseline_kernel")


def format_groups(loaded: list[Loaded]) -> list[dict[str, Any]]:
    """Per weight-only format and layer: each result's break-even batch against its own bf16 (from its analysis,
    ``roofline.analysis.formats``); only results that measured the format and bf16 on that layer."""
    groups: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for item in loaded:
        for c in item.analysis.get("formats") or []:
            key = (c["format"], c["backend"], c["n"], c["k"])
            group = groups.setdefault(key, {"format": c["format"], "baseline": c["baseline"], "backend": c["backend"],
                                            "n": c["n"], "k": c["k"], "rows": []})
            group["rows"].append({"file": item.file, "device": f"{item.result.device.name} [{Path(item.file).stem}]",
                                  "sku": item.result.device.sku, **{name: c.get(name) for name in FORMAT_KEYS}})
    return list(groups.values())


def _samples(item: Loaded, op: str, group: tuple[str, int, int]) -> dict[int, tuple[float, ...]]:
    dtype, n, k = group
    return {p.batch: p.samples_s for p in item.result.points if p.usable and p.op == op and p.dtype == dtype
            and p.n == n and p.k == k and p.backend in ("torch", "imported")}


def busy_note(base: Loaded, item: Loaded) -> str | None:
    """Which of the two runs was measured on a busy device, and why (``roofline.analysis.trust``), or None."""
    busy = [f"{Path(x.file).name} was measured on a busy device ({why})"
            for x, why in ((base, busy_why(base.result)), (item, busy_why(item.result))) if why]
    return " and ".join(busy) or None


def differences(base: Loaded, base_row: dict[str, Any], item: Loaded, row: dict[str, Any],
                group: tuple[str, int, int]) -> dict[str, Any]:
    """Each matching point (from the samples) and each fitted figure (from the intervals), decided; none decided
    where either run was measured on a busy device (``busy``: which, and why)."""
    busy = busy_note(base, item)

    def decided(difference: Difference | None) -> dict[str, Any] | None:
        if difference is None:
            return None
        return (discounted_for_busy(difference, busy) if busy else difference).to_dict()

    a, b = _samples(base, "gemm", group), _samples(item, "gemm", group)
    points = {batch: decided(compare_samples(a[batch], b[batch])) for batch in sorted(set(a) & set(b))}
    gemv_a, gemv_b = _samples(base, "gemv", group), _samples(item, "gemv", group)
    out: dict[str, Any] = {"busy": busy, "points": points,
                           "gemv": decided(compare_samples(gemv_a[1], gemv_b[1])) if 1 in gemv_a and 1 in gemv_b
                           else None}
    for key, interval, words in (("critical_batch", "critical_batch_ci95", ("higher", "lower")),
                                 ("bandwidth_bytes_per_s", "bandwidth_ci95", ("faster", "slower")),
                                 ("peak_flop_per_s", "peak_ci95", ("faster", "slower"))):
        out[key] = decided(compare_intervals(base_row.get(key), base_row.get(interval) or [None, None],
                                             row.get(key), row.get(interval) or [None, None], words))
    counts: dict[str, int] = defaultdict(int)
    for value in points.values():
        counts[value["verdict"]] += 1
    out["counts"] = dict(counts)
    return out


def _find_baseline(loaded: list[Loaded], baseline: str | None) -> Loaded | None:
    if baseline is None:
        return loaded[0] if loaded else None
    for item in loaded:
        if item.file == baseline or Path(item.file).name == Path(baseline).name:
            return item
    raise ResultError(f"--baseline {baseline}: not among the results compared")


def _robust_flags(values: dict[str, float], k: float) -> dict[str, str]:
    median = statistics.median(values.values())
    scale = max(robust_sd(list(values.values())), MAD_FLOOR_REL * abs(median))
    return {file: f"{(value - median) / scale:+.1f} robust sd from the median {median:.4g}"
            for file, value in values.items() if abs(value - median) > k * scale}


def _own_noise(value: float | None, interval: list[float | None]) -> float | None:
    """A figure's relative half-width from its own interval (None when it has none)."""
    if not value or None in interval:
        return None
    return (interval[1] - interval[0]) / 2 / value


def _distances(values: dict[str, float], noise: dict[str, float | None]) -> dict[str, dict[str, Any]]:
    """How far each unit is from the SKU's median, relatively and in its own measured noise."""
    median = statistics.median(values.values())
    out = {}
    for file, value in values.items():
        rel = value / median - 1
        own = noise.get(file)
        out[file] = {"rel_from_median": rel, "own_noise_rel": own,
                     "in_own_noise": rel / own if own else None}
    return out


def fleet(loaded: list[Loaded], k: float = DEFAULT_K) -> dict[str, Any]:
    """Units grouped by SKU; outliers in GEMV bandwidth or peak within each SKU, and throttled units."""
    units: dict[str, dict[str, Any]] = {}
    for item in loaded:
        device = item.result.device
        sku = device.sku or device.name or device.kind
        units[item.file] = {"file": item.file, "device": device.name, "sku": sku,
                            "uuid": device.uuid, "figures": {}, "noise": {}, "distance": {},
                            "outlier": False, "why": []}
        for dtype, n, k_dim in groups_of([item]):
            row = unit_figures(item, dtype, n, k_dim)
            if row:
                units[item.file]["figures"][f"{dtype} {n}x{k_dim}"] = {
                    "gemv_bytes_per_s": row["gemv_bytes_per_s"], "peak_flop_per_s": row["peak_flop_per_s"]}
                units[item.file]["noise"][f"{dtype} {n}x{k_dim}"] = {
                    "gemv_bytes_per_s": _own_noise(row["gemv_bytes_per_s"], row["gemv_bandwidth_ci95"]),
                    "peak_flop_per_s": _own_noise(row["peak_flop_per_s"], row["peak_ci95"])}
        throttled = sum(p.throttled for p in item.result.points)
        if throttled:
            units[item.file]["outlier"] = True
            units[item.file]["why"].append(f"{throttled} point(s) measured while throttled")
        busy = busy_why(item.result)
        if busy:  # said beside its figures: a loaded unit reads slow without being one
            units[item.file]["why"].append(f"measured on a busy device ({busy}): its figures read slower")
    by_sku: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for unit in units.values():
        by_sku[unit["sku"]].append(unit)
    for members in by_sku.values():
        if len(members) < 3:
            continue  # no robust centre with fewer than three units
        metrics = {(g, m) for u in members for g, figs in u["figures"].items() for m, v in figs.items() if v}
        for group, metric in sorted(metrics):
            values = {u["file"]: u["figures"][group][metric] for u in members
                      if u["figures"].get(group, {}).get(metric)}
            if len(values) < 3:
                continue
            noise = {file: units[file]["noise"].get(group, {}).get(metric) for file in values}
            distances = _distances(values, noise)
            for file, distance in distances.items():
                units[file]["distance"][f"{group} {metric}"] = distance
            for file, why in _robust_flags(values, k).items():
                units[file]["outlier"] = True
                own = distances[file]["in_own_noise"]
                why += f"; {100 * distances[file]['rel_from_median']:+.1f}%" + (
                    f", {abs(own):.0f}× its own noise (±{100 * distances[file]['own_noise_rel']:.2f}%)"
                    if own is not None else ", its own noise unknown")
                units[file]["why"].append(f"{group} {metric}: {why}")
    return {"k": k, "units": list(units.values()),
            "skus": {sku: len(members) for sku, members in by_sku.items()}}
