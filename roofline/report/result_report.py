"""``gpubench report``: a folder with report.html (self-contained), report.md with PNGs beside it, and
analysis.json (the fit, as ``gpubench fit --json`` prints it).  Reads the result only: no torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from roofline.analysis.reference import marked_percent
from roofline.analysis.series import analyse
from roofline.core.stats import quantile
from roofline.core.units import seconds
from roofline.report import page, plots
from roofline.report.format_plot import format_figures
from roofline.report.grouped_plot import grouped_figures
from roofline.report.page import PAGE_FILES, figure_pngs, page_files
from roofline.report.tables import formats_table, reference_lines, series_table
from roofline.result.document import Result, backend_tag
from roofline.result.folders import FolderKind
from roofline.result.io import write_output_file

# A sample this short is within ~1% of the timers' resolution (events ~0.5 µs, perf_counter ~0.1 µs).
NOISE_FLOOR_SAMPLE_S = 50e-6
# What ``gpubench report`` and ``sweep --report`` write: analysis.json (the fit, known by its keys) and the page.
REPORT_FOLDER = FolderKind("report", "analysis.json", keys=("series", "verdict"), files=PAGE_FILES,
                           page=page_files)


def default_report_dir(result_path: Path) -> Path:
    return result_path.with_name(result_path.stem + "-report")


def _known(facts: list[tuple[Any, str]]) -> str:
    """The text of each fact whose value was recorded, joined; an imported result records few."""
    return ", ".join(text for value, text in facts if value is not None)


def environment_lines(result: Result) -> list[str]:
    d, host, tool = result.device, result.host, result.tool
    lines = [f"Device: {d.name} ({d.kind}), SKU: {d.sku or 'none matched'}"]
    if d.kind == "cuda":
        ecc, mig = d.ecc.current if d.ecc else None, d.mig.current if d.mig else None
        build = _known([(d.driver_version, f"Driver {d.driver_version}"),
                        (d.cuda_runtime, f"CUDA runtime {d.cuda_runtime}"),
                        (d.compute_capability, f"compute capability {d.compute_capability}"),
                        (d.sm_count, f"{d.sm_count} SMs"),
                        (d.l2_cache_bytes, f"L2 {d.format('l2_cache_bytes')}"),
                        (d.memory_bytes, f"memory {d.format('memory_bytes')}")])
        state = _known([(d.max_sm_clock_hz, f"Max SM clock {d.format('max_sm_clock_hz')}"),
                        (d.max_memory_clock_hz, f"max memory clock {d.format('max_memory_clock_hz')}"),
                        (d.power_limit_w, f"power limit {d.format('power_limit_w')}"),
                        (ecc, f"ECC {ecc}"), (mig, f"MIG {mig}"),
                        (d.persistence, f"persistence {d.persistence}"),
                        (d.other_processes, f"other processes: {len(d.other_processes or ())}")])
        lines += [line for line in (build, state) if line]
        if not (build or state):
            lines.append("Driver, clocks, power limit, ECC and MIG: not recorded")
    elif d.kind == "cpu":
        lines.append(f"{d.cores} cores, {d.threads} torch threads, "
                     f"last-level cache {d.format('last_level_cache_bytes')}, memory {d.format('memory_bytes')}")
    if len(host):
        lines.append(f"Host {host.hostname}: {host.os}, Python {host.python}, "
                     + ", ".join(f"{k} {v}" for k, v in (host.libraries or {}).items()))
    if tool.version is None and tool.imported_from:
        lines.append(f"Imported by gpubench from {tool.imported_from}, created {result.created_at}")
    else:
        git = f" (git {tool.git_sha[:10]}{', dirty' if tool.git_dirty else ''})" if tool.git_sha else ""
        lines.append(f"gpubench {tool.version or '(version not recorded)'}{git}, created {result.created_at}")
    return lines


def method_lines(result: Result) -> list[str]:
    s = result.settings
    if s.reference:
        return [f"Reference data imported from {s.reference.package} ({s.source_file}): {s.reference.words()}; "
                "one sample per point, not measured by gpubench."]
    if result.origin == "imported":
        return [f"Imported from {s.source_file}: another tool's timings, not measured by gpubench."]
    ok = result.ok_points()
    samples = sorted(p.stats.n for p in ok)
    lines = [
        f"Timer: {s.timer}; weights: {s.l2_policy} (copies totalling ≥ "
        f"{s.rotation_cache_factor}× the {s.format('rotation_cache_bytes')} cache, so launches read DRAM)",
        f"Stopping rule: 95% CI of the median within {100 * (s.target_rel_ci or 0):.1f}% or {s.format('budget_s')} "
        f"per point; seed {s.seed}",
    ]
    if samples:
        lines.append(f"Samples per point: median {quantile(samples, 0.5):g}, range {samples[0]}–{samples[-1]}")
    telemetry = result.telemetry
    if telemetry.sampled:
        extra = f"; {telemetry.reason}" if telemetry.reason else ""
        lines.append(f"Telemetry: {telemetry.source} every {telemetry.format('interval_s')}; power "
                     f"{telemetry.power or 'instantaneous'}{extra}")
    overheads = [p.launch_overhead_s for p in ok if p.launch_overhead_s is not None]
    if overheads:
        median = quantile(sorted(overheads), 0.5)
        lines.append(f"Launch overhead (eager − graph median): median {seconds(median)}")
    return lines


def warning_lines(result: Result, analysis: dict[str, Any]) -> list[str]:
    warnings = []
    if result.origin == "imported":
        warnings.append("Imported data: gpubench did not measure it; no ceilings or telemetry of its own.")
        warnings += list(result.settings.import_warnings or ())
    throttled = [p for p in result.points if p.throttled]
    if throttled:
        warnings.append(f"{len(throttled)} point(s) measured while the GPU was throttled.")
    retried = [p for p in result.points if p.superseded]
    if retried:
        warnings.append(f"{len(retried)} point(s) were flagged by telemetry (throttled or SM clock drift) and "
                        "measured again after a pause; both attempts are kept and the fit used the second: "
                        + ", ".join(f"{p.op} {p.dtype} B={p.batch}" for p in retried[:6]))
    wrong = [p for p in result.points if p.correct is False]
    if wrong:
        warnings.append(f"{len(wrong)} point(s) failed the correctness check and are left out of the fit: "
                        + ", ".join(f"{p.op} {p.dtype} B={p.batch}" for p in wrong[:5]))
    floor = [p for p in result.ok_points() if p.launches_per_sample and
             p.stats.median_s * p.launches_per_sample < NOISE_FLOOR_SAMPLE_S]
    if floor:
        warnings.append(f"{len(floor)} point(s) near the timer's noise floor (a sample under "
                        f"{seconds(NOISE_FLOOR_SAMPLE_S)}).")
    # Busy device, CIs wider than the target, incomplete series, too few points (roofline.analysis.trust).
    warnings += [line[0].upper() + line[1:] + "." for line in analysis.get("warnings") or []]
    warnings += over_ceiling_warnings(analysis)
    failed = [p for p in result.points if not p.ok]
    if failed:
        kinds = sorted({p.status for p in failed})
        warnings.append(f"{len(failed)} point(s) not measured ({', '.join(kinds)}): "
                        + "; ".join(sorted({f'{p.op} {p.dtype}: {p.reason}' for p in failed})[:4]))
    if not result.telemetry.sampled:
        warnings.append(f"No telemetry: {result.telemetry.reason or 'not recorded'}.")
    warnings += cross_check_lines(result, analysis)
    if not result.ceilings.measured and result.origin != "imported":
        warnings.append("No measured ceilings (run without them): efficiencies are against the spec only.")
    if analysis.get("spec_reason"):
        warnings.append(f"Spec: {analysis['spec_reason']}.")
    return warnings


CROSS_CHECK_BAND = (0.85, 1.15)


def over_ceiling_warnings(analysis: dict[str, Any]) -> list[str]:
    """Points the fitted roof does not bound, and points above a measured ceiling: named, never hidden."""
    lines = []
    for s in analysis["series"]:
        label = f"{s['op']} {s['dtype']} {s['n']}x{s['k']}{backend_tag(s['backend'])}"
        if s.get("set_aside"):
            lines.append(f"{label}: {len(s['set_aside'])} point(s) set aside from the fitted roof: "
                         + "; ".join(f"B={a['batch']} ({a['why']})" for a in s["set_aside"][:6]) + ".")
        above = s.get("above_measured_ceiling") or []
        if above:
            lines.append(f"{label}: above a measured ceiling (flagged in the table, analysis.json and the roofline "
                         "plot): " + ", ".join(f"B={a['batch']} {marked_percent(a['pct'])} of the {a['ceiling']}"
                                               for a in above[:6]) + ".")
    return lines


def cross_check_lines(result: Result, analysis: dict[str, Any]) -> list[str]:
    """Memory-bound points whose timer bandwidth disagrees with GPM's DRAM counter by more than 15%."""
    bound = {(s["op"], s["dtype"], s["n"], s["k"], p["batch"]): p["bound"]
             for s in analysis["series"] for p in s["points"]}
    ratios, off = [], []
    for point in result.ok_points():
        ratio = point.telemetry.timer_over_counter if point.telemetry is not None else None
        if ratio is None or bound.get((point.op, point.dtype, point.n, point.k, point.batch)) != "memory":
            continue
        ratios.append(ratio)
        if not CROSS_CHECK_BAND[0] <= ratio <= CROSS_CHECK_BAND[1]:
            off.append(f"{point.op} {point.dtype} {point.n}x{point.k} B={point.batch}: {ratio:.2f}")
    lines = []
    if ratios:
        ratios.sort()
        lines.append(f"Cross-check (timer bytes/s over GPM DRAM counter, memory-bound points): median "
                     f"{ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}.")
    if off:
        lines.append(f"{len(off)} memory-bound point(s) disagree with the DRAM counter by more than 15% (the "
                     "timing, the byte count or the counter is wrong): " + "; ".join(off[:5]))
    return lines


def render_figures(result: Result, analysis: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """PNG bytes per figure name, and the names of figures with nothing to draw."""
    figures = {}
    for dtype in sorted({s["dtype"] for s in analysis["series"] if s["points"]}):
        figures[f"roofline_{dtype}"] = plots.roofline_figure(result, analysis, dtype)
    for name, draw in plots.FIGURES.items():
        figures[name] = draw(result, analysis)
    figures.update(format_figures(result, analysis))  # only for layers measured in bf16 and a weight-only format
    figures.update(grouped_figures(analysis))  # only for mixture-of-experts series
    return figure_pngs(figures)


MISSING_WHY = {
    "telemetry": "no telemetry timeline in this result",
    "gemm_vs_bmm": "needs both gemm and bmm series",
    "time_vs_batch": "needs a gemm series with at least two ok points",
    "throughput": "needs a gemm series",
    "efficiency": "needs a gemm series and a roof (measured ceilings or a spec SKU)",
}


def write_report(result: Result, folder: Path) -> dict[str, Any]:
    """Write the report folder; return the analysis.  Each file is written atomically and never over a link
    or a special file (``write_output_file``): a report.html linked to a result would otherwise become HTML."""
    folder.mkdir(parents=True, exist_ok=True)
    analysis = analyse(result)
    images, missing = render_figures(result, analysis)
    write_output_file(folder / "analysis.json", json.dumps(analysis, indent=1, allow_nan=False) + "\n")
    sections = {
        "environment": environment_lines(result),
        "method": method_lines(result),
        "warnings": warning_lines(result, analysis),
        "missing": [f"{name}: {MISSING_WHY.get(name, 'nothing to draw')}" for name in missing],
    }
    header, rows = series_table(analysis)
    blocks: list[page.Block] = [
        page.Heading("Verdict"), page.Bullets(tuple(analysis["verdict"] or ["No series could be analysed."])),
        page.Heading("Fit per series"), page.Table(tuple(header), tuple(map(tuple, rows))),
        page.Bullets(tuple(reference_lines(analysis)))]
    if analysis["formats"]:
        header, rows = formats_table(analysis)
        blocks += [page.Heading("Weight-only formats against bf16"), page.Table(tuple(header), tuple(map(tuple, rows))),
                   page.Bullets(("Speed-up: bf16's median time over the format's at the same batch. Break-even: where "
                                 "the speed-up first falls below 1 as the batch grows (linear in log batch between "
                                 "the measured batches around it). Intervals: 95% bootstrap over each point's "
                                 "samples.",))]
    blocks.append(page.Images())
    for key, lines in sections.items():
        if lines:
            css_class = "warn" if key == "warnings" else None
            blocks += [page.Heading(key.capitalize()), page.Bullets(tuple(lines), css_class)]
    page.write_page(folder, f"gpubench report: {result.device.label}", CSS, blocks, images)
    return analysis


CSS = ("body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#111}"
       "table{border-collapse:collapse;font-size:14px}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
       "td:first-child,th:first-child{text-align:left}img{max-width:100%;display:block;margin:1em 0}"
       ".warn li{color:#8a4b00}")
