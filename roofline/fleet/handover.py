"""Prefill and decode apart (DistServe, Splitwise): what a decode replica runs, and the link a prompt's KV
cache crosses from the prefill replica that made it to the decode replica that continues it.

A prefill replica runs the chosen policy on requests cut to their first token: its steps are prefills, and a
request leaves it when its first token is out (its KV blocks are freed then; holding them through the
transfer is not modelled).  The KV cache of the prompt then moves over the link, one transfer of
``prompt_tokens × kv_bytes_per_token`` bytes (each tensor-parallel rank sends its own shard over its own link
at once, and the profile's ``kv_bytes_per_token`` is one rank's; transfers that overlap do not share the link),
and the request arrives at a decode replica that much later, holding that KV and its first token.  The decode
replica admits it by the policy's slots and KV blocks and decodes it; it prefills only what a preemption there
makes it recompute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.core.errors import BadInputError
from roofline.core.roof import transfer_time_s
from roofline.serving.policies import Policy, StepPlan
from roofline.serving.profile_doc import StepProfile
from roofline.specs.gpus import SpecError, load_gpu_spec

GIGABIT_BYTES = 1e9 / 8


@dataclass(frozen=True)
class DecodeOnly(Policy):
    """A decode replica's policy: admit handed-over requests by slots and KV blocks (the prefill policy's
    ``max_batch`` and block size) and decode every running sequence; a preempted one recomputes its prefill
    first, as under ``continuous``."""

    max_tokens: int | None = None
    paged: bool = False  # as the prefill policy's: a block-limited KV cache or not
    kind = "decode-only"

    @classmethod
    def of(cls, policy: Policy) -> DecodeOnly:
        return cls(text=f"decode of {policy.text}", max_batch=policy.max_batch, block=policy.block,
                   max_tokens=getattr(policy, "max_tokens", None), paged=policy.paged)

    def schedule(self, engine) -> StepPlan:
        admitted = engine.admit(self.max_batch, self.max_tokens)
        recompute = [(s, s.prefill_left) for s in admitted if s.prefill_left > 0]
        if recompute:
            return StepPlan(chunks=recompute)
        return StepPlan(decodes=engine.decodable())


@dataclass(frozen=True)
class KvLink:
    """The link a prompt's KV cache crosses from a prefill to a decode replica."""

    bytes_per_s: float
    latency_s: float
    source: str

    def transfer_s(self, profile: StepProfile, prompt_tokens: int) -> float:
        return transfer_time_s(prompt_tokens * profile.memory["kv_bytes_per_token"], self.bytes_per_s,
                               self.latency_s)

    def to_dict(self) -> dict[str, Any]:
        return {"bytes_per_s": self.bytes_per_s, "latency_s": self.latency_s, "source": self.source}


def kv_link(profile: StepProfile, gbps: float | None) -> KvLink:
    """``--kv-link-gbps`` when given (no latency), else one link of the interconnect on the spec sheet of the
    profile's GPU (its bandwidth one way and the latency of one hop)."""
    if gbps is not None:
        return KvLink(gbps * GIGABIT_BYTES, 0.0, f"--kv-link-gbps {gbps:g}")
    sku = profile.device.get("sku")
    if not sku:
        raise BadInputError(f"--disaggregate: the profile of {profile.model['name']} names no GPU SKU whose spec "
                            "sheet gives the link the KV cache crosses; give --kv-link-gbps")
    try:
        link = load_gpu_spec(sku).interconnect
    except SpecError as exc:
        raise BadInputError(f"--disaggregate: {exc}; give --kv-link-gbps") from None
    return KvLink(link.link_bytes_per_s, link.hop_latency_s,
                  f"{link.kind} of spec sheet {sku} ({link.link_bytes_per_s / 1e9:.0f} GB/s one way, "
                  f"{link.hop_latency_s * 1e6:.2g} µs a hop)")
