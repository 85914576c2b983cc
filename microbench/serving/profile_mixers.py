"""The measured profile's mixer kinds beyond the main attention, and DSA as the main attention.

A hybrid model's other mixer kinds (``StepModel.mixers`` that do not read the main attention's tables) each get a
``MixerTable`` (``roofline.serving.profile_doc``), measured per layer on this device as the analytic profile counts it
(``roofline.serving.profiles.analytic.kind_tables``):

- a recurrent kind (Gated DeltaNet, Mamba-2): decode over the batch grid at one context column (its state is the
  same at any length), the sweep's ``state_update`` workload of the layer's shape (``timing.mixers.recurrent``);
  prefill per prompt, the chunked scan over the prompt from an empty state (``PromptScanWorkload``); no chunk table
  (a chunk costs its tokens whatever its prefix);
- an attention-like kind of another shape (softmax attention or MLA of its own heads, DSA): decode over batches ×
  contexts and prefill per prompt with the profile's attention workload of that shape, or DSA's sparse attention
  (``timing.mixers.sparse_attention``); no chunk table (the simulator takes a chunk from the prefill table's
  difference).

Where DSA is the main attention (DeepSeek-V3.2, GLM-5: every layer sparse), the main decode, prefill and chunk tables
time the sparse workload too, not the dense MLA.  The shapes of the recurrent and DSA workloads are the sweep points
``roofline.decode.step.DecodeSetup.point_keys`` names for the layer: what a measured decode times it by.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from microbench.points.plan import PlanError, PointSpec
from microbench.serving.profile_kernels import AttentionShape, AttentionWorkload, kv_bytes
from microbench.serving.profile_plan import Grids, Item, own_mixers
from microbench.timing import ops
from microbench.timing.mixers.recurrent import GDN_CHUNK, PromptScanWorkload, RecurrentLayer, StateUpdateWorkload
from microbench.timing.mixers.recurrent import bytes_per_copy as state_bytes_per_copy
from microbench.timing.mixers.sparse_attention import SparseAttentionWorkload, SparseLayer
from microbench.timing.mixers.sparse_attention import bytes_per_copy as sparse_bytes_per_copy
from roofline.core.counting import DTYPE_SIZES
from roofline.decode.step import DecodeSetup
from roofline.step.batch import Batch
from roofline.step.kinds import MixerRules
from roofline.step.launches import StepModel

# The main tables' kernel name where the main attention is DSA's sparse one.
SPARSE_KERNEL = "torch DSA reference (fp8 indexer, top-k, absorbed MLA)"
# Copies of a workload: (bytes one copy holds, what it is, the bytes a launch reads cold) -> copies.
CopiesFn = Callable[[int, str, "int | None"], int]


def is_sparse(rules: MixerRules) -> bool:
    return rules.op == "dsa_attention"


def sparse_layer(step: StepModel, rules: MixerRules) -> tuple[str, SparseLayer]:
    """A DSA layer's dtype and shape on one GPU, as its sweep point names them."""
    launch = step.mixer_launch(rules, 1, Batch.decode(1, 1))
    op, dtype, _, _, latent, mixer = DecodeSetup(step, 1).point_keys(launch)[0]
    return dtype, SparseLayer.of(latent, mixer)


def sparse_workload(session, step: StepModel, rules: MixerRules, batch: int, q_len: int, kv_len: int,
                    copies_for: CopiesFn, what: str) -> SparseAttentionWorkload:
    dtype, layer = sparse_layer(step, rules)
    per_copy = sparse_bytes_per_copy(batch, q_len, kv_len, layer, DTYPE_SIZES[dtype][0])
    copies = copies_for(per_copy, what, None)
    return SparseAttentionWorkload(session.torch, layer, dtype, batch, q_len, kv_len, session.choice.torch_name,
                                   copies, session.seed, ops.random_tensor, ops.seed_for)


def mixer_workload(session, step: StepModel, item: Item, kv_dtype: str, copies_for: CopiesFn):
    """The workload of one mixer item, correctness checked (a kernel that fails its check is bad input here)."""
    rules = step.mixer_named(item.name)
    tp = step.parallelism.tp
    if rules.recurrent:
        launch = step.mixer_launch(rules, 1, Batch.decode(item.a, 1))
        op, dtype, batch, n, k, mixer = DecodeSetup(step, 1).point_keys(launch)[0]
        spec = PointSpec(op, dtype, batch, n, k, mixer=mixer)
        if item.kind == "mixer_decode":
            copies = copies_for(state_bytes_per_copy(spec), f"{item.name} decode of {item.a}", None)
            workload: Any = StateUpdateWorkload(session.torch, spec, session.choice.torch_name, copies, session.seed,
                                                ops.random_tensor, ops.seed_for)
        else:
            assert spec.mixer is not None  # a state_update point always has one
            layer = RecurrentLayer.of(spec.n, spec.k, spec.mixer)
            chunk = getattr(rules.spec, "chunk", GDN_CHUNK)  # Mamba-2's config gives its chunk; fla's is 64
            size = DTYPE_SIZES[spec.dtype][0]
            per_copy = item.a * (3 * layer.conv_dim + 2 * layer.heads * layer.value) * size + \
                4 * layer.heads * layer.value * layer.key
            copies = copies_for(per_copy, f"{item.name} prefill of {item.a}", None)
            workload = PromptScanWorkload(session.torch, layer, spec.dtype, item.a, session.choice.torch_name, copies,
                                          session.seed, ops.random_tensor, ops.seed_for, chunk)
    else:
        batch, q_len, kv_len = (item.a, 1, item.b) if item.kind == "mixer_decode" else (1, item.a, item.a)
        what = f"{item.name} {item.kind.removeprefix('mixer_')} {batch}×{q_len}×{kv_len}"
        if is_sparse(rules):
            workload = sparse_workload(session, step, rules, batch, q_len, kv_len, copies_for, what)
        else:
            shape = AttentionShape.of(rules, tp)
            size = DTYPE_SIZES[kv_dtype][0]
            per_copy = kv_bytes(shape, batch, kv_len, kv_dtype) + \
                size * batch * shape.heads * q_len * 2 * max(shape.head_dim, shape.cached_values) + \
                (4 * shape.heads * q_len * kv_len if q_len > 1 else 0)
            workload = AttentionWorkload(session.torch, shape, batch, q_len, kv_len, kv_dtype, "sdpa",
                                         session.choice.torch_name, copies_for(per_copy, what, None), session.seed)
            return workload  # the profile's attention workload, as the main tables time it (no check of its own)
    checked(workload, session.seed, item.label)
    return workload


def checked(workload, seed: int, label: str) -> None:
    correctness = workload.check(ops.seed_for(seed, "check", label))
    if not correctness["passed"]:
        raise PlanError(f"{label}: the kernel failed its correctness check (relative error {correctness['rel_err']}, "
                        f"{correctness['reference']})")


def main_sparse_workload(session, step: StepModel, item: Item, copies_for: CopiesFn) -> SparseAttentionWorkload:
    """A main-table item (decode, prefill, chunk) of a model whose main attention is DSA's."""
    batch, q_len, kv_len = {"decode": (item.a, 1, item.b), "prefill": (1, item.a, item.a),
                            "chunk": (1, item.a, item.a + item.b)}[item.kind]
    workload = sparse_workload(session, step, step.main_mixer, batch, q_len, kv_len, copies_for,
                               f"{item.kind} DSA attention {batch}×{q_len}×{kv_len}")
    checked(workload, session.seed, item.label)
    return workload


def mixer_tables(step: StepModel, grids: Grids, times: Callable[[str, str, list], list[float]],
                 kernels: dict[str, str], source: str) -> list[dict[str, Any]]:
    """The document's ``mixers``: one table set per other mixer kind, from the measured medians (``times(kind, name,
    [(a, b), ...])``), each table naming the kernel that ran (``kernels`` by mixer name and item kind)."""
    out = []
    for rules, count, name, contexts in own_mixers(step, grids):
        decode = {"kernel": kernels.get(f"mixer_decode/{name}", ""), "batches": list(grids.batches),
                  "contexts": list(contexts),
                  "time_s": [times("mixer_decode", name, [(b, c) for c in contexts]) for b in grids.batches]}
        prefill = {"kernel": kernels.get(f"mixer_prefill/{name}", ""), "prompt_tokens": list(grids.prompts),
                   "time_s": times("mixer_prefill", name, [(p, 0) for p in grids.prompts])}
        out.append({"name": name, "op": rules.op, "layers": count, "decode": decode, "prefill": prefill,
                    "chunk": None, "source": source})
    return out
