"""Spec sheets of GPU SKUs (``profiles/gpus/<sku>.toml``), with the source of every figure.

Hardware numbers live in these files, never in code.  The file name is the SKU id that commands take.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from roofline.core.counting import compute_dtype
from roofline.core.errors import BadInputError
from roofline.core.roof import (
    ScaleOutLink,
    all_to_all_across_time_s,
    all_to_all_time_s,
    domains_spanned,
    ring_all_reduce_across_time_s,
    ring_all_reduce_time_s,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

GIB = 1024**3


class SpecError(BadInputError):
    """A spec sheet or model spec that is missing or malformed; one line (bad input, as every other)."""


def profiles_dir() -> Path:
    """The profiles folder: the repository's when run from the tree, else the installed copy."""
    in_tree = Path(__file__).resolve().parents[2] / "profiles"
    if (in_tree / "gpus").is_dir():
        return in_tree
    spec = importlib.util.find_spec("gpubench_profiles")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    raise SpecError("cannot find the profiles folder (is gpubench installed?)")


@dataclass(frozen=True)
class ScaleOut:
    """What a GPU reaches past its NVLink domain: its own NIC (InfiniBand or RoCE), the bandwidth one way, the
    latency of one ring step over the network and NCCL's net overhead (the floor under every other step of a ring
    that leaves the domain), each with its source.  Not part of the SKU: ``deployment`` says whose deployment the
    figures are (a vendor's reference system)."""

    kind: str
    link_bytes_per_s: float
    hop_latency_s: float
    net_overhead_s: float
    link_source: str
    latency_source: str
    net_overhead_source: str
    deployment: str

    @property
    def link(self) -> ScaleOutLink:
        return ScaleOutLink(self.link_bytes_per_s, self.hop_latency_s, self.net_overhead_s)

    def describe(self) -> str:
        return (f"{self.kind}, {self.link_bytes_per_s / 1e9:.0f} GB/s each way, {self.hop_latency_s * 1e6:.2g} us per "
                "ring step")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "link_bytes_per_s": self.link_bytes_per_s, "hop_latency_s": self.hop_latency_s,
                "net_overhead_s": self.net_overhead_s, "deployment": self.deployment,
                "sources": {"link": self.link_source, "latency": self.latency_source,
                            "net_overhead": self.net_overhead_source}}


@dataclass(frozen=True)
class Interconnect:
    """What a collective crosses between GPUs: within one NVLink domain (``domain_gpus`` GPUs on one switch: an HGX
    board's 8, an NVL72 rack's 72) the link's bandwidth one way (a ring sends each byte one way along each link), the
    latency of one ring step and the fixed latency of one collective (NCCL's base latency); a group larger than the
    domain also crosses ``scale_out``, each GPU's NIC.  Each figure with its source.  A sheet without a domain size
    (a PCIe card's) costs every group on its link, as one domain."""

    kind: str
    link_bytes_per_s: float
    hop_latency_s: float
    link_source: str
    latency_source: str
    base_latency_s: float = 0.0
    base_latency_source: str = ""
    domain_gpus: int | None = None
    domain_source: str = ""
    scale_out: ScaleOut | None = None

    def domains(self, ranks: int) -> int:
        """How many NVLink domains a group of ``ranks`` GPUs spans, placed contiguously (1 without a domain size)."""
        if self.domain_gpus is None or self.scale_out is None:
            return 1
        return domains_spanned(ranks, self.domain_gpus)

    def all_reduce_time_s(self, message_bytes: float, ranks: int) -> float:
        """One ring all-reduce of ``message_bytes`` over ``ranks`` GPUs (``roofline.core.roof``), its base latency
        included: on this link within a domain, as NCCL's ring between nodes when the group spans several."""
        if self.domains(ranks) > 1:
            assert self.domain_gpus is not None and self.scale_out is not None  # domains() is 1 without them
            return ring_all_reduce_across_time_s(message_bytes, ranks, self.domain_gpus, self.link_bytes_per_s,
                                                 self.hop_latency_s, self.base_latency_s, self.scale_out.link)
        return ring_all_reduce_time_s(message_bytes, ranks, self.link_bytes_per_s, self.hop_latency_s,
                                      self.base_latency_s)

    def all_to_all_time_s(self, message_bytes: float, ranks: int) -> float:
        """One all-to-all over ``ranks`` GPUs sending ``message_bytes`` from each (``roofline.core.roof``), NCCL's
        base latency included as the all-reduce's is; the share bound for other domains through the scale-out link."""
        if self.domains(ranks) > 1:
            assert self.domain_gpus is not None and self.scale_out is not None
            return all_to_all_across_time_s(message_bytes, ranks, self.domain_gpus, self.link_bytes_per_s,
                                            self.hop_latency_s, self.base_latency_s, self.scale_out.link)
        return all_to_all_time_s(message_bytes, ranks, self.link_bytes_per_s, self.hop_latency_s,
                                 self.base_latency_s)

    def crossing(self, ranks: int) -> str:
        """The link a collective over ``ranks`` GPUs crosses, in words: this one, or the scale-out link between
        domains."""
        domains = self.domains(ranks)
        if domains <= 1:
            return self.kind
        assert self.scale_out is not None
        return f"scale-out {self.scale_out.kind} between {domains} {self.kind} domains of {self.domain_gpus}"

    def describe(self, ranks: int | None = None) -> str:
        """The link's figures; with ``ranks``, those of what a collective over that many GPUs crosses."""
        words = (f"{self.kind}, {self.link_bytes_per_s / 1e9:.0f} GB/s each way, "
                 f"{self.hop_latency_s * 1e6:.2g} us per ring step, {self.base_latency_s * 1e6:.2g} us per "
                 "collective")
        if ranks is not None and self.domains(ranks) > 1:
            assert self.scale_out is not None
            words += (f"; {ranks} GPUs span {self.domains(ranks)} domains of {self.domain_gpus}, joined by "
                      f"{self.scale_out.describe()}")
        return words

    def to_dict(self) -> dict:
        return {"kind": self.kind, "link_bytes_per_s": self.link_bytes_per_s, "hop_latency_s": self.hop_latency_s,
                "base_latency_s": self.base_latency_s, "domain_gpus": self.domain_gpus,
                "scale_out": self.scale_out.to_dict() if self.scale_out is not None else None,
                "sources": {"link": self.link_source, "latency": self.latency_source,
                            "base_latency": self.base_latency_source, "domain": self.domain_source}}


@dataclass(frozen=True)
class Achievable:
    """What the SKU reaches in practice (measured by others, or derived from a sibling SKU's measured fraction of
    its spec): the memory bandwidth of a streaming kernel and the matmul FLOP/s per dtype, each with a short basis
    ("measured: …" or "derived: …") for the step profile's ``basis`` and a full source."""

    bandwidth_bytes_per_s: float
    peak_flop_per_s: dict[str, float]
    bandwidth_basis: str
    bandwidth_source: str
    peak_basis: dict[str, str]
    peak_source: str

    def peak_for(self, dtype: str) -> float | None:
        """The achievable peak the arithmetic of ``dtype`` runs at: a weight-only format's is its compute dtype's."""
        return self.peak_flop_per_s.get(compute_dtype(dtype))

    def describe(self, dtype: str) -> str:
        """One line for a profile's basis: both ceilings of ``dtype``, each with its basis."""
        compute = compute_dtype(dtype)
        peak = self.peak_flop_per_s.get(compute)
        matmul = f"{peak / 1e12:.0f} TFLOP/s {compute} ({self.peak_basis[compute]})" if peak else f"no {compute} matmul"
        return f"{self.bandwidth_bytes_per_s / 1e12:.3g} TB/s ({self.bandwidth_basis}), {matmul}"


@dataclass(frozen=True)
class GpuSpec:
    """A SKU's spec sheet.  Peaks are dense FLOP/s per dtype; a dtype the SKU lacks is absent.  ``capacity_bytes``
    is the datasheet's "80 GB"; ``reported_bytes`` what the driver reports for the board (nvidia-smi's total), which
    is what KV capacity is sized from."""

    sku: str
    name: str
    name_regex: str
    memory_gib_range: tuple[float, float]
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    peak_flop_per_s: dict[str, float]
    bandwidth_source: str
    peak_source: str
    interconnect: Interconnect
    reported_bytes: float
    reported_source: str
    achievable: Achievable
    tdp_w: float | None = None  # the board's power limit, the datasheet's thermal design power
    tdp_source: str = ""
    # The systems reference databases name this SKU by ({"aiconfigurator": "h200_sxm"}): none, no reference data.
    reference_systems: dict[str, str] = field(default_factory=dict)

    def matches(self, device_name: str, memory_bytes: float | None) -> bool:
        if not re.search(self.name_regex, device_name, flags=re.IGNORECASE):
            return False
        if memory_bytes is None:
            return True
        lo, hi = self.memory_gib_range
        return lo <= memory_bytes / GIB <= hi

    def peak_for(self, dtype: str) -> float | None:
        """The spec peak the arithmetic of ``dtype`` runs at: a weight-only format's is its compute dtype's."""
        return self.peak_flop_per_s.get(compute_dtype(dtype))

    def ridge_flop_per_byte(self, dtype: str) -> float | None:
        peak = self.peak_for(dtype)
        return peak / self.bandwidth_bytes_per_s if peak else None

    def to_dict(self) -> dict:
        return {
            "sku": self.sku,
            "name": self.name,
            "memory_bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "capacity_bytes": self.capacity_bytes,
            "peak_flop_per_s": dict(self.peak_flop_per_s),
            "sources": {"memory": self.bandwidth_source, "peak_flop_per_s": self.peak_source},
        }


# What a spec sheet's figures may be: about 1,000 times past the shipped sheets' extremes either way (profiles/gpus:
# memory bandwidth 0.27-8 TB/s, memory 24-288 GB, dense peaks 13 TFLOP/s-15 PFLOP/s, links 32-900 GB/s one way
# (scale-out NICs 50-100 GB/s), latencies 0.6-12 us, boards 72-1,400 W).  Past them a figure is a typo, not a GPU: 0
# divides by zero later, and 1e300 overflows the first product (a step's FLOP over 1e300 FLOP/s underflows, its
# bytes' time prints with 300 digits).  A link's bounds are --interconnect-gbps' (1 to 1,000,000 Gb/s: gigabit
# Ethernet to past any link).
MIN_LINK_GBPS = 1.0
MAX_LINK_GBPS = 1e6
BANDWIDTH_RANGE = (1e8, 1e16)  # bytes/s
MEMORY_RANGE = (1e8, 1e15)  # bytes
PEAK_RANGE = (1e9, 1e19)  # FLOP/s
LINK_RANGE = (MIN_LINK_GBPS * 1e9 / 8, MAX_LINK_GBPS * 1e9 / 8)  # bytes/s one way
LATENCY_RANGE = (0.0, 1.0)  # seconds
POWER_RANGE = (1.0, 1e6)  # watts
MEMORY_GIB_RANGE = (0.0, 1e6)  # the driver's report a sheet matches, GiB
# GPUs in one NVLink domain: one (a lone card) to past any switch fabric built (the NVL72 rack holds 72; NVIDIA's
# NVLink Switch System is specified to 576).
DOMAIN_RANGE = (1, 100_000)


class _Figure(ValueError):
    """A figure out of its range or not a number, said with its key."""


def _figure(table: dict, key: str, section: str, bounds: tuple[float, float]) -> float:
    """``table[key]``, a number within ``bounds`` (nan, inf, a string, a bool are not), else one line naming
    ``section.key``."""
    value = table[key]
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise _Figure(f"{section}.{key} = {value!r}: give a number from {low:g} to {high:g}")
    return float(value)


def _parse_gpu_profile(sku: str, data: dict) -> GpuSpec:
    try:
        match, memory, peaks, link = data["match"], data["memory"], data["peak_flop_per_s"], data["interconnect"]
        lo, hi = match["memory_gib"]
        gib = {"low": lo, "high": hi}
        lo, hi = (_figure(gib, "low", "match.memory_gib", MEMORY_GIB_RANGE),
                  _figure(gib, "high", "match.memory_gib", MEMORY_GIB_RANGE))
        bandwidth = _figure(memory, "bandwidth_bytes_per_s", "memory", BANDWIDTH_RANGE)
        peak_flop_per_s = _peaks(peaks, "peak_flop_per_s")
        return GpuSpec(
            sku=sku,
            name=str(data["name"]),
            name_regex=str(match["name_regex"]),
            memory_gib_range=(lo, hi),
            capacity_bytes=_figure(memory, "capacity_bytes", "memory", MEMORY_RANGE),
            bandwidth_bytes_per_s=bandwidth,
            peak_flop_per_s=peak_flop_per_s,
            bandwidth_source=str(memory["source"]),
            peak_source=str(peaks["source"]),
            interconnect=_interconnect(link, data.get("scale_out")),
            reported_bytes=_figure(memory, "reported_bytes", "memory", MEMORY_RANGE),
            reported_source=str(memory["reported_source"]),
            achievable=_achievable(data["achievable"], bandwidth, peak_flop_per_s),
            tdp_w=_figure(data["power"], "tdp_w", "power", POWER_RANGE) if "power" in data else None,
            tdp_source=str(data.get("power", {}).get("source", "")),
            reference_systems={str(k): str(v) for k, v in data.get("reference", {}).items() if k != "note"},
        )
    except _Figure as exc:
        raise SpecError(f"profile {sku}: {exc}") from None
    except KeyError as exc:
        raise SpecError(f"profile {sku}: malformed (no {exc})") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise SpecError(f"profile {sku}: malformed ({exc})") from None


def _interconnect(link: dict, scale_out: dict | None) -> Interconnect:
    """[interconnect], and with its NVLink domain size the [scale_out] table a larger group crosses: both or
    neither (a domain without a way out, or a way out of no known domain, cannot cost a group past it)."""
    within = Interconnect(kind=str(link["kind"]),
                          link_bytes_per_s=_figure(link, "link_bytes_per_s", "interconnect", LINK_RANGE),
                          hop_latency_s=_figure(link, "hop_latency_s", "interconnect", LATENCY_RANGE),
                          link_source=str(link["link_source"]),
                          latency_source=str(link["latency_source"]),
                          base_latency_s=_figure(link, "base_latency_s", "interconnect", LATENCY_RANGE),
                          base_latency_source=str(link["base_latency_source"]))
    if ("domain_gpus" in link) != (scale_out is not None):
        raise ValueError("give interconnect.domain_gpus and a [scale_out] table together (a group larger than the "
                         "domain crosses the scale-out link), or neither")
    if scale_out is None:
        return within
    out = ScaleOut(kind=str(scale_out["kind"]),
                   link_bytes_per_s=_figure(scale_out, "link_bytes_per_s", "scale_out", LINK_RANGE),
                   hop_latency_s=_figure(scale_out, "hop_latency_s", "scale_out", LATENCY_RANGE),
                   net_overhead_s=_figure(scale_out, "net_overhead_s", "scale_out", LATENCY_RANGE),
                   link_source=str(scale_out["link_source"]), latency_source=str(scale_out["latency_source"]),
                   net_overhead_source=str(scale_out["net_overhead_source"]),
                   deployment=str(scale_out["deployment"]))
    return replace(within, domain_gpus=_count(link, "domain_gpus", "interconnect", DOMAIN_RANGE),
                   domain_source=str(link["domain_source"]), scale_out=out)


def _count(table: dict, key: str, section: str, bounds: tuple[int, int]) -> int:
    """``table[key]``, a whole number within ``bounds``, else one line naming ``section.key``."""
    value = table[key]
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Figure(f"{section}.{key} = {value!r}: give a whole number from {low:,} to {high:,}")
    return value


# A peak table's words beside its figures.
PEAK_WORDS = ("source", "note", "basis")


def _peaks(table: dict, section: str) -> dict[str, float]:
    """A peak table's figures (FLOP/s per dtype); a zero means the SKU has no such unit (A100 and fp8): left out."""
    figures = {str(k): v for k, v in table.items() if k not in PEAK_WORDS}
    return {k: _figure(figures, k, section, PEAK_RANGE) for k, v in figures.items() if v != 0 or isinstance(v, bool)}


def _achievable(table: dict, spec_bandwidth: float, spec_peaks: dict[str, float]) -> Achievable:
    """The [achievable] table: a figure for every dtype the spec sheet has a peak for, each with its basis, and none
    above the spec sheet's (a typo there would make every default profile optimistic without a word)."""
    peaks = _peaks(table["peak_flop_per_s"], "achievable.peak_flop_per_s")
    bandwidth = _figure(table, "bandwidth_bytes_per_s", "achievable", BANDWIDTH_RANGE)
    basis = table["peak_flop_per_s"]["basis"]
    if not isinstance(basis, dict):
        raise ValueError(f"achievable.peak_flop_per_s.basis = {basis!r}: give a table of one basis per dtype")
    missing = sorted(set(spec_peaks) - set(peaks)) + sorted(d for d in peaks if not basis.get(d))
    if missing:
        raise ValueError(f"[achievable] has no figure or no basis for {', '.join(missing)}")
    above = [d for d in peaks if peaks[d] > spec_peaks.get(d, 0.0)]
    above += ["bandwidth"] if bandwidth > spec_bandwidth else []
    if above:
        raise ValueError(f"[achievable] is above the spec sheet for {', '.join(above)}")
    return Achievable(bandwidth_bytes_per_s=bandwidth, peak_flop_per_s=peaks,
                      bandwidth_basis=str(table["bandwidth_basis"]), bandwidth_source=str(table["bandwidth_source"]),
                      peak_basis={d: str(basis[d]) for d in peaks},
                      peak_source=str(table["peak_flop_per_s"]["source"]))


def load_gpu_specs() -> dict[str, GpuSpec]:
    folder = profiles_dir() / "gpus"
    profiles = {}
    for path in sorted(folder.glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SpecError(f"{path}: {exc}") from None
        profiles[path.stem] = _parse_gpu_profile(path.stem, data)
    return profiles


def load_gpu_spec(sku: str) -> GpuSpec:
    profiles = load_gpu_specs()
    if sku not in profiles:
        raise SpecError(f"unknown SKU {sku!r}; known: {', '.join(profiles)}")
    return profiles[sku]


# A spec sheet's largest size: the shipped ones are 4-6 KB (profiles/gpus), so 1 MiB is room for any, and a larger
# file (a dataset given by mistake) is refused before it is read whole.
MAX_SPEC_SHEET_BYTES = 2**20


def load_gpu_spec_file(path: Path) -> GpuSpec:
    """A spec sheet of one's own, in the ``profiles/gpus/<sku>.toml`` format and checked by the same parser: its
    SKU is the file's name without ``.toml``, which must not be a shipped SKU's (the fleet and the plan read a SKU's
    figures by name)."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_SPEC_SHEET_BYTES + 1)
        if len(raw) > MAX_SPEC_SHEET_BYTES:
            raise SpecError(f"--gpu-spec {path}: larger than {MAX_SPEC_SHEET_BYTES:,} bytes; not a spec sheet")
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise SpecError(f"--gpu-spec {path}: cannot read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"--gpu-spec {path}: not a TOML spec sheet ({exc})") from None
    except RecursionError:  # tomllib recurses once per level of a nested array or table: 500 deep overflows
        raise SpecError(f"--gpu-spec {path}: nested too deep to be a spec sheet") from None
    if path.stem in load_gpu_specs():
        raise SpecError(f"--gpu-spec {path}: {path.stem} is a shipped SKU's name; name your spec sheet apart "
                        f"(e.g. {path.stem}-own.toml), or give --gpu {path.stem}")
    try:
        return _parse_gpu_profile(path.stem, data)
    except SpecError as exc:
        raise SpecError(f"--gpu-spec {path}: {str(exc).partition(': ')[2]}") from None


def with_link_gbps(gpu: GpuSpec, gbps: float) -> GpuSpec:
    """``gpu`` with its GPU-to-GPU link replaced by one of ``gbps`` gigabits/s each way (``--interconnect-gbps``),
    its latencies kept."""
    link = replace(gpu.interconnect, kind=f"--interconnect-gbps {gbps:g} (replacing {gpu.interconnect.kind})",
                   link_bytes_per_s=gbps * 1e9 / 8, link_source=f"--interconnect-gbps {gbps:g}")
    return replace(gpu, interconnect=link)


def match_gpu_spec(device_name: str, memory_bytes: float | None) -> GpuSpec | None:
    """The one profile whose name pattern and memory range fit this device, or None if none or several."""
    found = [p for p in load_gpu_specs().values() if p.matches(device_name, memory_bytes)]
    return found[0] if len(found) == 1 else None
