"""Speculative decoding: a drafter proposes ``draft`` tokens per sequence, one verification step of the target
model checks them all, and the tokens a step yields are the accepted drafts plus the target's own next token.

``--spec-decode draft=K,accept=DIST[,drafter=D]``:

- ``accept=geometric:P``: each draft is accepted with probability P, independently, until the first rejection
  (the acceptance model of Leviathan et al. and of vLLM's and SGLang's reported acceptance rates): P(A = a) = P^a
  (1 − P) for a < K and P^K for a = K, so a step yields ``(1 − P^(K+1)) / (1 − P)`` tokens on average.
- ``accept=hist:p0/p1/.../pK``: the probability that exactly 0, 1, ..., K drafts are accepted, as measured by an
  engine (its acceptance-length histogram); they must sum to 1.
- ``drafter=mtp`` (default): DeepSeek's multi-token-prediction head, one more transformer layer of the model and
  its LM head per draft token; ``drafter=MODEL`` (a profiles/models id) a separate small model, K decode steps of it.

The verification step runs K + 1 query tokens per sequence through the same linears and attention (causal among
the drafts): its GEMMs are the sweep's at batch × (K + 1), so a memory-bound decode turns compute-bound at about
1/(K + 1) of the batch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from roofline.core.errors import BadInputError

MAX_DRAFT = 16


@dataclass(frozen=True)
class SpecDecode:
    draft: int
    accept: tuple[float, ...]  # P(accepted = 0..draft)
    drafter: str = "mtp"
    spelled: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.draft <= MAX_DRAFT:
            raise BadInputError(f"--spec-decode draft={self.draft}: give 1 to {MAX_DRAFT} draft tokens")
        # not (p >= 0) and not (|sum - 1| <= 1e-6): NaN fails every comparison, so it is refused with the rest
        if len(self.accept) != self.draft + 1 or not all(p >= 0 for p in self.accept) \
                or not abs(sum(self.accept) - 1) <= 1e-6:
            raise BadInputError(f"--spec-decode: the acceptance probabilities must be {self.draft + 1} non-negative "
                                "numbers summing to 1")

    @property
    def queries(self) -> int:
        """Query tokens one sequence brings to the verification step."""
        return self.draft + 1

    @property
    def tokens_per_step(self) -> float:
        """Tokens one sequence gains per step on average: accepted drafts plus the target's own."""
        return float(sum((a + 1) * p for a, p in enumerate(self.accept)))

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``count`` tokens-per-step draws (accepted drafts + 1), seeded by ``rng``."""
        return rng.choice(np.arange(1, self.draft + 2), size=count, p=np.asarray(self.accept))

    def describe(self) -> str:
        drafter = "an MTP head" if self.drafter == "mtp" else f"draft model {self.drafter}"
        return (f"speculative decoding: {self.draft} draft tokens from {drafter}, {self.tokens_per_step:.2f} tokens "
                "per sequence per step on average")

    def to_dict(self) -> dict:
        return {"draft": self.draft, "accept": list(self.accept), "drafter": self.drafter,
                "tokens_per_step": self.tokens_per_step, "spelled": self.spelled}


def geometric(draft: int, rate: float) -> tuple[float, ...]:
    if not 0 <= rate < 1:
        raise BadInputError(f"accept=geometric:{rate:g}: the acceptance rate must be in [0, 1)")
    return tuple([rate**a * (1 - rate) for a in range(draft)] + [rate**draft])


def parse_spec_decode(text: str | None) -> SpecDecode | None:
    """``draft=K,accept=geometric:P|hist:p0/p1/...[,drafter=mtp|MODEL]``; None: not asked for."""
    if not text:
        return None
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("draft", "accept", "drafter"):
            raise BadInputError(f"--spec-decode {text!r}: expected draft=K,accept=DIST[,drafter=mtp|MODEL]")
        fields[key.strip()] = value.strip()
    if "draft" not in fields or "accept" not in fields:
        raise BadInputError(f"--spec-decode {text!r}: give both draft=K and accept=geometric:P or hist:p0/.../pK")
    if not re.fullmatch(r"\d+", fields["draft"]):
        raise BadInputError(f"--spec-decode draft={fields['draft']!r} is not a whole number of tokens")
    draft, accept = int(fields["draft"]), fields["accept"]
    if not 1 <= draft <= MAX_DRAFT:  # before the acceptance list is built: it holds draft + 1 probabilities
        raise BadInputError(f"--spec-decode draft={fields['draft']}: give 1 to {MAX_DRAFT} draft tokens")
    try:
        if accept.startswith("geometric:"):
            probabilities = geometric(draft, float(accept.split(":", 1)[1]))
        elif accept.startswith("hist:"):
            probabilities = tuple(float(v) for v in accept.split(":", 1)[1].split("/"))
        else:
            raise ValueError
    except ValueError:
        raise BadInputError(f"--spec-decode accept={accept!r}: expected geometric:P or hist:p0/p1/.../pK") from None
    return SpecDecode(draft, probabilities, fields.get("drafter", "mtp"), text)


def drafter_step(step, spec: SpecDecode):
    """The step model of the drafter: an MTP head is one more layer of the target (an MoE layer in a mixture, as
    DeepSeek-V3's) with its LM head; a draft model is its own model, on the target's TP where it divides (else one
    GPU), in the target's dtype."""
    from dataclasses import replace

    from roofline.specs.gpus import SpecError
    from roofline.specs.models import load_model
    from roofline.step.launches import StepModel

    if spec.drafter == "mtp":
        m = step.model
        one = replace(m, layers=1, moe_layers=1 if m.is_moe else None, sliding_layers=0, sliding_window=None)
        if m.hybrid:  # the head's one block: the main attention and the routed experts (else the first MLP)
            mlp = m.moe or m.mlp_layers[0][0]
            one = replace(one, mixers=((step.main_mixer.spec, 1),), mlps=((mlp, 1),))
        return StepModel(one, step.parallelism, step.dtype, step.kv_dtype, step.routing)
    if spec.drafter.endswith(".json"):
        from pathlib import Path

        from roofline.specs.hf_config import load_hf_config

        model = load_hf_config(Path(spec.drafter))
    else:
        model = load_model(spec.drafter)
    try:
        return StepModel.of(model, step.parallelism.tp, 1, step.dtype, step.kv_dtype)
    except SpecError:
        return StepModel.of(model, 1, 1, step.dtype, step.kv_dtype)


def drafter_work(drafter, decodes: int, context_sum: float, draft: int) -> tuple[float, float]:
    """(FLOP, bytes) of the drafter's ``draft`` steps of ``decodes`` sequences whose contexts sum to
    ``context_sum``, on one GPU (the launches ``gpubench decode --spec-decode`` counts)."""
    from roofline.step.launches import Batch

    work = drafter.work(Batch(decodes, context_sum)).total
    return draft * work.flop, draft * work.bytes


def drafter_roof_s(drafter, decodes: int, context_sum: float, draft: int, bandwidth_bytes_per_s: float,
                   peak_flop_per_s: float | None) -> float:
    """Seconds of the drafter's ``draft`` steps on a roofline: each launch the slower of its bytes at
    ``bandwidth_bytes_per_s`` and its FLOP at ``peak_flop_per_s`` (None: bytes only), as ``gpubench decode
    --analytic`` times the drafter's launches."""
    from roofline.step.launches import Batch

    seconds = 0.0
    for launch in drafter.launches(Batch(decodes, context_sum)):
        memory = launch.work.bytes / bandwidth_bytes_per_s
        compute = launch.work.flop / peak_flop_per_s if peak_flop_per_s else 0.0
        seconds += launch.count * max(memory, compute)
    return draft * seconds


# The acceptance draws' stream beside the workload's (numpy's default_rng(seed) draws the lengths): one seed, two
# independent streams, so turning speculation on never changes the workload drawn.
ACCEPTANCE_STREAM = 0x5EC


def acceptance_rng(seed: int, replica: int = 0) -> np.random.Generator:
    """The generator of one replica's acceptance draws under ``--seed``."""
    return np.random.default_rng((seed, ACCEPTANCE_STREAM, replica))
