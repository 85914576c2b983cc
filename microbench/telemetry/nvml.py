"""Safe NVML queries for the device record.  Every field that cannot be read is None, never a crash;
when NVML itself is missing the reason is returned instead.

Uses nvidia-ml-py (import name ``pynvml``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def init_nvml():
    """Import and initialise NVML; return (module, None) or (None, reason)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML unavailable: {exc.__class__.__name__}: {exc}"
    except Exception as exc:  # a broken driver install can raise anything at load time
        return None, f"NVML unavailable: {exc}"
    return pynvml, None


def _read(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:
        return None


def find_handle(nvml, uuid: str | None, pci_bus_id: str | None, index: int):
    """The NVML handle of the CUDA device: by UUID, then PCI bus, then (least reliable) index.

    CUDA and NVML may order devices differently (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), so the
    index is the last resort.
    """
    if uuid:
        for candidate in (uuid, f"GPU-{uuid}"):
            handle = _read(lambda c=candidate: nvml.nvmlDeviceGetHandleByUUID(c))
            if handle is not None:
                return handle
    if pci_bus_id:
        handle = _read(lambda: nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id))
        if handle is not None:
            return handle
    return _read(lambda: nvml.nvmlDeviceGetHandleByIndex(index))


def _pair(value):
    return {"current": bool(value[0]), "pending": bool(value[1])} if value is not None else None


def device_state(nvml, handle) -> dict[str, Any]:
    """What NVML says about the card as found: clocks, power, ECC, MIG, persistence, processes."""
    processes = _read(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    power_limit_mw = _read(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    bus_width = _read(lambda: nvml.nvmlDeviceGetMemoryBusWidth(handle))
    max_mem_mhz = _read(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM))
    util = _read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    cuda_driver = _read(nvml.nvmlSystemGetCudaDriverVersion)
    return {
        "nvml_name": _read(lambda: _text(nvml.nvmlDeviceGetName(handle))),
        "nvml_uuid": _read(lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
        "pci_bus_id": _read(lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        "driver_version": _read(lambda: _text(nvml.nvmlSystemGetDriverVersion())),
        "cuda_driver_version": (
            f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}" if isinstance(cuda_driver, int) else None
        ),
        "max_sm_clock_hz": _mhz(_read(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))),
        "max_memory_clock_hz": _mhz(max_mem_mhz),
        "sm_clock_hz": _mhz(_read(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))),
        "memory_clock_hz": _mhz(_read(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))),
        "memory_bus_width_bits": bus_width,
        # DDR: two transfers per memory clock.  This is the number NVML's counters are relative to.
        "theoretical_bandwidth_bytes_per_s": (
            2 * max_mem_mhz * 1e6 * bus_width / 8 if max_mem_mhz and bus_width else None
        ),
        "power_limit_w": power_limit_mw / 1000 if power_limit_mw is not None else None,
        "ecc": _pair(_read(lambda: nvml.nvmlDeviceGetEccMode(handle))),
        "mig": _pair(_read(lambda: nvml.nvmlDeviceGetMigMode(handle))),
        "persistence": _read(lambda: bool(nvml.nvmlDeviceGetPersistenceMode(handle))),
        "temperature_c": _read(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        "utilization_gpu_percent": util.gpu if util is not None else None,
        "other_processes": (
            [{"pid": p.pid, "used_memory_bytes": p.usedGpuMemory} for p in processes]
            if processes is not None
            else None
        ),
        "gpm_supported": _read(lambda: bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)),
    }


def _mhz(value) -> float | None:
    return value * 1e6 if isinstance(value, (int, float)) else None
