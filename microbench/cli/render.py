"""What the terminal shows: a progress bar with ETA while measuring, tables when done (rich)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from microbench.timing.observer import SweepObserver
from roofline.analysis.reference import marked_percent, reference_bandwidth, result_peak
from roofline.analysis.summary import over_ceiling_lines, summarize_series
from roofline.core.counting import compute_dtype, is_weight_only
from roofline.core.units import interval_digits, percent, seconds, si, significant
from roofline.report.tables import formats_table, series_table
from roofline.result.document import Result, backend_tag
from roofline.result.sections import BandwidthChoice, Ceilings, Device, PeakRun, SpecCeilings

PIPED_WIDTH = 150  # piped or captured: tables keep their columns instead of folding at 80


class PipedConsole(Console):
    """A console that lays out to ``PIPED_WIDTH`` columns when it writes to no terminal and ``COLUMNS`` is unset,
    decided at each print rather than once at import (where it would hang on whether ``COLUMNS`` happened to be
    set when this module was first imported); a width set on it, or ``COLUMNS``, wins."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if kwargs.get("width") is None:
            self._width = None  # rich fixed COLUMNS as it was at construction: read it at each print instead

    @property
    def size(self) -> ConsoleDimensions:
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(PIPED_WIDTH, super().size.height)
        return super().size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


stdout = PipedConsole()
stderr = Console(stderr=True)
if not stdout.is_terminal:
    stdout.soft_wrap = True  # and a sentence stays one line, however long (tables still lay out to the width)
if not stderr.is_terminal:
    stderr.soft_wrap = True  # a log file or a CI gets each message on one line, not folded at 80 columns


# A rich column costs its text, a space each side and a rule; the table adds one more rule.
COLUMN_FRAME = 3


def column_groups(widths: list[int], limit: int, frame: int = COLUMN_FRAME) -> list[list[int]]:
    """The columns (by index) of each table a wide one splits into so each fits ``limit`` characters: the
    first (the row's name) in every table, then as many of the rest, in order, as fit beside it.  A terminal
    narrower than a table otherwise squeezes every column and breaks words mid-word ('inco nclusive')."""
    groups: list[list[int]] = []
    used = 1 + widths[0] + frame
    for index, width in enumerate(widths[1:], start=1):
        if not groups or used + width + frame > limit:
            groups.append([0])
            used = 1 + widths[0] + frame
        groups[-1].append(index)
        used += width + frame
    return groups or [[0]]


def _natural_width(header: str, cells: list[str]) -> int:
    """The width a column takes with nothing wrapped, its header included (rich lays a table out from these)."""
    return max(Text.from_markup(text).cell_len for text in [escape(header), *cells])


def print_split_table(title: str, header: list[str], rows: list[list[str]], justify=None, markup=False) -> None:
    """One table, or several side by side in the order of ``header`` that each fit the terminal, each with the
    first column again; words are never broken.  ``justify(index, name)``: the column's alignment;
    ``markup``: cells hold rich markup (else they are printed as written)."""
    cells = rows if markup else [[escape(cell) for cell in row] for row in rows]
    widths = [_natural_width(name, [row[i] for row in cells]) for i, name in enumerate(header)]
    groups = column_groups(widths, stdout.width)
    for part, columns in enumerate(groups, start=1):
        suffix = f" ({part}/{len(groups)})" if len(groups) > 1 else ""
        table = Table(title=title + suffix, title_justify="left")
        for index in columns:
            table.add_column(header[index], justify=justify(index, header[index]) if justify else
                             ("left" if index == 0 else "right"), no_wrap=index == 0, overflow="ellipsis")
        for row in cells:
            table.add_row(*(row[index] for index in columns))
        stdout.print(table)


@contextlib.contextmanager
def search_progress():
    """``gpubench search``'s bar: configurations simulated of all, elapsed and ETA; ``update(done, total, what)``."""
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), console=stderr, transient=False,
    )
    tasks: list[TaskID] = []

    def update(done: int, total: int, what: str) -> None:
        if not tasks:
            progress.start()
            tasks.append(progress.add_task("searching", total=total, completed=done))
        progress.update(tasks[0], completed=done, description=escape(f"searching: {what}"[:60]))

    try:
        yield update
    finally:
        if tasks:
            progress.stop()


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

    def on_item(description: str) -> None:
        progress.update(task["id"], advance=1, description=escape(description))

    def on_point(point) -> None:
        detail = f"{point.op} {point.dtype} {point.n}x{point.k} B={point.batch}"
        if point.ok:
            median = point.stats.median_s
            detail += f"  {seconds(median, interval_digits(median, *point.stats.ci95_s))}"
        else:
            progress.console.print(f"[yellow]{escape(detail)}: {point.status}: {escape(point.reason or '')}[/]")
        on_item(detail)

    def on_phase(name: str) -> None:
        if name == "ceilings":
            stderr.print("measuring ceilings: copy and read bandwidth, matmul peak ...")

    observer = SweepObserver(on_notice=lambda m: stderr.print(f"[bold]{escape(m)}[/]"), on_start=on_start,
                             on_point=on_point, on_phase=on_phase, on_item=on_item)
    try:
        yield observer
    finally:
        if task["id"] is not None:
            progress.stop()


class SimulationProgress:
    """A progress bar for each simulation that lasts (``roofline.fleet.simulate_run.Ticker``): requests finished
    of the requests in all, with the time left.  A simulation shows its bar only once it has run
    ``SHOW_AFTER_S`` (most end sooner: 20,000 requests simulate in about 1.5 s on this project's 2-core machine,
    scripts/measure_simulation_memory.py), and its bar goes when it ends: what stays on the terminal is the lines
    and the table printed, as before.  Lines printed while a bar shows go through it (``echo``), above the bar."""

    SHOW_AFTER_S = 2.0

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.started: dict[str, float] = {}
        self.tasks: dict[str, Any] = {}

    def tick(self, label: str, done: int, total: int) -> None:
        import time

        now = time.monotonic()
        started = self.started.setdefault(label, now)
        if done >= total:  # this simulation ended: its bar goes, and the next of the label starts afresh
            self.started.pop(label, None)
            task = self.tasks.pop(label, None)
            if task is not None and self.progress is not None:
                self.progress.remove_task(task)
            return
        if label not in self.tasks and now - started < self.SHOW_AFTER_S:
            return
        if self.progress is None:
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("requests"), TimeElapsedColumn(), TextColumn("ETA"),
                                     TimeRemainingColumn(), console=stderr, transient=True)
            self.progress.start()
        if label not in self.tasks:
            self.tasks[label] = self.progress.add_task(escape(f"simulating {label}"), total=total)
        self.progress.update(self.tasks[label], completed=done)

    def echo(self, line: str) -> None:
        """A line to stderr: above the bar while one shows, else as every other line."""
        import click

        if self.progress is not None:
            self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(line, err=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


@contextlib.contextmanager
def simulation_progress():
    """A ``SimulationProgress`` for the length of a simulate command, its bars gone at the end however it ends."""
    shown = SimulationProgress()
    try:
        yield shown
    finally:
        shown.close()


def print_sweep_summary(result: Result, output: Path | None) -> None:
    header = ["series", "ok", "bytes/s at lowest B", "% spec/meas BW", "best FLOP/s (B)", "% spec/meas peak"]
    rows = summarize_series(result)
    cells = []
    for row in rows:
        ok = f"{row.points_ok}/{row.points_total}"
        if row.failed_checks:
            ok += f" [red]{row.failed_checks} wrong[/]"
        low = f"{_with_ci(row.low_batch_bytes_per_s, row.low_batch_bytes_per_s_ci95, 'B/s')} ({row.low_batch})" \
            if row.low_batch else "–"
        peak = f"{_with_ci(row.peak_flop_per_s, row.peak_flop_per_s_ci95, 'FLOP/s')} ({row.peak_batch})" \
            if row.peak_flop_per_s else "–"
        mark = marked_percent
        bandwidth = f"{mark(row.pct_of_spec_bandwidth, 0)} / {mark(row.pct_of_measured_bandwidth, 0)}"
        compute = f"{mark(row.pct_of_spec_peak, 0)} / {mark(row.pct_of_measured_peak, 0)}"
        mixer = f" {row.mixer_tag}" if row.mixer_tag else ""
        cells.append([escape(f"{row.op} {row.dtype} {row.n}×{row.k}{mixer}{backend_tag(row.backend)}"), ok, escape(low),
                      escape(bandwidth), escape(peak), escape(compute)])
    print_split_table(result.device.label, header, cells, markup=True)
    measured = result.ceilings.measured
    if measured and measured.copy and measured.read:
        stdout.print(f"measured copy {measured.copy.format('bytes_per_s')} ({measured.copy.timer}), "
                     f"read {measured.read.format('bytes_per_s')}")
    reference = reference_bandwidth(result.ceilings)
    if reference:
        stdout.print(escape(f"% meas BW is of the reference bandwidth: {reference.label} ({reference.why})"))
    by_compute: dict[str, list[str]] = {}
    for dtype in sorted({row.dtype for row in rows}):
        by_compute.setdefault(compute_dtype(dtype), []).append(dtype)
    for computes_in, dtypes in by_compute.items():  # a weight-only format's peak is its compute dtype's
        peak = result_peak(result, computes_in)
        if peak:
            stdout.print(escape(f"% meas peak ({', '.join(dtypes)}) is of {peak.label}"))
    for line in over_ceiling_lines(result, rows):
        stdout.print(f"[yellow]warning: {escape(line)}[/]")
    failed = sum(p.correct is False for p in result.points)
    bad = [p for p in result.points if not p.ok]
    if failed:
        stdout.print(f"[red]{failed} point(s) failed the correctness check[/]")
    if bad:
        stdout.print(f"{len(bad)} point(s) not measured: "
                     + ", ".join(sorted({p.status for p in bad})))
    if not result.telemetry.sampled:
        stdout.print(f"telemetry: none ({result.telemetry.reason})")
    for line in telemetry_warnings(result.points):
        stdout.print(line)
    if output is not None:
        stdout.print(f"saved {output}")


def _with_ci(value: float | None, ci95: tuple[float, float] | None, unit: str) -> str:
    """A measured rate to the digits its interval supports (``interval_digits``)."""
    return si(value, unit, interval_digits(value, *(ci95 or (None, None))))


def telemetry_warnings(points) -> list[str]:
    """One line per kind of flag, counted per series (shape and back end included), superseded attempts
    excluded: throttled (thermal/hardware, each was measured again) and power-capped (recorded)."""
    lines = []
    for key, label, style in (("throttled", "throttled (thermal or hardware slowdown)", "red"),
                              ("power_capped", "power-capped (sw_power_cap: recorded, not re-measured)", "yellow")):
        series: dict[str, list[int]] = {}
        for p in points:
            if not p.superseded and p.telemetry is not None and getattr(p.telemetry, key):
                where = backend_tag(p.backend)
                series.setdefault(f"{p.op} {p.dtype} {p.n}x{p.k}{where}", []).append(p.batch)
        if series:
            count = sum(len(b) for b in series.values())
            detail = "; ".join(f"{name} B={','.join(map(str, sorted(b)))}" for name, b in series.items())
            lines.append(f"[{style}]{'warning' if key == 'throttled' else 'note'}: {count} point(s) {label}: "
                         f"{escape(detail)}[/]")
    return lines


def _regime_how(entry: PeakRun) -> str:
    """Timer, clock, power and reasons of one compute regime, for the ceilings table."""
    parts = [entry.timer, entry.format("duration_s")]
    clock, power = entry.sm_clock_hz, entry.power_w
    if isinstance(clock, dict):
        parts.append(f"SM {si(clock['min'], 'Hz')}–{si(clock['max'], 'Hz')}")
    if isinstance(power, dict):
        parts.append(f"{si(power['median'], 'W')}")
    if entry.clock_event_reasons:
        parts.append(",".join(entry.clock_event_reasons))
    return ", ".join(parts)


def print_ceilings(ceilings: Ceilings, device: Device) -> None:
    measured, spec = ceilings.measured, ceilings.spec or SpecCeilings()
    table = Table(title=f"ceilings: {device.label}", title_justify="left")
    for column in ("what", "measured", "spec", "% of spec", "how"):
        table.add_column(column)
    spec_bw = spec.memory_bandwidth_bytes_per_s

    def of_spec(value, reference):
        return percent(100 * value / reference if reference and value else None)

    kernels = measured.stream_kernels or {"copy": measured.copy, "read": measured.read}
    for name, entry in kernels.items():
        table.add_row(f"{name} bandwidth", entry.format("bytes_per_s"), spec.format("memory_bandwidth_bytes_per_s"),
                      of_spec(entry.bytes_per_s, spec_bw),
                      f"{entry.kernel} ({entry.timer}), {entry.counts or ''}".rstrip(", "))
    reference = measured.reference_bandwidth or BandwidthChoice(bytes_per_s=measured.bandwidth_bytes_per_s,
                                                                name=measured.bandwidth_kernel)
    table.add_row("reference bandwidth", reference.format("bytes_per_s"), spec.format("memory_bandwidth_bytes_per_s"),
                  of_spec(reference.bytes_per_s, spec_bw), f"best read or copy kernel: {reference.name}")
    for dtype, peak in (measured.peak or {}).items():
        spec_peak = (spec.peak_flop_per_s or {}).get(dtype)
        if not peak.flop_per_s:
            table.add_row(f"{dtype} matmul peak", "–", si(spec_peak, "FLOP/s"), "–", peak.reason)
            continue
        shape = peak.best_shape
        found = f"{peak.kernel}, best of {len(peak.tried or ())}: {shape['m']}×{shape['n']}×{shape['k']}"
        for regime in ("burst", "sustained"):
            entry = getattr(peak, regime)
            if entry:
                table.add_row(f"{dtype} matmul peak ({regime})", entry.format("flop_per_s"),
                              si(spec_peak, "FLOP/s"), of_spec(entry.flop_per_s, spec_peak),
                              f"{found}; {_regime_how(entry)}")
    stdout.print(table)
    if not spec.sku:
        stdout.print(f"spec: {spec.reason}")


def print_devices() -> None:
    from microbench.device.discovery import cuda_status
    from microbench.device.provenance import describe_cpu, describe_cuda

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
    blind = []
    for index in range(count):
        d = describe_cuda(index)
        if not (d.get("nvml") or {}).get("available"):
            blind.append(f"GPU {index}: no NVML ({(d.get('nvml') or {}).get('reason') or 'not available'}), so its "
                         "clocks, power limit, ECC, MIG, processes and GPM are not known")
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
    for line in blind:
        stdout.print(escape(line))


def print_fit(analysis: dict[str, Any]) -> None:
    """The warnings first, one table of series, the references it is against, then the verdict in words."""
    from roofline.report.tables import reference_lines

    title = f"roofline fit: {analysis['device']} ({analysis['sku'] or 'no SKU'})"
    if analysis.get("reference"):
        title += f" — reference data from {analysis['reference']['package']}"
    elif analysis["origin"] == "imported":
        title += " — imported data"
    for line in analysis.get("warnings") or []:
        stdout.print(f"[yellow]warning: {escape(line)}[/]")
    header, rows = series_table(analysis)
    if rows:
        print_split_table(title, header, rows,
                          justify=lambda _, column: "left" if column in ("series", "flags") else "right")
    for line in reference_lines(analysis):
        stdout.print(escape(line))
    if analysis.get("reference"):
        from roofline.result.sections import ReferenceSource

        source = ReferenceSource.from_dict(analysis["reference"])
        assert isinstance(source, ReferenceSource)  # from_dict builds the record it is called on
        words = source.words()
        stdout.print(escape(f"Reference data, not measured here: {words} ({analysis['reference']['file']})."))
    if analysis["spec_reason"]:
        stdout.print(f"spec: {analysis['spec_reason']}")
    header, rows = formats_table(analysis)
    if rows:
        _print_rows(f"weight-only formats against bf16: {analysis['device']}", header, rows)
    for line in analysis["verdict"]:
        stdout.print(escape(line))


def _print_rows(title: str, header: list[str], rows: list[list[str]]) -> None:
    print_split_table(title, header, rows, justify=lambda index, _: "left" if index < 2 else "right")


def print_decode(document: dict[str, Any]) -> None:
    """Measured and analytic side by side, one row per batch, then the answer in words."""
    setup = document["setup"]
    parts = [(key, document[key]) for key in ("measured", "analytic") if document.get(key)]
    # A weight-only format names what it quantizes: the linears, not the embeddings and LM head (bf16).
    head_dtype = f", embeddings and LM head {compute_dtype(setup['dtype'])}" if is_weight_only(setup["dtype"]) else ""
    title = (f"decode: {setup['model']}, TP {setup['tp']}, context {setup['context']}, {setup['dtype']}{head_dtype} "
             f"(KV {setup['kv_dtype']})")
    # The all-reduces' share of the step: a column only where TP > 1 gives them (TP 1's table is as it was).
    columns = ("ms/token", "comm", "tokens/s", "MBU", "MFU", "bound", "KV fits") if setup["tp"] > 1 else \
        ("ms/token", "tokens/s", "MBU", "MFU", "bound", "KV fits")
    header = ["batch"] + [f"{'meas' if key == 'measured' else 'model'} {column}" for key, _ in parts
                          for column in columns]
    rows = []
    for index, batch in enumerate(setup["batches"]):
        cells = [str(batch)]
        for _, part in parts:
            row = part["rows"][index]
            cells += [significant(row["step_time_s"] * 1e3)]
            cells += [percent(100 * row["comm_share"]) if (part.get("comm") or {}).get("interconnect") else "–"] \
                if setup["tp"] > 1 else []
            cells += [significant(row["tokens_per_s"], 4),
                      percent(100 * row["mbu"] if row["mbu"] is not None else None),
                      f"{100 * row['mfu']:.2f}%" if row["mfu"] is not None else "–", escape(row["bound"]),
                      {True: "yes", False: "[red]no[/]", None: "–"}[row["kv_fits"]]]
        rows.append(cells)
    print_split_table(title, header, rows, justify=lambda *_: "right", markup=True)
    kernels = (document.get("measured") or {}).get("kernels") or {}
    if kernels:
        stdout.print(escape("kernels measured: " + "; ".join(f"{dtype} {', '.join(names) or '?'}"
                                                            for dtype, names in kernels.items())))
    for line in document["summary"]:
        stdout.print(f"[yellow]{escape(line)}[/]" if ": warning: " in line else escape(line))


def print_compare(comparison: dict[str, Any], fleet: dict[str, Any]) -> None:
    from roofline.compare.view import (
        COLUMNS,
        FORMAT_COLUMNS,
        GROUPED_COLUMNS,
        difference_lines,
        format_cells,
        format_title,
        grouped_cells,
        grouped_title,
        row_cells,
    )

    for group in comparison["groups"]:
        rows = [row_cells(row, group["speed_vs_baseline"], comparison["baseline"],
                          group.get("significance_vs_baseline")) for row in group["rows"]]
        print_split_table(f"{group['dtype']} {group['n']}×{group['k']}", list(COLUMNS), rows)
        for line in difference_lines(group)[:12]:
            stdout.print(escape(line))
    for group in comparison.get("formats") or []:
        _print_rows(format_title(group), list(FORMAT_COLUMNS), [format_cells(row) for row in group["rows"]])
    for group in comparison.get("grouped") or []:
        _print_rows(grouped_title(group), list(GROUPED_COLUMNS), [grouped_cells(row) for row in group["rows"]])
    for line in comparison["not_comparable"]:
        stdout.print(f"[yellow]not comparable: {line}[/]")
    for line in comparison.get("reference_verdicts") or []:
        stdout.print(escape(line))
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
