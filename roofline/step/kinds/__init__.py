"""Each mixer kind's rules, one module a kind: the matrices a layer of it multiplies on one GPU, what one sequence
keeps between steps (a cache that grows with the context, or a fixed state), and one layer's mixing work over a
step's batch, counted in ``roofline.core.counting``.

- ``attention``: softmax attention over a KV cache, full or over a sliding window (``roofline.specs.layers.Attention``);
- ``latent``: DeepSeek's latent attention (MLA), and with an indexer DeepSeek sparse attention (DSA);
- ``linear``: Gated DeltaNet's linear attention (a recurrent state);
- ``mamba``: Mamba-2's state-space layer (a recurrent state).

``rules_of(spec)`` is the one lookup; the step model (``roofline.step.launches``), memory (``roofline.step.memory``),
the profiles and the simulator read a kind only through these rules.
"""

from __future__ import annotations

from typing import Any

from roofline.step.kinds.attention import AttentionRules
from roofline.step.kinds.base import MixerRules
from roofline.step.kinds.latent import LatentRules
from roofline.step.kinds.linear import LinearAttentionRules
from roofline.step.kinds.mamba import Mamba2Rules

RULES: dict[str, type[MixerRules]] = {"attention": AttentionRules, "mla": LatentRules,
                                      "linear_attention": LinearAttentionRules, "mamba2": Mamba2Rules}


def rules_of(spec: Any) -> MixerRules:
    """The rules of a mixer spec's kind."""
    return RULES[spec.kind](spec)
