"""The CPU validate checks' command (``tests/test_validate_engine.py`` for the tiny Llama,
``tests/test_validate_moe.py`` for the tiny Qwen3-MoE), which ``scripts/bench_validate.py`` runs again and again
to show how far its runs spread: one copy of its sizes and repeats."""

from __future__ import annotations

from pathlib import Path

# At 5 repeats the gated errors spread with a standard deviation of 5-7% on the 2-core VM, and CI runs crossed the
# 15% gate now and then; at 15 the spread narrowed (docs/serving.md, "How validate's prediction is made").
REPEATS = 15


def check_args(config: Path, out: Path, repeats: int = REPEATS) -> list[str]:
    """``gpubench validate`` of the model ``config`` as the checks run it, into ``out``."""
    return ["validate", "--hf-config", str(config), "--device", "cpu", "--requests", "32", "--calibration-requests",
            "16", "--prompt", "fixed:8", "--output", "uniform:4:24", "--static-batch", "8", "--max-batch", "8",
            "--budget-tokens", "64", "--repeats", str(repeats), "--profile-budget", "0.01", "-o", str(out)]
