"""The recurrent mixers' math in torch: Gated DeltaNet (Qwen3-Next, Qwen3.5) and Mamba-2 (Nemotron-H), each as a
decode step over a batch of sequences and as a chunked scan over a prompt, vectorised over sequences and heads.

These are the reference kernels ``recurrent`` times where fla / mamba-ssm are not installed (every
CPU), and the float64 definitions its correctness checks compare against.  Two forms of each on purpose: the decode
step updates the state in place (as the engines' kernels do: the state is read and written once), the chunked scan
is the algebra fla's ``chunk_gated_delta_rule`` and Mamba-2's SSD run; the checks hold each against the plain
token-by-token recurrence (``*_recurrence``), written separately from both.

Layouts: a step's inputs are per sequence ``[B, ...]``; a prompt's ``[B, T, ...]``.  Gated DeltaNet: queries and keys
``[.., Hk, dk]``, values ``[.., Hv, dv]``, log-decay ``g`` and ``beta`` ``[.., Hv]``, state ``[B, Hv, dk, dv]``; value
head h reads key head ``h // (Hv / Hk)`` (fla's GVA).  Mamba-2: ``x`` and the gate ``z`` ``[.., H, P]``, ``B`` and
``C`` ``[.., G, N]`` (head h reads group ``h // (H / G)``), ``dt`` ``[.., H]`` before its bias and softplus, ``A``,
``D`` and ``dt_bias`` ``[H]``, state ``[B, H, P, N]`` (mamba-ssm's ``selective_state_update``).
"""

from __future__ import annotations

import math
from typing import Any

# fla's and Qwen3-Next's epsilon of the l2 norm on queries and keys.
L2_EPS = 1e-6


def l2_normalised(torch, x):
    """``x`` over its last dimension to unit length (fla's ``use_qk_l2norm_in_kernel``)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def per_head(x, heads: int):
    """``[.., G, d]`` → ``[.., heads, d]``: each of G groups (key heads, Mamba-2's B/C groups) given to its heads."""
    return x.repeat_interleave(heads // x.shape[-2], dim=-2)


def conv_update(torch, x, conv_state, weight):
    """One token of a depthwise causal convolution (causal_conv1d_update's semantics, SiLU after): ``x`` [B, C],
    ``conv_state`` [B, C, K - 1] (the last inputs, updated in place), ``weight`` [C, K]."""
    window = torch.cat([conv_state, x.unsqueeze(-1)], dim=-1)
    conv_state.copy_(window[..., 1:])
    return torch.nn.functional.silu((window * weight).sum(-1))


def conv_prompt(torch, x, weight):
    """A prompt through the same convolution from an empty state: ``x`` [B, T, C] → (outputs [B, T, C], the state
    it leaves: the last K - 1 inputs [B, C, K - 1])."""
    channels, width = weight.shape
    out = torch.nn.functional.conv1d(x.transpose(1, 2), weight.unsqueeze(1), padding=width - 1, groups=channels)
    state = torch.nn.functional.pad(x.transpose(1, 2), (width - 1, 0))[..., -(width - 1):] if width > 1 else \
        x.new_zeros(x.shape[0], channels, 0)
    return torch.nn.functional.silu(out[..., : x.shape[1]]).transpose(1, 2), state


# --- Gated DeltaNet --------------------------------------------------------------------------------------------

def gdn_step(torch, state, q, k, v, g, beta, scale: float):
    """One decode token of each sequence, the state updated in place: decay, the delta rule's correction along k,
    then the output read along q.  q, k already normalised and given to each value head ([B, Hv, dk])."""
    batch, heads, dk, dv = state.shape
    work = state if state.dtype == torch.float32 else state.float()
    work.mul_(g.float().exp()[..., None, None])
    flat = work.view(batch * heads, dk, dv)
    keys = k.float().reshape(batch * heads, 1, dk)
    remembered = torch.bmm(keys, flat).view(batch, heads, dv)
    delta = (v.float() - remembered) * beta.float()[..., None]
    flat.baddbmm_(keys.transpose(1, 2), delta.view(batch * heads, 1, dv))
    out = torch.bmm(q.float().reshape(batch * heads, 1, dk) * scale, flat).view(batch, heads, dv)
    if work is not state:
        state.copy_(work)
    return out.to(v.dtype)


def gdn_recurrence(torch, state, q, k, v, g, beta, scale: float):
    """The definition, token by token (the checks' float64 reference): q, k [B, T, Hv, dk], v [B, T, Hv, dv], g and
    beta [B, T, Hv]; returns (outputs [B, T, Hv, dv], the final state)."""
    outs = []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        remembered = torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        delta = (v[:, t] - remembered) * beta[:, t, :, None]
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t], delta)
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    return torch.stack(outs, dim=1), state


def gdn_chunked(torch, q, k, v, g, beta, scale: float, chunk: int, state=None):
    """A prompt in chunks of ``chunk`` tokens (fla's chunk_gated_delta_rule algebra, in fp32): within a chunk the
    delta rule's corrections are one triangular solve, between chunks the state carries over.  q, k [B, T, Hv, dk]
    (normalised, per value head), v [B, T, Hv, dv], g and beta [B, T, Hv]; returns (outputs, final state)."""
    batch, length, heads, dk = q.shape
    dv = v.shape[-1]
    pad = (-length) % chunk
    # Padding tokens with k = 0, beta = 0 and g = 0 change nothing: no correction, no decay.
    q, k, v, g, beta = (torch.nn.functional.pad(t.float(), (0, 0) * (t.dim() - 2) + (0, pad))
                        for t in (q, k, v, g, beta))
    n = (length + pad) // chunk

    def chunks(t):  # [B, T, H, *] -> [B, H, n, C, *]
        return t.transpose(1, 2).reshape(batch, heads, n, chunk, *t.shape[3:])

    q, k, v = chunks(q) * scale, chunks(k), chunks(v)
    g, beta = chunks(g.unsqueeze(-1)).squeeze(-1), chunks(beta.unsqueeze(-1)).squeeze(-1)
    g = g.cumsum(-1)
    ones = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device)
    lower, strict = ones.tril(), ones.tril(-1)
    decay = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, -math.inf).exp()
    weighted = k * beta[..., None]
    corrections = ((weighted @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    inverse = torch.linalg.solve_triangular(eye + corrections, eye.expand_as(corrections), upper=False)
    w = inverse @ (weighted * g.exp()[..., None])
    u = inverse @ (v * beta[..., None])
    state = q.new_zeros(batch, heads, dk, dv) if state is None else state.float()
    out = q.new_empty(batch, heads, n, chunk, dv)
    for c in range(n):
        qc, kc, gc = q[:, :, c], k[:, :, c], g[:, :, c]
        fresh = u[:, :, c] - w[:, :, c] @ state
        inner = (qc @ kc.transpose(-1, -2)) * decay[:, :, c]
        out[:, :, c] = (qc * gc.exp()[..., None]) @ state + inner @ fresh
        last = gc[..., -1:]
        state = state * last.exp()[..., None] + (kc * (last - gc).exp()[..., None]).transpose(-1, -2) @ fresh
    return out.reshape(batch, heads, n * chunk, dv)[:, :, :length].transpose(1, 2), state


# --- Mamba-2 -----------------------------------------------------------------------------------------------------

def mamba_step(torch, state, x, dt, a, b, c, d, z, dt_bias):
    """One decode token of each sequence (selective_state_update with dt_softplus and the gate z), the state
    updated in place: decay by exp(dt·A), add dt·x ⊗ B, read along C, skip D·x, gate by SiLU(z)."""
    batch, heads, p, n = state.shape
    work = state if state.dtype == torch.float32 else state.float()
    step = torch.nn.functional.softplus(dt.float() + dt_bias.float())
    work.mul_((step * a.float()).exp()[..., None, None])
    flat = work.view(batch * heads, p, n)
    flat.baddbmm_((step[..., None] * x.float()).reshape(batch * heads, p, 1),
                  per_head(b, heads).float().reshape(batch * heads, 1, n))
    y = torch.bmm(flat, per_head(c, heads).float().reshape(batch * heads, n, 1)).view(batch, heads, p)
    if work is not state:
        state.copy_(work)
    y = (y + d.float()[:, None] * x.float()) * torch.nn.functional.silu(z.float())
    return y.to(x.dtype)


def mamba_recurrence(torch, state, x, dt, a, b, c, d, z, dt_bias):
    """The definition, token by token (the checks' float64 reference): x, z [B, T, H, P], dt [B, T, H], b, c
    [B, T, G, N]; returns (outputs [B, T, H, P], the final state)."""
    heads = x.shape[2]
    outs = []
    for t in range(x.shape[1]):
        step = torch.nn.functional.softplus(dt[:, t] + dt_bias)
        state = state * (step * a).exp()[..., None, None] + \
            torch.einsum("bhp,bhn->bhpn", step[..., None] * x[:, t], per_head(b[:, t], heads))
        y = torch.einsum("bhpn,bhn->bhp", state, per_head(c[:, t], heads)) + d[:, None] * x[:, t]
        outs.append(y * torch.nn.functional.silu(z[:, t]))
    return torch.stack(outs, dim=1), state


def _segment_sums(torch, x):
    """[.., T] → [.., T, T]: entry (i, j) the sum of x over j < t ≤ i, -inf above the diagonal (SSD's segsum)."""
    length = x.shape[-1]
    ones = torch.ones(length, length, dtype=torch.bool, device=x.device)
    spread = x[..., None].expand(*x.shape, length).masked_fill(~ones.tril(-1), 0)
    return spread.cumsum(-2).masked_fill(~ones.tril(), -math.inf)


def mamba_chunked(torch, x, dt, a, b, c, d, z, dt_bias, chunk: int, state=None):
    """A prompt by Mamba-2's SSD in chunks of ``chunk`` tokens (mamba-ssm's ssd_minimal_discrete, in fp32): the
    quadratic form within each chunk, the states passed between chunks.  Returns (outputs [B, T, H, P], final
    state [B, H, P, N])."""
    batch, length, heads, p = x.shape
    pad = (-length) % chunk
    step = torch.nn.functional.softplus(dt.float() + dt_bias.float())  # [B, T, H]
    # Padding tokens with dt·x = 0 and dt·A = 0: nothing added, nothing decayed.
    xs = torch.nn.functional.pad(x.float() * step[..., None], (0, 0, 0, 0, 0, pad))
    decays = torch.nn.functional.pad(step * a.float(), (0, 0, 0, pad))
    bs, cs = (torch.nn.functional.pad(per_head(t, heads).float(), (0, 0, 0, 0, 0, pad)) for t in (b, c))
    n = (length + pad) // chunk
    xs, bs, cs = (t.reshape(batch, n, chunk, heads, t.shape[-1]) for t in (xs, bs, cs))
    decays = decays.reshape(batch, n, chunk, heads).permute(0, 3, 1, 2)  # [B, H, n, C]
    cumulative = decays.cumsum(-1)
    within = _segment_sums(torch, decays).exp()
    diagonal = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", cs, bs, within, xs)
    to_end = (cumulative[..., -1:] - cumulative).exp()
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", bs, to_end, xs)
    first = xs.new_zeros(batch, 1, heads, p, bs.shape[-1]) if state is None else state.float()[:, None]
    states = torch.cat([first, states], dim=1)
    between = _segment_sums(torch, torch.nn.functional.pad(cumulative[..., -1], (1, 0))).exp()
    carried = torch.einsum("bhzc,bchpn->bzhpn", between, states)
    states, final = carried[:, :-1], carried[:, -1]
    off = torch.einsum("bclhn,bchpn,bhcl->bclhp", cs, states, cumulative.exp())
    y = (diagonal + off).reshape(batch, n * chunk, heads, p)[:, :length]
    y = (y + d.float()[:, None] * x.float()) * torch.nn.functional.silu(z.float())
    return y, final


def float64(tensors: dict[str, Any]) -> dict[str, Any]:
    """Each tensor on the host in float64: the checks' reference runs there."""
    return {name: t.detach().double().cpu() for name, t in tensors.items()}
