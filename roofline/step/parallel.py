"""How a model is split over GPUs: tensor parallelism (``tp``) and expert parallelism (``ep``).

``tp`` GPUs split every layer's heads and MLP (Megatron-LM's column and row split; the vocabulary of the LM head
too).  ``ep`` GPUs split a mixture of experts' routed experts, each expert whole on one GPU, and run attention and
the dense parts data-parallel over ``ep / tp`` groups of ``tp`` GPUs each (vLLM's and SGLang's expert parallelism:
the EP group is TP × DP).  Without ``ep`` the routed experts are split like the dense MLP, each expert's width over
the ``tp`` GPUs.  A step's batch is the whole group's; each data-parallel rank runs its share of the sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from roofline.specs.gpus import SpecError
from roofline.specs.models import ModelSpec


@dataclass(frozen=True)
class Parallelism:
    tp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"--{name} must be a positive integer, got {value!r}")
        if self.ep > 1 and self.ep % self.tp:
            raise SpecError(f"--ep {self.ep} is not a multiple of --tp {self.tp}: the expert-parallel group is "
                            "data-parallel groups of TP GPUs")

    @property
    def gpus(self) -> int:
        return self.ep if self.ep > 1 else self.tp

    @property
    def attention_dp(self) -> int:
        """Data-parallel attention groups (each of ``tp`` GPUs): ``ep / tp`` with expert parallelism, else 1."""
        return self.ep // self.tp if self.ep > 1 else 1

    @property
    def expert_tp(self) -> int:
        """How many GPUs split each routed expert's width: ``tp`` without expert parallelism, else none (1)."""
        return 1 if self.ep > 1 else self.tp

    def rank_share(self, count: int) -> int:
        """What one data-parallel rank runs of ``count`` sequences or tokens: its even share, the busiest's."""
        return math.ceil(count / self.attention_dp)

    def describe(self) -> str:
        return f"TP {self.tp}" + (f", EP {self.ep} (attention data-parallel × {self.attention_dp})"
                                  if self.ep > 1 else "")

    def to_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "ep": self.ep}


def check_parallelism(model: ModelSpec, parallelism: Parallelism) -> None:
    """Refuse (one line) a split the model's shapes do not divide evenly."""
    from roofline.specs.layers import DenseMlp
    from roofline.step.kinds import rules_of

    tp, ep, moe = parallelism.tp, parallelism.ep, model.moe
    if ep > 1 and moe is None:
        raise SpecError(f"--ep {ep}: {model.name} has no experts to split (it is dense)")
    if ep > 1 and moe is not None and moe.experts % ep:
        raise SpecError(f"--ep {ep} does not divide the {moe.experts} experts of {model.name}")
    checks = [check for kind, _ in model.mixer_layers for check in rules_of(kind).divides()]
    checks += [("intermediate size", mlp.intermediate) for mlp, _ in model.mlp_layers if isinstance(mlp, DenseMlp)]
    if moe is not None and moe.shared_width:
        checks.append(("shared experts' width", moe.shared_width))
    if moe is not None and parallelism.expert_tp > 1:
        checks.append(("experts' intermediate size", moe.expert_intermediate))
    for what, value in dict.fromkeys(checks):
        if value % tp:
            raise SpecError(f"--tp {tp} does not divide the {value} {what} of {model.name}")
    for kind, _ in model.mixer_layers:
        problem = rules_of(kind).tp_problem(tp)
        if problem:
            raise SpecError(f"{problem} of {model.name}")
