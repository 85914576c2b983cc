"""Reading a real serving benchmark's per-request results: what each request asked (prompt and output tokens),
when it was sent, and when its tokens came back, in one ``BenchRun`` whatever wrote it.

Each format as its writer writes it (read at the source):

- **vLLM**, ``vllm bench serve --save-result --save-detailed`` (vllm-project/vllm ``vllm/benchmarks/serve.py`` at
  def9ce85ba1079af970a58ed3d42dd861ae35d58, ``benchmark`` and ``main_async``): one JSON object with the run's
  settings (``request_rate``: a number or ``"inf"``, ``burstiness``, ``max_concurrency``: null or an integer,
  ``num_prompts``, ``duration``) and, per request in the order they were sent, ``input_lens`` (prompt tokens),
  ``output_lens`` (tokens generated; 0 for a failed request), ``ttfts`` (seconds from sending to the first token),
  ``itls`` (each request's gaps between streamed chunks, seconds) and ``errors`` (empty string when it
  succeeded).  Send times are not saved: ``get_request`` draws each gap from a gamma distribution (shape
  ``burstiness``, mean 1/``request_rate``; burstiness 1 is Poisson) and rescales the gaps so the last request is
  sent at ``num_prompts / request_rate``; ``"inf"`` sends every request at once; ``max_concurrency`` lets at
  most that many be in flight (a semaphore, in sending order).  So the arrivals are replayed the same way (a
  seeded draw of the same process, recorded as such), or as a closed loop of ``max_concurrency``.  The same
  keys are what SGLang's ``python -m sglang.bench_serving --output-details`` writes (adapted from vLLM's,
  sgl-project/sglang ``python/sglang/bench_serving.py``), one JSON object a line: a file of one line is read
  as vLLM's.
- **GuideLLM**, ``guidellm run --output kind=json`` (guidellm 0.8.1 from PyPI, ``guidellm/benchmark/schemas/
  report.py`` ``GenerativeBenchmarksReport`` and ``guidellm/schemas/base/request_stats.py``; the same report
  version 2 in vllm-project/guidellm at ee7a77457ba668b4b5ccb40f110518829893b36a): ``{"metadata": {"version":
  2, "guidellm_version"}, "config", "benchmarks": [...]}``, one benchmark per strategy of the run (a sweep, or
  ``--override profile.streams 1,4``, has several: each is a run of its own, or pick one with ``--run``).
  Each benchmark's ``config.strategy`` (``type_``: synchronous, concurrent, throughput, constant, poisson;
  ``rate``, ``streams``) and ``requests.successful`` (also ``errored``,
  ``incomplete``), each request with ``request_start_time`` (epoch seconds, when it was sent: the arrival
  replayed), ``prompt_tokens`` and ``output_tokens`` (the server's usage counts when it sent them), and
  ``info.timings`` ``first_token_iteration`` and ``last_token_iteration`` (epoch seconds of the first and last
  streamed token).  GuideLLM keeps no per-token times: its requests have no ITL samples, and the decode span
  (first to last token) is what is fitted.
"""

from __future__ import annotations

import gzip
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import BadInputError
from roofline.core.jsonfile import JsonFileError, parse_json
from roofline.result.io import MAX_RESULT_BYTES
from roofline.serving.latency import ServedRequest
from roofline.serving.workload import MAX_ARRIVAL_S, MAX_GAMMA_CV, MIN_GAMMA_CV, Gamma, Request, WorkloadError

FORMATS = ("vllm", "guidellm")


class BenchError(BadInputError):
    """A benchmark file that cannot be read or replayed; one line."""


def measured(path: str, index: int, arrival_s: float, prompt: int, output: int, first_token_s: float,
             finish_s: float, token_times_s: tuple[float, ...] = ()) -> ServedRequest:
    """One request as the load generator saw it, seconds from the run's first send (``token_times_s``: every
    streamed token's time where the generator kept them, vLLM's ``itls``; else empty, no ITL samples); a request
    the simulator could not take (``Request``'s own bounds) is refused naming the file."""
    try:
        return ServedRequest(Request(index, arrival_s, prompt, output), first_token_s, finish_s, token_times_s)
    except WorkloadError as exc:
        raise BenchError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class BenchRun:
    """One run of a load generator against one engine: its requests (ids 0.. in sending order) and how they
    arrived.  ``arrivals``: ``measured`` (each request's send time, replayed as it was), ``burst``,
    ``poisson:RATE`` or ``gamma:RATE:BURSTINESS`` (the generator's process, drawn again with ``seed``: its own
    draw was not saved), or ``concurrency:C`` (a closed loop: a request is sent when one of the C in flight ends)."""

    path: str
    format: str
    requests: tuple[ServedRequest, ...]
    arrivals: str
    label: str  # what the file says it ran: "poisson@4.00", "vllm request_rate=4 max_concurrency=None"
    source: dict[str, Any] = field(default_factory=dict)  # the generator and its version, when the file says
    dropped: int = 0  # requests that failed or returned no token, not replayed

    @property
    def concurrency(self) -> int | None:
        return int(self.arrivals.split(":")[1]) if self.arrivals.startswith("concurrency:") else None

    def workload(self) -> list[Request]:
        """The requests to simulate: their lengths, and their arrivals where they are known (a closed loop's
        are set as the replay runs: ``roofline.calibrate.replay``)."""
        return [r.request for r in self.requests]

    def describe(self) -> str:
        return (f"{self.path}: {self.format} {self.label}, {len(self.requests)} requests"
                + (f" ({self.dropped} failed, left out)" if self.dropped else "") + f", arrivals {self.arrivals}")


def read_bench(path: str | os.PathLike, fmt: str = "auto", run: int | None = None, seed: int = 0) -> list[BenchRun]:
    """The runs saved in ``path`` (``fmt``: vllm, guidellm or auto: told apart by their keys): every benchmark
    of a file that holds several (GuideLLM's sweep, each replayed on its own), or with ``run`` the one of that
    index, from 0."""
    document = _load(Path(path))
    if fmt == "auto":
        fmt = "guidellm" if isinstance(document, dict) and "benchmarks" in document else "vllm"
    if fmt not in FORMATS:
        raise BenchError(f"--format {fmt!r}: choose from auto, {', '.join(FORMATS)}")
    if fmt == "guidellm":
        return _guidellm(str(path), document, run)
    if run not in (None, 0):
        raise BenchError(f"{path}: a vLLM result holds one run; --run {run} is not in it")
    return [_vllm(str(path), document, seed)]


def _load(path: Path) -> Any:
    """The file's JSON (gzip-compressed where its name ends in ``.gz``: benchmark results compress tenfold)."""
    try:
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise BenchError(f"{path}: larger than {MAX_RESULT_BYTES // 2**20} MiB; not a benchmark result")
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as stream:
                raw = stream.read(MAX_RESULT_BYTES + 1)
            if len(raw) > MAX_RESULT_BYTES:
                raise BenchError(f"{path}: larger than {MAX_RESULT_BYTES // 2**20} MiB uncompressed; not a benchmark "
                                 "result")
            text = raw.decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise BenchError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    try:  # with a nesting cap: a file nested 100,000 deep is bad input, not a RecursionError
        if len(lines) > 1 and lines[0].lstrip().startswith("{") and not text.lstrip().startswith("{\n"):
            # SGLang appends one run per line
            objects = [parse_json(line, f"{path}: line {i}") for i, line in enumerate(lines, start=1)]
            if len(objects) > 1:
                raise BenchError(f"{path}: {len(objects)} runs, one a line; keep the one to calibrate on")
            return objects[0]
        return parse_json(text, str(path))
    except JsonFileError as exc:
        raise BenchError(str(exc)) from None


def _number(value: Any, what: str, low: float = 0.0, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        bounds = f"from {low:g} to {high:g}" if math.isfinite(high) else f">= {low:g}"
        raise BenchError(f"{what} must be a finite number {bounds}, got {_shown(value)}")
    return float(value)


def _seconds(value: Any, what: str) -> float:
    """A measured time (a TTFT, an inter-token gap): 0 to ``MAX_ARRIVAL_S`` seconds (31 years; past it a time is
    no measurement, and 1e308 summed over a request's gaps overflows to inf)."""
    return _number(value, what, high=MAX_ARRIVAL_S)


def _shown(value: Any) -> str:
    """A value from the file as a message shows it: its repr, cut short (a file's value can be a whole list)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar(value: Any) -> str | int | float | None:
    """A value the file says about itself (a model id, a version, a setting), kept for the document only when it is
    a string or a number: a nested value there is no setting."""
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BenchError(f"{what} must be a whole number of tokens, got {_shown(value)}")
    return value


# --- vLLM (and SGLang's copy of its keys) --------------------------------------------------------------------
VLLM_LISTS = ("input_lens", "output_lens", "ttfts", "itls")


def _vllm(path: str, d: Any, seed: int) -> BenchRun:
    if not isinstance(d, dict):
        raise BenchError(f"{path}: not a vLLM benchmark result (a JSON object)")
    missing = [key for key in VLLM_LISTS if not isinstance(d.get(key), list)]
    if missing:
        raise BenchError(f"{path}: no per-request {', '.join(missing)}: save the run with vllm bench serve "
                         "--save-result --save-detailed")
    n = len(d["input_lens"])
    if any(len(d[key]) != n for key in VLLM_LISTS) or n == 0:
        raise BenchError(f"{path}: input_lens, output_lens, ttfts and itls must list the same requests (>= 1)")
    listed = d.get("errors")
    errors: list[Any] = listed if isinstance(listed, list) and len(listed) == n else [""] * n
    drawn = _vllm_arrivals(path, d, n, seed)
    # None: a closed loop, each request sent when one in flight ended
    arrivals = drawn if drawn is not None else closed_loop_sends([_latency(path, d, i) for i in range(n)],
                                                                 int(d["max_concurrency"]))
    kept, dropped = [], 0
    for i in range(n):
        prompt = _count(d["input_lens"][i], f"{path}: input_lens[{i}]")
        output = _count(d["output_lens"][i], f"{path}: output_lens[{i}]")
        if errors[i] or output < 1 or prompt < 1:
            dropped += 1
            continue
        ttft = _seconds(d["ttfts"][i], f"{path}: ttfts[{i}]")
        gaps = d["itls"][i]
        if not isinstance(gaps, list):
            raise BenchError(f"{path}: itls[{i}] must be a list of seconds")
        gaps = [_seconds(g, f"{path}: itls[{i}]") for g in gaps]
        start = float(arrivals[i])
        times = tuple(float(t) for t in start + ttft + np.cumsum([0.0, *gaps]))
        if times[-1] - start > MAX_ARRIVAL_S:
            raise BenchError(f"{path}: request {i}'s ttfts and itls add up to {times[-1] - start:.3g} s, past "
                             f"{MAX_ARRIVAL_S:.0e} s; not a measured request")
        kept.append(measured(path, len(kept), start, prompt, output, times[0], times[-1], times))
    if not kept:
        raise BenchError(f"{path}: every request failed; nothing to calibrate on")
    rate, concurrency = _scalar(d.get("request_rate")), _scalar(d.get("max_concurrency"))
    label = f"request_rate={rate} burstiness={_scalar(d.get('burstiness', 1.0))} max_concurrency={concurrency}"
    source = {"generator": "vllm bench serve", "backend": _scalar(d.get("backend")),
              "model_id": _scalar(d.get("model_id")), "date": _scalar(d.get("date"))}
    return BenchRun(path, "vllm", tuple(kept), _vllm_arrival_spec(d, seed), label, source, dropped)


def _latency(path: str, d: dict[str, Any], i: int) -> float:
    """Request ``i``'s time from sending to its last token (0 for a failed one: it freed its slot at once)."""
    if not d["output_lens"][i] or (isinstance(d.get("errors"), list) and d["errors"][i:i + 1] != [""]
                                   and d["errors"][i:i + 1] != [None]):
        return 0.0
    gaps = d["itls"][i] if isinstance(d["itls"][i], list) else []
    return _seconds(d["ttfts"][i], f"{path}: ttfts[{i}]") + sum(_seconds(g, f"{path}: itls[{i}]") for g in gaps)


def closed_loop_sends(latencies_s: Sequence[float], concurrency: int) -> list[float]:
    """When each request of a closed loop was sent, in sending order: the first ``concurrency`` at 0, then each
    when the earliest of those in flight ends (an asyncio semaphore of ``concurrency``, as vLLM's)."""
    import heapq

    in_flight: list[float] = []
    sends = []
    for latency in latencies_s:
        send = heapq.heappop(in_flight) if len(in_flight) >= concurrency else 0.0
        sends.append(send)
        heapq.heappush(in_flight, send + latency)
    return sends


def _vllm_arrival_spec(d: dict[str, Any], seed: int) -> str:
    """The arrivals replayed, in ``--arrivals``' terms (``roofline.serving.workload.ARRIVALS``): vLLM's burstiness
    is the gamma shape, so its gaps' coefficient of variation is 1 / sqrt(burstiness)."""
    rate, burstiness, concurrency = d.get("request_rate"), d.get("burstiness", 1.0), d.get("max_concurrency")
    if rate in (None, "inf", float("inf")):
        return f"concurrency:{concurrency}" if concurrency else "burst"
    if burstiness == 1.0:
        return f"poisson:{rate:g} (seed {seed}; the generator's own draw is not saved)"
    process = Gamma.of_shape(rate, burstiness)
    return (f"gamma:{rate:g}:{process.cv:.4g} (vLLM's burstiness {burstiness:g}; seed {seed}; the generator's own "
            "draw is not saved)")


def _vllm_arrivals(path: str, d: dict[str, Any], n: int, seed: int) -> np.ndarray | None:
    """Send times as vLLM's ``get_request`` makes them (gamma gaps rescaled to end at n / rate), drawn again with
    ``seed``; all 0 for rate inf; None for a closed loop (set while replaying).  A finite rate with
    ``max_concurrency`` as well is both at once, which one replay cannot be: refused."""
    rate, burstiness, concurrency = d.get("request_rate"), d.get("burstiness", 1.0), d.get("max_concurrency")
    if concurrency is not None:  # the semaphore's size: requests in flight, a whole number
        if isinstance(concurrency, bool) or not isinstance(concurrency, (int, float)) \
                or not (math.isfinite(concurrency) and concurrency == int(concurrency) and concurrency >= 1):
            raise BenchError(f"{path}: max_concurrency must be a whole number of requests in flight (1 or more), "
                             f"got {_shown(concurrency)}")
    if rate in (None, "inf", float("inf")):
        return None if concurrency else np.zeros(n)
    rate = _number(rate, f"{path}: request_rate")
    burstiness = _number(burstiness, f"{path}: burstiness")
    if rate <= 0 or burstiness <= 0:
        raise BenchError(f"{path}: request_rate and burstiness must be positive")
    if concurrency:
        raise BenchError(f"{path}: a request rate with max_concurrency as well cannot be replayed; calibrate on a "
                         "run with one of them")
    # vLLM's gaps are gamma gaps of shape burstiness: the simulator's gamma arrivals, whose range of spread it
    # keeps (past it the draw underflows to bursts of zero gaps: roofline.serving.workload.MAX_GAMMA_CV).
    lowest, highest = 1 / MAX_GAMMA_CV**2, 1 / MIN_GAMMA_CV**2
    if not lowest <= burstiness <= highest:
        raise BenchError(f"{path}: burstiness {burstiness:g} is gaps of coefficient of variation "
                         f"{1 / math.sqrt(burstiness):.3g}; the replay draws burstiness {lowest:g} to {highest:,.0f} "
                         f"(CV {MAX_GAMMA_CV:g} to {MIN_GAMMA_CV:g})")
    rate_limit = n / MAX_ARRIVAL_S
    if rate < rate_limit:
        raise BenchError(f"{path}: at request_rate {rate:g} the run lasts past {MAX_ARRIVAL_S:.0e} s")
    times = np.cumsum(Gamma.of_shape(rate, burstiness).gaps(n, np.random.default_rng(seed), per_arrival=1.0))
    if times[-1] > 0:  # the first is sent one gap after the run starts, the last at n / rate
        times *= (n / rate) / times[-1]
    else:  # every gap underflowed to 0 (a burst): all sent at n / rate
        times = np.full(n, n / rate)
    return times


# --- GuideLLM ------------------------------------------------------------------------------------------------
def _guidellm(path: str, d: Any, run: int | None) -> list[BenchRun]:
    benchmarks = d.get("benchmarks") if isinstance(d, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise BenchError(f"{path}: a GuideLLM report with no benchmarks")
    if run is not None and not 0 <= run < len(benchmarks):
        raise BenchError(f"{path}: --run {run} is not one of its {len(benchmarks)} benchmarks")
    metadata = d.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    chosen = range(len(benchmarks)) if run is None else [run]
    return [_guidellm_benchmark(path, benchmarks[i], i, metadata) for i in chosen]


def _guidellm_benchmark(path: str, benchmark: Any, index: int, metadata: dict[str, Any]) -> BenchRun:
    label = _strategy_label(benchmark)
    requests = (benchmark.get("requests") or {}) if isinstance(benchmark, dict) else {}
    rows = requests.get("successful") if isinstance(requests, dict) else None
    if not isinstance(rows, list):
        raise BenchError(f"{path}: benchmark {index} has no requests.successful list")
    parsed = [p for p in (_guidellm_request(path, i, row) for i, row in enumerate(rows)) if p is not None]
    if not parsed:
        raise BenchError(f"{path}: benchmark {index} ({label}) has no successful request with its tokens' "
                         "times")
    parsed.sort(key=lambda p: p[0])
    start = parsed[0][0]
    kept = tuple(measured(path, i, s - start, prompt, output, first - start, last - start)
                 for i, (s, prompt, output, first, last) in enumerate(parsed))
    failed = [requests.get(k) for k in ("errored", "incomplete")]
    dropped = len(rows) - len(parsed) + sum(len(f) for f in failed if isinstance(f, list))
    source = {"generator": "guidellm", "guidellm_version": _scalar(metadata.get("guidellm_version")),
              "report_version": _scalar(metadata.get("version")), "benchmark": index}
    return BenchRun(path, "guidellm", kept, "measured", label, source, dropped)


def _strategy_label(benchmark: Any) -> str:
    config = benchmark.get("config") if isinstance(benchmark, dict) else None
    strategy = config.get("strategy") if isinstance(config, dict) else None
    if not isinstance(strategy, dict):
        return "unknown strategy"
    kind, rate, streams = _scalar(strategy.get("type_", "?")), _scalar(strategy.get("rate")), \
        _scalar(strategy.get("streams"))
    if isinstance(rate, (int, float)) and math.isfinite(rate):
        return f"{kind}@{rate:.2f}"
    return f"{kind}@{streams}" if streams is not None else str(kind)


def _guidellm_request(path: str, i: int, row: Any) -> tuple[float, int, int, float, float] | None:
    """(sent, prompt tokens, output tokens, first token, last token), epoch seconds; None for a request that
    streamed no token."""
    what = f"{path}: requests.successful[{i}]"
    if not isinstance(row, dict):
        raise BenchError(f"{what} is not an object")
    info = row.get("info") or {}
    if not isinstance(info, dict):
        raise BenchError(f"{what}.info must be an object (GuideLLM's request info), got {_shown(info)}")
    timings = info.get("timings") or {}
    if not isinstance(timings, dict):
        raise BenchError(f"{what}.info.timings must be an object of the tokens' times (first_token_iteration, "
                         f"last_token_iteration), got {_shown(timings)}")
    first, last = timings.get("first_token_iteration"), timings.get("last_token_iteration")
    output = row.get("output_tokens")
    if first is None or last is None or not output:
        return None
    sent = _number(row.get("request_start_time"), f"{what}.request_start_time")
    first, last = _number(first, f"{what} first_token_iteration"), _number(last, f"{what} last_token_iteration")
    if not sent <= first <= last:
        raise BenchError(f"{what}: its first token is before it was sent, or after its last")
    prompt = _count(row.get("prompt_tokens"), f"{what}.prompt_tokens")
    return sent, max(prompt, 1), _count(output, f"{what}.output_tokens"), first, last


def measured_lengths(requests: Sequence[ServedRequest]) -> str:
    """Prompt and output tokens of the requests in a few words: ``prompt 4-22 (mean 12.3), output 32``."""
    def span(values: list[int]) -> str:
        low, high = min(values), max(values)
        return f"{low}" if low == high else f"{low}-{high} (mean {sum(values) / len(values):.1f})"

    return (f"prompt {span([r.prompt_tokens for r in requests])}, "
            f"output {span([r.output_tokens for r in requests])}")
