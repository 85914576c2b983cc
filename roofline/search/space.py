"""The space ``gpubench search`` walks, and what is pruned before anything is simulated.

A configuration is a SKU, a split (TP; for a mixture of experts, EP and the data-parallel attention groups it
implies, EP = TP x DP, as ``roofline.step.parallel`` models it), the KV cache's dtype, the engine's most running
sequences (max-batch), the tokens one step holds (the chunked-prefill budget), speculative decoding on or off, and
(decided by the planner) one pool or prefill and decode apart.  Every configuration runs ``chunked:budget=T:
max-batch=B``, the schedule vLLM V1, SGLang and TensorRT-LLM's chunked prefill share.

Pruned with no simulation, each with its reason:

- a split the model's shapes do not divide (``check_parallelism``);
- a split whose GPU holds the weights but not one sequence at the workload's longest context beside them, in
  ``--mem-fraction`` of the memory its driver reports (``roofline.step.memory.kv_capacity``);
- later, in the worker, before any load is simulated: an SLO every request misses served alone on one replica
  (``roofline.serving.capacity.unloaded_checks``: a lone request's latencies bound every rate's), for all the
  max-batch values of that profile, policy budget and speculation at once.

Not in the space: pipeline parallelism (the step model splits a layer over GPUs, never the layers: a PP stage's
bubble and its activations' hand-over are not modelled, so a PP figure would be made up); replicas spanning more
than ``--gpus-per-node`` GPUs (the spec sheets give the NVLink inside a node, not the network between nodes); a
mixture's experts split by TP over the data-parallel group (vLLM's DP without --enable-expert-parallel: the step
model splits experts by TP or whole by EP, not both).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from roofline.core.errors import BadInputError
from roofline.core.jsonfile import read_json_file
from roofline.core.units import si_bytes
from roofline.search.config import SearchConfig
from roofline.serving.profiles.engine_time import preset_overhead
from roofline.specs.gpus import GpuSpec, SpecError, load_gpu_spec
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import ModelSpec, load_model, step_formats
from roofline.step.launches import StepModel
from roofline.step.memory import kv_capacity, weight_bytes
from roofline.step.parallel import check_parallelism

# DeepSeek-V3's MTP head as its report measured it: "the acceptance rate of the second token prediction ranges
# between 85% and 90%" (DeepSeek-V3 Technical Report, arXiv 2412.19437, section 5.4.3); the low end, one draft.
DEEPSEEK_MTP = "draft=1,accept=geometric:0.85"
DEEPSEEK_MTP_SOURCE = ("DeepSeek-V3 Technical Report (arXiv 2412.19437) section 5.4.3: the second token's acceptance "
                       "85-90%; 0.85 taken")
NOT_MODELLED = (
    "pipeline parallelism: the step model splits each layer over GPUs, never the layers (a stage's bubble and the "
    "activations handed between stages are not modelled), so no PP configuration is searched",
    "a replica spans one node at most (--gpus-per-node): a split past the NVLink domain, costed on the spec "
    "sheet's scale-out link by decode and profile, is not tried",
    "a mixture's experts split by TP across data-parallel attention groups (vLLM's DP without "
    "--enable-expert-parallel): the step model splits experts by TP or whole by EP",
)


@dataclass(frozen=True)
class Setting:
    """One configuration of the space (the layout, one pool or P:D, is the planner's answer for it)."""

    sku: str
    tp: int
    ep: int
    kv_dtype: str
    max_batch: int
    budget: int
    spec: str | None = None  # --spec-decode as spelled; None: no speculative decoding

    @property
    def attention_dp(self) -> int:
        return self.ep // self.tp if self.ep > 1 else 1

    @property
    def gpus(self) -> int:
        return self.ep if self.ep > 1 else self.tp

    @property
    def policy(self) -> str:
        return f"chunked:budget={self.budget}:max-batch={self.max_batch}"

    @property
    def key(self) -> str:
        return (f"{self.sku}/tp{self.tp}/ep{self.ep}/kv-{self.kv_dtype}/mb{self.max_batch}/cb{self.budget}/"
                f"spec-{'on' if self.spec else 'off'}")

    def split_words(self) -> str:
        if self.ep > 1:
            return f"TP {self.tp} x DP {self.attention_dp}, EP {self.ep}" if self.attention_dp > 1 else \
                f"TP {self.tp}, EP {self.ep}"
        return f"TP {self.tp}"

    def words(self) -> str:
        """"h200-sxm, TP 4, KV fp8, max-batch 256, chunks of 2048, MTP"."""
        spec = ", speculative" if self.spec else ""
        return (f"{self.sku}, {self.split_words()}, KV {self.kv_dtype}, max-batch {self.max_batch}, "
                f"chunks of {self.budget}{spec}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "attention_dp": self.attention_dp, "gpus": self.gpus, "policy": self.policy,
                "key": self.key}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Setting:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Group:
    """Configurations that share a profile, a budget and speculation (only max-batch differs): the unit a worker
    runs, so the lone-request SLO check is made once for all of them."""

    settings: tuple[Setting, ...]

    @property
    def first(self) -> Setting:
        return self.settings[0]


@dataclass(frozen=True)
class Pruned:
    what: str  # the configurations it stands for, in words
    reason: str  # memory | split | slo
    why: str
    count: int  # configurations of the space it removes
    sku: str
    keys: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ModelInfo:
    """The model searched: its spec, the weights' dtype, whether and how it can speculate, and what the engines
    load (``served``: a repository or folder; None: the launch scripts take $MODEL)."""

    spec: ModelSpec
    dtype: str
    checkpoint_dtype: str
    mtp_layers: int
    model_type: str | None
    speculation: str | None  # the --spec-decode tried when speculation is on (None: none available)
    speculation_source: str
    served: str | None
    served_note: str
    user_dtype: str | None = None  # --dtype as given (None: the checkpoint's)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.spec.id, "name": self.spec.name, "source": self.spec.source, "dtype": self.dtype,
                "checkpoint_dtype": self.checkpoint_dtype, "moe": self.spec.is_moe, "hybrid": self.spec.hybrid,
                "mtp_layers": self.mtp_layers, "model_type": self.model_type, "speculation": self.speculation,
                "speculation_source": self.speculation_source, "served_model": self.served,
                "served_model_note": self.served_note, "max_positions": self.spec.max_positions}


def _raw_config(path: Path) -> dict[str, Any]:
    document = read_json_file(path, 16 * 1024 * 1024)
    if not isinstance(document, dict):
        return {}
    text = document.get("text_config")
    return {**document, **text} if isinstance(text, dict) else document


def model_info(config: SearchConfig) -> ModelInfo:
    """The model of ``--model`` or ``--hf-config``, read once (a refusal is one line)."""
    try:
        spec = load_model(config.model) if config.model else load_hf_config(Path(str(config.hf_config)))
    except SpecError as exc:
        raise BadInputError(str(exc)) from None
    raw = _raw_config(Path(str(config.hf_config))) if config.hf_config else {}
    mtp = int(raw.get("num_nextn_predict_layers") or raw.get("mtp_num_hidden_layers") or 0)
    model_type = raw.get("model_type") if isinstance(raw.get("model_type"), str) else None
    _, checkpoint, _, _ = step_formats(spec, None, None)
    _, dtype, _, _ = step_formats(spec, config.dtype, None)
    if config.speculation_given is not None:
        speculation, source = config.spec_decode, "--spec-decode"
    elif mtp and model_type in ("deepseek_v3",):
        speculation, source = DEEPSEEK_MTP, DEEPSEEK_MTP_SOURCE
    elif mtp:
        speculation, source = None, (f"{spec.name} has an MTP head ({mtp} layer{'s' if mtp > 1 else ''}) but no "
                                     "published acceptance rate is built in: give --spec-decode draft=K,accept=... "
                                     "to try it")
    else:
        speculation, source = None, f"{spec.name} has no MTP head: give --spec-decode with a drafter to try one"
    if config.speculation == "on" and speculation is None:
        raise BadInputError(f"--speculation on: {source}")
    if config.served_model:
        served, note = config.served_model, "--served-model"
    elif config.model and spec.source.endswith(" config.json"):
        served, note = spec.source.removesuffix(" config.json"), f"the source of profiles/models/{spec.id}.toml"
    else:
        served, note = None, (f"set MODEL to the checkpoint of {Path(str(config.hf_config)).name} (a Hugging Face "
                              "repository or a folder), or give --served-model")
    return ModelInfo(spec, dtype, checkpoint, mtp, model_type, speculation, source, served, note, config.dtype)


def parallelisms(model: ModelSpec, tps: tuple[int, ...], dps: tuple[int, ...], per_node: int
                 ) -> list[tuple[int, int]]:
    """(tp, ep) of the space: TP alone; for a mixture also EP = TP (dp 1) and EP = TP x DP, within a node."""
    out: list[tuple[int, int]] = []
    for tp in tps:
        if tp > per_node:
            continue
        out.append((tp, 1))
        if not model.is_moe:
            continue
        for dp in dps:
            ep = tp * dp
            if ep > 1 and ep <= per_node and (tp, ep) not in out:
                out.append((tp, ep))
    return out


def longest_context(requests) -> int:
    """The longest sequence the workload holds: its longest prompt plus its output."""
    return max(r.prompt_tokens + r.output_tokens for r in requests)


def build_space(config: SearchConfig, info: ModelInfo, requests) -> tuple[list[Group], list[Pruned], dict[str, Any]]:
    """The groups to simulate, what was pruned (memory, split) and the space in words."""
    context = longest_context(requests)
    specs: list[str | None] = {"off": [None], "on": [info.speculation],
                               "auto": [None] + ([info.speculation] if info.speculation else [])}[config.speculation]
    splits = parallelisms(info.spec, config.tp_values, config.dp_values, config.gpus_per_node)
    per_split = len(config.max_batch_values) * len(config.budget_values) * len(specs)
    groups: list[Group] = []
    pruned: list[Pruned] = []
    for sku in config.skus:
        try:
            gpu = load_gpu_spec(sku)
        except SpecError as exc:
            raise BadInputError(f"--gpu {sku}: {exc}") from None
        for tp, ep in splits:
            for kv in config.kv_values:
                why, reason = _unfit(info, gpu, tp, ep, kv, context, config.mem_fraction)
                label = f"{sku}, {Setting(sku, tp, ep, kv, 0, 0).split_words()}, KV {kv}"
                if why:
                    pruned.append(Pruned(label, reason, why, per_split, sku))
                    continue
                for spec in specs:
                    for budget in config.budget_values:
                        groups.append(Group(tuple(Setting(sku, tp, ep, kv, mb, budget, spec)
                                                  for mb in config.max_batch_values)))
    described = {
        "skus": list(config.skus), "tp": list(config.tp_values),
        "attention_dp": list(config.dp_values) if info.spec.is_moe else [1],
        "splits": [{"tp": tp, "ep": ep} for tp, ep in splits], "gpus_per_node": config.gpus_per_node,
        "kv_dtypes": list(config.kv_values), "max_batch": list(config.max_batch_values),
        "chunk_budget": list(config.budget_values), "speculation": [s or "off" for s in specs],
        "speculation_source": info.speculation_source,
        "layouts": ["aggregated"] if config.aggregated_only else ["aggregated", "disaggregated"],
        "policy": "chunked:budget=T:max-batch=B", "longest_context_tokens": context,
        "configurations": len(config.skus) * len(splits) * len(config.kv_values) * per_split,
        "engine": config.engine, "engine_time": _engine_words(config.engine, info.spec.layers),
        "not_modelled": list(NOT_MODELLED)}
    return groups, pruned, described


def _engine_words(engine: str, layers: int) -> str:
    """Whose engine time every candidate's steps carry (``--engine``), with the preset's source."""
    overhead = preset_overhead(engine, layers)
    return overhead.fitted_on if overhead else "none: kernels only (--engine none)"


def _unfit(info: ModelInfo, gpu: GpuSpec, tp: int, ep: int, kv: str, context: int, mem_fraction: float
           ) -> tuple[str | None, str]:
    """Why a split cannot run on ``gpu`` (None: it can): its shapes, or its memory."""
    model, dtype, kv_dtype, _ = step_formats(info.spec, info.user_dtype, kv)
    try:
        step = StepModel.of(model, tp, ep, dtype, kv_dtype)
        check_parallelism(model, step.parallelism)
    except SpecError as exc:
        return str(exc), "split"
    memory = gpu.reported_bytes
    fit = kv_capacity(step, context, memory, mem_fraction)
    if fit["max_batch"]:
        return None, ""
    weights = weight_bytes(step)
    room = mem_fraction * memory - weights
    if room <= 0:
        return (f"weights {si_bytes(weights)} a GPU over the {si_bytes(mem_fraction * memory)} of {gpu.sku} "
                f"(--mem-fraction {mem_fraction:g}); {model.name} needs about "
                f"{-(-weights * step.parallelism.gpus // int(mem_fraction * memory))} such GPUs"), "memory"
    return (f"weights {si_bytes(weights)} a GPU leave {si_bytes(room)}, less than one sequence of {context} tokens "
            f"({si_bytes(fit['kv_bytes_per_sequence'])})"), "memory"


def identity(config: SearchConfig, info: ModelInfo, described: dict[str, Any]) -> bytes:
    """What makes two searches the same one (a journal of another is never resumed): the model, the workload, the
    SLO, the rates, the router, the bound, the memory share, the dtype, routing and efficiency, and the space."""
    record = {"model": info.to_dict(), "hf_config": str(config.hf_config) if config.hf_config else None,
              "workload": [config.requests, config.prompt, config.output_lengths, str(config.lengths),
                           config.seed, str(config.trace)],
              "slo": dict(config.slo.limits_s) if config.slo else None, "rates": list(config.rates),
              "router": config.router, "max_gpus": config.max_gpus, "mem_fraction": config.mem_fraction,
              "dtype": config.dtype, "routing": config.routing, "efficiency": config.efficiency,
              "prices": list(config.prices), "space": described}
    return json.dumps(record, sort_keys=True).encode("utf-8")

