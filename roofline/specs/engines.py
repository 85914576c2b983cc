"""Engine overhead presets (``profiles/engines/<name>.toml``): what a serving engine spends outside its kernels each
step, as published by others, with the source of every figure.

The figures live in these files, never in code, as a GPU's do in ``profiles/gpus``.  Each preset gives the terms of
``roofline.serving.profile_doc.EngineOverhead`` (per step, per sequence in the step, per cached token attended, once
more for a step that runs prefill) and one more a model scales, per layer a step (BLIS's), which a preset resolves
against the model's layer count (``EnginePreset.terms_s``).  A term the source does not give is 0, and its source
says so; ``[left_out]`` says what the sources give that the preset does not use, and why.  ``--engine none`` is no
preset: kernels only.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import lru_cache

from roofline.core.errors import BadInputError
from roofline.core.units import seconds
from roofline.specs.gpus import SpecError, profiles_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# --engine none: no engine time, kernels only (what every simulation answered before presets).
NONE = "none"
# The engine simulate, profile and plan assume when none is named: vLLM, the engine most of the public measurements
# (BLIS's fit, aiconfigurator's default tables) are of.
DEFAULT_ENGINE = "vllm"
# The terms a preset gives, each in seconds, in EngineOverhead's order; per_layer_step_s is folded into per_step_s
# by the model's layers (``terms_s``).
OVERHEAD_TERMS = ("per_step_s", "per_sequence_s", "per_cached_token_s", "per_prefill_step_s")
PRESET_TERMS = ("per_step_s", "per_layer_step_s", "per_sequence_s", "per_cached_token_s", "per_prefill_step_s")
# No engine spends a second a step outside its kernels (the largest figure here is 25 ms); past it a figure is a
# typo, such as microseconds written as seconds.
MAX_TERM_S = 1.0


# The preset's identity, each in a few words with its longer source beside it (``<key>_source``, ``source_detail``).
IDENTITY = ("name", "version", "gpu", "source")


@dataclass(frozen=True)
class EnginePreset:
    """One engine's overhead terms (seconds), each with its source, and who measured them on what: ``engine`` (the
    engine's own name), ``version`` and ``gpu`` it was fitted on and ``source`` (whose figures), each in a few words,
    ``notes`` their longer sources."""

    name: str  # the file's name: vllm, sglang, trtllm
    engine: str
    version: str
    gpu: str
    source: str
    fitted_on: str
    notes: dict[str, str]  # version_source, gpu_source, source_detail
    seconds: dict[str, float]  # by PRESET_TERMS
    sources: dict[str, str]  # by PRESET_TERMS
    left_out: dict[str, str]

    def terms_s(self, layers: int) -> dict[str, float]:
        """EngineOverhead's terms for a model of ``layers`` transformer layers: the per-layer term folded into the
        per-step one."""
        terms = {term: self.seconds[term] for term in OVERHEAD_TERMS}
        terms["per_step_s"] += self.seconds["per_layer_step_s"] * layers
        return terms

    @property
    def charges_nothing(self) -> bool:
        return not any(self.seconds.values())

    def terms_words(self, layers: int | None = None) -> str:
        """The terms in words (the per-layer one times ``layers`` when given): ``126 us + 32.1 us x 32 layers a
        step, 4.42 us a sequence``."""
        s = self.seconds
        parts = []
        if s["per_step_s"] or s["per_layer_step_s"]:
            step = _us(s["per_step_s"])
            if s["per_layer_step_s"]:
                step += f" + {_us(s['per_layer_step_s'])} x {layers} layers" if layers else \
                    f" + {_us(s['per_layer_step_s'])} a layer"
            parts.append(f"{step} a step")
        for term, unit in (("per_sequence_s", "a sequence"), ("per_cached_token_s", "a cached token"),
                           ("per_prefill_step_s", "more a step that runs prefill")):
            if s[term]:
                parts.append(f"{_us(s[term])} {unit}")
        return ", ".join(parts) or "no engine time"

    def describe(self, layers: int | None = None) -> str:
        """The preset in one line: its name, the engine's version and GPU it was fitted on, whose figures, and the
        terms (resolved for ``layers`` when given)."""
        return (f"{self.name} preset: {self.engine} {self.version} on {self.gpu}, {self.source}: "
                f"{self.terms_words(layers)}")

    def to_dict(self) -> dict[str, str]:
        """The preset's identity, as a document records it."""
        return {"name": self.name, "engine": self.engine, "version": self.version, "gpu": self.gpu,
                "source": self.source, "source_detail": self.notes["source_detail"]}


def _us(value_s: float) -> str:
    return seconds(value_s)


def _text(table: dict, key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{where}: {key} must be a non-empty string")
    return value


def _parse(name: str, data: dict) -> EnginePreset:
    where = f"profiles/engines/{name}.toml"
    overhead = data.get("overhead")
    if not isinstance(overhead, dict):
        raise SpecError(f"{where}: no [overhead] table")
    seconds, sources = {}, {}
    for term in PRESET_TERMS:
        value = overhead.get(term)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                or not 0 <= value <= MAX_TERM_S:
            raise SpecError(f"{where}: [overhead] {term} = {value!r}: give seconds from 0 to {MAX_TERM_S:g}")
        seconds[term] = float(value)
        sources[term] = _text(overhead, term.removesuffix("_s") + "_source", f"{where} [overhead]")
    extra = set(overhead) - set(PRESET_TERMS) - {term.removesuffix("_s") + "_source" for term in PRESET_TERMS}
    if extra:
        raise SpecError(f"{where}: [overhead] has unknown keys {', '.join(sorted(extra))}")
    left_out = data.get("left_out", {})
    if not isinstance(left_out, dict) or not all(isinstance(v, str) and v for v in left_out.values()):
        raise SpecError(f"{where}: [left_out] must map names to reasons")
    notes = {key: _text(data, key, where) for key in ("version_source", "gpu_source", "source_detail")}
    return EnginePreset(name=name, engine=_text(data, "name", where), version=_text(data, "version", where),
                        gpu=_text(data, "gpu", where), source=_text(data, "source", where),
                        fitted_on=_text(data, "fitted_on", where), notes=notes, seconds=seconds, sources=sources,
                        left_out=dict(left_out))


@lru_cache(maxsize=1)
def load_engine_presets() -> dict[str, EnginePreset]:
    """Every preset in ``profiles/engines``, by name."""
    presets = {}
    for path in sorted((profiles_dir() / "engines").glob("*.toml")):
        with path.open("rb") as stream:
            presets[path.stem] = _parse(path.stem, tomllib.load(stream))
    if DEFAULT_ENGINE not in presets:
        raise SpecError(f"profiles/engines/{DEFAULT_ENGINE}.toml is missing: it is the default engine's preset")
    return presets


def engine_names() -> tuple[str, ...]:
    """What ``--engine`` takes: each preset, then ``none``."""
    return (*load_engine_presets(), NONE)


def check_engine_name(name: str) -> str:
    """``--engine``: a preset's name or ``none``; anything else one line."""
    if name not in engine_names():
        raise BadInputError(f"--engine {name}: unknown engine; choose from {', '.join(engine_names())} (none: kernels "
                            "only, no engine time)")
    return name


def engine_preset(name: str) -> EnginePreset | None:
    """The preset of ``--engine name`` (None for ``none``)."""
    check_engine_name(name)
    return None if name == NONE else load_engine_presets()[name]


def kernel_engine(name: str) -> str:
    """Whose kernel tables a reference database is read for under ``--engine name``: the engine's own, and vLLM's
    (the database's default, what every profile read before) under ``none``, which only drops the engine time."""
    return DEFAULT_ENGINE if name == NONE else name
