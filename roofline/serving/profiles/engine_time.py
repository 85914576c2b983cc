"""Whose engine time a simulation's steps carry: a calibrated profile's fitted terms, an engine preset's published
ones (``roofline.specs.engines``: ``--engine vllm|sglang|trtllm``), or none (``--engine none``: kernels only).

The one rule, for simulate and plan alike: a profile's own overhead that was not taken from a preset (fitted by
``calibrate`` or ``validate``: ``fitted_from`` set; or written into the profile by hand) wins over any preset, and
the answer says so; otherwise the ``--engine`` preset's terms, for the profile's model, are the engine time (a
profile made with a preset keeps it unless ``--engine`` is typed); ``--engine none`` drops a preset and keeps a
fitted overhead.  Each ``--overhead-*`` typed replaces its term of whichever was chosen (``EngineTime.given``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from roofline.serving.profile_doc import EngineOverhead, StepProfile
from roofline.specs.engines import NONE, EnginePreset, engine_names, engine_preset

# Where a simulation's engine time comes from (the simulation document's engine_time.whose).
WHOSE = ("preset", "calibrated", "profile", "given", "none")


def preset_overhead(name: str, layers: int) -> EngineOverhead | None:
    """The overhead of ``--engine name`` for a model of ``layers`` layers, its ``fitted_on`` naming the preset and
    its source (None for ``none``)."""
    preset = engine_preset(name)
    if preset is None:
        return None
    terms = preset.terms_s(layers)
    return EngineOverhead(per_step_s=terms["per_step_s"], per_sequence_s=terms["per_sequence_s"],
                          per_cached_token_s=terms["per_cached_token_s"],
                          per_prefill_step_s=terms["per_prefill_step_s"], fitted_on=preset.describe(layers),
                          preset=name)


@dataclass(frozen=True)
class EngineTime:
    """The engine time a simulation charges every step: the overhead, and in words whose it is."""

    engine: str  # the --engine the answer is for (a profile's own preset when --engine was not typed)
    whose: str  # one of WHOSE
    overhead: EngineOverhead | None
    words: str
    preset: EnginePreset | None = None  # the preset whose terms are used

    def given(self, terms: dict[str, float], flags: str) -> EngineTime:
        """The same with each ``--overhead-*`` typed (``terms``, spelled ``flags``) replacing its term."""
        if not terms:
            return self
        base = self.overhead or EngineOverhead(0.0, 0.0, "")
        said = f"{base.fitted_on}; {flags} given on the command line" if base.fitted_on else f"{flags} given"
        overhead = replace(base, **terms, fitted_on=said)
        words = f"{self.words}; {flags} given on the command line" if self.overhead else f"given: {flags}"
        return replace(self, overhead=overhead, words=words, whose=self.whose if self.overhead else "given")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "whose": self.whose, "words": self.words}
        return {**out, "preset": self.preset.to_dict()} if self.preset is not None else out


def engine_time(profile: StepProfile, engine: str, typed: bool = True) -> EngineTime:
    """Whose engine time ``profile`` is simulated with under ``--engine engine`` (``typed``: given on the command
    line, rather than its default), before any ``--overhead-*``."""
    own = profile.engine_overhead
    if own is not None and own.preset is None:
        whose = "calibrated" if own.fitted_from is not None else "profile"
        lead = "calibrated" if whose == "calibrated" else "the profile's own engine overhead"
        passed = "" if engine == NONE else f" (the {engine} preset is not used: the profile's terms win over it)"
        return EngineTime(engine, whose, own, f"{lead}: {own.fitted_on}{passed}")
    name = engine
    if not typed and own is not None and own.preset:
        if own.preset not in engine_names():  # a preset this install does not ship: the profile's terms, as recorded
            return EngineTime(own.preset, "preset", own, f"the profile's {own.preset} preset: {own.fitted_on}")
        name = own.preset
    preset = engine_preset(name)
    if preset is None:
        return EngineTime(NONE, "none", None, "none: kernels only (--engine none)")
    overhead = preset_overhead(name, profile.layers)
    replacing = (f" (replacing the profile's {own.preset} preset)"
                 if own is not None and own.preset and own.preset != name else "")
    assert overhead is not None  # a preset, not none
    return EngineTime(name, "preset", overhead, overhead.fitted_on + replacing, preset)
