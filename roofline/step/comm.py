"""What a step's collectives move between GPUs: tensor parallelism's all-reduces and expert parallelism's
all-to-alls.  Their time is the interconnect's (``roofline.specs.gpus.Interconnect``: within one NVLink domain its
link, a group larger than the domain across the scale-out link too, each with NCCL's fixed latency per collective);
they move no HBM bytes the roofline counts, so a step reports them apart.

- TP > 1: a ring all-reduce after each mixer's output projection and each MLP (two per transformer layer; one per
  Nemotron-H block), each of the rank's tokens' hidden vectors (Megatron-LM's row-parallel linears).
- EP > 1: per MoE layer, a dispatch and a combine all-to-all, each of the rank's tokens' hidden vectors once per
  expert they are routed to (DeepEP's and vLLM's all-to-all kernels; the share bound for the rank's own experts
  stays on the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.core.counting import all_reduce_bytes, all_to_all_bytes
from roofline.specs.gpus import Interconnect
from roofline.step.launches import StepModel

ALL_TO_ALLS_PER_MOE_LAYER = 2  # dispatch and combine


@dataclass(frozen=True)
class Collective:
    name: str  # all_reduce | all_to_all
    ranks: int
    count: int  # per step
    message_bytes: float  # one collective's, from each rank

    def crossing(self, link: Interconnect) -> str:
        """The link this collective crosses on ``link``'s sheet: its own, or the scale-out link between domains."""
        return link.crossing(self.ranks)

    def time_s(self, link: Interconnect) -> float:
        one = link.all_reduce_time_s(self.message_bytes, self.ranks) if self.name == "all_reduce" \
            else link.all_to_all_time_s(self.message_bytes, self.ranks)
        return self.count * one


def collectives(step: StepModel, tokens: int) -> list[Collective]:
    """The collectives of a step of ``tokens`` tokens (the group's), on one GPU."""
    m, par = step.model, step.parallelism
    out = []
    if par.tp > 1 and tokens:
        out.append(Collective("all_reduce", par.tp, all_reduces_per_step(m),
                              all_reduce_bytes(step.dtype, step.rank_tokens(tokens), m.hidden)))
    if par.ep > 1 and tokens and m.moe is not None:
        out.append(Collective("all_to_all", par.ep, ALL_TO_ALLS_PER_MOE_LAYER * m.routed_layers,
                              all_to_all_bytes(step.dtype, step.rank_tokens(tokens), m.moe.latent or m.hidden,
                                               m.moe.topk, m.moe.experts, par.ep)))
    return out


def all_reduces_per_step(model) -> int:
    """A tensor-parallel step's all-reduces: one after each mixer and each MLP (``TP_ALL_REDUCES_PER_LAYER`` in a
    transformer layer, which holds one of each)."""
    return sum(c for _, c in model.mixer_layers) + sum(c for _, c in model.mlp_layers)


def comm_time_s(step: StepModel, tokens: int, link: Interconnect) -> float:
    return sum(c.time_s(link) for c in collectives(step, tokens))
