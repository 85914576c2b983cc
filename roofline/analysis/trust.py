"""How far to trust a result: the noise and gaps a reader must see before any number (noise is
shown, not hidden).  One list of sentences, used by ``fit``, the report's warnings, the verdict and
``decode``'s measured table.

- the device was busy when the run started (``settings.busy_at_start``);
- points whose 95% CI of the median is wider than the run's target, whatever their sample count (fewer
  than ``stats.MIN_SAMPLES_FOR_CI`` samples: the interval is the whole range), and single-sample points,
  which have no interval at all;
- a series that stopped before the batches its op was measured at elsewhere (an interrupted sweep); a series
  that is ``unsupported`` at every batch is not one (bmm in a weight-only format, fp8 before compute
  capability 8.9: the op does not exist there, and the report lists those points with their reason);
- a series with too few ok points to fit.
"""

from __future__ import annotations

from collections.abc import Iterable

from roofline.result.document import Point, Result, backend_tag
from roofline.result.sections import Busy

# Imported or old results name no target: a CI wider than ±5% is noisy by any standard.
DEFAULT_TARGET_REL_CI = 0.05


def _label(p: Point) -> str:
    where = backend_tag(p.backend)
    return f"{p.op} {p.dtype} {p.n}x{p.k}{where} B={p.batch}"


def noisy_points(points: Iterable[Point], target_rel_ci: float) -> tuple[list[Point], list[Point]]:
    """(points whose CI is wider than the target, points with a single sample)."""
    wide, single = [], []
    for p in points:
        if not p.usable:
            continue
        if p.stats.n == 1:
            single.append(p)
        elif p.stats.rel_ci95_half_width > target_rel_ci:
            wide.append(p)
    return wide, single


def point_noise_lines(points: list[Point], target_rel_ci: float) -> list[str]:
    wide, single = noisy_points(points, target_rel_ci)
    lines = []
    if wide:
        worst = max(wide, key=lambda p: p.stats.rel_ci95_half_width)
        lines.append(f"{len(wide)} point(s) with a 95% CI wider than the ±{100 * target_rel_ci:.1f}% target "
                     f"(worst: {_label(worst)}, ±{100 * worst.stats.rel_ci95_half_width:.1f}%)")
    if single:
        lines.append(f"{len(single)} point(s) with a single sample: no interval, their noise is unknown")
    return lines


def busy_why(result: Result) -> str | None:
    """Why the device was busy when this result's run started (None: it was not, or nobody checked).  The one
    test of a busy run: ``fit``'s first warning, ``compare``'s verdicts and an analytic profile's basis read it."""
    busy = result.settings.busy_at_start
    if busy is not None and busy.busy:
        return busy.why or "reason not recorded"
    return None


def busy_line(result: Result) -> str | None:
    why = busy_why(result)
    return f"measured on a busy device ({why}): slower and noisier" if why else None


def target_rel_ci(result: Result) -> float:
    return float(result.settings.target_rel_ci or DEFAULT_TARGET_REL_CI)


def incomplete_lines(result: Result, series: dict[tuple, list[Point]]) -> list[str]:
    """Series without an ok point at batches their op has elsewhere in the run, or that the plan named:
    failed points say their status, batches with no point at all were never measured (interrupted)."""
    planned = (result.settings.config or {}).get("batches")
    by_op: dict[str, set[int]] = {}
    for (op, *_), points in series.items():
        by_op.setdefault(op, set()).update(p.batch for p in points if not p.superseded)
    lines = []
    for (op, backend, dtype, n, k, *_), points in series.items():
        if op == "gemv":
            continue
        expected = set(planned) if planned else by_op[op]
        measured = {p.batch for p in points if p.usable}
        failed = {p.batch: p.status if p.correct is not False else "wrong" for p in points
                  if not p.usable and not p.superseded}
        if not measured and set(failed.values()) == {"unsupported"}:
            continue
        missing = sorted(expected - measured)
        if not missing:
            continue
        where = backend_tag(backend)
        never = [b for b in missing if b not in failed]
        kinds = sorted({failed[b] for b in missing if b in failed})
        parts = []
        if kinds:
            parts.append(f"{len(missing) - len(never)} not ok ({', '.join(kinds)})")
        if never:
            parts.append(f"{len(never)} never measured (B={_batches(never)}: interrupted?)")
        lines.append(f"{op} {dtype} {n}x{k}{where}: {len(measured)} of {len(expected)} batches ok; "
                     + ", ".join(parts))
    return lines


def _batches(values: list[int]) -> str:
    return ", ".join(map(str, values[:6])) + ("…" if len(values) > 6 else "")


def trust_lines(result: Result, series: dict[tuple, list[Point]], min_points: int) -> list[str]:
    """Every reason to doubt this result's numbers, one sentence each (empty: nothing known)."""
    lines = [line for line in (busy_line(result),) if line]
    lines += point_noise_lines([p for p in result.points], target_rel_ci(result))
    lines += incomplete_lines(result, series)
    few = [key for key, points in series.items()
           if key[0] != "gemv" and 0 < sum(p.usable for p in points) < min_points]
    if few:
        lines.append(f"{len(few)} series with fewer than {min_points} ok points: not fitted ("
                     + ", ".join(f"{op} {dtype} {n}x{k}" for op, _, dtype, n, k in few[:4]) + ")")
    if not result.ok_points():
        lines.append("no ok points: nothing to fit or draw (a ceilings-only or interrupted result)")
    return lines


def decode_noise_lines(points: list[Point], busy: Busy | None, target: float) -> list[str]:
    """The same warnings for the launches a measured decode step was built from."""
    lines = []
    if busy is not None and busy.busy:
        lines.append(f"measured on a busy device ({busy.why}): step times may be slower and noisier")
    lines += point_noise_lines(points, target)
    return lines
