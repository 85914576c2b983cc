"""The typed sections of a result document: ``tool``, ``host``, ``device``, ``settings``, ``ceilings`` and
``telemetry`` (and each point's telemetry summary), each a ``Record`` whose keys are declared once here with
their JSON type, unit and meaning (see roofline.result.keys).  docs/reference/result.md lists every key declared here,
and docs/result.schema.json is generated from these declarations (both checked in tests).

Every key is optional unless marked required: documents of earlier versions lack many of them, imported
results lack most, and readers treat an absent key as "not recorded".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from roofline.core.counting import compute_dtype
from roofline.result.keys import Record, key


def _plain_seconds(value: float) -> str:
    """Settings print as given (``0.5 s``, ``0.05 s``), not rescaled: they are what the user typed."""
    return f"{value} s"


# --- tool, host -------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Tool(Record):
    SECTION: ClassVar[str] = "tool"
    name: str | None = key("string", doc="always gpubench")
    version: str | None = key("string", doc="gpubench version that wrote the document")
    git_sha: str | None = key("string", doc="commit of the gpubench checkout that measured (null: not a checkout)")
    git_dirty: bool | None = key("boolean", doc="the checkout had uncommitted changes")
    content_sha256: str | None = key("string", doc="sha256 over gpubench's package files: what ran, git or not")
    provenance: str | None = key("string", doc="which of git_sha / content_sha256 identifies the code")
    imported_from: str | None = key("string", doc="import: the file the samples came from")


@dataclass(frozen=True, kw_only=True)
class Host(Record):
    SECTION: ClassVar[str] = "host"
    hostname: str | None = key("string", doc="machine name")
    os: str | None = key("string", doc="platform.platform()")
    cpu_model: str | None = key("string", doc="CPU model name from /proc/cpuinfo")
    cpu_cores: int | None = key("integer", doc="logical CPUs (os.cpu_count())")
    memory_bytes: int | None = key("integer", unit="B", doc="total host memory (MemTotal)")
    python: str | None = key("string", doc="Python version")
    torch_threads: int | None = key("integer", doc="torch intra-op threads (null: torch not loaded)")
    libraries: dict[str, str] | None = key("object", doc="installed versions of torch, numpy, nvidia-ml-py, ...")


@dataclass(frozen=True)
class Provenance:
    """Who made a document, as every document records it: the ``tool`` and ``host`` sections (the measuring side
    describes them: ``microbench.device.provenance``) and the command line (``argv``)."""

    tool: dict[str, Any]
    host: dict[str, Any]
    argv: tuple[str, ...] = ()


# --- device -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class NvmlAccess(Record):
    SECTION: ClassVar[str] = "device.nvml"
    available: bool | None = key("boolean", doc="NVML has a handle for this device")
    reason: str | None = key("string", doc="why not, when it has none")


@dataclass(frozen=True, kw_only=True)
class ModePair(Record):
    SECTION: ClassVar[str] = "device.ecc|mig"
    current: bool | None = key("boolean", doc="the mode now")
    pending: bool | None = key("boolean", doc="the mode after the next reset")


@dataclass(frozen=True, kw_only=True)
class GpuProcess(Record):
    SECTION: ClassVar[str] = "device.other_processes[]"
    pid: int | None = key("integer", doc="process id")
    used_memory_bytes: int | None = key("integer", unit="B", doc="GPU memory it holds (null: not reported)")


@dataclass(frozen=True, kw_only=True)
class Device(Record):
    SECTION: ClassVar[str] = "device"
    kind: str | None = key("string", required=True, choices=("cuda", "cpu"), doc="cuda or cpu")
    index: int | None = key("integer", doc="CUDA device index (null on the CPU)")
    name: str | None = key("string", doc="device name (torch's for a GPU, the CPU model on the CPU)")
    sku: str | None = key("string", doc="matched profiles/gpus/*.toml SKU (null: none matched)")
    uuid: str | None = key("string", doc="GPU UUID")
    pci_bus_id: str | None = key("string", doc="PCI bus id")
    compute_capability: str | None = key("string", doc="major.minor")
    sm_count: int | None = key("integer", doc="streaming multiprocessors")
    memory_bytes: int | None = key("integer", unit="B", doc="device memory (the CPU: host MemTotal)")
    l2_cache_bytes: int | None = key("integer", unit="B", doc="GPU L2 cache")
    cuda_runtime: str | None = key("string", doc="CUDA runtime torch was built with")
    torch_cudnn: int | None = key("integer", doc="cuDNN version torch loads")
    nvml: NvmlAccess | None = key("object", record=NvmlAccess, doc="whether NVML could be read, and why not")
    nvml_name: str | None = key("string", doc="NVML's device name")
    nvml_uuid: str | None = key("string", doc="NVML's UUID")
    driver_version: str | None = key("string", doc="NVIDIA driver version")
    cuda_driver_version: str | None = key("string", doc="CUDA version the driver supports")
    max_sm_clock_hz: float | None = key("number", unit="Hz", doc="maximum SM clock")
    max_memory_clock_hz: float | None = key("number", unit="Hz", doc="maximum memory clock")
    sm_clock_hz: float | None = key("number", unit="Hz", doc="SM clock when the run started")
    memory_clock_hz: float | None = key("number", unit="Hz", doc="memory clock when the run started")
    memory_bus_width_bits: int | None = key("integer", unit="bit", doc="memory bus width")
    theoretical_bandwidth_bytes_per_s: float | None = key(
        "number", unit="B/s", doc="2 x max memory clock x bus width / 8: what NVML's counters are relative to")
    power_limit_w: float | None = key("number", unit="W", doc="enforced power limit")
    ecc: ModePair | None = key("object", record=ModePair, doc="ECC mode")
    mig: ModePair | None = key("object", record=ModePair, doc="MIG mode")
    persistence: bool | None = key("boolean", doc="persistence mode")
    temperature_c: float | None = key("number", unit="°C", doc="GPU temperature when the run started")
    utilization_gpu_percent: float | None = key("number", unit="%", doc="GPU utilisation when the run started")
    other_processes: tuple | None = key("array", items="object", item_record=GpuProcess,
                                        doc="other compute processes on the GPU when the run started")
    gpm_supported: bool | None = key("boolean", doc="GPM counters (Hopper and newer) are available")
    memory_available_bytes: int | None = key("integer", unit="B", doc="CPU: MemAvailable at the start")
    caches_bytes: dict[str, int] | None = key("object", doc="CPU: cache sizes by level name")
    last_level_cache_bytes: int | None = key("integer", unit="B", doc="CPU: the largest cache, which rotation defeats")
    cores: int | None = key("integer", doc="CPU: logical CPUs")
    threads: int | None = key("integer", doc="CPU: torch threads")

    @property
    def label(self) -> str:
        """``NVIDIA H200 (h200-sxm)``: name and SKU (or kind), as titles print it."""
        return f"{self.name} ({self.sku or self.kind})"


# --- settings ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Busy(Record):
    SECTION: ClassVar[str] = "settings.busy_at_start"
    busy: bool | None = key("boolean", doc="someone else was using the device at the start")
    why: str | None = key("string", doc="who or what (processes, utilisation, busy cores)")


@dataclass(frozen=True, kw_only=True)
class ReferenceSource(Record):
    SECTION: ClassVar[str] = "settings.reference"
    name: str | None = key("string", doc="the reference database (--reference): aiconfigurator")
    package: str | None = key("string", doc="the package the data came in: aiconfigurator-core")
    package_version: str | None = key("string", doc="its installed version, read")
    measured_by: str | None = key("string", doc="who measured the data")
    system: str | None = key("string", doc="the database's name for the GPU (h200_sxm)")
    family: str | None = key("string", doc="the table's family (gemm)")
    engine: str | None = key("string", doc="the serving engine whose kernels were timed (vllm, sglang, trtllm)")
    engine_version: str | None = key("string", doc="that engine's version")
    file: str | None = key("string", doc="the table, relative to the package's systems/data folder")
    device: str | None = key("string", doc="the device name the rows carry")
    kernel: str | None = key("string", doc="the kernel that ran (the engine's busiest for the dtype)")

    def words(self) -> str:
        """``measured by NVIDIA (aiconfigurator's collector) with vllm 0.24.0 (its kernel), from aiconfigurator-core
        0.12.0``: what fit, report and compare say beside data imported from a reference."""
        return (f"measured by {self.measured_by} with {self.engine} {self.engine_version} ({self.kernel}) on "
                f"{self.device}, from {self.package} {self.package_version}")


@dataclass(frozen=True, kw_only=True)
class Resumed(Record):
    SECTION: ClassVar[str] = "settings.resumed[]"
    at: str | None = key("string", doc="UTC time the sweep was resumed")
    remaining_points: int | None = key("integer", doc="points left to measure then")
    forced_over: tuple | None = key("array", items="string", doc="differences --force resumed over (null: none)")


@dataclass(frozen=True, kw_only=True)
class Settings(Record):
    SECTION: ClassVar[str] = "settings"
    backends: tuple | None = key("array", items="string", doc="back ends measured (torch, cupy)")
    timer: str | None = key("string", doc="perf_counter | cuda-graph | cuda-eager | imported")
    l2_policy: str | None = key("string", doc="rotate (cold weights) or warm")
    rotation_cache_factor: float | None = key("number", doc="weight copies total at least this many times the cache")
    rotation_cache_bytes: int | None = key("integer", unit="B", doc="the cache the rotation defeats (L2 or LLC)")
    budget_s: float | None = key("number", unit="s", formatter=_plain_seconds, doc="sampling budget per point")
    target_rel_ci: float | None = key("number", doc="stop when the 95% CI of the median is within this fraction")
    min_samples: int | None = key("integer", doc="samples before the CI rule may stop")
    max_samples: int | None = key("integer", doc="samples at most per point")
    warmup_s: float | None = key("number", unit="s", doc="warm-up per point")
    seed: int | None = key("integer", doc="seed of the random inputs")
    quick: bool | None = key("boolean", doc="the --quick plan")
    max_memory_bytes: int | None = key("integer", unit="B", doc="--max-memory cap (null: none)")
    torch_threads: int | None = key("integer", doc="torch intra-op threads")
    fp16_reduced_precision_reduction: bool | None = key("boolean", doc="torch allows fp16 reduced-precision sums")
    bf16_reduced_precision_reduction: bool | None = key("boolean", doc="torch allows bf16 reduced-precision sums")
    tolerances: dict[str, float] | None = key("object", doc="correctness tolerance (relative error) per dtype")
    retry_pause_s: float | None = key("number", unit="s", doc="pause before measuring a flagged point again")
    config: dict[str, Any] | None = key("object", doc="the plan (SweepConfig.to_record): what --resume rebuilds")
    busy_at_start: Busy | None = key("object", record=Busy, doc="was the device busy before the start")
    resumed: tuple | None = key("array", items="object", item_record=Resumed, doc="each --resume of this file")
    import_warnings: tuple | None = key("array", items="string", doc="import: what the importer warned about")
    source_file: str | None = key("string", doc="import: the file imported")
    reference: ReferenceSource | None = key("object", record=ReferenceSource,
                                            doc="import --reference: the database, who measured it, with which "
                                                "engine and version (null: not a reference)")


# --- ceilings ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class StreamKernel(Record):
    SECTION: ClassVar[str] = "ceilings.measured.<kernel>"
    kernel: str | None = key("string", doc="what ran: torch.Tensor.copy_, gpubench read_sum, ...")
    kind: str | None = key("string", doc="copy | read | scale | add | triad")
    bytes: int | None = key("integer", unit="B", doc="bytes moved per launch (see counts)")
    bytes_per_s: float | None = key("number", unit="B/s", doc="bytes over the median time")
    time_s: float | None = key("number", unit="s", doc="median time per launch")
    timer: str | None = key("string", doc="the timer used")
    samples_s: tuple | None = key("array", items="number", unit="s", doc="every timed sample")
    counts: str | None = key("string", doc="what bytes counts: bytes read, or read + written")


@dataclass(frozen=True, kw_only=True)
class BandwidthChoice(Record):
    SECTION: ClassVar[str] = "ceilings.measured.reference_bandwidth"
    bytes_per_s: float | None = key("number", unit="B/s", doc="the reference every % of bandwidth is of")
    name: str | None = key("string", doc="the kernel entry chosen: cupy read, torch copy (eager), ...")
    kind: str | None = key("string", doc="read | copy | unknown")
    kernel: str | None = key("string", doc="what ran")
    timer: str | None = key("string", doc="its timer")
    why: str | None = key("string", doc="the rule that chose it")


@dataclass(frozen=True, kw_only=True)
class PeakRun(Record):
    SECTION: ClassVar[str] = "ceilings.measured.peak.<dtype>.burst|sustained"
    flop_per_s: float | None = key("number", unit="FLOP/s", doc="FLOP over the median time in this regime")
    time_s: float | None = key("number", unit="s", doc="median time per launch")
    samples: int | None = key("integer", doc="timed samples")
    timer: str | None = key("string", doc="the timer used")
    duration_s: float | None = key("number", unit="s", doc="length of the timed phase")
    window_s: tuple | None = key("array", items="number", unit="s", doc="[start, end] on the telemetry clock")
    sm_clock_hz: Any = key("number", "object", unit="Hz", doc="SM clock in the phase ({min, median, max}), or null")
    power_w: Any = key("number", "object", unit="W", doc="power in the phase ({median, max}), or null")
    clock_event_reasons: tuple | None = key("array", items="string", doc="NVML clock-event reasons in the phase")
    telemetry_reason: str | None = key("string", doc="why no telemetry describes the phase")
    run_s: float | None = key("number", unit="s", doc="sustained: the whole run, settling included")
    shape: dict[str, int] | None = key("object", doc="{m, n, k} of the GEMM")
    kernel: str | None = key("string", doc="what ran")
    backend: str | None = key("string", doc="torch | cupy")


@dataclass(frozen=True, kw_only=True)
class Peak(Record):
    SECTION: ClassVar[str] = "ceilings.measured.peak.<dtype>"
    flop_per_s: float | None = key("number", unit="FLOP/s", doc="the sustained peak (null: no shape ran)")
    regime: str | None = key("string", doc="sustained (older documents: absent)")
    reason: str | None = key("string", doc="why there is no peak")
    best_shape: dict[str, int] | None = key("object", doc="{m, n, k} that reached it")
    kernel: str | None = key("string", doc="what ran")
    backend: str | None = key("string", doc="torch | cupy")
    timer: str | None = key("string", doc="the timer used")
    tried: tuple | None = key("array", items="object", doc="every shape and back end tried, with its status")
    burst: PeakRun | None = key("object", record=PeakRun, doc="a short burst at the best shape")
    sustained: PeakRun | None = key("object", record=PeakRun, doc="a long run at the best shape, after settling")


@dataclass(frozen=True, kw_only=True)
class MeasuredCeilings(Record):
    SECTION: ClassVar[str] = "ceilings.measured"
    copy: StreamKernel | None = key("object", record=StreamKernel, doc="torch copy_ of a large buffer")
    read: StreamKernel | None = key("object", record=StreamKernel, doc="torch sum of a large fp32 vector")
    stream_kernels: dict[str, StreamKernel] | None = key(
        "object", record=StreamKernel, keyed=True, doc="every bandwidth kernel by name (samples left out)")
    reference_bandwidth: BandwidthChoice | None = key(
        "object", record=BandwidthChoice, doc="the bandwidth reference (older documents: derived by readers)")
    bandwidth_bytes_per_s: float | None = key("number", unit="B/s", doc="the reference's figure, for older readers")
    bandwidth_kernel: str | None = key("string", doc="the reference's name, for older readers")
    peak: dict[str, Peak] | None = key("object", record=Peak, keyed=True, doc="matmul peak per dtype")
    peak_flop_per_s: dict[str, float] | None = key("object", unit="FLOP/s", doc="sustained peak per dtype")
    peak_flop_per_s_burst: dict[str, float] | None = key("object", unit="FLOP/s", doc="burst peak per dtype")
    started_at: str | None = key("string", doc="UTC time the ceilings started")
    finished_at: str | None = key("string", doc="UTC time they finished")


@dataclass(frozen=True, kw_only=True)
class SpecCeilings(Record):
    SECTION: ClassVar[str] = "ceilings.spec"
    sku: str | None = key("string", doc="the matched SKU (null: none)")
    name: str | None = key("string", doc="the SKU's full name")
    memory_bandwidth_bytes_per_s: float | None = key("number", unit="B/s", doc="spec-sheet memory bandwidth")
    capacity_bytes: float | None = key("number", unit="B", doc="spec-sheet memory capacity")
    peak_flop_per_s: dict[str, float] | None = key("object", unit="FLOP/s", doc="spec-sheet dense peak per dtype")
    sources: dict[str, str] | None = key("object", doc="where each spec figure comes from")
    reason: str | None = key("string", doc="why there is no spec")


@dataclass(frozen=True, kw_only=True)
class Ceilings(Record):
    SECTION: ClassVar[str] = "ceilings"
    measured: MeasuredCeilings | None = key("object", record=MeasuredCeilings, doc="measured here (null: not run)")
    spec: SpecCeilings | None = key("object", record=SpecCeilings, doc="from the matched GPU profile")

    def spec_bandwidth_bytes_per_s(self) -> float | None:
        return self.spec.memory_bandwidth_bytes_per_s if self.spec else None

    def spec_peak_flop_per_s(self, dtype: str) -> float | None:
        return (self.spec.peak_flop_per_s or {}).get(compute_dtype(dtype)) if self.spec else None


# --- telemetry --------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TimelineRow(Record):
    """One NVML reading (documented here; rows stay plain objects in memory: there can be tens of thousands)."""

    SECTION: ClassVar[str] = "telemetry.timeline[]"
    t_s: float | None = key("number", unit="s", required=True, doc="when it was read (perf_counter clock)")
    sm_clock_hz: float | None = key("number", unit="Hz", doc="SM clock")
    memory_clock_hz: float | None = key("number", unit="Hz", doc="memory clock")
    power_w: float | None = key("number", unit="W", doc="power (instantaneous unless telemetry.power says not)")
    energy_j: float | None = key("number", unit="J", doc="total energy counter")
    gpu_util_percent: float | None = key("number", unit="%", doc="NVML GPU utilisation")
    memory_busy_percent: float | None = key("number", unit="%", doc="share of time memory was busy (not bandwidth)")
    temperature_c: float | None = key("number", unit="°C", doc="GPU temperature")
    memory_temperature_c: float | None = key("number", unit="°C", doc="memory temperature")
    memory_used_bytes: float | None = key("number", unit="B", doc="device memory in use")
    clock_event_reasons: int | None = key("integer", doc="nvmlClocksEventReason bit mask")
    gpm_window_s: tuple | None = key("array", items="number", unit="s", doc="[start, end] of this GPM pair")
    dram_bw_util_percent: float | None = key("number", unit="%", doc="GPM: DRAM bandwidth utilisation")
    tensor_util_percent: float | None = key("number", unit="%", doc="GPM: tensor pipe utilisation")
    hmma_tensor_util_percent: float | None = key("number", unit="%", doc="GPM: HMMA tensor utilisation")
    sm_util_percent: float | None = key("number", unit="%", doc="GPM: SM utilisation")
    sm_occupancy_percent: float | None = key("number", unit="%", doc="GPM: SM occupancy")
    fp16_util_percent: float | None = key("number", unit="%", doc="GPM: fp16 pipe utilisation")
    fp32_util_percent: float | None = key("number", unit="%", doc="GPM: fp32 pipe utilisation")


@dataclass(frozen=True, kw_only=True)
class Telemetry(Record):
    SECTION: ClassVar[str] = "telemetry"
    source: str | None = key("string", doc="none | nvml-basic | nvml+gpm")
    reason: str | None = key("string", doc="why there is none, or what is missing")
    interval_s: float | None = key("number", unit="s", formatter=_plain_seconds, doc="seconds between readings")
    power: str | None = key("string", doc="what power_w is: instantaneous, or a 1 s average")
    read_errors: int | None = key("integer", doc="readings that failed (gaps in the timeline)")
    gpm_min_point_window_s: float | None = key("number", unit="s", doc="GPM on: shortest timed phase")
    min_point_window_s: float | None = key("number", unit="s", doc="shortest timed phase readings can describe")
    timeline: tuple | None = key("array", items="object", item_record=TimelineRow, doc="every reading, in order")

    @property
    def sampled(self) -> bool:
        """Whether anything was sampled (a source other than none)."""
        return self.source not in (None, "none")

    def check(self) -> None:
        for index, row in enumerate(self.timeline or ()):
            t = row.get("t_s") if isinstance(row, Mapping) else None
            if not isinstance(t, (int, float)) or isinstance(t, bool):
                raise ValueError(f"telemetry.timeline[{index}] needs a number t_s")


@dataclass(frozen=True, kw_only=True)
class Spread(Record):
    SECTION: ClassVar[str] = "points[].telemetry.<metric>"
    median: float | None = key("number", doc="median over the readings describing the phase")
    min: float | None = key("number", doc="smallest")
    max: float | None = key("number", doc="largest")


@dataclass(frozen=True, kw_only=True)
class PointTelemetry(Record):
    """A point's telemetry: the readings that describe its own timed phase (microbench.telemetry.sampler)."""

    SECTION: ClassVar[str] = "points[].telemetry"
    window_s: tuple | None = key("array", items="number", unit="s", doc="[start, end] of the timed phase")
    attribution: str | None = key("string", doc="how readings were attributed to the phase")
    lag_s: float | None = key("number", unit="s", doc="how late a reading describes the GPU")
    readings: int | None = key("integer", doc="plain readings that describe the phase")
    gpm_readings: int | None = key("integer", doc="GPM pairs wholly inside the phase")
    gpm_described_s: tuple | None = key("array", items="array", unit="s", doc="intervals those pairs describe")
    sm_clock_hz: Spread | None = key("object", record=Spread, unit="Hz", doc="SM clock")
    memory_clock_hz: Spread | None = key("object", record=Spread, unit="Hz", doc="memory clock")
    power_w: Spread | None = key("object", record=Spread, unit="W", doc="power")
    gpu_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPU utilisation")
    memory_busy_percent: Spread | None = key("object", record=Spread, unit="%", doc="memory busy time")
    temperature_c: Spread | None = key("object", record=Spread, unit="°C", doc="GPU temperature")
    memory_temperature_c: Spread | None = key("object", record=Spread, unit="°C", doc="memory temperature")
    memory_used_bytes: Spread | None = key("object", record=Spread, unit="B", doc="memory in use")
    dram_bw_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM DRAM bandwidth")
    tensor_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM tensor pipe")
    hmma_tensor_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM HMMA tensor")
    sm_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM SM utilisation")
    sm_occupancy_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM SM occupancy")
    fp16_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM fp16 pipe")
    fp32_util_percent: Spread | None = key("object", record=Spread, unit="%", doc="GPM fp32 pipe")
    energy_per_launch_j: float | None = key("number", unit="J", doc="energy counter over the phase / launches")
    clock_event_reasons: tuple | None = key("array", items="string", doc="NVML clock-event reasons in the phase")
    throttled: bool | None = key("boolean", doc="thermal or hardware slowdown: the point was measured again")
    power_capped: bool | None = key("boolean", doc="sw_power_cap: recorded, not measured again")
    sm_clock_drift: bool | None = key("boolean", doc="the SM clock moved by more than 5% in the phase")
    no_reading_reason: str | None = key("string", doc="why no reading describes the phase")
    gpm_covered: bool | None = key("boolean", doc="a whole GPM pair lies in the phase")
    gpm_missing_reason: str | None = key("string", doc="why none does")
    dram_counter_bytes_per_s: float | None = key("number", unit="B/s", doc="GPM DRAM utilisation x theoretical")
    timer_over_counter: float | None = key("number", doc="timer bytes/s over the DRAM counter's")
    timer_over_counter_reason: str | None = key("string", doc="why there is no ratio")


SECTIONS: dict[str, type[Record]] = {"tool": Tool, "host": Host, "device": Device, "settings": Settings,
                                     "ceilings": Ceilings, "telemetry": Telemetry}
