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
from roofline.serving.workload import (
    MAX_ARRIVAL_S,
    MAX_GAMMA_CV,
    MAX_LENGTH_TOKENS,
    MAX_REQUESTS,
    MIN_GAMMA_CV,
    Gamma,
    Request,
    WorkloadError,
)

FORMATS = ("vllm", "guidellm")


class BenchError(BadInputError):
    """A benchmark file that cannot be read or replayed; one line."""


def measured(path: str, index: int, arrival_s: float, prompt: int, output: int, first_token_s: float,
             finish_s: float, token_times_s: tuple[float, ...] = (),
             segments: tuple[tuple[int, int], ...] = ()) -> ServedRequest:
    """One request as the load generator saw it, seconds from the run's first send (``token_times_s``: every
    streamed token's time where the generator kept them, vLLM's ``itls``; else empty, no ITL samples;
    ``segments``: the shared prefix it opened with, ``SharedPrefix``); a request the simulator could not take
    (``Request``'s own bounds) is refused naming the file."""
    try:
        return ServedRequest(Request(index, arrival_s, prompt, output, segments), first_token_s, finish_s,
                             token_times_s)
    except WorkloadError as exc:
        raise BenchError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class BenchRun:
    """One run of a load generator against one engine: its requests (ids 0.. in sending order) and how they
    arrived.  ``arrivals``: ``measured`` (each request's send time, replayed as it was), ``burst``,
    ``poisson:RATE`` or ``gamma:RATE:BURSTINESS`` (the generator's process, drawn again with ``seed``: its own
    draw was not saved), or ``concurrency:C`` (a closed loop: a request is sent when one of the C in flight ends;
    a synchronous run is ``concurrency:1``)."""

    path: str
    format: str
    requests: tuple[ServedRequest, ...]
    arrivals: str
    label: str  # what the file says it ran: "poisson@4.00", "vllm request_rate=4 max_concurrency=None"
    source: dict[str, Any] = field(default_factory=dict)  # the generator and its version, when the file says
    dropped: int = 0  # requests that failed or returned no token, not replayed
    prefix: str = ""  # the shared prefix its prompts opened with, in words ("": none the file records)
    # The engine's limits where the file records them (max_num_seqs, max_num_batched_tokens,
    # enable_prefix_caching, and "source": where), for the policy it is replayed under (roofline.calibrate.config)
    engine: dict[str, Any] = field(default_factory=dict)

    @property
    def concurrency(self) -> int | None:
        return int(self.arrivals.split(":")[1]) if self.arrivals.startswith("concurrency:") else None

    def workload(self) -> list[Request]:
        """The requests to simulate: their lengths, their shared prefix, and their arrivals where they are known (a
        closed loop's are set as the replay runs: ``roofline.calibrate.replay``)."""
        return [r.request for r in self.requests]

    def describe(self) -> str:
        return (f"{self.path}: {self.format} {self.label}, {len(self.requests)} requests"
                + (f" ({self.dropped} failed, left out)" if self.dropped else "") + f", arrivals {self.arrivals}"
                + (f", {self.prefix}" if self.prefix else ""))


@dataclass(frozen=True)
class SharedPrefix:
    """Prompts that open with one of a few shared prefixes, as the load generator made them: each prefix's tokens
    (0: no prefix) and its share of the prompts, and where the file says so.  Replayed as the simulator's segments,
    one content id per prefix (``Request.segments``), which its prefix cache keys block by block
    (``roofline.serving.kv_blocks``).  The generator made each prefix as text of that many tokens and the server
    tokenized the prompt whole, so a prefix's last block may come out a token or two apart; the blocks before it
    are the ones the engine found again."""

    tokens: tuple[int, ...]
    weights: tuple[float, ...]
    source: str

    def segments(self, prompts: Sequence[int], seed: int) -> list[tuple[tuple[int, int], ...]]:
        """Each prompt's prefix segment, in sending order: the one prefix, or (several) one drawn by their
        weights with ``seed`` (no report says which one a prompt had); at most the prompt's own length."""
        if len(self.tokens) == 1:
            chosen = np.zeros(len(prompts), dtype=int)
        else:
            weights = np.asarray(self.weights, dtype=float)
            chosen = np.random.default_rng(seed).choice(len(self.tokens), size=len(prompts), p=weights / weights.sum())
        return [((int(k), min(self.tokens[k], prompt)),) if self.tokens[k] else ()
                for k, prompt in zip(chosen, prompts, strict=True)]

    def describe(self, seed: int) -> str:
        if len(self.tokens) == 1:
            return f"shared prefix of {self.tokens[0]} tokens on every prompt ({self.source})"
        lengths = sorted({t for t in self.tokens if t})
        share = sum(w for t, w in zip(self.tokens, self.weights, strict=True) if t) / sum(self.weights)
        return (f"{sum(1 for t in self.tokens if t)} shared prefixes of {', '.join(str(t) for t in lengths)} tokens "
                f"on {100 * share:.0f}% of the prompts ({self.source}); each prompt's drawn again by their weights "
                f"with seed {seed}: the report does not say which a prompt had")


ENGINE_LIMITS = ("max_num_seqs", "max_num_batched_tokens")  # vLLM's EngineArgs names


def engine_limits(path: str, settings: Any, where: str) -> dict[str, Any]:
    """vLLM's engine limits among ``settings`` (its ``EngineArgs`` names, ``_`` or ``-`` spelled, as vLLM's sweep
    and its CLI take them): ``max_num_seqs``, ``max_num_batched_tokens`` (whole numbers, or their digits as
    ``--metadata`` saves them) and ``enable_prefix_caching`` (true or false); {} when none is there."""
    if not isinstance(settings, dict):
        return {}
    named = f"{where}." if where else ""
    out: dict[str, Any] = {}
    for name in (*ENGINE_LIMITS, "enable_prefix_caching"):
        spelled = next((k for k in (name, name.replace("_", "-")) if k in settings), None)
        if spelled is None:
            continue
        value = settings[spelled]
        if name == "enable_prefix_caching":
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                value = value.strip().lower() == "true"
            if not isinstance(value, bool):
                raise BenchError(f"{path}: {named}{spelled} must be true or false, got {_shown(value)}")
        else:
            if _digits(value):
                value = int(value.strip())
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LENGTH_TOKENS:
                raise BenchError(f"{path}: {named}{spelled} must be a whole number from 1 to "
                                 f"{MAX_LENGTH_TOKENS:,}, got {_shown(value)}")
        out[name] = value
    return {**out, "source": where or "the file's top level"} if out else {}


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
        return _guidellm(str(path), document, run, seed)
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


def _digits(value: Any) -> bool:
    """A whole number written as its digits (``--metadata KEY=VALUE`` saves every value as a string)."""
    return isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value) < 20


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
    concurrency = d.get("max_concurrency")
    if concurrency is not None:  # the semaphore's size: requests in flight, a whole number
        if isinstance(concurrency, bool) or not isinstance(concurrency, (int, float)) \
                or not (math.isfinite(concurrency) and concurrency == int(concurrency) and concurrency >= 1):
            raise BenchError(f"{path}: max_concurrency must be a whole number of requests in flight (1 or more), "
                             f"got {_shown(concurrency)}")
    sent = _vllm_start_times(path, d, n, errors)
    if sent is None:
        sent = _vllm_arrivals(path, d, n, seed)
    if sent is None:  # a closed loop with no send times saved: each request sent when one in flight ended
        sent = np.asarray(closed_loop_sends([_latency(path, d, i) for i in range(n)], int(d["max_concurrency"])))
    spec = _vllm_arrival_spec(d, seed)
    shared = _vllm_prefix(path, d)
    dropped, rows = 0, []
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
        start = float(sent[i])
        times = tuple(float(t) for t in start + ttft + np.cumsum([0.0, *gaps]))
        if times[-1] - start > MAX_ARRIVAL_S:
            raise BenchError(f"{path}: request {i}'s ttfts and itls add up to {times[-1] - start:.3g} s, past "
                             f"{MAX_ARRIVAL_S:.0e} s; not a measured request")
        rows.append((start, prompt, output, times))
    if not rows:
        raise BenchError(f"{path}: every request failed; nothing to calibrate on")
    segments = shared.segments([r[1] for r in rows], seed) if shared else [()] * len(rows)
    kept = [measured(path, j, start, prompt, output, times[0], times[-1], times, segments[j])
            for j, (start, prompt, output, times) in enumerate(rows)]
    rate = _scalar(d.get("request_rate"))
    label = f"request_rate={rate} burstiness={_scalar(d.get('burstiness', 1.0))} max_concurrency={concurrency}"
    if d.get("ramp_up_strategy") is not None:
        label += (f" ramp_up={_scalar(d.get('ramp_up_strategy'))}:{_scalar(d.get('ramp_up_start_rps'))}-"
                  f"{_scalar(d.get('ramp_up_end_rps'))}")
    source = {"generator": "vllm bench serve", "backend": _scalar(d.get("backend")),
              "model_id": _scalar(d.get("model_id")), "date": _scalar(d.get("date"))}
    return BenchRun(path, "vllm", tuple(kept), spec, label, source, dropped,
                    shared.describe(seed) if shared else "", engine_limits(path, d, ""))


def _vllm_start_times(path: str, d: dict[str, Any], n: int, errors: list[Any]) -> np.ndarray | None:
    """Each request's send time, seconds from the first that succeeded, where the result saves them:
    ``start_times`` (the client's ``time.perf_counter()`` as each request went out, after ``max_concurrency``'s
    semaphore let it through; the current ``vllm/benchmarks/serve.py``); None where it does not."""
    if "start_times" not in d:
        return None
    listed = d["start_times"]
    if not isinstance(listed, list) or len(listed) != n:
        raise BenchError(f"{path}: start_times must list the send time of each of the {n} requests")
    times = np.array([_number(t, f"{path}: start_times[{i}]") for i, t in enumerate(listed)])
    # A request that failed before it was sent keeps RequestFuncOutput's start_time 0.0: the run starts at the
    # first that succeeded.
    ok = [i for i in range(n) if not errors[i] and d["output_lens"][i]]
    times -= times[ok].min() if ok else times.min()
    if ok and times[ok].max() > MAX_ARRIVAL_S:
        raise BenchError(f"{path}: start_times span {times[ok].max():.3g} s, past {MAX_ARRIVAL_S:.0e} s; not one "
                         "run")
    return times


def _synchronous(d: dict[str, Any]) -> bool:
    """One request in flight, each sent when the one before it ended: ``max_concurrency`` 1 at rate inf."""
    return d.get("max_concurrency") == 1 and d.get("request_rate") in (None, "inf", float("inf")) \
        and d.get("ramp_up_strategy") is None


def _vllm_prefix(path: str, d: dict[str, Any]) -> SharedPrefix | None:
    """The random dataset's one prefix (``--random-prefix-len``: generated once, the same tokens opening every
    prompt, counted in ``input_lens``; ``vllm/benchmarks/datasets/random.py``) where the result records it: a plain
    ``vllm bench serve`` result saves none of its dataset options, but ``vllm bench sweep serve`` writes each
    swept ``--bench-params`` key into its ``run=N.json`` beside the result (``sweep/serve.py``), and
    ``--metadata random_prefix_len=L`` saves it there too.  Read only for the random datasets (or where the
    dataset is not named)."""
    spelled = next((k for k in ("random_prefix_len", "random-prefix-len") if k in d), None)
    dataset = d.get("dataset_name", d.get("dataset-name"))
    if spelled is None or dataset not in (None, "random", "random-mm"):
        return None
    value = d[spelled]
    if _digits(value):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LENGTH_TOKENS:
        raise BenchError(f"{path}: {spelled} must be a whole number of tokens, got {_shown(value)}")
    return SharedPrefix((value,), (1.0,), spelled) if value else None


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
    """The arrivals replayed, in ``--arrivals``' terms (``roofline.serving.workload.ARRIVALS``): a synchronous run
    (``max_concurrency`` 1 at rate inf) a closed loop of one, whatever it saved; the saved ``start_times`` as
    measured; else the rate drawn again (vLLM's burstiness is the gamma shape, so its gaps' coefficient of
    variation is 1 / sqrt(burstiness)), a burst, or a closed loop of ``max_concurrency``."""
    rate, burstiness, concurrency = d.get("request_rate"), d.get("burstiness", 1.0), d.get("max_concurrency")
    if _synchronous(d):
        return "concurrency:1"
    if "start_times" in d:
        return "measured"
    if rate in (None, "inf", float("inf")):
        return f"concurrency:{concurrency}" if concurrency else "burst"
    if burstiness == 1.0:
        return f"poisson:{rate:g} (seed {seed}; the generator's own draw is not saved)"
    process = Gamma.of_shape(rate, burstiness)
    return (f"gamma:{rate:g}:{process.cv:.4g} (vLLM's burstiness {burstiness:g}; seed {seed}; the generator's own "
            "draw is not saved)")


def _vllm_arrivals(path: str, d: dict[str, Any], n: int, seed: int) -> np.ndarray | None:
    """Send times as vLLM's ``get_request`` makes them (gamma gaps rescaled to end at n / rate), drawn again with
    ``seed``, where the result saved none (``start_times``); all 0 for rate inf; None for a closed loop (set while
    replaying).  A finite rate with ``max_concurrency`` as well is both at once, and a ramp-up a rate that
    changes: neither is replayable without the send times: refused."""
    rate, burstiness, concurrency = d.get("request_rate"), d.get("burstiness", 1.0), d.get("max_concurrency")
    if d.get("ramp_up_strategy") is not None:
        raise BenchError(f"{path}: a ramp-up run ({_shown(d.get('ramp_up_strategy'))}) saved no start_times: its "
                         "changing rate cannot be drawn again; save it with a vllm bench serve that records "
                         "start_times (--save-detailed)")
    if rate in (None, "inf", float("inf")):
        return None if concurrency else np.zeros(n)
    rate = _number(rate, f"{path}: request_rate")
    burstiness = _number(burstiness, f"{path}: burstiness")
    if rate <= 0 or burstiness <= 0:
        raise BenchError(f"{path}: request_rate and burstiness must be positive")
    if concurrency:
        raise BenchError(f"{path}: a request rate with max_concurrency as well, and no start_times saved, cannot "
                         "be replayed; save it with a vllm bench serve that records start_times (--save-detailed), "
                         "or calibrate on a run with one of them")
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
def _guidellm(path: str, d: Any, run: int | None, seed: int) -> list[BenchRun]:
    benchmarks = d.get("benchmarks") if isinstance(d, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise BenchError(f"{path}: a GuideLLM report with no benchmarks")
    if run is not None and not 0 <= run < len(benchmarks):
        raise BenchError(f"{path}: --run {run} is not one of its {len(benchmarks)} benchmarks")
    metadata = d.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    shared, engine = _guidellm_prefix(path, d), _guidellm_engine(path, d)
    chosen = range(len(benchmarks)) if run is None else [run]
    return [_guidellm_benchmark(path, benchmarks[i], i, metadata, shared, engine, seed) for i in chosen]


def _child(value: Any, *keys: str) -> Any:
    """``value[k1][k2]...`` where each level is an object, else None."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _guidellm_data(d: dict[str, Any]) -> list[tuple[str, Any]]:
    """The run's data arguments, each with where it sits, as a dict where it is an inline synthetic config:
    report version 2 (GuideLLM 0.7 on; 0.8.1's ``GenerativeBenchmarksReport.config``, a ``BenchmarkScenario``)
    keeps them typed under ``config.spec.data``; version 1 (0.4-0.6: ``GenerativeBenchmarksReport.args``) as the
    strings given to ``--data``, read here as GuideLLM's ``data/config.py`` ``_load_config_str`` reads them (a
    JSON object, or ``key=value`` pairs joined by commas, a value a whole number where it is digits)."""
    typed = _child(d, "config", "spec", "data")
    if isinstance(typed, list):
        return [(f"config.spec.data[{i}]", entry) for i, entry in enumerate(typed)]
    given = _child(d, "args", "data")
    if not isinstance(given, list):
        return []
    out = []
    for i, text in enumerate(given):
        if not isinstance(text, str):
            continue
        text = text.strip()
        config: Any = None
        if text.startswith("{") and text.endswith("}"):
            try:
                config = parse_json(text, f"args.data[{i}]")
            except JsonFileError:
                config = None
        elif text.count("=") > 1:
            pairs = [item.split("=") for item in text.split(",")]
            try:  # GuideLLM's own int() of what isnumeric() passes, which fails on "½": then no config
                config = {key.strip(): int(value.strip()) if value.strip().isnumeric() else value.strip()
                          for key, value in pairs} if all(len(pair) == 2 for pair in pairs) else None
            except ValueError:
                config = None
        out.append((f"args.data[{i}]", config))
    return out


def _guidellm_prefix(path: str, d: dict[str, Any]) -> SharedPrefix | None:
    """The synthetic data's shared prefixes (GuideLLM's ``SyntheticTextPrefixBucketConfig``: ``prefix_buckets``,
    each ``bucket_weight`` (default 100), ``prefix_count`` prefixes (default 1) of ``prefix_tokens`` tokens
    (default 0: none); or the shorthand ``prefix_tokens`` and ``prefix_count``, one bucket, which 0.8.1 folds into
    ``prefix_buckets`` before it saves the report).  As ``_create_prefix_iter`` draws them, each of a bucket's
    prefixes is drawn with weight ``bucket_weight / prefix_count``, and the server's prompt-token count includes
    the prefix (the completions prompt is the prefix, a space and the text)."""
    found = []
    for where, config in _guidellm_data(d):
        if not isinstance(config, dict):
            continue
        buckets, shorthand = config.get("prefix_buckets"), False
        if buckets is None and (config.get("prefix_tokens") is not None or config.get("prefix_count") is not None):
            buckets, shorthand = [{"prefix_count": config.get("prefix_count") or 1,
                                   "prefix_tokens": config.get("prefix_tokens") or 0}], True
        elif buckets is None:
            continue
        else:
            where = f"{where}.prefix_buckets"
        if not isinstance(buckets, list):
            raise BenchError(f"{path}: {where} must be a list of prefix buckets, got {_shown(buckets)}")
        found.append((where, shorthand, buckets))
    if len(found) > 1:
        raise BenchError(f"{path}: {found[0][0]} and {found[1][0]} both give the prompts prefixes; calibrate on a "
                         "run of one data source with prefixes")
    if not found:
        return None
    where, shorthand, buckets = found[0]
    tokens: list[int] = []
    weights: list[float] = []
    for b, bucket in enumerate(buckets):
        if not isinstance(bucket, dict):
            raise BenchError(f"{path}: {where}[{b}] must be a prefix bucket (an object), got {_shown(bucket)}")
        named = f"{where}." if shorthand else f"{where}[{b}]."  # the shorthand's fields as the file names them
        weight = _bucket_count(path, f"{named}bucket_weight", bucket.get("bucket_weight", 100), 1)
        count = _bucket_count(path, f"{named}prefix_count", bucket.get("prefix_count", 1), 1)
        length = _bucket_count(path, f"{named}prefix_tokens", bucket.get("prefix_tokens", 0), 0)
        if len(tokens) + count > MAX_REQUESTS:
            raise BenchError(f"{path}: {where} makes more than {MAX_REQUESTS:,} prefixes")
        tokens += [length] * count
        weights += [weight / count] * count
    if not any(tokens):
        return None
    return SharedPrefix(tuple(tokens), tuple(weights), f"{where}.prefix_tokens" if shorthand else where)


def _bucket_count(path: str, what: str, value: Any, low: int) -> int:
    high = MAX_LENGTH_TOKENS if what.endswith("prefix_tokens") else MAX_REQUESTS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BenchError(f"{path}: {what} must be a whole number from {low} to {high:,}, got {_shown(value)}")
    return value


def _guidellm_engine(path: str, d: dict[str, Any]) -> dict[str, Any]:
    """vLLM's engine limits where GuideLLM ran vLLM in its own process (backend ``vllm_python``: 0.8.1's
    ``VLLMPythonAsyncBackendArgs.vllm_config``, the ``AsyncEngineArgs`` it starts the engine with, saved under
    ``config.spec.backend``); {} for a server it reached over HTTP, whose settings no report holds."""
    backend = _child(d, "config", "spec", "backend")
    if _child(backend, "kind") not in ("vllm_python", "vllm_python_async"):
        return {}
    return engine_limits(path, _child(backend, "vllm_config"), "config.spec.backend.vllm_config")


def _guidellm_benchmark(path: str, benchmark: Any, index: int, metadata: dict[str, Any],
                        shared: SharedPrefix | None, engine: dict[str, Any], seed: int) -> BenchRun:
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
    segments = shared.segments([p[1] for p in parsed], seed) if shared else [()] * len(parsed)
    kept = tuple(measured(path, i, s - start, prompt, output, first - start, last - start, (), segments[i])
                 for i, (s, prompt, output, first, last) in enumerate(parsed))
    failed = [requests.get(k) for k in ("errored", "incomplete")]
    dropped = len(rows) - len(parsed) + sum(len(f) for f in failed if isinstance(f, list))
    source = {"generator": "guidellm", "guidellm_version": _scalar(metadata.get("guidellm_version")),
              "report_version": _scalar(metadata.get("version")), "benchmark": index}
    # A synchronous strategy sends each request when the one before it ends (GuideLLM's SynchronousStrategy: one
    # request in flight): a closed loop of one, replayed as one rather than at its send times.
    synchronous = _child(benchmark, "config", "strategy", "type_") == "synchronous"
    return BenchRun(path, "guidellm", kept, "concurrency:1" if synchronous else "measured", label, source, dropped,
                    shared.describe(seed) if shared else "", engine)


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
