"""A record of the device and the host as found, and of the tool that measured: what every document keeps.

A field that cannot be read is None, never a crash.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from microbench.device.discovery import DeviceChoice
from microbench.telemetry import nvml
from roofline.specs.gpus import match_gpu_spec


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def meminfo_bytes(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_cache_bytes() -> dict[str, int]:
    """Cache sizes of CPU 0 by level (``L1d``, ``L2``, ``L3``), from sysfs."""
    sizes: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        multiplier = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            sizes[f"L{level}" + ("d" if kind == "Data" else "")] = int(digits) * multiplier
    return sizes


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


PACKAGES = ("microbench", "roofline")
PACKAGE_SUFFIXES = (".py", ".cu", ".cuh", ".toml")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git_state(root: Path) -> tuple[str | None, bool | None]:
    """(sha, dirty) only when ``root`` is itself the top of a git checkout that tracks this package.

    The first H200 run recorded the sha of a parent folder's repository: git looks upwards, so a copy of
    gpubench inside any other checkout would claim that checkout's commit."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return None, None
    if _git(root, "ls-files", "--error-unmatch", "microbench/__init__.py") is None:
        return None, None
    sha = _git(root, "rev-parse", "HEAD")
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return sha, (bool(dirty) if dirty is not None else None)


def content_hash(root: Path) -> str:
    """sha256 over the package files' relative paths and bytes, in a fixed order: what ran, git or not."""
    digest = hashlib.sha256()
    files = sorted(path for package in PACKAGES for path in (root / package).rglob("*")
                   if path.is_file() and path.suffix in PACKAGE_SUFFIXES and "__pycache__" not in path.parts)
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def tool_info(root: Path | None = None) -> dict[str, Any]:
    from microbench import __version__

    root = root or Path(__file__).resolve().parents[2]
    sha, dirty = _git_state(root)
    return {"name": "gpubench", "version": __version__, "git_sha": sha, "git_dirty": dirty,
            "content_sha256": content_hash(root),
            "provenance": "git checkout of gpubench" if sha else "content hash (not a git checkout of gpubench)"}


def host_info() -> dict[str, Any]:
    """The machine around the device: OS, CPU, memory, Python and library versions.

    Torch's thread count only when torch is already loaded (every measuring command loads it first): the
    commands that only analyse (``simulate``, ``profile --analytic``) must not import torch to describe the host.
    """
    torch = sys.modules.get("torch")
    packages = ("torch", "numpy", "nvidia-ml-py", "cupy-cuda12x", "cupy-cuda13x", "click", "matplotlib")
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "memory_bytes": meminfo_bytes("MemTotal"),
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "libraries": {name: _version(name) for name in packages if _version(name)},
    }


def describe_cpu() -> dict[str, Any]:
    caches = cpu_cache_bytes()
    return {
        "kind": "cpu",
        "index": None,
        "name": _cpu_model(),
        "sku": None,
        "memory_bytes": meminfo_bytes("MemTotal"),
        "memory_available_bytes": meminfo_bytes("MemAvailable"),
        "caches_bytes": caches,
        # The rotation must defeat the largest cache: the last level.
        "last_level_cache_bytes": max(caches.values()) if caches else None,
        "cores": os.cpu_count(),
        "threads": _torch_threads(),
    }


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _cuda_properties(index: int) -> dict[str, Any]:
    import torch

    props = torch.cuda.get_device_properties(index)

    def attr(name):
        return getattr(props, name, None)

    pci = None
    if attr("pci_bus_id") is not None:
        pci = f"{attr('pci_domain_id') or 0:08X}:{attr('pci_bus_id'):02X}:{attr('pci_device_id') or 0:02X}.0"
    return {
        "name": props.name,
        "uuid": str(attr("uuid")) if attr("uuid") is not None else None,
        "pci_bus_id": pci,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_cache_bytes": attr("L2_cache_size"),
        "cuda_runtime": torch.version.cuda,
        "torch_cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }


def describe_cuda(index: int) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": "cuda", "index": index}
    record.update(_cuda_properties(index))
    module, why = nvml.init_nvml()
    if module is None:
        record["nvml"] = {"available": False, "reason": why}
    else:
        handle = nvml.find_handle(module, record["uuid"], record["pci_bus_id"], index)
        state = nvml.device_state(module, handle) if handle is not None else {}
        processes = state.get("other_processes")
        if processes is not None:
            state["other_processes"] = [p for p in processes if p["pid"] != os.getpid()]
        record["nvml"] = {"available": handle is not None, "reason": None if handle else "no NVML handle"}
        record.update(state)
    profile = match_gpu_spec(record["name"], record["memory_bytes"])
    record["sku"] = profile.sku if profile else None
    return record


def describe_device(choice: DeviceChoice) -> dict[str, Any]:
    return describe_cpu() if choice.kind == "cpu" else describe_cuda(choice.index)  # pyright: ignore[reportArgumentType]
