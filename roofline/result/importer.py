"""Bring measurements made elsewhere into a result document, so they get the same fit and reports.

CSV, one row per sample, columns ``op,dtype,batch,n,k,time_s`` (extra columns are ignored).  Rows with a
NaN, zero or negative time, or one so short that no device could reach the rate it implies, are dropped
and counted; a point left with no valid sample is recorded as an
``error`` point saying so, and the rest is still imported.  A file with no valid time at all is refused.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from roofline.core.counting import count_work
from roofline.core.errors import BadInputError
from roofline.result.document import Point, Result, plausible_time
from roofline.specs.gpus import load_gpu_spec, match_gpu_spec

COLUMNS = ("op", "dtype", "batch", "n", "k", "time_s")
TOO_SHORT = "NaN, zero or negative, or too short to be real"


class CsvError(BadInputError):
    """A CSV that cannot be imported: one line, exit 2."""


def _parse_row(row: dict[str, str | None], where: str) -> tuple[tuple, float]:
    if any(row.get(column) is None for column in COLUMNS):  # csv fills the columns a short row lacks with None
        given = sum(row.get(column) is not None for column in COLUMNS)
        raise CsvError(f"{where}: {given} of the {len(COLUMNS)} columns {','.join(COLUMNS)}")
    try:
        key = (row["op"].strip(), row["dtype"].strip(), int(row["batch"]), int(row["n"]), int(row["k"]))
    except ValueError:
        raise CsvError(f"{where}: op,dtype,batch,n,k must be text and integers") from None
    try:
        time_s = float(row["time_s"])
    except (TypeError, ValueError):
        time_s = math.nan
    return key, time_s


def _plausible(key: tuple, time_s: float) -> bool:
    """A time a device could take (``document.plausible_time``: the rule every loaded sample meets)."""
    if not (math.isfinite(time_s) and time_s > 0):
        return False
    try:
        work = count_work(*key)
    except ValueError:
        return True  # an impossible point: the Point built from it says why, naming the line's values
    return plausible_time(work, time_s)


def read_samples(path: Path) -> tuple[dict[tuple, list[float]], dict[tuple, int]]:
    """Valid samples per point, and the count of dropped (NaN, zero, negative) samples per point."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # Excel starts its UTF-8 CSVs with a byte-order mark
    except FileNotFoundError:
        raise CsvError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CsvError(f"{path}: cannot read ({exc})") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CsvError(f"{path}: missing column(s) {', '.join(missing)}; need {','.join(COLUMNS)}")
    samples: dict[tuple, list[float]] = defaultdict(list)
    dropped: dict[tuple, int] = defaultdict(int)
    for row in reader:
        key, time_s = _parse_row(row, f"{path} line {reader.line_num}")
        if _plausible(key, time_s):
            samples[key].append(time_s)
        else:
            dropped[key] += 1
            samples.setdefault(key, [])
    if not samples:
        raise CsvError(f"{path}: no data rows")
    return samples, dropped


def import_csv(path: Path, device_name: str, sku: str | None = None, device_kind: str = "cuda",
               argv: tuple[str, ...] = ()) -> Result:
    samples, dropped = read_samples(Path(path))
    if not any(samples.values()):  # a result of error points only: nothing to fit, and an exit 0 would hide it
        raise CsvError(f"{path}: none of its {sum(dropped.values())} time(s) can be imported: every one is "
                       f"{TOO_SHORT}")
    profile = load_gpu_spec(sku) if sku else match_gpu_spec(device_name, None)
    points = []
    warnings = []
    for key in sorted(samples):
        op, dtype, batch, n, k = key
        common = {"op": op, "dtype": dtype, "batch": batch, "n": n, "k": k, "backend": "imported"}
        try:
            if samples[key]:
                points.append(Point(status="ok", timer="imported", samples_s=tuple(samples[key]), **common))
            else:
                points.append(Point(status="error", **common,
                                    reason=f"all {dropped[key]} time(s) were {TOO_SHORT}"))
        except ValueError as exc:
            raise CsvError(f"{path}: point {op} {dtype} batch={batch} {n}x{k}: {exc}") from None
        if dropped[key] and samples[key]:
            warnings.append(f"{op} {dtype} batch={batch} {n}x{k}: dropped {dropped[key]} time(s): {TOO_SHORT}")
    device: dict[str, Any] = {"kind": device_kind, "name": device_name, "sku": profile.sku if profile else None}
    ceilings = {"spec": profile.to_dict() if profile else {"sku": None, "reason": "no SKU given or matched"}}
    return Result(
        tool={"name": "gpubench", "imported_from": str(path)},
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        argv=argv, host={}, device=device,
        settings={"timer": "imported", "source_file": str(path), "import_warnings": warnings},
        ceilings=ceilings, points=tuple(points),
        telemetry={"source": "none", "reason": "imported data has no telemetry"},
        origin="imported",
    )
