"""The kinds of layer a model is made of: what mixes tokens (a mixer) and what each token runs alone (an MLP).

A model's blocks each hold a mixer, an MLP, or both (a transformer layer holds both; Nemotron-H's blocks hold one:
a Mamba-2 block, an attention block, an MoE block).  A step's cost adds up per block, so a model spec keeps how
many blocks hold each mixer and each MLP (``ModelSpec.mixers``, ``ModelSpec.mlps``), not which block holds which.

Mixers:

- ``Attention``: softmax attention over a KV cache (GQA; MHA and MQA are its cases), over every cached token or a
  sliding window of the last ``window``; its own heads and head sizes (gemma 4's and MiMo's local and global layers
  differ); ``output_gate``: the query projection also yields a sigmoid gate per head (Qwen3-Next, Qwen3.5);
  ``shared_kv``: keys and values come from one projection (gemma 4's ``attention_k_eq_v``: no value projection,
  both still cached).
- ``LatentAttention``: DeepSeek's multi-head latent attention (MLA), a latent of ``kv_lora_rank`` and a rope key
  per cached token; with an ``Indexer`` it is DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): a lightning
  indexer scores every cached token with small fp8 keys and MLA attends over the top ``topk`` only.
- ``LinearAttention``: Gated DeltaNet (Qwen3-Next, Qwen3.5): no KV cache, a recurrent state of value heads × key
  size × value size per sequence plus a short convolution's last ``conv_kernel - 1`` inputs.
- ``Mamba2``: the state-space layer of Mamba-2 (Nemotron-H): a state of heads × head size × ``state_size`` per
  sequence plus the convolution's.

MLPs: ``DenseMlp`` (gated: SwiGLU's gate, up and down; plain: up and down) and ``MoeMlp`` (routed experts, top-k,
always-on shared experts; ``latent``: Nemotron's latent MoE, whose experts run in a smaller width between two
projections).

What each kind launches and keeps per sequence is the step model's (``roofline.step.kinds``); this module holds the
facts and the record a document keeps of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from roofline.specs.gpus import SpecError


def _check_positive(spec: Any, names: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    for name in names + optional:
        value = getattr(spec, name)
        if value is None and name in optional:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SpecError(f"{spec.kind} layer: {name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class Attention:
    kind: ClassVar[str] = "attention"
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int | None = None  # None: head_dim
    window: int | None = None  # None: every cached token
    output_gate: bool = False
    shared_kv: bool = False

    def __post_init__(self) -> None:
        _check_positive(self, ("heads", "kv_heads", "head_dim"), ("v_head_dim", "window"))
        if self.heads % self.kv_heads:
            raise SpecError(f"attention layer: {self.heads} heads are not a multiple of {self.kv_heads} KV heads")

    @property
    def value_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def label(self) -> str:
        shape = f"{self.heads} heads, {self.kv_heads} KV heads of {self.head_dim}"
        return f"sliding-window attention ({self.window} tokens; {shape})" if self.window else f"attention ({shape})"


@dataclass(frozen=True)
class Indexer:
    """DSA's lightning indexer: ``heads`` query heads of ``head_dim`` over one fp8 key of ``head_dim`` per cached
    token, keeping the ``topk`` best-scoring tokens for the attention."""

    heads: int
    head_dim: int
    topk: int
    kind: ClassVar[str] = "indexer"

    def __post_init__(self) -> None:
        _check_positive(self, ("heads", "head_dim", "topk"))


@dataclass(frozen=True)
class LatentAttention:
    kind: ClassVar[str] = "mla"
    heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    indexer: Indexer | None = None

    def __post_init__(self) -> None:
        _check_positive(self, ("heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
                        ("q_lora_rank",))

    @property
    def head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def label(self) -> str:
        base = f"latent attention (MLA: {self.heads} heads over a {self.kv_lora_rank}+{self.qk_rope_head_dim} latent)"
        if self.indexer is None:
            return base
        return f"sparse {base[:-1]}; DSA: top {self.indexer.topk} keys by an indexer of {self.indexer.heads} heads)"


@dataclass(frozen=True)
class LinearAttention:
    kind: ClassVar[str] = "linear_attention"
    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    state_dtype: str = "fp32"

    def __post_init__(self) -> None:
        _check_positive(self, ("key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel"))
        if self.value_heads % self.key_heads:
            raise SpecError(f"linear attention layer: {self.value_heads} value heads are not a multiple of "
                            f"{self.key_heads} key heads")

    @property
    def label(self) -> str:
        return (f"linear attention (Gated DeltaNet: {self.value_heads} value heads, a {self.key_head_dim}×"
                f"{self.value_head_dim} {self.state_dtype} state each)")


@dataclass(frozen=True)
class Mamba2:
    kind: ClassVar[str] = "mamba2"
    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int
    state_dtype: str = "fp32"
    chunk: int = 128  # the chunked scan's tokens per chunk (the config's chunk_size)

    def __post_init__(self) -> None:
        _check_positive(self, ("heads", "head_dim", "state_size", "groups", "conv_kernel", "chunk"))
        if self.heads % self.groups:
            raise SpecError(f"mamba2 layer: {self.heads} heads are not a multiple of {self.groups} groups")

    @property
    def label(self) -> str:
        return (f"Mamba-2 ({self.heads} heads, a {self.head_dim}×{self.state_size} {self.state_dtype} state each)")


@dataclass(frozen=True)
class DenseMlp:
    kind: ClassVar[str] = "dense"
    intermediate: int
    gated: bool = True

    def __post_init__(self) -> None:
        _check_positive(self, ("intermediate",))

    @property
    def label(self) -> str:
        return f"dense MLP ({self.intermediate} wide)"


@dataclass(frozen=True)
class MoeMlp:
    kind: ClassVar[str] = "moe"
    experts: int
    topk: int
    expert_intermediate: int
    shared_width: int = 0  # every token's shared experts' width in all (0: none)
    gated: bool = True
    latent: int | None = None  # Nemotron's latent MoE: the experts' input and output width (None: the hidden size)

    def __post_init__(self) -> None:
        _check_positive(self, ("experts", "topk", "expert_intermediate"), ("latent",))
        if not isinstance(self.shared_width, int) or self.shared_width < 0:
            raise SpecError(f"moe layer: shared_width must be a non-negative integer, got {self.shared_width!r}")
        if self.topk > self.experts:
            raise SpecError("moe layer: more experts per token than experts")

    @property
    def label(self) -> str:
        shared = f" + {self.shared_width} shared" if self.shared_width else ""
        latent = f" in a {self.latent} latent" if self.latent else ""
        return f"MoE ({self.experts} experts of {self.expert_intermediate}, top {self.topk}{shared}{latent})"


MIXER_KINDS: dict[str, type] = {k.kind: k for k in (Attention, LatentAttention, LinearAttention, Mamba2)}
MLP_KINDS: dict[str, type] = {k.kind: k for k in (DenseMlp, MoeMlp)}


def kind_record(spec: Any) -> dict[str, Any]:
    """A layer kind as a document keeps it: its kind and every field that is set."""
    record = {"kind": spec.kind}
    for name, value in asdict(spec).items():
        if value is not None and value is not False and not (name == "shared_width" and value == 0):
            record[name] = value
    return record


def kind_from_record(record: Any, kinds: dict[str, type], what: str) -> Any:
    """The layer kind a document's record describes (``SpecError``, one line, for a record that is not one)."""
    if not isinstance(record, dict) or record.get("kind") not in kinds:
        raise SpecError(f"{what}: not a layer kind ({', '.join(kinds)})")
    cls = kinds[record["kind"]]
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in record.items() if k != "kind"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise SpecError(f"{what}: a {record['kind']} layer has no {', '.join(unknown)}")
    if isinstance(values.get("indexer"), dict):
        values["indexer"] = Indexer(**values["indexer"])
    try:
        return cls(**values)
    except TypeError as exc:
        raise SpecError(f"{what}: {exc}") from None


def counted_record(counted: tuple[tuple[Any, int], ...]) -> list[dict[str, Any]]:
    return [{**kind_record(spec), "layers": count} for spec, count in counted]


def counted_from_record(records: Any, kinds: dict[str, type], what: str) -> tuple[tuple[Any, int], ...]:
    if not isinstance(records, list):
        raise SpecError(f"{what} must be a list")
    out = []
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise SpecError(f"{what}[{i}] must be an object")
        count = record.get("layers")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise SpecError(f"{what}[{i}].layers must be a positive integer")
        out.append((kind_from_record({k: v for k, v in record.items() if k != "layers"}, kinds, f"{what}[{i}]"),
                    count))
    return tuple(out)


def merged(counted: list[tuple[Any, int]]) -> tuple[tuple[Any, int], ...]:
    """Equal kinds counted once, in first-seen order."""
    out: dict[Any, int] = {}
    for spec, count in counted:
        if count:
            out[spec] = out.get(spec, 0) + count
    return tuple(out.items())
