"""NVIDIA's aiconfigurator-core database of kernel latencies, read where the optional extra installed it.

aiconfigurator-core (NVIDIA, Apache-2.0) ships tables measured by aiconfigurator's collector on each GPU it
covers: ``aiconfigurator_core/systems/data/<system>/<family>/<engine>/<version>/<table>.parquet``, one row per
kernel call with its shape, its dtype, the kernel that ran and ``latency`` in milliseconds (the collector times a
CUDA graph of the engine's own layer: vLLM's ``RowParallelLinear``, its attention backend, ...).

This module finds the installed package without importing it (its import loads a Rust extension the tables do not
need), says which version it read, maps gpubench's SKUs (``[reference]`` in ``profiles/gpus/*.toml``) and dtypes
onto the database's names, and picks each engine's version as the database itself does
(``systems/query_versions.yaml``: the ``current`` version, older ones filling a table it lacks, never a newer one).
It reads with pyarrow and PyYAML, both installed by the extra: nothing here imports torch.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from roofline.core.errors import BadInputError
from roofline.reference import rows_cache
from roofline.specs.gpus import GpuSpec

NAME = "aiconfigurator"  # what --reference takes
PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
REFERENCES = (NAME,)
ENGINES = ("vllm", "sglang", "trtllm")
DEFAULT_ENGINE = "vllm"
MEASURED_BY = "NVIDIA (aiconfigurator's collector)"
INSTALL = "pip install 'gpubench-roofline[reference]' (aiconfigurator-core needs Python 3.11 to 3.13)"
# gpubench's dtype -> the database's name, for GEMMs and for a KV cache.
GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block", "nvfp4": "nvfp4"}
KV_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
MS = 1e-3  # the database's latencies are milliseconds


class ReferenceDataError(BadInputError):
    """Reference data that is not installed, does not cover what was asked, or cannot be read: one line, exit 2."""


@dataclass(frozen=True)
class TableSource:
    """Where a table's rows come from: the package and version, the system (GPU), the family and file, the engine
    and its version the collector ran, the kernel that ran, and the device name the rows carry."""

    package_version: str
    system: str
    family: str
    engine: str
    engine_version: str
    file: str  # relative to the package's systems/data folder
    device: str
    kernel: str

    def describe(self) -> str:
        return (f"{PACKAGE} {self.package_version}: {self.family} of {self.engine} {self.engine_version} "
                f"({self.kernel}) on {self.device}, measured by {MEASURED_BY}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": NAME, "package": PACKAGE, "package_version": self.package_version,
                "measured_by": MEASURED_BY, "system": self.system, "family": self.family, "engine": self.engine,
                "engine_version": self.engine_version, "file": self.file, "device": self.device,
                "kernel": self.kernel}


def _version_key(version: str) -> tuple:
    """Order versions as releases do: 1.3.0rc20 before 1.3.0, 0.5.6 before 0.5.6.post2, a dev build first."""
    match = re.match(r"(\d+(?:\.\d+)*)(.*)", version)
    if not match:
        return ((), 0, version)
    release = tuple(int(x) for x in match.group(1).split("."))
    suffix = match.group(2).lstrip(".")
    rank = 1 if suffix.startswith("dev") else 2 if re.match(r"(a|b|rc)\d", suffix) else 4 if suffix.startswith(
        "post") else 3
    return (release, rank, suffix)


@lru_cache(maxsize=64)
def _yaml(path: Path) -> dict[str, Any]:
    """The YAML file at ``path``, parsed once per process (every table lookup reads ``query_versions.yaml``): the
    dict is shared, read it and never change it."""
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ReferenceDataError(f"{path}: cannot read ({exc})") from None


@dataclass(frozen=True)
class Database:
    """The installed database: its ``systems`` folder and the package's version."""

    root: Path
    version: str

    @property
    def label(self) -> str:
        return f"{PACKAGE} {self.version}"

    def system(self, gpu: GpuSpec) -> str:
        """The database's system for ``gpu``, refused in one line when the spec sheet names none or it has no data."""
        system = gpu.reference_systems.get(NAME)
        covered = sorted(p.name for p in (self.root / "data").iterdir() if p.is_dir() and any(p.rglob("*.parquet")))
        if system is None:
            raise ReferenceDataError(f"{self.label} has no data for {gpu.sku} (it covers {', '.join(covered)})")
        if system not in covered:
            raise ReferenceDataError(f"{gpu.sku}: {self.label} has no system {system!r} (its systems: "
                                     f"{', '.join(covered)})")
        return system

    def _current(self, system: str, engine: str) -> str | None:
        slots = _yaml(self.root / "query_versions.yaml")
        chosen = (slots.get("overrides") or {}).get(system, {}).get(engine) or (slots.get("defaults") or {}).get(
            engine) or {}
        return chosen.get("current")

    def table(self, system: str, family: str, engine: str, filename: str) -> tuple[Path, str]:
        """The file of ``family``'s table ``filename`` for ``engine`` on ``system``, and the engine version it was
        measured with: the database's current version, else the newest older one that has it."""
        folder = self.root / "data" / system / family / engine
        versions = sorted((p.name for p in folder.iterdir() if (p / filename).is_file()), key=_version_key,
                          reverse=True) if folder.is_dir() else []
        current = self._current(system, engine)
        if current is not None:  # never a version newer than the current one: the database's own rule
            versions = [v for v in versions if _version_key(v) <= _version_key(current)]
        if not versions:
            raise ReferenceDataError(f"{self.label} has no {family} table ({filename}) for {engine} on {system}")
        return folder / versions[0] / filename, versions[0]

    def nccl_table(self, system: str) -> tuple[Path, str]:
        """NCCL's all-reduce table of ``system`` in the version its system file names (``misc.nccl_version``)."""
        spec = _yaml(self.root / f"{system}.yaml")
        version = str((spec.get("misc") or {}).get("nccl_version") or "")
        path = self.root / "data" / system / "comm" / "nccl" / version / "nccl_perf.parquet"
        if not version or not path.is_file():
            raise ReferenceDataError(f"{self.label} has no NCCL table for {system}")
        return path, version

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root / "data"))

    def read(self, path: Path, columns: list[str], equal: dict[str, Any] | None = None) -> dict[str, list]:
        """The ``columns`` of the rows of ``path`` whose columns equal ``equal``'s values, as lists (read once per
        process: a profile reads the same tables for every launch, and a command may build several profiles).
        The lists are shared between callers: read them, never change them."""
        return _read_rows(path, self.relative(path), tuple(columns), tuple(sorted((equal or {}).items())))


@lru_cache(maxsize=256)
def _read_rows(path: Path, shown: str, columns: tuple[str, ...], equal_items: tuple[tuple[str, Any], ...]
               ) -> dict[str, list]:
    """``Database.read``'s rows (``shown``: the file as a message names it)."""
    kept = rows_cache.load(path, columns, equal_items)
    if kept is not None:
        return kept
    rows = _read_parquet(path, shown, columns, dict(equal_items))
    rows_cache.store(path, columns, equal_items, rows)
    return rows


def _read_parquet(path: Path, shown: str, columns: tuple[str, ...], equal: dict[str, Any]) -> dict[str, list]:
    import pyarrow.parquet as pq

    # Read whole with ParquetFile and filtered here: pyarrow's row filters and its Table.filter/to_numpy import its
    # dataset layer and pandas (0.4 s, more than reading the table); to_pylist imports neither.
    try:
        wanted = list(dict.fromkeys([*columns, *equal]))
        table = pq.ParquetFile(path)
        present = set(table.schema_arrow.names)
        if not set(wanted) <= present:  # an older table's layout: the data is there, in columns of its own
            raise ReferenceDataError(f"{shown}: an older table layout, without the columns "
                                     f"{', '.join(sorted(set(wanted) - present))} gpubench reads")
        read = table.read(columns=wanted, use_threads=False)  # one small row group: a thread pool costs more
        rows = {name: read.column(name).to_pylist() for name in wanted}
    except (OSError, ValueError, KeyError) as exc:  # pyarrow's errors derive from these
        raise ReferenceDataError(f"{path}: cannot read ({str(exc).splitlines()[0]})") from None
    keep: range | list[int] = range(len(rows[columns[0]]))
    for name, value in equal.items():  # one column at a time: a comprehension per column, not a call per row
        column = rows[name]
        keep = [i for i in keep if column[i] == value]
    return {name: [rows[name][i] for i in keep] for name in columns}


def _located() -> tuple[Path, str]:
    """The installed package's systems folder and version, found without importing the package."""
    try:
        spec = importlib.util.find_spec(MODULE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ReferenceDataError(f"the reference data {PACKAGE} is not installed: {INSTALL}")
    for name in ("pyarrow", "yaml"):
        if importlib.util.find_spec(name) is None:
            raise ReferenceDataError(f"reading {PACKAGE} needs {name}, which is not installed: {INSTALL}")
    root = Path(list(spec.submodule_search_locations)[0]) / "systems"
    if not (root / "data").is_dir():
        raise ReferenceDataError(f"{PACKAGE} at {root.parent} has no systems/data folder")
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return root, version


@lru_cache(maxsize=1)
def open_database() -> Database:
    """The installed aiconfigurator-core database (``ReferenceDataError``, one line, when it is not installed)."""
    root, version = _located()
    return Database(root, version)


def installed() -> bool:
    """Whether the database can be read here (the optional extra is installed)."""
    try:
        open_database()
    except ReferenceDataError:
        return False
    return True


def check_reference(name: str | None) -> None:
    """``--reference NAME``: the databases gpubench reads."""
    if name is not None and name not in REFERENCES:
        raise ReferenceDataError(f"--reference {name}: unknown reference; choose from {', '.join(REFERENCES)}")


def check_engine(engine: str | None) -> str:
    """``--engine``: the engine whose kernels the database timed (vLLM's when not given)."""
    if engine is None:
        return DEFAULT_ENGINE
    if engine not in ENGINES:
        raise ReferenceDataError(f"--engine {engine}: choose from {', '.join(ENGINES)}")
    return engine


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def busiest_kernel(kernels: list[str]) -> str:
    """The kernel with the most rows: the engine's own path where it timed several for one dtype (vLLM's fp8-block
    has DeepGEMM, CUTLASS and FlashInfer rows), the others left out rather than mixed into one curve."""
    counts: dict[str, int] = {}
    for kernel in kernels:
        counts[kernel] = counts.get(kernel, 0) + 1
    return max(sorted(counts), key=lambda kernel: counts[kernel])
