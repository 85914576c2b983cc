"""What ``gpubench calibrate`` is asked to do: one ``CalibrateConfig``, built from the command's options and
checked once, before any file is read.  ``FLAGS`` declares each option (the CLI declares its flags from it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.calibrate.bench import FORMATS, BenchRun
from roofline.core.options import Option, OptionError, check_seed, number_refusal
from roofline.serving.policies import POLICIES, PolicyError, parse_policy

FLAGS: dict[str, Option] = {
    "bench": Option(("--bench",), "path", required=True, multiple=True,
                    help="the benchmark to fit on: vllm bench serve --save-result --save-detailed JSON, or "
                         "GuideLLM's benchmarks.json; repeatable (fitted on all of them together)"),
    "profile": Option(("--profile",), "path", required=True, help="the step profile of the engine's model and device"),
    "out_dir": Option(("-o", "--output"), "path", required=True,
                      help="folder for calibrated.json (the profile with the fitted overhead) and calibrate.json"),
    # multiple: so that a second --policy is seen and refused (click keeps the last of a single option, silently)
    "policy": Option(("--policy",), required=True, multiple=True,
                     help="the engine's scheduling as a simulator policy: chunked:budget=T:max-batch=B (vLLM's "
                          "max_num_batched_tokens and max_num_seqs), continuous:max-batch=B, ... (once: the one "
                          "scheduler the engine ran)"),
    "predict": Option(("--predict",), "text", multiple=True, metavar="FILE[:POLICY]",
                      help="another benchmark of the same engine, predicted with the fitted overhead (not fitted "
                           "on), under POLICY where given (another engine configuration: "
                           "FILE:chunked:budget=512:max-batch=32), else --policy with the engine limits the file "
                           "records; repeatable"),
    "fmt": Option(("--format",), "choice", "auto", choices=("auto", *FORMATS), show_default=True,
                  help="the benchmarks' format (auto: told apart by their keys)"),
    "run": Option(("--run",), "int", help="which benchmark of a GuideLLM file with several (a sweep), from 0"),
    "mem_fraction": Option(("--mem-fraction",), "number", 0.9, show_default=True, low=0, high=1,
                           help="share of device memory the engine holds (weights + KV cache)"),
    "seed": Option(("--seed",), "int", 0, show_default=True,
                   help="draws a generator's arrival process again where it saved no send times (vLLM's rate)"),
}


@dataclass(frozen=True)
class Predicted:
    """One ``--predict``: a benchmark file and the policy its engine ran (None: ``--policy``, with the engine limits
    the file records: ``replay_policy``)."""

    path: Path
    policy: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.policy}" if self.policy else str(self.path)


def parse_predict(text: str) -> Predicted:
    """``FILE`` or ``FILE:POLICY``: the policy starts at the first ``:`` that a policy kind follows (``static``,
    ``continuous``, ``paged``, ``chunked``), so a file whose name holds a colon is still a file."""
    for at, char in enumerate(text):
        if char == ":" and text[at + 1:].split(":", 1)[0] in POLICIES:
            path, policy = text[:at], text[at + 1:]
            if not path:
                raise OptionError(f"--predict {text!r}: give the benchmark file before its policy (FILE:POLICY)")
            try:
                parse_policy(policy)
            except PolicyError as exc:
                raise OptionError(f"--predict {text!r}: {exc}") from None
            return Predicted(Path(path), policy)
    return Predicted(Path(text))


# Which policy option each of vLLM's engine limits is, per policy kind (EngineArgs names: max_num_seqs, the
# sequences a step holds; max_num_batched_tokens, the tokens it holds, the chunked budget; enable_prefix_caching).
LIMIT_OPTIONS: dict[str, dict[str, str]] = {
    "chunked": {"max_num_batched_tokens": "budget", "max_num_seqs": "max-batch",
                "enable_prefix_caching": "prefix-cache"},
    "paged": {"max_num_batched_tokens": "max-tokens", "max_num_seqs": "max-batch",
              "enable_prefix_caching": "prefix-cache"},
    "continuous": {"max_num_batched_tokens": "max-tokens", "max_num_seqs": "max-batch"},
    "static": {"max_num_seqs": "batch"},
}


def with_limits(policy: str, engine: dict[str, Any]) -> tuple[str, list[str]]:
    """``policy`` with the engine limits a benchmark file records put in as its options (``LIMIT_OPTIONS``), and
    each limit in words as put in (``max_num_seqs 64 as max-batch=64``)."""
    kind, *parts = policy.strip().split(":")
    options = dict(part.split("=", 1) for part in parts)
    put = []
    for limit, option in LIMIT_OPTIONS.get(kind, {}).items():
        if limit not in engine:
            continue
        value = engine[limit]
        typed = ("on" if value else "off") if isinstance(value, bool) else str(value)
        options[option] = typed
        put.append(f"{limit} {str(value).lower() if isinstance(value, bool) else value} as {option}={typed}")
    return ":".join([kind, *(f"{k}={v}" for k, v in options.items())]), put


def replay_policy(policy: str, bench: BenchRun, given: str | None = None) -> tuple[str, str]:
    """The policy ``bench`` is replayed under, and whence: ``given`` (a ``--predict FILE:POLICY``) as given;
    else ``policy`` (``--policy``) with the engine limits the file records put in (``with_limits``).  Said either
    way, so a file's own limits are never taken or passed over silently."""
    source = bench.engine.get("source", "")
    limited, put = with_limits(given or policy, bench.engine)
    agrees = True
    if put:
        try:
            agrees = _schedule(limited) == _schedule(given or policy)
        except PolicyError as exc:
            raise OptionError(f"{bench.path}: its engine limits ({', '.join(put)}, {source}) make {exc}") from None
    if given is not None:
        if put and not agrees:
            return given, (f"given with the file; the file records {', '.join(put)} ({source}), which the given "
                           "policy does not match")
        return given, "given with the file"
    if not put:
        return policy, "--policy"
    if agrees:
        return policy, f"--policy, as the file's engine limits say: {', '.join(put)} ({source})"
    return limited, f"--policy with the file's engine limits: {', '.join(put)} ({source})"


def _schedule(policy: str) -> dict[str, Any]:
    """What a policy schedules by, whatever its text's order."""
    return {**parse_policy(policy).to_dict(), "policy": None}


@dataclass(frozen=True)
class CalibrateConfig:
    bench: tuple[Path, ...]
    profile: Path
    out_dir: Path
    policy: str
    predict: tuple[Predicted, ...] = ()
    fmt: str = "auto"
    run: int | None = None
    mem_fraction: float = 0.9
    seed: int = 0

    def __post_init__(self) -> None:
        parse_policy(self.policy)  # a PolicyError names what is wrong with it
        why = number_refusal(self.mem_fraction, low=0, high=1)
        if why is not None:
            raise OptionError(f"--mem-fraction {self.mem_fraction:g}: {why}")
        if not self.bench:
            raise OptionError("--bench: give the benchmark to fit on")
        if self.run is not None and self.run < 0:
            raise OptionError(f"--run {self.run}: counts benchmarks from 0")
        if self.fmt not in ("auto", *FORMATS):
            raise OptionError(f"--format {self.fmt!r}: choose from auto, {', '.join(FORMATS)}")
        check_seed(self.seed)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], given: Collection[str] = ()) -> CalibrateConfig:
        """The config of one command line (``options``: the values by field name as click parsed them)."""
        values = dict(options)
        values["policy"] = one_policy(values.get("policy"))
        values["predict"] = tuple(parse_predict(str(p)) for p in values.get("predict") or ())
        values["bench"] = tuple(Path(p) for p in values.get("bench") or ())
        for name in ("profile", "out_dir"):
            values[name] = Path(values[name])
        return cls(**values)

    def to_record(self) -> dict[str, Any]:
        return {"bench": [str(p) for p in self.bench], "profile": str(self.profile), "policy": self.policy,
                "predict": [str(p) for p in self.predict], "format": self.fmt, "run": self.run,
                "mem_fraction": self.mem_fraction, "seed": self.seed}


def one_policy(given: str | Sequence[str] | None) -> str:
    """``--policy`` once.  Refused twice rather than fitted once each: the overhead is the engine's, fitted on the
    schedule of the one scheduler it ran, and one calibrate writes one calibrated profile; each other policy is a
    calibration of its own (its own -o)."""
    policies = [given] if isinstance(given, str) else list(given or ())
    if not policies:
        raise OptionError("--policy: give the engine's scheduling as a simulator policy")
    if len(policies) > 1:
        raise OptionError(f"--policy given {len(policies)} times ({', '.join(policies)}): the overhead is fitted on "
                          "the schedule of the one scheduler the engine ran; give that one, and predict another "
                          "configuration's benchmark with --predict FILE:POLICY")
    return policies[0]
