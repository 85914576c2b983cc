"""The recurrent mixers' kernels as workloads: one layer of Gated DeltaNet or Mamba-2 on one GPU, decoding one token
for each of a batch of sequences (the sweep's ``state_update`` op: ``StateUpdateWorkload``), or prefilling one
prompt through the chunked scan (the measured profile's prefill table: ``PromptScanWorkload``).

Each launch runs what the engines run for the layer after its input projection: the short causal convolution's
update (its state of the last K - 1 inputs per sequence read and written), then the recurrence, whose state is read
and written once per sequence: exactly what ``roofline.core.counting.recurrent_work`` counts for the layer.  Which
kernels run is the point's ``kernel``:

- on a CUDA device where they are installed, the engines' own: flash-linear-attention's
  ``fused_recurrent_gated_delta_rule`` / ``chunk_gated_delta_rule`` (vLLM's and SGLang's Gated DeltaNet), mamba-ssm's
  ``selective_state_update`` / ``mamba_chunk_scan_combined``, and causal-conv1d's ``causal_conv1d_update`` /
  ``causal_conv1d_fn`` for the convolution;
- elsewhere (every CPU), the torch reference of ``recurrent_math``, vectorised over sequences and
  heads, the state updated in place.

The GPU packages are looked up by name (``installed``): none is installed where pyright and the CPU tests run, so
their calls are typed ``Any`` here and exercised by the ``gpu`` tests.  Rotation: each copy holds its own states (the
"weights" of this op), so a launch reads them from memory, not from a cache the previous launch warmed.

Correctness, once per point: copy 0's states are kept, the output poisoned, one launch run, and its outputs and new
states for the first sequences compared with the float64 recurrence from the kept states (``recurrent_math``); a
prompt's outputs over its first tokens (across the first chunk boundary) likewise.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

from microbench.timing.mixers import recurrent_math as rm
from roofline.core.counting import MIXER_DTYPES, MixerShape, count_work

# The sequences (decode) the float64 check recomputes, and the chunks past the first whose tokens a prompt's covers.
CHECK_SEQUENCES = 2
CHECK_CHUNK_TOKENS = 2
# fla's chunk_gated_delta_rule runs chunks of 64 tokens; Mamba-2's chunk is the config's (chunk_size, 128 by default).
GDN_CHUNK = 64
MAMBA_CHUNK = 128
# What each path is called in a point's ``kernel``.
TORCH_CONV = "torch conv update"
TORCH_KERNELS = {"gdn": "torch reference gated delta rule (recurrent_math.gdn_step)",
                 "mamba2": "torch reference selective state update (recurrent_math.mamba_step)"}
TORCH_PROMPT_KERNELS = {"gdn": "torch reference chunked gated delta rule (recurrent_math.gdn_chunked)",
                        "mamba2": "torch reference SSD chunked scan (recurrent_math.mamba_chunked)"}
# (module, function) of each engine kernel, by what it runs.
GPU_KERNELS = {
    "gdn": ("fla.ops.gated_delta_rule", "fused_recurrent_gated_delta_rule"),
    "gdn_prompt": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
    "mamba2": ("mamba_ssm.ops.triton.selective_state_update", "selective_state_update"),
    "mamba2_prompt": ("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined"),
    "conv": ("causal_conv1d", "causal_conv1d_update"),
    "conv_prompt": ("causal_conv1d", "causal_conv1d_fn"),
}


def installed(what: str, device_type: str) -> Any | None:
    """The engine kernel ``what`` (a key of ``GPU_KERNELS``) where its package is installed and the device is a GPU;
    None elsewhere (the torch reference runs).  Imported by name: a package that fails to import (no GPU build, a
    torch it was not built for) counts as not installed."""
    if device_type != "cuda":
        return None
    module, name = GPU_KERNELS[what]
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - ImportError, or a broken build's OSError/RuntimeError: the reference runs
        return None


def support_problem(dtype: str, backend: str) -> str | None:
    if backend != "torch":
        return "state updates and sparse attention are timed through torch (its kernels or the engines') only"
    if dtype not in MIXER_DTYPES:
        return f"a mixer's activations are {', '.join(MIXER_DTYPES)}, not {dtype}"
    return None


@dataclass(frozen=True)
class RecurrentLayer:
    """One layer's recurrent mixer on one GPU: ``kind`` gdn | mamba2, ``heads`` value heads (Mamba-2: heads),
    ``groups`` key heads (Mamba-2: B/C groups), ``value`` the value (head) size, ``key`` the key (state) size."""

    kind: str
    heads: int
    groups: int
    value: int
    key: int
    conv_kernel: int
    state_dtype: str

    @classmethod
    def of(cls, n: int, k: int, mixer: MixerShape) -> RecurrentLayer:
        return cls(mixer.kind, mixer.heads, mixer.groups or 1, n, k, mixer.conv_kernel or 1,
                   mixer.state_dtype or "fp32")

    @property
    def splits(self) -> list[int]:
        """The convolution's channels, in order: q, k, v (Gated DeltaNet); x, B, C (Mamba-2)."""
        if self.kind == "gdn":
            return [self.groups * self.key, self.groups * self.key, self.heads * self.value]
        return [self.heads * self.value, self.groups * self.key, self.groups * self.key]

    @property
    def conv_dim(self) -> int:
        return sum(self.splits)

    def state_shape(self, batch: int) -> tuple[int, ...]:
        if self.kind == "gdn":
            return (batch, self.heads, self.key, self.value)
        return (batch, self.heads, self.value, self.key)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.key)


class _RecurrentOperands:
    """Rotation copies of one layer's operands for ``batch`` sequences of ``tokens`` tokens (1: a decode step):
    the convolution's inputs and state, the recurrence's other inputs and state; the layer's parameters once."""

    def __init__(self, torch, layer: RecurrentLayer, dtype: str, batch: int, tokens: int, device: str, copies: int,
                 seed: int, random_tensor, seed_for, label: str):
        from microbench.timing.ops import torch_dtype

        self.torch, self.layer, self.copies, self.batch, self.tokens = torch, layer, copies, batch, tokens
        f = torch.nn.functional
        lead = (batch,) if tokens == 1 else (batch, tokens)

        def rand(name, shape, i=0, kind=dtype):
            return random_tensor(torch, shape, kind, device, seed_for(seed, name, label, i))

        heads = layer.heads
        self.conv_in = [rand("conv_in", lead + (layer.conv_dim,), i) for i in range(copies)]
        self.conv_state = [rand("conv_state", (batch, layer.conv_dim, layer.conv_kernel - 1), i) for i in range(copies)]
        # States of a modest size, as a layer's settle to: the decay keeps them bounded step after step.
        self.state = [rand("state", layer.state_shape(batch), i, layer.state_dtype) * 0.1 for i in range(copies)]
        self.weight = rand("conv_weight", (layer.conv_dim, layer.conv_kernel)) / math.sqrt(layer.conv_kernel)
        if layer.kind == "gdn":
            # log-decays below 0 and betas in (0, 1), as the layer's gating computes them
            self.g = [-f.softplus(rand("g", lead + (heads,), i, "fp32")) for i in range(copies)]
            self.beta = [torch.sigmoid(rand("beta", lead + (heads,), i)) for i in range(copies)]
        else:
            self.dt = [rand("dt", lead + (heads,), i) for i in range(copies)]
            self.z = [rand("z", lead + (heads * layer.value,), i) for i in range(copies)]
            self.a = -torch.exp(rand("A", (heads,), 0, "fp32") * 0.5)
            self.d = rand("D", (heads,), 0, "fp32")
            self.dt_bias = rand("dt_bias", (heads,), 0, "fp32") * 0.5 - 2.0
        self.outputs: list = [None] * copies
        self.act = torch_dtype(torch, dtype)

    def kept(self, i: int, sequences: int) -> dict[str, Any]:
        """Copy ``i``'s operands for its first ``sequences`` sequences, in float64 on the host, before a launch."""
        kept = {"conv_in": self.conv_in[i][:sequences], "conv_state": self.conv_state[i][:sequences],
                "state": self.state[i][:sequences], "weight": self.weight}
        if self.layer.kind == "gdn":
            kept.update(g=self.g[i][:sequences], beta=self.beta[i][:sequences])
        else:
            kept.update(dt=self.dt[i][:sequences], z=self.z[i][:sequences], a=self.a, d=self.d, dt_bias=self.dt_bias)
        return rm.float64(kept)


def reference(torch, layer: RecurrentLayer, kept: dict[str, Any], tokens: int):
    """The float64 definition over the kept operands' first ``tokens`` tokens: (outputs [B, T, heads, value], final
    state)."""
    x = kept["conv_in"] if kept["conv_in"].dim() == 3 else kept["conv_in"].unsqueeze(1)
    x = x[:, :tokens]
    state = kept["conv_state"].clone()
    mixed = torch.stack([rm.conv_update(torch, x[:, t], state, kept["weight"]) for t in range(tokens)], dim=1)
    first, second, third = mixed.split(layer.splits, dim=-1)
    lead = mixed.shape[:2]

    def series(name):
        value = kept[name]
        return (value if value.dim() == 3 else value.unsqueeze(1))[:, :tokens]

    if layer.kind == "gdn":
        q = rm.per_head(rm.l2_normalised(torch, first.view(*lead, layer.groups, layer.key)), layer.heads)
        k = rm.per_head(rm.l2_normalised(torch, second.view(*lead, layer.groups, layer.key)), layer.heads)
        v = third.view(*lead, layer.heads, layer.value)
        return rm.gdn_recurrence(torch, kept["state"], q, k, v, series("g"), series("beta"), layer.scale)
    return rm.mamba_recurrence(torch, kept["state"], first.view(*lead, layer.heads, layer.value), series("dt"),
                               kept["a"], second.view(*lead, layer.groups, layer.key),
                               third.view(*lead, layer.groups, layer.key), kept["d"],
                               series("z").reshape(*lead, layer.heads, layer.value), kept["dt_bias"])


def compared(torch, got: list, ref: list, tolerance: float, written: bool, what: str) -> dict[str, Any]:
    """The check's record: the worst relative error of the pairs (outputs, states) against float64."""
    errors = []
    for g, r in zip(got, ref, strict=True):
        norm = float(torch.linalg.vector_norm(r))
        errors.append(float(torch.linalg.vector_norm(g.double().cpu() - r)) / norm if norm > 0 else math.inf)
    worst = max(errors)
    rel_err = worst if math.isfinite(worst) else None
    return {"rel_err": rel_err, "tolerance": tolerance, "outputs_written": written,
            "passed": written and rel_err is not None and rel_err <= tolerance, "reference": what}


class StateUpdateWorkload(_RecurrentOperands):
    """A ``state_update`` point: ``spec.batch`` sequences decoding one token each through one layer."""

    def __init__(self, torch, spec, device: str, copies: int, seed: int, random_tensor, seed_for):
        assert spec.mixer is not None  # PointSpec refuses a state_update without one
        layer = RecurrentLayer.of(spec.n, spec.k, spec.mixer)
        super().__init__(torch, layer, spec.dtype, spec.batch, 1, device, copies, seed, random_tensor, seed_for,
                         spec.label)
        self.spec = spec
        device_type = self.state[0].device.type
        self.recurrence = installed(layer.kind, device_type) if layer.state_dtype == "fp32" else None
        self.conv = installed("conv", device_type)
        self.final: list = list(self.state)  # fla returns the new state; the others update it in place
        names = [GPU_KERNELS[layer.kind][1] if self.recurrence else TORCH_KERNELS[layer.kind],
                 GPU_KERNELS["conv"][1] if self.conv else TORCH_CONV]
        self.kernel = " + ".join(names)

    def _mixed(self, i: int):
        if self.conv is not None:
            return self.conv(self.conv_in[i], self.conv_state[i], self.weight, activation="silu")
        return rm.conv_update(self.torch, self.conv_in[i], self.conv_state[i], self.weight)

    def launch(self, i: int) -> None:
        layer, batch = self.layer, self.batch
        first, second, third = self._mixed(i).split(layer.splits, dim=-1)
        if layer.kind == "gdn":
            self._gdn(i, first, second, third)
            return
        x = first.reshape(batch, layer.heads, layer.value)
        b, c = second.reshape(batch, layer.groups, layer.key), third.reshape(batch, layer.groups, layer.key)
        z = self.z[i].view(batch, layer.heads, layer.value)
        if self.recurrence is None:
            self.outputs[i] = rm.mamba_step(self.torch, self.state[i], x, self.dt[i], self.a, b, c, self.d, z,
                                            self.dt_bias)
            return
        # mamba-ssm takes per-(head, channel) parameters: the per-head ones broadcast, as its Mamba2.step does.
        heads, p, n = layer.heads, layer.value, layer.key
        self.outputs[i] = self.recurrence(
            self.state[i], x, self.dt[i][..., None].expand(batch, heads, p), self.a[:, None, None].expand(heads, p, n),
            b, c, D=self.d[:, None].expand(heads, p), z=z, dt_bias=self.dt_bias[:, None].expand(heads, p),
            dt_softplus=True)

    def _gdn(self, i: int, first, second, third) -> None:
        layer, batch = self.layer, self.batch
        if self.recurrence is None:
            q = rm.per_head(rm.l2_normalised(self.torch, first.view(batch, layer.groups, layer.key)), layer.heads)
            k = rm.per_head(rm.l2_normalised(self.torch, second.view(batch, layer.groups, layer.key)), layer.heads)
            self.outputs[i] = rm.gdn_step(self.torch, self.state[i], q, k,
                                          third.view(batch, layer.heads, layer.value), self.g[i], self.beta[i],
                                          layer.scale)
            return
        out, self.final[i] = self.recurrence(
            first.reshape(batch, 1, layer.groups, layer.key), second.reshape(batch, 1, layer.groups, layer.key),
            third.reshape(batch, 1, layer.heads, layer.value), g=self.g[i].view(batch, 1, layer.heads),
            beta=self.beta[i].view(batch, 1, layer.heads), scale=layer.scale, initial_state=self.state[i],
            output_final_state=True, use_qk_l2norm_in_kernel=True)
        self.outputs[i] = out.view(batch, layer.heads, layer.value)

    def check(self, seed: int) -> dict[str, Any]:
        """One launch from kept states, its first sequences' outputs and new states against float64."""
        from microbench.timing.ops import TOLERANCES

        torch, sequences = self.torch, min(CHECK_SEQUENCES, self.batch)
        kept = self.kept(0, sequences)
        self.outputs[0] = None
        self.launch(0)
        out = self.outputs[0]
        written = out is not None and bool(torch.isfinite(out).all().item())
        ref_out, ref_state = reference(torch, self.layer, kept, 1)
        got = [ref_out * math.nan, ref_state] if out is None else \
            [out[:sequences].unsqueeze(1), self.final[0][:sequences]]
        return compared(torch, got, [ref_out, ref_state], TOLERANCES[self.spec.dtype], written,
                        f"float64 recurrence of the first {sequences} sequences: outputs and new states")


class PromptScanWorkload(_RecurrentOperands):
    """One prompt of ``tokens`` tokens through one layer from an empty state, in chunks (the profile's prefill of a
    recurrent kind): the convolution over the prompt, the chunked scan, the final states written."""

    def __init__(self, torch, layer: RecurrentLayer, dtype: str, tokens: int, device: str, copies: int, seed: int,
                 random_tensor, seed_for, chunk: int | None = None):
        super().__init__(torch, layer, dtype, 1, tokens, device, copies, seed, random_tensor, seed_for,
                         f"prompt/{layer}/{tokens}")
        for state in self.state + self.conv_state:  # a prompt starts from nothing
            state.zero_()
        self.dtype = dtype
        self.chunk = chunk or (GDN_CHUNK if layer.kind == "gdn" else MAMBA_CHUNK)
        device_type = self.state[0].device.type
        self.scan = installed(f"{layer.kind}_prompt", device_type)
        self.conv = installed("conv_prompt", device_type)
        names = [GPU_KERNELS[f"{layer.kind}_prompt"][1] if self.scan else TORCH_PROMPT_KERNELS[layer.kind],
                 GPU_KERNELS["conv_prompt"][1] if self.conv else "torch conv1d"]
        self.kernel = " + ".join(names)

    def _mixed(self, i: int):
        x = self.conv_in[i]
        width = self.layer.conv_kernel
        if self.conv is None:
            mixed, last = rm.conv_prompt(self.torch, x, self.weight)
            self.conv_state[i].copy_(last)
            return mixed
        if width > 1:  # the last K - 1 inputs are the state a decode continues from
            tail = x[:, -(width - 1):].transpose(1, 2)
            self.conv_state[i][..., -tail.shape[-1]:].copy_(tail)
        return self.conv(x.transpose(1, 2), self.weight, activation="silu").transpose(1, 2)

    def launch(self, i: int) -> None:
        torch, layer, t = self.torch, self.layer, self.tokens
        first, second, third = self._mixed(i).split(layer.splits, dim=-1)
        if layer.kind == "gdn":
            q, k = first.reshape(1, t, layer.groups, layer.key), second.reshape(1, t, layer.groups, layer.key)
            v = third.reshape(1, t, layer.heads, layer.value)
            if self.scan is not None:
                out, final = self.scan(q, k, v, g=self.g[i], beta=self.beta[i], scale=layer.scale,
                                       output_final_state=True, use_qk_l2norm_in_kernel=True)
            else:
                q = rm.per_head(rm.l2_normalised(torch, q.float()), layer.heads)
                k = rm.per_head(rm.l2_normalised(torch, k.float()), layer.heads)
                out, final = rm.gdn_chunked(torch, q, k, v, self.g[i], self.beta[i], layer.scale, self.chunk)
        else:
            x = first.reshape(1, t, layer.heads, layer.value)
            b, c = second.reshape(1, t, layer.groups, layer.key), third.reshape(1, t, layer.groups, layer.key)
            z = self.z[i].view(1, t, layer.heads, layer.value)
            if self.scan is not None:
                out, final = self.scan(x, self.dt[i], self.a, b, c, self.chunk, D=self.d, z=z, dt_bias=self.dt_bias,
                                       dt_softplus=True, return_final_states=True)
            else:
                out, final = rm.mamba_chunked(torch, x, self.dt[i], self.a, b, c, self.d, z, self.dt_bias, self.chunk)
        self.state[i].copy_(final)
        self.outputs[i] = out.to(self.act)

    def check(self, seed: int) -> dict[str, Any]:
        """One launch; its outputs over the first tokens (past the first chunk boundary) against float64."""
        from microbench.timing.ops import TOLERANCES

        torch = self.torch
        tokens = min(self.tokens, self.chunk * (CHECK_CHUNK_TOKENS - 1) + 2)
        kept = self.kept(0, 1)
        self.outputs[0] = None
        self.launch(0)
        out = self.outputs[0]
        written = out is not None and bool(torch.isfinite(out).all().item())
        ref_out, ref_state = reference(torch, self.layer, kept, tokens)
        got, ref = [ref_out * math.nan if out is None else out[:, :tokens].reshape(ref_out.shape)], [ref_out]
        if tokens == self.tokens:
            got, ref = got + [self.state[0]], ref + [ref_state]
        return compared(torch, got, ref, TOLERANCES[self.dtype], written,
                        f"float64 recurrence over the first {tokens} tokens")


def bytes_per_copy(spec) -> int:
    """One copy's operands: the states (read and written in place: held once), the inputs and outputs."""
    work = count_work(spec.op, spec.dtype, spec.batch, spec.n, spec.k, mixer=spec.mixer)
    return work.weight_bytes // 2 + work.activation_bytes + work.output_bytes
