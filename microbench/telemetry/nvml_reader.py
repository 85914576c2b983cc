"""The real telemetry reader: NVML calls for one GPU, and GPM sample pairs where supported.

Every call is guarded: a metric the driver does not offer is simply absent from the reading.
"""

from __future__ import annotations

from typing import Any

from microbench.telemetry import nvml
from microbench.telemetry.sampler import GPM_MIN_POINT_WINDOW_S, Sampler, min_point_window_s

GPM_METRIC_NAMES = {
    "NVML_GPM_METRIC_DRAM_BW_UTIL": "dram_bw_util_percent",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": "tensor_util_percent",
    "NVML_GPM_METRIC_HMMA_TENSOR_UTIL": "hmma_tensor_util_percent",
    "NVML_GPM_METRIC_SM_UTIL": "sm_util_percent",
    "NVML_GPM_METRIC_SM_OCCUPANCY": "sm_occupancy_percent",
    "NVML_GPM_METRIC_FP16_UTIL": "fp16_util_percent",
    "NVML_GPM_METRIC_FP32_UTIL": "fp32_util_percent",
}


def _field_value(field) -> float | None:
    if field.nvmlReturn != 0:
        return None
    kind = field.valueType  # nvmlValueType_t: 0 double, 1 uint, 2 ulong, 3 ulonglong, 4 slonglong, 5 sint
    value = field.value
    return {0: value.dVal, 1: value.uiVal, 2: value.ulVal, 3: value.ullVal, 4: value.sllVal,
            5: value.siVal, 6: value.usVal}.get(kind)


class NvmlReader:
    def __init__(self, module, handle, use_gpm: bool):
        self.nvml = module
        self.handle = handle
        self.use_gpm = use_gpm
        self.source = "nvml+gpm" if use_gpm else "nvml-basic"
        self.power_note = "instantaneous (NVML_FI_DEV_POWER_INSTANT)"
        self._previous_gpm = None

    def _call(self, fn, *args):
        try:
            return fn(self.handle, *args)
        except Exception:  # noqa: BLE001
            return None

    def read(self) -> dict[str, Any]:
        m = self.nvml
        row: dict[str, Any] = {}
        util = self._call(m.nvmlDeviceGetUtilizationRates)
        if util is not None:
            row["gpu_util_percent"], row["memory_busy_percent"] = util.gpu, util.memory
        sm = self._call(m.nvmlDeviceGetClockInfo, m.NVML_CLOCK_SM)
        mem = self._call(m.nvmlDeviceGetClockInfo, m.NVML_CLOCK_MEM)
        row["sm_clock_hz"] = sm * 1e6 if sm is not None else None
        row["memory_clock_hz"] = mem * 1e6 if mem is not None else None
        fields = self._call(m.nvmlDeviceGetFieldValues, [m.NVML_FI_DEV_POWER_INSTANT, m.NVML_FI_DEV_MEMORY_TEMP])
        power_mw = _field_value(fields[0]) if fields is not None else None
        if power_mw is None:
            # Fallback: nvmlDeviceGetPowerUsage is a 1 s average on recent drivers, not instantaneous.
            power_mw = self._call(m.nvmlDeviceGetPowerUsage)
            self.power_note = "1 s average (nvmlDeviceGetPowerUsage): NVML_FI_DEV_POWER_INSTANT unavailable"
        row["power_w"] = power_mw / 1000 if power_mw is not None else None
        row["memory_temperature_c"] = _field_value(fields[1]) if fields is not None else None
        energy_mj = self._call(m.nvmlDeviceGetTotalEnergyConsumption)
        row["energy_j"] = energy_mj / 1000 if energy_mj is not None else None
        row["temperature_c"] = self._call(m.nvmlDeviceGetTemperature, m.NVML_TEMPERATURE_GPU)
        memory = self._call(m.nvmlDeviceGetMemoryInfo)
        row["memory_used_bytes"] = memory.used if memory is not None else None
        row["clock_event_reasons"] = self._call(m.nvmlDeviceGetCurrentClocksEventReasons)
        return row

    def gpm(self) -> dict[str, float] | None:
        """Metrics between the previous GPM sample and a new one (None on the first call)."""
        if not self.use_gpm:
            return None
        m = self.nvml
        sample = m.nvmlGpmSampleAlloc()
        m.nvmlGpmSampleGet(self.handle, sample)
        previous, self._previous_gpm = self._previous_gpm, sample
        if previous is None:
            return None
        request = m.c_nvmlGpmMetricsGet_t()
        request.version = m.NVML_GPM_METRICS_GET_VERSION
        request.sample1, request.sample2 = previous, sample
        wanted = [(getattr(m, name), key) for name, key in GPM_METRIC_NAMES.items() if hasattr(m, name)]
        request.numMetrics = len(wanted)
        for index, (metric_id, _) in enumerate(wanted):
            request.metrics[index].metricId = metric_id
        try:
            m.nvmlGpmMetricsGet(request)
        finally:
            m.nvmlGpmSampleFree(previous)
        return {key: request.metrics[i].value for i, (_, key) in enumerate(wanted)
                if request.metrics[i].nvmlReturn == 0}


def start_telemetry(device: dict[str, Any], interval_s: float):
    """A started sampler for this CUDA device and the telemetry record, or (None, record with the reason)."""
    if device["kind"] != "cuda":
        return None, {"source": "none", "reason": "the CPU has no NVML counters"}
    module, why = nvml.init_nvml()
    if module is None:
        return None, {"source": "none", "reason": why}
    handle = nvml.find_handle(module, device.get("uuid"), device.get("pci_bus_id"), device["index"])
    if handle is None:
        return None, {"source": "none", "reason": "NVML has no handle for this device"}
    reasons = []
    mig = (device.get("mig") or {}).get("current")
    use_gpm = bool(device.get("gpm_supported")) and not mig
    if mig:
        reasons.append("MIG is enabled: GPM is per instance, not read here")
    elif not device.get("gpm_supported"):
        reasons.append("GPM not supported on this GPU (Hopper and newer have it)")
    reader = NvmlReader(module, handle, use_gpm)
    if use_gpm:
        try:
            reader.gpm()  # prime, and find out now whether GPM really works here
        except Exception as exc:  # noqa: BLE001
            reader.use_gpm, reader.source = False, "nvml-basic"
            reasons.append(f"GPM failed: {exc}")
    sampler = Sampler(reader, interval_s)
    sampler.start()
    record = {"source": reader.source, "interval_s": interval_s, "reason": "; ".join(reasons) or None,
              "gpm_min_point_window_s": GPM_MIN_POINT_WINDOW_S if reader.use_gpm else None,
              "min_point_window_s": min_point_window_s(reader.use_gpm, interval_s)}
    return sampler, record
