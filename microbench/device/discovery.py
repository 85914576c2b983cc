"""Which device to measure: ``--device`` resolved against what is present (CUDA devices, or the CPU).

A bad ``--device`` is ``DeviceError``: one line, exit code 2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class DeviceError(Exception):
    """Bad ``--device``: one line, exit code 2."""


@dataclass(frozen=True)
class DeviceChoice:
    kind: str  # cuda | cpu
    index: int | None
    notice: str | None = None

    @property
    def torch_name(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"


def cuda_status() -> tuple[int, str | None]:
    """Number of usable CUDA devices, and why there are none."""
    import torch

    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return 0, "this torch build has no CUDA"
        return 0, "torch finds no CUDA device (no GPU or no driver)"
    return torch.cuda.device_count(), None


def resolve_device(spec: str) -> DeviceChoice:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``."""
    spec = spec.strip().lower()
    if spec == "cpu":
        return DeviceChoice("cpu", None)
    match = re.fullmatch(r"cuda(?::(\d+))?|auto", spec)
    if not match:
        raise DeviceError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N")
    count, why = cuda_status()
    if spec == "auto":
        if count:
            return DeviceChoice("cuda", 0)
        return DeviceChoice("cpu", None, notice=f"No CUDA GPU ({why}): measuring the CPU instead.")
    index = int(match.group(1) or 0)
    if not count:
        raise DeviceError(f"--device {spec}: {why}")
    if index >= count:
        raise DeviceError(f"--device {spec}: only {count} CUDA device(s), numbered from 0")
    return DeviceChoice("cuda", index)
