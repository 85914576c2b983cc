"""What the terminal shows: a progress bar with ETA while measuring, tables when done (rich)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from microbench.sweep import SweepObserver
from roofline.schema import Result
from roofline.summary import summarize_series
from roofline.tables import series_table
from roofline.units import percent, seconds, si, significant

stdout = Console()
stderr = Console(stderr=True)
if not stdout.is_terminal and "COLUMNS" not in os.environ:
    stdout.width = 150  # piped or captured: tables keep their columns instead of folding at 80
if not stderr.is_terminal:
    stderr.soft_wrap = True  # a log file or a CI gets each message on one line, not folded at 80 columns


@contextlib.contextmanager
def terminal_observer():
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), console=stderr, transient=False,
    )
    task = {"id": None}

    def on_start(total: int) -> None:
        progress.start()  # only now: a run that stops earlier leaves no empty progress line behind
        task["id"] = progress.add_task("measuring", total=total)

    def on_point(point) -> None:
        detail = f"{point.op} {point.dtype} {point.n}x{point.k} B={point.batch}"
        if point.ok:
            detail += f"  {seconds(point.stats.median_s)}"
        else:
            progress.console.print(f"[yellow]{detail}: {point.status}: {point.reason}[/]")
        progress.update(task["id"], advance=1, description=detail)

    def on_phase(name: str) -> None:
        if name == "ceilings":
            stderr.print("measuring ceilings: copy and read bandwidth, matmul peak ...")

    observer = SweepObserver(on_notice=lambda m: stderr.print(f"[bold]{escape(m)}[/]"), on_start=on_start,
                             on_point=on_point, on_phase=on_phase)
    try:
        yield observer
    finally:
        if task["id"] is not None:
            progress.stop()


def print_sweep_summary(result: Result, output: Path | None) -> None:
    device = result.device
    table = Table(title=f"{device.get('name')} ({device.get('sku') or device['kind']})", title_justify="left")
    table.add_column("series")
    table.add_column("ok", justify="right")
    table.add_column("bytes/s at lowest B", justify="right")
    table.add_column("% spec/meas BW", justify="right")
    table.add_column("best FLOP/s (B)", justify="right")
    table.add_column("% spec/meas peak", justify="right")
    for row in summarize_series(result):
        ok = f"{row.points_ok}/{row.points_total}"
        if row.failed_checks:
            ok += f" [red]{row.failed_checks} wrong[/]"
        low = f"{si(row.low_batch_bytes_per_s, 'B/s')} ({row.low_batch})" if row.low_batch else "–"
        peak = f"{si(row.peak_flop_per_s, 'FLOP/s')} ({row.peak_batch})" if row.peak_flop_per_s else "–"
        where = "" if row.backend == "torch" else escape(f" [{row.backend}]")
        table.add_row(f"{row.op} {row.dtype} {row.n}×{row.k}{where}", ok, low,
                      f"{percent(row.pct_of_spec_bandwidth)} / {percent(row.pct_of_measured_bandwidth)}", peak,
                      f"{percent(row.pct_of_spec_peak)} / {percent(row.pct_of_measured_peak)}")
    stdout.print(table)
    measured = (result.ceilings or {}).get("measured")
    if measured:
        stdout.print(f"measured copy {si(measured['copy']['bytes_per_s'], 'B/s')}, "
                     f"read {si(measured['read']['bytes_per_s'], 'B/s')}")
    failed = sum(p.correct is False for p in result.points)
    bad = [p for p in result.points if not p.ok]
    if failed:
        stdout.print(f"[red]{failed} point(s) failed the correctness check[/]")
    if bad:
        stdout.print(f"{len(bad)} point(s) not measured: "
                     + ", ".join(sorted({p.status for p in bad})))
    if result.telemetry.get("source") in (None, "none"):
        stdout.print(f"telemetry: none ({result.telemetry.get('reason')})")
    throttled = [p for p in result.points if (p.telemetry or {}).get("throttled")]
    if throttled:
        stdout.print(f"[red]warning: {len(throttled)} point(s) measured while the GPU was throttled: "
                     + ", ".join(f"{p.op} {p.dtype} B={p.batch}" for p in throttled[:6]) + "[/]")
    if output is not None:
        stdout.print(f"saved {output}")


def print_ceilings(ceilings: dict[str, Any], device: dict[str, Any]) -> None:
    measured, spec = ceilings["measured"], ceilings.get("spec") or {}
    table = Table(title=f"ceilings: {device.get('name')} ({device.get('sku') or device['kind']})",
                  title_justify="left")
    for column in ("what", "measured", "spec", "% of spec", "how"):
        table.add_column(column)
    spec_bw = spec.get("memory_bandwidth_bytes_per_s")
    for kind in ("copy", "read"):
        entry = measured[kind]
        table.add_row(f"{kind} bandwidth", si(entry["bytes_per_s"], "B/s"), si(spec_bw, "B/s"),
                      percent(100 * entry["bytes_per_s"] / spec_bw if spec_bw else None),
                      f"{entry['kernel']}, {entry['counts']}")
    for name, entry in (measured.get("stream_kernels") or {}).items():
        if not name.startswith("torch"):
            table.add_row(f"{name} bandwidth", si(entry["bytes_per_s"], "B/s"), si(spec_bw, "B/s"),
                          percent(100 * entry["bytes_per_s"] / spec_bw if spec_bw else None), entry["kernel"])
    table.add_row("roofline slope", si(measured["bandwidth_bytes_per_s"], "B/s"), si(spec_bw, "B/s"),
                  percent(100 * measured["bandwidth_bytes_per_s"] / spec_bw if spec_bw else None),
                  f"best kernel: {measured.get('bandwidth_kernel')}")
    for dtype, peak in measured["peak"].items():
        spec_peak = (spec.get("peak_flop_per_s") or {}).get(dtype)
        if peak["flop_per_s"]:
            shape = peak["best_shape"]
            how = f"{peak['kernel']}, best of {len(peak['tried'])}: {shape['m']}×{shape['n']}×{shape['k']}"
        else:
            how = peak["reason"]
        table.add_row(f"{dtype} matmul peak", si(peak["flop_per_s"], "FLOP/s"), si(spec_peak, "FLOP/s"),
                      percent(100 * peak["flop_per_s"] / spec_peak if spec_peak and peak["flop_per_s"] else None),
                      how)
    stdout.print(table)
    if not spec.get("sku"):
        stdout.print(f"spec: {spec.get('reason')}")


def print_devices() -> None:
    from microbench.devices import cuda_status, describe_cpu, describe_cuda

    count, why = cuda_status()
    if not count:
        stdout.print(f"No CUDA GPU: {why}.")
        cpu = describe_cpu()
        stdout.print(f"CPU: {cpu['name']}, {cpu['cores']} cores ({cpu['threads']} torch threads), "
                     f"{si(cpu['memory_bytes'], 'B')} memory, "
                     f"last-level cache {si(cpu['last_level_cache_bytes'], 'B')}")
        return
    table = Table(title="CUDA devices", title_justify="left")
    for column in ("#", "name", "SKU", "memory", "SM / mem clock max", "power limit", "ECC", "MIG",
                   "persistence", "other processes", "GPM"):
        table.add_column(column)
    for index in range(count):
        d = describe_cuda(index)
        ecc, mig = d.get("ecc") or {}, d.get("mig") or {}
        processes = d.get("other_processes")
        table.add_row(
            str(index), d["name"], d.get("sku") or "no match", si(d.get("memory_bytes"), "B"),
            f"{si(d.get('max_sm_clock_hz'), 'Hz')} / {si(d.get('max_memory_clock_hz'), 'Hz')}",
            si(d.get("power_limit_w"), "W"), str(ecc.get("current", "–")), str(mig.get("current", "–")),
            str(d.get("persistence", "–")), "–" if processes is None else str(len(processes)),
            str(d.get("gpm_supported", "–")),
        )
    stdout.print(table)


def print_fit(analysis: dict[str, Any]) -> None:
    """One table per kind of series, then the verdict in words."""
    title = f"roofline fit: {analysis['device']} ({analysis['sku'] or 'no SKU'})"
    if analysis["origin"] == "imported":
        title += " — imported data"
    table = Table(title=title, title_justify="left")
    header, rows = series_table(analysis)
    for column in header:
        table.add_column(column, justify="left" if column == "series" else "right", no_wrap=column == "series")
    for row in rows:
        table.add_row(*map(escape, row))
    stdout.print(table)
    for s in analysis["series"]:
        if s["status"] in ("insufficient",):
            stdout.print(f"[yellow]{s['op']} {s['dtype']} {s['n']}x{s['k']}: {s['message']}[/]")
    if analysis["spec_reason"]:
        stdout.print(f"spec: {analysis['spec_reason']}")
    for line in analysis["verdict"]:
        stdout.print(escape(line))


def print_decode(document: dict[str, Any]) -> None:
    """Measured and analytic side by side, one row per batch, then the answer in words."""
    setup = document["setup"]
    parts = [(key, document[key]) for key in ("measured", "analytic") if document.get(key)]
    table = Table(title=f"decode: {setup['model']}, TP {setup['tp']}, context {setup['context']}, "
                        f"{setup['dtype']} (KV {setup['kv_dtype']})", title_justify="left")
    table.add_column("batch", justify="right")
    for key, _ in parts:
        for column in ("ms/token", "tokens/s", "MBU", "MFU", "bound", "KV fits"):
            label = "meas" if key == "measured" else "spec"
            table.add_column(f"{label} {column}", justify="right")
    for index, batch in enumerate(setup["batches"]):
        cells = [str(batch)]
        for _, part in parts:
            row = part["rows"][index]
            cells += [significant(row["step_time_s"] * 1e3), significant(row["tokens_per_s"], 4),
                      percent(100 * row["mbu"] if row["mbu"] is not None else None),
                      f"{100 * row['mfu']:.2f}%" if row["mfu"] is not None else "–", row["bound"],
                      {True: "yes", False: "[red]no[/]", None: "–"}[row["kv_fits"]]]
        table.add_row(*cells)
    stdout.print(table)
    for line in document["summary"]:
        stdout.print(escape(line))


def print_compare(comparison: dict[str, Any], fleet: dict[str, Any]) -> None:
    from roofline.compare_view import COLUMNS, row_cells

    for group in comparison["groups"]:
        table = Table(title=f"{group['dtype']} {group['n']}×{group['k']}", title_justify="left")
        for column in COLUMNS:
            table.add_column(column, justify="left" if column == "device" else "right", no_wrap=column == "device")
        for row in group["rows"]:
            table.add_row(*map(escape, row_cells(row, group["speed_vs_baseline"], comparison["baseline"])))
        stdout.print(table)
    for line in comparison["not_comparable"]:
        stdout.print(f"[yellow]not comparable: {line}[/]")
    flagged = [u for u in fleet["units"] if u["outlier"]]
    if len(fleet["units"]) >= 3 or flagged:
        table = Table(title=f"fleet: {len(fleet['units'])} unit(s), outliers beyond {fleet['k']} robust sd",
                      title_justify="left")
        for column in ("file", "device", "SKU", "outlier", "why"):
            table.add_column(column)
        for unit in fleet["units"]:
            table.add_row(escape(unit["file"]), escape(str(unit["device"])), escape(str(unit["sku"])),
                          "[red]yes[/]" if unit["outlier"] else "no", escape("; ".join(unit["why"]) or "–"))
        stdout.print(table)
