"""The result document: one JSON file per run, versioned, SI units with the unit in every key.

``Point`` is one (op, dtype, shape, batch) measurement with all its raw samples; ``Result`` holds the
environment, the settings, the ceilings, the points and the telemetry timeline.  Both are frozen and
validated on construction, so a document that loads is a document every analysis can trust.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from roofline.core.counting import DTYPES, MIXER_OPS, OPS, MixerShape, Work, count_work
from roofline.core.stats import Stats, summarize
from roofline.result.keys import Record
from roofline.result.sections import SECTIONS, Ceilings, Device, Host, PointTelemetry, Settings, Telemetry, Tool

SCHEMA_VERSION = 1
STATUSES = ("ok", "skipped", "oom", "error", "unsupported")
ORIGINS = ("measured", "imported")


def backend_tag(backend: str | None) -> str:
    """The suffix a series' label carries for its back end: none for torch (the default) or imported data
    (their origin is said once, in the title), `` [cupy]`` for the others."""
    return "" if backend in (None, "torch", "imported") else f" [{backend}]"


# No launch of a microbenchmark lasts an hour; a larger sample is a damaged file, and its statistics (the mean
# of a few 1e308 s samples) would overflow to inf far from where the number was read.
MAX_SAMPLE_S = 3600.0
# The floor, scaled to the launch: a sample so short that the point's FLOP or bytes (the minimum traffic: each
# input read once, the output written once) would run faster than this per second is a unit slip, a broken timer
# or a damaged file, not a measurement.  It is a hundred times any device's peak (B200: 8e12 B/s, 9e15 FP8
# FLOP/s), so no cache or clock makes a real launch cross it, and it keeps every rate finite (one 1e-300 s sample
# read as an infinite peak).  A fixed floor in seconds would pass 1e-9 s for a 1 GB weight.
MAX_RATE_PER_S = 1e18


def plausible_time(work: Work, time_s: float) -> bool:
    """A finite positive time whose FLOP/s and bytes/s for ``work`` stay within ``MAX_RATE_PER_S``."""
    return math.isfinite(time_s) and time_s > 0 and max(work.flop, work.bytes) / time_s <= MAX_RATE_PER_S


def _positive_finite(values: list[float] | tuple[float, ...], what: str, work: Work) -> None:
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{what} must hold finite positive numbers, found {v!r}")
        if v > MAX_SAMPLE_S:
            raise ValueError(f"{what} must hold seconds per launch up to {MAX_SAMPLE_S:g}, found {v!r}")
        if not plausible_time(work, v):
            raise ValueError(f"{what} holds {v!r} s: {max(work.flop, work.bytes) / v:.3g} FLOP or bytes per "
                             f"second, past the {MAX_RATE_PER_S:g} no device reaches")


# Point fields stored as given, each with the type it must have (the rest are checked in __post_init__).
_PLAIN_FIELDS = (("backend", str), ("reason", str | None), ("timer", str | None), ("stop_reason", str | None),
                 ("kernel", str | None), ("started_at", str | None), ("finished_at", str | None),
                 ("launches_per_sample", int | None), ("rotation_copies", int | None),
                 ("correctness", dict | None), ("attempt", int), ("superseded", bool))
_KIND_WORDS = {str: "text", str | None: "text or null", int | None: "an integer or null", int: "an integer",
               dict | None: "an object or null", bool: "true or false"}


@dataclass(frozen=True)
class Point:
    """One measured point.  Times are seconds per launch; ``flop`` and ``bytes`` per launch."""

    op: str
    dtype: str
    batch: int
    n: int
    k: int
    backend: str
    status: str
    reason: str | None = None
    timer: str | None = None
    samples_s: tuple[float, ...] = ()
    warmup_samples_s: tuple[float, ...] = ()
    eager_samples_s: tuple[float, ...] = ()
    launches_per_sample: int | None = None
    stop_reason: str | None = None
    rotation_copies: int | None = None
    correctness: dict[str, Any] | None = None
    telemetry: PointTelemetry | None = None  # a dict is accepted and typed
    started_at: str | None = None
    finished_at: str | None = None
    # A point flagged by telemetry (throttled, clock drift) is measured again: the first attempt is kept
    # with superseded=True, the second has attempt=2, and analyses use only points not superseded.
    attempt: int = 1
    superseded: bool = False
    kernel: str | None = None  # what ran: torch.matmul, cuBLAS via cupy.matmul, gpubench gemv_warp, ...
    # A grouped GEMM (op "grouped"): ``experts`` N×K matrices, each of the ``batch`` tokens routed to ``topk`` of
    # them by ``routing`` (balanced | uniform | zipf:S | power-law:ALPHA, seeded), of which ``touched`` got at least
    # one token: the weights the launch really read.  None for every other op.
    experts: int | None = None
    topk: int | None = None
    routing: str | None = None
    touched: int | None = None
    # A recurrent mixer's state update or DSA's sparse attention (op "state_update", "sparse_attention"): the
    # mixer's shape beyond n and k (``roofline.core.counting.MixerShape``; a dict is accepted and typed).  None for
    # every other op.
    mixer: MixerShape | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}")
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        for name in ("batch", "n", "k"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, found {value!r}")
        grouped = (self.experts, self.topk, self.routing, self.touched)
        if self.op == "grouped":
            counts = (self.experts, self.topk, self.touched)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts) or \
                    not isinstance(self.routing, str):
                raise ValueError("a grouped point needs integer experts, topk and touched, and a routing")
        elif any(v is not None for v in grouped):
            raise ValueError(f"experts, topk, routing and touched belong to grouped points, not {self.op}")
        if isinstance(self.mixer, dict):
            object.__setattr__(self, "mixer", MixerShape.from_dict(self.mixer))
        if (self.mixer is not None) != (self.op in MIXER_OPS):
            raise ValueError(f"a mixer shape belongs to {' and '.join(MIXER_OPS)} points, and they need one "
                             f"({self.op} has {'one' if self.mixer is not None else 'none'})")
        work = self.work  # raises on impossible combinations
        _positive_finite(self.samples_s, "samples_s", work)
        _positive_finite(self.warmup_samples_s, "warmup_samples_s", work)
        _positive_finite(self.eager_samples_s, "eager_samples_s", work)
        if self.status == "ok" and not self.samples_s:
            raise ValueError("an ok point needs samples")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a point with status {self.status!r} needs a reason")
        for name, kind in _PLAIN_FIELDS:  # kept as given: a list for backend would be a TypeError much later
            value = getattr(self, name)
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise ValueError(f"{name} must be {_KIND_WORDS[kind]}, found {value!r}")
        if self.attempt < 1:
            raise ValueError(f"attempt must be 1 or more, found {self.attempt!r}")
        if self.telemetry is not None:
            object.__setattr__(self, "telemetry", PointTelemetry.from_dict(self.telemetry, "telemetry"))

    # Shape conventions: gemm reads X[m=B, K]; bmm is `groups`=B GEMVs, each with m = 1; a mixer op updates
    # `groups`=B sequences' own state (or reads their own cache), one token each.
    @property
    def m(self) -> int:
        return 1 if self.op in ("gemv", "bmm") + MIXER_OPS else self.batch

    @property
    def groups(self) -> int:
        return self.batch if self.op in ("bmm",) + MIXER_OPS else 1

    # Derived once per point: a sweep saves (and so serialises every point) after each new point.
    @cached_property
    def work(self) -> Work:
        if self.op == "grouped":
            return count_work(self.op, self.dtype, self.batch, self.n, self.k, self.experts or 1, self.topk or 1,
                              self.touched)
        return count_work(self.op, self.dtype, self.batch, self.n, self.k, mixer=self.mixer)

    @property
    def flop(self) -> int:
        return self.work.flop

    @property
    def bytes(self) -> int:
        return self.work.bytes

    @property
    def intensity_flop_per_byte(self) -> float:
        return self.flop / self.bytes

    @cached_property
    def stats(self) -> Stats | None:
        return summarize(self.samples_s) if self.samples_s else None

    @cached_property
    def eager_stats(self) -> Stats | None:
        return summarize(self.eager_samples_s) if self.eager_samples_s else None

    @property
    def launch_overhead_s(self) -> float | None:
        """Eager median minus graph median: what one launch costs beyond the kernel."""
        if self.timer != "cuda-graph" or not self.eager_samples_s or not self.samples_s:
            return None
        return self.eager_stats.median_s - self.stats.median_s

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def usable(self) -> bool:
        """What analyses use: measured, not shown wrong, not replaced by a second attempt."""
        return self.ok and self.correct is not False and not self.superseded

    @property
    def correct(self) -> bool | None:
        return None if self.correctness is None else bool(self.correctness.get("passed"))

    @property
    def throttled(self) -> bool:
        """Telemetry saw a thermal or hardware slowdown in this point's timed phase."""
        return bool(self.telemetry is not None and self.telemetry.throttled)

    @property
    def window_s(self) -> tuple[float, float] | None:
        """The timed phase on the telemetry clock, when telemetry recorded it."""
        window = self.telemetry.window_s if self.telemetry is not None else None
        return (window[0], window[1]) if window else None

    @property
    def grouping(self) -> tuple:
        """What a grouped point adds to its identity: (experts, topk, routing); a mixer op's, its mixer shape; () for
        every other op."""
        if self.op == "grouped":
            return (self.experts, self.topk, self.routing)
        return (self.mixer,) if self.mixer is not None else ()

    @property
    def plan_key(self) -> tuple:
        """Identifies the planned point: what --resume matches on."""
        return (self.op, self.dtype, self.batch, self.n, self.k, self.backend) + self.grouping

    @property
    def launch_key(self) -> tuple:
        """What a step model's launch is timed by (``roofline.step.launches.Launch.key``; a mixer op's, as
        ``roofline.decode.step.DecodeSetup.point_keys`` keys it)."""
        return (self.op, self.dtype, self.batch, self.n, self.k) + self.grouping[:2]

    @property
    def series_key(self) -> tuple:
        return (self.op, self.backend, self.dtype, self.n, self.k) + self.grouping

    def to_dict(self) -> dict[str, Any]:
        stats = self.stats
        eager = self.eager_stats
        median = stats.median_s if stats else None
        return {
            "op": self.op,
            "backend": self.backend,
            "dtype": self.dtype,
            "batch": self.batch,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "groups": self.groups,
            "flop": self.flop,
            "bytes": self.bytes,
            "intensity_flop_per_byte": self.intensity_flop_per_byte,
            "status": self.status,
            "reason": self.reason,
            "timer": self.timer,
            "launches_per_sample": self.launches_per_sample,
            "stop_reason": self.stop_reason,
            "rotation_copies": self.rotation_copies,
            "samples_s": list(self.samples_s),
            "warmup_samples_s": list(self.warmup_samples_s),
            "eager_samples_s": list(self.eager_samples_s),
            "stats": stats.to_dict() if stats else None,
            "eager_stats": eager.to_dict() if eager else None,
            "launch_overhead_s": self.launch_overhead_s,
            "time_s": median,
            "flop_per_s": self.flop / median if median else None,
            "bytes_per_s": self.bytes / median if median else None,
            "correctness": self.correctness,
            "telemetry": self.telemetry.to_dict() if self.telemetry is not None else None,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempt": self.attempt,
            "superseded": self.superseded,
            "kernel": self.kernel,
            **({"experts": self.experts, "topk": self.topk, "routing": self.routing, "touched": self.touched}
               if self.op == "grouped" else {}),
            **({"mixer": self.mixer.to_dict()} if self.mixer is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Point:
        """Rebuild from the stored document; derived figures are recomputed, never trusted."""
        point = cls(
            op=d["op"],
            dtype=d["dtype"],
            batch=d["batch"],
            n=d["n"],
            k=d["k"],
            backend=d["backend"],
            status=d["status"],
            reason=d.get("reason"),
            timer=d.get("timer"),
            samples_s=tuple(d.get("samples_s") or ()),
            warmup_samples_s=tuple(d.get("warmup_samples_s") or ()),
            eager_samples_s=tuple(d.get("eager_samples_s") or ()),
            launches_per_sample=d.get("launches_per_sample"),
            stop_reason=d.get("stop_reason"),
            rotation_copies=d.get("rotation_copies"),
            correctness=d.get("correctness"),
            telemetry=d.get("telemetry"),
            started_at=d.get("started_at"),
            finished_at=d.get("finished_at"),
            attempt=d.get("attempt", 1),
            superseded=bool(d.get("superseded", False)),
            kernel=d.get("kernel"),
            experts=d.get("experts"),
            topk=d.get("topk"),
            routing=d.get("routing"),
            touched=d.get("touched"),
            mixer=d.get("mixer"),
        )
        for key in ("flop", "bytes"):
            if key in d and d[key] != getattr(point, key):
                raise ValueError(f"stored {key}={d[key]} disagrees with the count for this op and shape")
        return point


def _check_measured_once(points: tuple[Point, ...]) -> None:
    """One measurement per planned point (``Point.plan_key``), besides first attempts marked ``superseded``.

    A repeat is refused, not merged or dropped: two measurements of one point come from two runs (results
    concatenated, a CSV pasted twice), and pooling them would count the batch twice in the fit's bootstrap and
    narrow every interval, while keeping one would hide the other.  Which of the two stands is the user's call."""
    first: dict[tuple, int] = {}
    for index, point in enumerate(points):
        if point.superseded:
            continue
        seen = first.setdefault(point.plan_key, index)
        if seen != index:
            raise ValueError(f"points[{index}] repeats points[{seen}] ({point.op} {point.dtype} {point.n}x{point.k} "
                             f"B={point.batch}{backend_tag(point.backend)}): a point is measured once (a second "
                             "attempt marks the first superseded)")


@dataclass(frozen=True)
class Result:
    """One run: who measured what, where, how, and every point.

    The sections are typed records (roofline.result.sections); a plain dict given for one is validated and typed,
    so writers may build them as dicts."""

    tool: Tool
    created_at: str
    argv: tuple[str, ...]
    host: Host
    device: Device
    settings: Settings
    ceilings: Ceilings = field(default_factory=Ceilings)
    points: tuple[Point, ...] = ()
    telemetry: Telemetry = field(default_factory=Telemetry)
    origin: str = "measured"
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not {SCHEMA_VERSION}")
        if self.origin not in ORIGINS:
            raise ValueError(f"unknown origin {self.origin!r}")
        for name, record in SECTIONS.items():
            value = getattr(self, name)
            if not isinstance(value, (dict, Record)):
                raise ValueError(f"{name} must be an object")
            object.__setattr__(self, name, record.from_dict(value))
        if not all(isinstance(p, Point) for p in self.points):
            raise ValueError("points must be Point objects")
        _check_measured_once(self.points)

    def with_point(self, point: Point) -> Result:
        return replace(self, points=(*self.points, point))

    def with_ceilings(self, ceilings: Ceilings | dict[str, Any]) -> Result:
        return replace(self, ceilings=ceilings)

    def with_telemetry(self, telemetry: Telemetry | dict[str, Any]) -> Result:
        return replace(self, telemetry=telemetry)

    def ok_points(self) -> list[Point]:
        return [p for p in self.points if p.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "origin": self.origin,
            "tool": self.tool.to_dict(),
            "created_at": self.created_at,
            "argv": list(self.argv),
            "host": self.host.to_dict(),
            "device": self.device.to_dict(),
            "settings": self.settings.to_dict(),
            "ceilings": self.ceilings.to_dict(),
            "points": [p.to_dict() for p in self.points],
            "telemetry": self.telemetry.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        points = []
        for index, raw in enumerate(d["points"]):
            if not isinstance(raw, dict):
                raise ValueError(f"points[{index}] is not an object")
            try:
                points.append(Point.from_dict(raw))
            except KeyError as exc:
                raise ValueError(f"points[{index}] lacks {exc}") from None
            except (TypeError, ValueError) as exc:
                raise ValueError(f"points[{index}]: {exc}") from None
        return cls(
            schema_version=d["schema_version"],
            origin=d.get("origin", "measured"),
            tool=d["tool"],
            created_at=d["created_at"],
            argv=tuple(d["argv"]),
            host=d["host"],
            device=d["device"],
            settings=d["settings"],
            ceilings=d.get("ceilings") or {},
            points=tuple(points),
            telemetry=d.get("telemetry") or {},
        )
