"""Workloads: requests with arrival times and prompt/output lengths, generated from a seed or read from a trace
(a CSV of lengths, or a Mooncake trace whose block hashes say which prompts share a prefix).

Lengths are integers of at least one token: a request always produces its first token.  The random streams
for arrivals, prompts and outputs are separate, so changing the arrival rate (the capacity search does) keeps
every request's lengths.  A request can say what its tokens are (``segments``: the content a prefix cache keys,
``roofline.serving.prefix_cache``): prompts that open with one of a few shared system prompts (``--prefix``), the
turns of a conversation, each resending the conversation so far (``--sessions``), or a trace's block hashes.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from roofline.core.errors import BadInputError
from roofline.core.jsonfile import JsonFileError, parse_json
from roofline.core.options import check_seed  # the one seed rule of every command
from roofline.specs.length_presets import PRESETS, LengthPreset


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


@dataclass(frozen=True)
class MemoryModel:
    """Bytes a simulated run takes: a constant, and so much a request, a logged step and an output token."""

    constant: float
    request: float
    step: float
    token: float

    def bytes(self, requests: int, steps: int, tokens: int) -> float:
        return self.constant + self.request * requests + self.step * steps + self.token * tokens


# What a simulate command's run takes, measured by scripts/measure_simulation_memory.py on this project's 2-core
# machine (its resident set at its highest, less before the workload is drawn; Llama-3-8B's analytic H100 profile
# under continuous; 7 cases from 2,000 to 80,000 requests, 1,564 to 584,253 steps, 0.3 to 10 million output
# tokens, each within 6% of the fit).  One run holds, while its figures are computed, 64 MB (the report's
# figures) + 493 bytes a request + 162 a logged step + 48.6 an output token (the token's time, and the pooled
# inter-token gaps with their owners and masks, taken at once); each further policy's run keeps to the end 491
# bytes a request + 180 a step + 16.8 a token.  So 1,000,000 requests at poisson:200 with outputs exp:128:512
# (127 million tokens, about 950,000 steps) take about 6.9 GB under one policy, where 7.3 GB was seen.
RUN_BYTES = MemoryModel(constant=64e6, request=493, step=162, token=48.6)
FURTHER_RUN_BYTES = MemoryModel(constant=0.0, request=491, step=180, token=16.8)


@dataclass(frozen=True)
class Request:
    id: int
    arrival_s: float  # a session's later turn: a placeholder (its session's start) until the turn before it ends
    prompt_tokens: int
    output_tokens: int
    # What the tokens are, from the first: (content id, tokens) pieces, the same id the same tokens; tokens past
    # them (none given: every token) are this request's own.  They may run on past the prompt into the output
    # that a later turn of the same session resends.
    segments: tuple[tuple[int, int], ...] = ()
    after: int | None = None  # a session's later turn: sent ``think_s`` after request ``after``'s last token
    think_s: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.arrival_s) or not 0 <= self.arrival_s <= MAX_ARRIVAL_S:
            raise WorkloadError(f"request {self.id}: arrival_s must be a number from 0 to {MAX_ARRIVAL_S:.0e} s, "
                                f"got {self.arrival_s}")
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WorkloadError(f"request {self.id}: {name} must be an integer >= 1, got {value!r}")
        if self.after is not None and not 0 <= self.after < self.id:  # a turn follows an earlier request
            raise WorkloadError(f"request {self.id}: it follows request {self.after}, which must come before it")


# --- the arrival processes and the length distributions: one registry each -----------------------------------
# Each entry is a class with its own parser (``parse``: the fields after its kind, as typed), its syntax and help
# line (what ``--arrivals``' and ``--prompt``/``--output``'s help and the documents' schemas read) and its seeded
# sampling; ``parse_arrivals`` and ``parse_lengths`` find a spec's class by its kind (Vidur's
# ``request_interval_generator_registry.py`` and ``request_length_generator_registry.py``, one registry each).

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


def _typed(value: float) -> str:
    """A parsed field as it was most likely typed: 128.0 -> "128", 0.25 -> "0.25"."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"


@dataclass(frozen=True)
class ArrivalProcess:
    """When requests arrive: ``KIND`` as typed, ``SYNTAX`` with its fields' placeholders, ``HELP`` in words;
    ``parse`` reads the fields after the kind, ``gaps`` draws the time before each arrival from its stream."""

    KIND: ClassVar[str] = ""
    SYNTAX: ClassVar[str] = ""
    HELP: ClassVar[str] = ""

    @classmethod
    def parse(cls, spec: str, parts: list[str]) -> ArrivalProcess:  # pragma: no cover - every process overrides it
        raise NotImplementedError

    def gaps(self, n: int, rng: np.random.Generator, per_arrival: float) -> np.ndarray:  # pragma: no cover
        """``n`` gaps, seconds, each before one arrival (the first from t = 0); ``per_arrival``: the requests one
        arrival stands for, so the gaps stretch that much and requests still come at the rate asked."""
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover
        raise NotImplementedError


@dataclass(frozen=True)
class Burst(ArrivalProcess):
    KIND: ClassVar[str] = "burst"
    SYNTAX: ClassVar[str] = "burst"
    HELP: ClassVar[str] = "all at t = 0"

    @classmethod
    def parse(cls, spec: str, parts: list[str]) -> Burst:
        if parts:
            raise WorkloadError(f"{spec!r}: burst takes no fields")
        return cls()

    def gaps(self, n: int, rng: np.random.Generator, per_arrival: float) -> np.ndarray:
        return np.zeros(n)

    def describe(self) -> str:
        return "all arriving at once (a burst)"


@dataclass(frozen=True)
class Poisson(ArrivalProcess):
    rate: float  # requests per second
    KIND: ClassVar[str] = "poisson"
    SYNTAX: ClassVar[str] = "poisson:RATE"
    HELP: ClassVar[str] = "RATE requests/s, independent exponential gaps"

    @classmethod
    def parse(cls, spec: str, parts: list[str]) -> Poisson:
        (rate,) = _numbers(spec, parts, (1,))
        return cls(rate)

    def gaps(self, n: int, rng: np.random.Generator, per_arrival: float) -> np.ndarray:
        return rng.exponential(per_arrival / self.rate, size=n)

    def describe(self) -> str:
        return f"Poisson arrivals at {_typed(self.rate)} requests/s"


# The spread gamma arrivals take, as the coefficient of variation of their gaps (shape 1/CV^2).  A shape k puts
# about (x/θ)^k / Γ(k + 1) of the gaps below x·θ (θ the scale): at CV 10 (k = 0.01) 0.08% of them fall below
# 1e-308·θ and underflow to 0, at CV 30 (k ≈ 0.0011) 45%, so past 10 the draw is no longer the process asked for.
# At CV 0.01 (k = 10,000) every gap is within ±3% (3 sigma) of the mean: a clock, and lower asks nothing more.
MIN_GAMMA_CV = 0.01
MAX_GAMMA_CV = 10.0


@dataclass(frozen=True)
class Gamma(ArrivalProcess):
    """Bursty (CV > 1) or steadier (CV < 1) than Poisson: gamma gaps of mean 1 / RATE and coefficient of
    variation CV (shape 1 / CV², the burstiness vLLM's ``--burstiness`` sets); CV 1 is Poisson's spread."""

    rate: float  # requests per second
    cv: float  # the gaps' standard deviation over their mean
    KIND: ClassVar[str] = "gamma"
    SYNTAX: ClassVar[str] = "gamma:RATE:CV"
    HELP: ClassVar[str] = (f"RATE requests/s, gamma gaps whose coefficient of variation is CV (bursty above 1, "
                           f"Poisson at 1; {_typed(MIN_GAMMA_CV)} to {_typed(MAX_GAMMA_CV)})")

    @classmethod
    def parse(cls, spec: str, parts: list[str]) -> Gamma:
        rate, cv = _numbers(spec, parts, (2,))
        if not MIN_GAMMA_CV <= cv <= MAX_GAMMA_CV:
            raise WorkloadError(f"{spec!r}: CV must be from {_typed(MIN_GAMMA_CV)} to {_typed(MAX_GAMMA_CV)} "
                                "(the gaps' standard deviation over their mean; 1 is Poisson's)")
        return cls(rate, cv)

    @classmethod
    def of_shape(cls, rate: float, shape: float) -> Gamma:
        """The process of a gamma shape (vLLM's burstiness) instead of its CV."""
        return cls(rate, 1 / math.sqrt(shape))

    @property
    def shape(self) -> float:
        return 1 / self.cv**2

    def gaps(self, n: int, rng: np.random.Generator, per_arrival: float) -> np.ndarray:
        shape = self.shape
        return rng.gamma(shape, per_arrival / (self.rate * shape), size=n)

    def describe(self) -> str:
        return (f"gamma arrivals at {_typed(self.rate)} requests/s, the gaps' coefficient of variation "
                f"{_typed(self.cv)}")


#: Every arrival process by kind, in the order the help lists them.
ARRIVALS: dict[str, type[ArrivalProcess]] = {process.KIND: process for process in (Burst, Poisson, Gamma)}


def arrival_syntax() -> str:
    """``burst | poisson:RATE | gamma:RATE:CV``: the documents' schema's words for a generated workload's arrivals."""
    return " | ".join(process.SYNTAX for process in ARRIVALS.values())


def arrivals_help() -> str:
    """``--arrivals``' help: each process as typed and what it is."""
    return " | ".join(f"{process.SYNTAX} ({process.HELP})" for process in ARRIVALS.values())


def parse_arrivals(spec: str) -> ArrivalProcess:
    """An ``--arrivals`` spec: one of ``arrival_syntax()``."""
    kind, *parts = str(spec).strip().split(":")
    process = ARRIVALS.get(kind)
    if process is None:
        raise WorkloadError(f"{spec!r}: arrivals are {' or '.join(ARRIVALS[k].SYNTAX for k in ARRIVALS)}")
    return process.parse(spec, parts)


@dataclass(frozen=True)
class LengthDistribution:
    """How many tokens a prompt or an output has: ``KIND`` as typed, ``SYNTAX`` with its fields' placeholders,
    ``HELP`` in words (empty: the syntax says it); ``parse`` reads the fields after the kind, ``sample`` draws
    (before rounding to tokens) from its stream."""

    KIND: ClassVar[str] = ""
    SYNTAX: ClassVar[str] = ""
    HELP: ClassVar[str] = ""

    @classmethod
    def parse(cls, spec: str, kind: str, parts: list[str]) -> LengthDistribution:  # pragma: no cover
        raise NotImplementedError

    def sample(self, n: int, rng: np.random.Generator, role: str) -> np.ndarray:  # pragma: no cover
        """``n`` lengths of ``role`` (prompt or output: a preset has one table each), unrounded."""
        raise NotImplementedError

    def describe(self, role: str) -> str:  # pragma: no cover
        raise NotImplementedError


def _capped(values: np.ndarray, cap: float | None) -> np.ndarray:
    return np.minimum(values, cap) if cap is not None else values


def _cap_words(cap: float | None) -> str:
    return f", capped at {_typed(cap)}" if cap is not None else ""


@dataclass(frozen=True)
class Fixed(LengthDistribution):
    tokens: float
    KIND: ClassVar[str] = "fixed"
    SYNTAX: ClassVar[str] = "fixed:N"

    @classmethod
    def parse(cls, spec: str, kind: str, parts: list[str]) -> Fixed:
        (tokens,) = _numbers(spec, parts, (1,))
        return cls(tokens)

    def sample(self, n: int, rng: np.random.Generator, role: str) -> np.ndarray:
        return np.full(n, self.tokens)

    def describe(self, role: str) -> str:
        return f"{_typed(self.tokens)} tokens each"


@dataclass(frozen=True)
class Uniform(LengthDistribution):
    low: float
    high: float
    KIND: ClassVar[str] = "uniform"
    SYNTAX: ClassVar[str] = "uniform:A:B"

    @classmethod
    def parse(cls, spec: str, kind: str, parts: list[str]) -> Uniform:
        low, high = _numbers(spec, parts, (2,))
        if high < low:
            raise WorkloadError(f"{spec!r}: B must be at least A")
        if high > MAX_LENGTH_TOKENS:  # numpy's integers() cannot take 1e308 ("high is out of bounds for int64")
            raise WorkloadError(f"{spec!r}: lengths reach past {MAX_LENGTH_TOKENS:,} tokens; give smaller numbers")
        return cls(low, high)

    def sample(self, n: int, rng: np.random.Generator, role: str) -> np.ndarray:
        return rng.integers(int(self.low), int(self.high) + 1, size=n)  # both ends included

    def describe(self, role: str) -> str:
        return f"uniform from {_typed(self.low)} to {_typed(self.high)} tokens"


@dataclass(frozen=True)
class Exponential(LengthDistribution):
    mean: float
    cap: float | None = None
    KIND: ClassVar[str] = "exp"
    SYNTAX: ClassVar[str] = "exp:MEAN[:CAP]"

    @classmethod
    def parse(cls, spec: str, kind: str, parts: list[str]) -> Exponential:
        mean, *cap = _numbers(spec, parts, (1, 2))
        return cls(mean, *cap)

    def sample(self, n: int, rng: np.random.Generator, role: str) -> np.ndarray:
        return _capped(rng.exponential(self.mean, size=n), self.cap)

    def describe(self, role: str) -> str:
        return f"exponential, mean {_typed(self.mean)} tokens{_cap_words(self.cap)}"


@dataclass(frozen=True)
class LogNormal(LengthDistribution):
    median: float
    sigma: float
    cap: float | None = None
    KIND: ClassVar[str] = "lognormal"
    SYNTAX: ClassVar[str] = "lognormal:MEDIAN:SIGMA[:CAP]"

    @classmethod
    def parse(cls, spec: str, kind: str, parts: list[str]) -> LogNormal:
        median, sigma, *cap = _numbers(spec, parts, (2, 3))
        return cls(median, sigma, *cap)

    def sample(self, n: int, rng: np.random.Generator, role: str) -> np.ndarray:
        return _capped(rng.lognormal(math.log(self.median), self.sigma, size=n), self.cap)

    def describe(self, role: str) -> str:
        return f"log-normal, median {_typed(self.median)} tokens, sigma {_typed(self.sigma)}{_cap_words(self.cap)}"


@dataclass(frozen=True)
class PresetLengths(LengthDistribution):
    """A published dataset's lengths (``roofline.specs.length_presets``), typed by its name alone."""

    preset: LengthPreset
    HELP: ClassVar[str] = "a preset fitted to a published trace"

    @classmethod
    def parse(cls, spec: str, kind: str, parts: list[str]) -> PresetLengths:
        if parts:
            raise WorkloadError(f"{spec!r}: the preset {kind} takes no fields")
        return cls(PRESETS[kind])

    def sample(self, n: int, rng: np.random.Generator, role: str) -> np.ndarray:
        return self.preset.sample(role, n, rng)

    def describe(self, role: str) -> str:
        return self.preset.describe(role)


#: Every length distribution by kind, in the order the help lists them; each preset by its name.
LENGTHS: dict[str, type[LengthDistribution]] = {
    **{shape.KIND: shape for shape in (Fixed, Uniform, Exponential, LogNormal)},
    **{name: PresetLengths for name in PRESETS}}


def _length_syntaxes() -> list[str]:
    return [kind if shape is PresetLengths else shape.SYNTAX for kind, shape in LENGTHS.items()]


def length_syntax() -> str:
    """``fixed:N | uniform:A:B | ... | sharegpt``: the documents' schema's words for a drawn length."""
    return " | ".join(_length_syntaxes())


def lengths_help() -> str:
    """``--prompt``'s help after "prompt lengths: ": each distribution as typed, a preset with what it is."""
    presets = [name for name, shape in LENGTHS.items() if shape is PresetLengths]
    shapes = [shape.SYNTAX for shape in LENGTHS.values() if shape is not PresetLengths]
    return " | ".join([*shapes, *presets]) + (f" ({PresetLengths.HELP})" if presets else "")


def parse_lengths(spec: str) -> LengthDistribution:
    """A ``--prompt`` or ``--output`` spec: one of ``length_syntax()``."""
    kind, *parts = str(spec).strip().split(":")
    shape = LENGTHS.get(kind)
    if shape is None:
        syntaxes = _length_syntaxes()
        raise WorkloadError(f"{spec!r}: lengths are {', '.join(syntaxes[:-1])} or {syntaxes[-1]}")
    return shape.parse(spec, kind, parts)


def sample_lengths(spec: str, n: int, rng: np.random.Generator, role: str = "prompt") -> list[int]:
    """``n`` lengths drawn from ``spec`` (``parse_lengths``; a preset's ``role`` lengths, ``prompt`` or
    ``output``), each rounded to a whole token, at least one."""
    raw = np.asarray(parse_lengths(spec).sample(n, rng, role), dtype=float)
    if not np.all(np.isfinite(raw)) or np.max(raw) > MAX_LENGTH_TOKENS:
        raise WorkloadError(f"{spec!r}: lengths reach past {MAX_LENGTH_TOKENS:,} tokens; give smaller numbers")
    return [max(1, int(round(v))) for v in raw]


def arrival_times(spec: str, n: int, rng: np.random.Generator, per_arrival: float = 1) -> list[float]:
    """``n`` arrival times from ``spec`` (``parse_arrivals``), the first one gap after t = 0; ``per_arrival``: the
    requests each arrival stands for (a session's turns, on average), so the gaps are that much longer and
    requests still come at the rate asked."""
    process = parse_arrivals(spec)
    times = np.cumsum(process.gaps(n, rng, per_arrival))
    if not np.all(np.isfinite(times)) or times[-1] > MAX_ARRIVAL_S:
        raise WorkloadError(f"{spec!r}: at this rate the requests arrive over more than {MAX_ARRIVAL_S:.0e} s; "
                            "give a higher rate")
    return [float(t) for t in times]


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


def estimated_bytes(requests: int, tokens: int, steps: int, runs: int) -> float:
    """The memory ``runs`` simulated runs (one per policy, all kept for the report) of ``requests`` requests of
    ``tokens`` output tokens take, ``steps`` logged in all: one run's while its figures are computed, and what each
    further run keeps (``RUN_BYTES``, ``FURTHER_RUN_BYTES``: measured)."""
    per_run = steps / runs if runs else 0
    return RUN_BYTES.bytes(requests, round(per_run), tokens) + \
        (runs - 1) * FURTHER_RUN_BYTES.bytes(requests, round(per_run), tokens)


def check_fits_in_memory(requests: list[Request], runs: int, tokens_per_step: int) -> None:
    """Refuse a workload whose ``runs`` simulated runs need more memory than is available (``estimated_bytes``),
    before the first step: a MemoryError, or the kernel's OOM killer, hours in is the same refusal, later and
    without a word.  The steps are not known before the run: each emits at most ``tokens_per_step`` output tokens
    (the largest batch, times the tokens a speculative step can accept), so at least tokens / that many are logged,
    and the estimate is what the run takes at least."""
    tokens = sum(r.output_tokens for r in requests)
    steps = runs * -(-tokens // max(tokens_per_step, 1))
    needed = estimated_bytes(len(requests), tokens, steps, runs)
    free = available_memory_bytes()
    if free is not None and needed > free:
        raise WorkloadError(f"{len(requests):,} requests of {tokens:,} output tokens under {runs} polic"
                            f"{'y' if runs == 1 else 'ies'} need at least {needed / 1e9:.1f} GB (measured: "
                            f"{RUN_BYTES.request:.0f} bytes a request and {RUN_BYTES.token:.1f} an output token), and "
                            f"{free / 1e9:.1f} GB is available: give fewer requests (--requests, or a shorter trace) "
                            "or shorter outputs")


def parse_prefix(text: str) -> tuple[int, int]:
    """``--prefix shared:L:N``: N system prompts of L tokens each (L, N)."""
    kind, *parts = text.strip().split(":")
    try:
        tokens, count = (int(p) for p in parts) if kind == "shared" and len(parts) == 2 else (0, 0)
    except ValueError:
        tokens = count = 0
    if not 1 <= tokens <= MAX_LENGTH_TOKENS or not 1 <= count <= MAX_REQUESTS:
        raise WorkloadError(f"--prefix {text!r}: give shared:L:N, N system prompts of L tokens (integers from 1; "
                            f"L at most {MAX_LENGTH_TOKENS:,}, N at most {MAX_REQUESTS:,})")
    return tokens, count


def parse_sessions(text: str) -> tuple[int, float]:
    """``--sessions T:G``: conversations of T turns, each sent G seconds after the answer to the one before."""
    turns, sep, gap = text.strip().partition(":")
    try:
        parsed = (int(turns), float(gap))
    except ValueError:
        parsed = None
    if not sep or parsed is None or not 1 <= parsed[0] <= MAX_REQUESTS or not 0 <= parsed[1] <= MAX_ARRIVAL_S:
        raise WorkloadError(f"--sessions {text!r}: give T:G, turns per conversation (an integer from 1) and the "
                            f"seconds a user takes to answer (from 0 to {MAX_ARRIVAL_S:.0e})")
    return parsed


def make_workload(n: int, arrivals: str, prompt: str, output: str, seed: int = 0, prefix: str | None = None,
                  sessions: str | None = None, lengths: list[tuple[int, int]] | None = None) -> list[Request]:
    """``n`` requests; with ``prefix`` (``shared:L:N``) each prompt opens with one of N system prompts of L tokens,
    drawn uniformly, and ``prompt`` is what follows it; with ``sessions`` (``T:G``) the requests are conversations
    of T turns (the last one shorter when T does not divide ``n``): ``arrivals`` start them (``poisson:RATE``:
    RATE requests/s, conversations at RATE / T), each later turn is sent G seconds after the turn before it ends,
    and its prompt resends the conversation so far (every earlier prompt and answer) before ``prompt`` new
    tokens."""
    check_request_count(n)
    check_seed(seed)
    shared = parse_prefix(prefix) if prefix else None
    turns, think_s = parse_sessions(sessions) if sessions else (1, 0.0)
    streams = np.random.SeedSequence(seed).spawn(4)  # the first three as they always were: same seed, same lengths
    if lengths:  # each request one row's pair: a prompt keeps its own answer's length, as the dataset had them
        rows = np.random.default_rng(streams[1]).integers(len(lengths), size=n)
        prompts, outputs = [lengths[i][0] for i in rows], [lengths[i][1] for i in rows]
    elif isinstance(preset := parse_lengths(prompt), PresetLengths) and preset == parse_lengths(output):
        # one trace's lengths for both: its cut on a request's total holds
        drawn = preset.preset.sample_pairs(n, np.random.default_rng(streams[1]), np.random.default_rng(streams[2]))
        prompts, outputs = ([int(v) for v in role] for role in drawn)
    else:
        prompts = sample_lengths(prompt, n, np.random.default_rng(streams[1]))
        outputs = sample_lengths(output, n, np.random.default_rng(streams[2]), role="output")
    if shared is not None and shared[0] + max(prompts) > MAX_LENGTH_TOKENS:  # before a session's turn says it
        raise WorkloadError(f"--prefix {prefix}: a system prompt of {shared[0]:,} tokens before prompts of up to "
                            f"{max(prompts):,} makes {shared[0] + max(prompts):,} tokens a request, past "
                            f"{MAX_LENGTH_TOKENS:,}; give a shorter system prompt")
    if shared is None and turns == 1:
        times = arrival_times(arrivals, n, np.random.default_rng(streams[0]))
        return [Request(i, t, p, o) for i, (t, p, o) in enumerate(zip(times, prompts, outputs, strict=True))]
    count = -(-n // turns)
    starts = arrival_times(arrivals, count, np.random.default_rng(streams[0]), per_arrival=n / count)
    systems = np.random.default_rng(streams[3]).integers(shared[1], size=count) if shared else None
    return [request for s in range(count) for request in _conversation(
        s, starts[s], range(s * turns, min(n, (s + 1) * turns)), prompts, outputs, shared,
        None if systems is None else int(systems[s]), think_s)]


def _conversation(session: int, start_s: float, ids: range, prompts: list[int], outputs: list[int],
                  shared: tuple[int, int] | None, system: int | None, think_s: float) -> list[Request]:
    """One session's turns.  Content ids: system prompt k is k; request i's new tokens are N + 2i and its answer
    N + 2i + 1 (N: the system prompts), so no two pieces of content share an id by accident."""
    first = shared[1] if shared else 0
    history: tuple[tuple[int, int], ...] = ((system, shared[0]),) if shared and system is not None else ()
    out = []
    for i in ids:
        new, answer = (first + 2 * i, prompts[i]), (first + 2 * i + 1, outputs[i])
        tokens = sum(length for _, length in history) + prompts[i]
        if tokens > MAX_LENGTH_TOKENS:
            raise WorkloadError(f"session {session}: turn {i - ids.start + 1} resends {tokens:,} tokens, past "
                                f"{MAX_LENGTH_TOKENS:,}; give fewer turns or shorter lengths")
        # Only content another request can meet is keyed: a last turn's own tokens are no one else's.
        segments = (*history, new, answer) if i + 1 < ids.stop else history
        out.append(Request(i, start_s, tokens, outputs[i], segments, after=i - 1 if i > ids.start else None,
                           think_s=think_s))
        history = (*history, new, answer)
    return out


def with_arrivals(requests: list[Request], arrivals: str, seed: int = 0) -> list[Request]:
    """The same requests (same lengths) under another arrival process: what a rate search varies.  A
    conversation's first turn takes the new time; its later turns still follow it (their placeholder moves
    with it), and ``poisson:RATE`` still means RATE requests/s."""
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[0])
    firsts = [r for r in requests if r.after is None]
    if len(firsts) == len(requests):
        times = arrival_times(arrivals, len(requests), rng)
        return [replace(r, arrival_s=t) for r, t in zip(requests, times, strict=True)]
    times = iter(arrival_times(arrivals, len(firsts), rng, per_arrival=len(requests) / len(firsts)))
    moved: dict[int, float] = {}
    for r in sorted(requests, key=lambda r: r.id):  # a turn's predecessor has a lower id
        moved[r.id] = next(times) if r.after is None else moved[r.after]
    return [replace(r, arrival_s=moved[r.id]) for r in requests]


def load_trace(path: str | Path) -> list[Request]:
    """A CSV with columns ``arrival_s,prompt_tokens,output_tokens`` (others ignored), or a Mooncake trace (a
    ``.jsonl`` file: ``load_mooncake_trace``), sorted by arrival."""
    path = Path(path)
    if path.suffix.lower() == ".jsonl":
        return load_mooncake_trace(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as stream:  # -sig: a spreadsheet's BOM is not a column
            reader = csv.DictReader(stream)
            missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(reader.fieldnames or ())
            if missing:
                raise WorkloadError(f"{path}: trace lacks column(s) {', '.join(sorted(missing))}")
            out: list[Request] = []
            # Each row a request as it is read (a row's dict is ~10 times a request, and a million of them held
            # at once were the most of a 1M-row trace's memory), counted: a huge trace is refused before it fills
            # the memory.
            for line, row in enumerate(reader, start=2):
                if len(out) == MAX_REQUESTS:
                    raise WorkloadError(f"{path}: trace has more than {MAX_REQUESTS:,} requests; give a shorter one")
                out.append(_csv_request(path, line, len(out), row))
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: not a UTF-8 text CSV") from None
    return _by_arrival(path, out)


def _csv_request(path: Path, line: int, index: int, row: dict[str, Any]) -> Request:
    try:
        arrival, prompt, output = float(row["arrival_s"]), int(row["prompt_tokens"]), int(row["output_tokens"])
    except (TypeError, ValueError):
        raise WorkloadError(f"{path}: line {line}: arrival_s must be a number, token counts integers") from None
    try:
        return Request(index, arrival, prompt, output)
    except WorkloadError as exc:
        raise WorkloadError(f"{path}: line {line}: {exc}") from None


def _by_arrival(path: Path, requests: list[Request]) -> list[Request]:
    if not requests:
        raise WorkloadError(f"{path}: trace has no requests")
    requests.sort(key=lambda r: (r.arrival_s, r.id))
    return [r if r.id == i else replace(r, id=i) for i, r in enumerate(requests)]  # in order already: kept


# Mooncake's traces (kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl) give one hash id per 512 tokens of input,
# the last block partial: 6,758 tokens have 14 ids.
MOONCAKE_BLOCK_TOKENS = 512


def load_mooncake_trace(path: Path) -> list[Request]:
    """A Mooncake trace: a JSON object a line, ``timestamp`` (ms since the first request), ``input_length``,
    ``output_length`` and ``hash_ids``, one id per ``MOONCAKE_BLOCK_TOKENS`` tokens of the prompt (the last block
    partial); two prompts whose ids agree up to a block share every token up to its end.  Other keys are
    ignored."""
    out: list[Request] = []
    try:
        with path.open(encoding="utf-8-sig") as stream:
            for line, text in enumerate(stream, start=1):  # each line a request as it is read, as a CSV's row
                if not text.strip():
                    continue
                if len(out) == MAX_REQUESTS:  # counted while read: a huge trace is refused before it fills memory
                    raise WorkloadError(f"{path}: trace has more than {MAX_REQUESTS:,} requests; give a shorter one")
                try:  # with a nesting cap: a line nested 100,000 deep is bad input, not a RecursionError
                    row = parse_json(text, f"{path}: line {line}")
                except JsonFileError as exc:
                    raise WorkloadError(f"{exc} (a Mooncake trace has one JSON object a line)") from None
                try:
                    out.append(_mooncake_request(len(out), row))
                except WorkloadError as exc:
                    raise WorkloadError(f"{path}: line {line}: {exc}") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: not UTF-8 text") from None
    return _by_arrival(path, out)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _mooncake_request(index: int, row: Any) -> Request:
    fields = ("timestamp", "input_length", "output_length", "hash_ids")
    if not isinstance(row, dict) or any(name not in row for name in fields):
        raise WorkloadError(f"a Mooncake trace row has {', '.join(fields)}")
    stamp, prompt, output, ids = (row[name] for name in fields)
    if not (_integer(stamp) or isinstance(stamp, float)) or not _integer(prompt) or not _integer(output) \
            or not isinstance(ids, list) or not all(_integer(i) for i in ids):
        raise WorkloadError("timestamp (ms) must be a number, input_length and output_length integers, hash_ids "
                            "a list of integers")
    blocks = -(-prompt // MOONCAKE_BLOCK_TOKENS) if prompt > 0 else 0
    if prompt > 0 and len(ids) != blocks:
        raise WorkloadError(f"{len(ids)} hash_ids for {prompt} input tokens: a Mooncake trace has one per "
                            f"{MOONCAKE_BLOCK_TOKENS} tokens ({blocks})")
    segments = tuple((i, MOONCAKE_BLOCK_TOKENS) for i in ids[:-1])
    if ids:
        segments += ((ids[-1], prompt - MOONCAKE_BLOCK_TOKENS * (len(ids) - 1)),)
    return Request(index, stamp / 1000, prompt, output, segments)


def read_workload(trace: Path | None, requests: int, arrivals: str, prompt: str, output: str,
                  seed: int, prefix: str | None = None, sessions: str | None = None, lengths: Path | None = None
                  ) -> tuple[list[Request], dict[str, Any]]:
    """A command's workload and the record its document keeps of it: the ``trace`` replayed, or ``requests`` drawn
    from the arrival and length specs with ``seed`` (``prefix``: shared system prompts; ``sessions``: multi-turn
    conversations; ``lengths``: a CSV of (prompt, output) pairs drawn instead of the length specs)."""
    if trace is not None:
        return load_trace(trace), {"trace": str(trace)}
    pairs = load_lengths(lengths) if lengths is not None else None
    drawn = {"lengths": str(lengths)} if lengths is not None else {"prompt": prompt, "output": output}
    spec = {"requests": requests, "arrivals": arrivals, **drawn, "seed": seed,
            **({"prefix": prefix} if prefix else {}), **({"sessions": sessions} if sessions else {})}
    return make_workload(requests, arrivals, prompt, output, seed, prefix, sessions, pairs), spec


#: the column pairs a lengths CSV may name its prompt and output lengths by: gpubench's own, and Vidur's and
#: Sarathi-Serve's processed traces' (``num_prefill_tokens,num_decode_tokens``)
LENGTH_COLUMNS = (("prompt_tokens", "output_tokens"), ("num_prefill_tokens", "num_decode_tokens"))


def load_lengths(path: Path) -> list[tuple[int, int]]:
    """A CSV of ``prompt_tokens,output_tokens`` or ``num_prefill_tokens,num_decode_tokens`` (others ignored;
    UTF-8, a byte-order mark allowed), one (prompt, output) pair a row, each at least 1 token and at most
    ``MAX_LENGTH_TOKENS``: a dataset's lengths (ShareGPT's as a tokenizer counts them, say), drawn from by
    ``make_workload``."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8-sig") as stream:
            reader = csv.DictReader(stream)
            names = set(reader.fieldnames or ())
            columns = next((pair for pair in LENGTH_COLUMNS if set(pair) <= names), None)
            if columns is None:
                missing = set(LENGTH_COLUMNS[0]) - names
                raise WorkloadError(f"--lengths {path}: lacks column(s) {', '.join(sorted(missing))} (or "
                                    f"{','.join(LENGTH_COLUMNS[1])})")
            pairs = []
            for line, row in enumerate(reader, start=2):
                if len(pairs) == MAX_REQUESTS:  # counted while read, as a trace is
                    raise WorkloadError(f"--lengths {path}: more than {MAX_REQUESTS:,} rows; give fewer")
                pairs.append(_length_pair(path, line, row, columns))
    except OSError as exc:
        raise WorkloadError(f"--lengths {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"--lengths {path}: not a UTF-8 text CSV") from None
    if not pairs:
        raise WorkloadError(f"--lengths {path}: no rows")
    return pairs


def _length_pair(path: Path, line: int, row: dict[str, Any], columns: tuple[str, str]) -> tuple[int, int]:
    try:
        pair = (int(row[columns[0]]), int(row[columns[1]]))
    except (TypeError, ValueError):
        pair = (0, 0)
    if not all(1 <= tokens <= MAX_LENGTH_TOKENS for tokens in pair):
        raise WorkloadError(f"--lengths {path}: line {line}: {columns[0]} and {columns[1]} must be integers from "
                            f"1 to {MAX_LENGTH_TOKENS:,}")
    return pair


def closed_loop_record(record: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """A workload record under ``--concurrency``: the clients, and no arrival process (a trace keeps its name:
    its lengths are sent in its order, its arrival times unused)."""
    return {**{k: v for k, v in record.items() if k != "arrivals"}, "concurrency": concurrency}


def describe_lengths(spec: str, role: str = "prompt") -> str:
    """A length spec in words: ``exp:128:512`` -> "exponential, mean 128 tokens, capped at 512"; a preset's
    ``role`` lengths with its source."""
    try:
        return parse_lengths(spec).describe(role)
    except WorkloadError:
        return str(spec)  # a spec this version does not know: as written


def describe_arrivals(spec: str) -> str:
    """``burst`` -> "all arriving at once (a burst)"; ``poisson:4`` -> "Poisson arrivals at 4 requests/s"."""
    try:
        return parse_arrivals(spec).describe()
    except WorkloadError:
        return f"arrivals {spec}"  # a spec this version does not know: as written


def _after_prefix(prefix: str | None) -> str:
    """``shared:2000:8`` -> ", after one of 8 shared system prompts of 2000 tokens"."""
    if not prefix:
        return ""
    kind, *parts = str(prefix).split(":")
    if kind != "shared" or len(parts) != 2:
        return f", after the shared prefix {prefix}"  # a spec this version does not know: as written
    return f", after one of {parts[1]} shared system prompts of {parts[0]} tokens"


def describe_workload(workload: dict[str, Any]) -> str:
    """The workload record of a simulation or plan document in words, for a report (a plan's has no arrivals:
    it sweeps the rate)."""
    clients = workload.get("concurrency")
    closed = (f"a closed loop of {clients} client{'s' if clients != 1 else ''}, each sending its next request when "
              "its last one ends") if clients else ""
    if workload.get("trace"):
        return f"requests replayed from the trace {workload['trace']}" + (f" in order, {closed}" if closed else "")
    parts = [f"{workload['requests']:,} requests" if "requests" in workload else "requests"]
    if workload.get("arrivals"):
        parts[0] += f", {describe_arrivals(workload['arrivals'])}"
    if closed:
        parts[0] += f", {closed}"
    if workload.get("prompt"):
        parts.append(f"{'new tokens per turn' if workload.get('sessions') else 'prompts'} "
                     f"{describe_lengths(workload['prompt'])}{_after_prefix(workload.get('prefix'))}")
    if workload.get("sessions"):
        turns, _, gap = str(workload["sessions"]).partition(":")
        parts.append(f"conversations of {turns} turns, each sent {gap} s after the answer to the one before and "
                     "resending the conversation so far")
    if workload.get("output"):
        parts.append(f"outputs {describe_lengths(workload['output'], 'output')}")
    if workload.get("lengths"):
        parts.append(f"prompt and output lengths drawn in pairs from {workload['lengths']}"
                     f"{_after_prefix(workload.get('prefix'))}")
    if workload.get("seed") is not None:
        parts.append(f"seed {workload['seed']}")
    return "; ".join(parts)
