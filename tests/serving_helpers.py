"""Profiles for the serving tests: one whose every step costs the same, so step counts are hand-computable."""

from __future__ import annotations

from roofline.serving.profile_doc import LinearTable, StepProfile, Table1D, Table2D


def constant_profile(step_s: float = 1.0, device_bytes: int | None = None, weight_bytes: int = 1,
                     kv_bytes_per_token: int = 1) -> StepProfile:
    """Every step takes ``step_s`` whatever it holds (one layer, one linear of constant time, free attention)."""
    grid = (1, 1_000_000)
    zero = (0.0, 0.0)
    return StepProfile(
        source="analytic", basis="constant step time (test)",
        model={"name": "const", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1, "head_dim": 8,
               "intermediate": 8, "vocab": 8, "mlp": "plain"},
        tp=1, dtype="fp32", kv_dtype="fp32",
        memory={"device_bytes": device_bytes, "weight_bytes": weight_bytes, "kv_bytes_per_token": kv_bytes_per_token},
        linears=(LinearTable("w", 8, 8, 1, grid, (step_s, step_s)),),
        lm_head=LinearTable("lm_head", 8, 8, 1, grid, zero),
        decode_attention=Table2D("const", "batches", "contexts", grid, grid, (zero, zero)),
        prefill_attention=Table1D("const", "prompt_tokens", grid, zero),
    )


def token_linear_profile(per_step_s: float, per_token_s: float, device_bytes: int | None = 10**9) -> StepProfile:
    """A step of T tokens (decodes plus prefill chunk tokens) takes ``per_step_s + per_token_s × T``, exactly:
    one linear whose table is a straight line over the whole grid, everything else free."""
    grid = (1, 1_000_000)
    zero = (0.0, 0.0)
    line = (per_step_s + per_token_s * grid[0], per_step_s + per_token_s * grid[1])
    return StepProfile(
        source="analytic", basis="per-step plus per-token time (test)",
        model={"name": "linear", "layers": 1, "hidden": 8, "heads": 1, "kv_heads": 1, "head_dim": 8,
               "intermediate": 8, "vocab": 8, "mlp": "plain"},
        tp=1, dtype="fp32", kv_dtype="fp32",
        memory={"device_bytes": device_bytes, "weight_bytes": 1, "kv_bytes_per_token": 1},
        linears=(LinearTable("w", 8, 8, 1, grid, line),),
        lm_head=LinearTable("lm_head", 8, 8, 1, grid, zero),
        decode_attention=Table2D("const", "batches", "contexts", grid, grid, (zero, zero)),
        prefill_attention=Table1D("const", "prompt_tokens", grid, zero),
    )
