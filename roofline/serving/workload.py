"""Workloads: requests with arrival times and prompt/output lengths, generated from a seed or read from a trace.

Lengths are integers of at least one token: a request always produces its first token.  The random streams
for arrivals, prompts and outputs are separate, so changing the arrival rate (the capacity search does) keeps
every request's lengths.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import BadInputError
from roofline.core.options import check_seed  # the one seed rule of every command


class WorkloadError(BadInputError):
    """A workload spec or trace that cannot be used; one line."""


# Bounds that no real workload reaches and that keep every sum and rate finite: a billion tokens is far past
# any context window (a trace's longer rows reach the simulator, which names the profile's own limit), and a
# billion seconds is 31 years.
MAX_LENGTH_TOKENS = 10**9
MAX_ARRIVAL_S = 1e9
# The most requests one workload (generated or a trace) holds.  The simulator steps every request in Python and
# keeps each one's state, outcome and token times for every policy: a million requests already take hours per
# policy, and ten billion (a typo) cannot even be allocated.
MAX_REQUESTS = 10**6
# The least a simulated run keeps per request (its request, state, outcome and requests.csv row) and per output
# token (its time, 8 bytes in an array): what ``check_fits_in_memory`` weighs against the memory available.
REQUEST_BYTES = 1024
TOKEN_TIME_BYTES = 8


@dataclass(frozen=True)
class Request:
    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.arrival_s) or not 0 <= self.arrival_s <= MAX_ARRIVAL_S:
            raise WorkloadError(f"request {self.id}: arrival_s must be a number from 0 to {MAX_ARRIVAL_S:.0e} s, "
                                f"got {self.arrival_s}")
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WorkloadError(f"request {self.id}: {name} must be an integer >= 1, got {value!r}")


def _numbers(spec: str, parts: list[str], count: tuple[int, ...]) -> list[float]:
    if len(parts) not in count:
        raise WorkloadError(f"{spec!r}: wrong number of fields")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise WorkloadError(f"{spec!r}: fields must be numbers") from None
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise WorkloadError(f"{spec!r}: fields must be positive")
    return values


def sample_lengths(spec: str, n: int, rng: np.random.Generator) -> list[int]:
    """``fixed:N`` | ``uniform:A:B`` (inclusive) | ``exp:MEAN[:CAP]`` | ``lognormal:MEDIAN:SIGMA[:CAP]``."""
    raw = _raw_lengths(spec, n, rng)
    if not np.all(np.isfinite(raw)) or np.max(raw) > MAX_LENGTH_TOKENS:
        raise WorkloadError(f"{spec!r}: lengths reach past {MAX_LENGTH_TOKENS:,} tokens; give smaller numbers")
    return [max(1, int(round(v))) for v in raw]


def _raw_lengths(spec: str, n: int, rng: np.random.Generator) -> np.ndarray:
    kind, *parts = spec.strip().split(":")
    if kind == "fixed":
        (value,) = _numbers(spec, parts, (1,))
        raw = np.full(n, value)
    elif kind == "uniform":
        lo, hi = _numbers(spec, parts, (2,))
        if hi < lo:
            raise WorkloadError(f"{spec!r}: B must be at least A")
        if hi > MAX_LENGTH_TOKENS:  # numpy's integers() cannot take 1e308 ("high is out of bounds for int64")
            raise WorkloadError(f"{spec!r}: lengths reach past {MAX_LENGTH_TOKENS:,} tokens; give smaller numbers")
        raw = rng.integers(int(lo), int(hi) + 1, size=n)
    elif kind == "exp":
        mean, *cap = _numbers(spec, parts, (1, 2))
        raw = np.minimum(rng.exponential(mean, size=n), cap[0] if cap else np.inf)
    elif kind == "lognormal":
        median, sigma, *cap = _numbers(spec, parts, (2, 3))
        raw = np.minimum(rng.lognormal(math.log(median), sigma, size=n), cap[0] if cap else np.inf)
    else:
        raise WorkloadError(f"{spec!r}: lengths are fixed:N, uniform:A:B, exp:MEAN[:CAP] or "
                            "lognormal:MEDIAN:SIGMA[:CAP]")
    return np.asarray(raw, dtype=float)


def arrival_times(spec: str, n: int, rng: np.random.Generator) -> list[float]:
    """``burst`` (all at t = 0) or ``poisson:RATE`` (requests per second, exponential gaps, first at its gap)."""
    kind, *parts = spec.strip().split(":")
    if kind == "burst" and not parts:
        return [0.0] * n
    if kind == "poisson":
        (rate,) = _numbers(spec, parts, (1,))
        times = np.cumsum(rng.exponential(1 / rate, size=n))
        if not np.all(np.isfinite(times)) or times[-1] > MAX_ARRIVAL_S:
            raise WorkloadError(f"{spec!r}: at this rate the requests arrive over more than {MAX_ARRIVAL_S:.0e} s; "
                                "give a higher rate")
        return [float(t) for t in times]
    raise WorkloadError(f"{spec!r}: arrivals are burst or poisson:RATE")


def check_request_count(n: int) -> int:
    """The one rule for ``--requests``: an integer from 1 to ``MAX_REQUESTS``."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_REQUESTS:
        raise WorkloadError(f"--requests {n!r}: give an integer from 1 to {MAX_REQUESTS:,} (each request is "
                            "stepped and kept in memory for every policy)")
    return n


def available_memory_bytes() -> int | None:
    """Memory a new allocation can have now (None where the system does not say): Linux's MemAvailable, which
    counts the page cache the kernel would give back (free pages alone undercount a busy machine), else the
    free pages."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits_in_memory(requests: list[Request], runs: int) -> None:
    """Refuse a workload whose ``runs`` simulated runs (one per policy, all kept for the report) need more memory
    than is available, before the first step: a MemoryError hours in is the same refusal, later and as a traceback."""
    tokens = sum(r.output_tokens for r in requests)
    needed = runs * (len(requests) * REQUEST_BYTES + tokens * TOKEN_TIME_BYTES)
    free = available_memory_bytes()
    if free is not None and needed > free:
        raise WorkloadError(f"{len(requests):,} requests of {tokens:,} output tokens under {runs} polic"
                            f"{'y' if runs == 1 else 'ies'} need at least {needed / 1e9:.1f} GB, and "
                            f"{free / 1e9:.1f} GB is available: give fewer --requests or shorter --output")


def make_workload(n: int, arrivals: str, prompt: str, output: str, seed: int = 0) -> list[Request]:
    check_request_count(n)
    check_seed(seed)
    streams = np.random.SeedSequence(seed).spawn(3)
    times = arrival_times(arrivals, n, np.random.default_rng(streams[0]))
    prompts = sample_lengths(prompt, n, np.random.default_rng(streams[1]))
    outputs = sample_lengths(output, n, np.random.default_rng(streams[2]))
    return [Request(i, t, p, o) for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))]


def with_arrivals(requests: list[Request], arrivals: str, seed: int = 0) -> list[Request]:
    """The same requests (same lengths) under another arrival process: what a rate search varies."""
    times = arrival_times(arrivals, len(requests), np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[0]))
    return [replace(r, arrival_s=t) for r, t in zip(requests, times, strict=True)]


def load_trace(path: str | Path) -> list[Request]:
    """A CSV with columns ``arrival_s,prompt_tokens,output_tokens`` (others ignored), sorted by arrival."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as stream:  # -sig: a spreadsheet's BOM is not a column
            reader = csv.DictReader(stream)
            missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(reader.fieldnames or ())
            if missing:
                raise WorkloadError(f"{path}: trace lacks column(s) {', '.join(sorted(missing))}")
            rows = []
            for row in reader:  # counted while read: a huge trace is refused before it fills the memory
                if len(rows) == MAX_REQUESTS:
                    raise WorkloadError(f"{path}: trace has more than {MAX_REQUESTS:,} requests; give a shorter one")
                rows.append(row)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: not a UTF-8 text CSV") from None
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            arrival, prompt, output = float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"])
        except (TypeError, ValueError):
            raise WorkloadError(f"{path}: line {line}: arrival_s must be a number, token counts integers") from None
        try:
            out.append(Request(len(out), arrival, prompt, output))
        except WorkloadError as exc:
            raise WorkloadError(f"{path}: line {line}: {exc}") from None
    if not out:
        raise WorkloadError(f"{path}: trace has no requests")
    out.sort(key=lambda r: (r.arrival_s, r.id))
    return [replace(r, id=i) for i, r in enumerate(out)]


def read_workload(trace: Path | None, requests: int, arrivals: str, prompt: str, output: str,
                  seed: int) -> tuple[list[Request], dict[str, Any]]:
    """A command's workload and the record its document keeps of it: the ``trace`` replayed, or ``requests`` drawn
    from the arrival and length specs with ``seed``."""
    if trace is not None:
        return load_trace(trace), {"trace": str(trace)}
    spec = {"requests": requests, "arrivals": arrivals, "prompt": prompt, "output": output, "seed": seed}
    return make_workload(requests, arrivals, prompt, output, seed), spec


def describe_lengths(spec: str) -> str:
    """A length spec in words: ``exp:128:512`` -> "exponential, mean 128 tokens, capped at 512"."""
    kind, *parts = str(spec).strip().split(":")
    shapes = {("fixed", 1): "{} tokens each", ("uniform", 2): "uniform from {} to {} tokens",
              ("exp", 1): "exponential, mean {} tokens", ("exp", 2): "exponential, mean {} tokens, capped at {}",
              ("lognormal", 2): "log-normal, median {} tokens, sigma {}",
              ("lognormal", 3): "log-normal, median {} tokens, sigma {}, capped at {}"}
    shape = shapes.get((kind, len(parts)))
    return shape.format(*parts) if shape else str(spec)  # a spec this version does not know: as written


def describe_arrivals(spec: str) -> str:
    """``burst`` -> "all arriving at once (a burst)"; ``poisson:4`` -> "Poisson arrivals at 4 requests/s"."""
    kind, *parts = str(spec).strip().split(":")
    if kind == "burst" and not parts:
        return "all arriving at once (a burst)"
    if kind == "poisson" and len(parts) == 1:
        return f"Poisson arrivals at {parts[0]} requests/s"
    return f"arrivals {spec}"


def describe_workload(workload: dict[str, Any]) -> str:
    """The workload record of a simulation or plan document in words, for a report (a plan's has no arrivals:
    it sweeps the rate)."""
    if workload.get("trace"):
        return f"requests replayed from the trace {workload['trace']}"
    parts = [f"{workload['requests']:,} requests" if "requests" in workload else "requests"]
    if workload.get("arrivals"):
        parts[0] += f", {describe_arrivals(workload['arrivals'])}"
    if workload.get("prompt"):
        parts.append(f"prompts {describe_lengths(workload['prompt'])}")
    if workload.get("output"):
        parts.append(f"outputs {describe_lengths(workload['output'])}")
    if workload.get("seed") is not None:
        parts.append(f"seed {workload['seed']}")
    return "; ".join(parts)
