"""Typed records with a key registry: what each key of a result document holds, in which unit, how it prints.

Each section of the result document (``device``, ``host``, ``settings``, ``ceilings``, ``telemetry``, ...)
is a frozen dataclass whose fields are declared with ``key(...)``: a JSON type, a unit, a description and
(optionally) a formatter.  Like pyperf's metadata registry, the declaration is the one place that says what a
key means; the docs (docs/reference/result.md), the JSON Schema (docs/result.schema.json) and every printed
value come from it, and tests check that none of them drift.

Records are validated on construction (each value has its declared JSON type; numbers are finite) and are
tolerant of what earlier writers produced: an absent key is ``None``, a key this version does not know is
kept in ``extra`` and written back unchanged, and a key that was present with ``null`` stays present.  So
loading and saving an old file changes nothing in it.

A record is also a read-only mapping of its document form (``record["kind"]``, ``record.get("sku")``):
analysis code uses attributes; the mapping keeps code that builds on the document's dict form (``{**settings,
"resumed": ...}``) working without a second model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from roofline.core.units import MISSING, seconds, si

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict, Mapping),
    "array": (list, tuple),
}
# Units printed with an SI prefix (``16.9 kB``, ``4.8 TB/s``).
SI_UNITS = ("B", "B/s", "FLOP/s", "Hz", "W", "J")
# Sizes and rates that cannot be negative: a file that says so is refused on load, not printed as "-5 B/s".
NON_NEGATIVE_UNITS = ("B", "B/s", "FLOP/s")


def _default_format(unit: str | None) -> Callable[[Any], str]:
    if unit in SI_UNITS:
        return lambda value: si(value, unit)
    if unit == "s":
        return seconds
    if unit == "%":
        return lambda value: f"{value:g}%"
    return str


@dataclass(frozen=True)
class Key:
    """One key of the document: its JSON type(s), unit (None: a count, a name or a ratio), description."""

    name: str
    types: tuple[str, ...]
    unit: str | None = None
    doc: str = ""
    record: type | None = None  # a nested record (an object), or the record of each value of a keyed object
    keyed: bool = False  # an object {name: record}
    items: str | None = None  # JSON type of an array's items
    item_record: type | None = None  # the record describing each item of an array (documented, not built)
    required: bool = False
    choices: tuple[str, ...] | None = None
    formatter: Callable[[Any], str] | None = None

    def format(self, value: Any) -> str:
        """How every output prints this key's value (``–`` when absent)."""
        if value is None:
            return MISSING
        return (self.formatter or _default_format(self.unit))(value)

    def check(self, value: Any, where: str) -> None:
        if value is None:
            if self.required:
                raise ValueError(f"{where}{self.name} is required")
            return
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where}{self.name} must be finite, found {value!r}")
        if not _is(value, self.types):
            raise ValueError(f"{where}{self.name} must be {' or '.join(self.types)}, found {_show(value)}")
        if self.unit in NON_NEGATIVE_UNITS and isinstance(value, (int, float)) and value < 0:
            raise ValueError(f"{where}{self.name} must not be negative ({self.unit}), found {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{where}{self.name} must be one of {', '.join(self.choices)}, found {value!r}")
        if self.items and isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if item is not None and not _is(item, (self.items,)):
                    raise ValueError(f"{where}{self.name}[{index}] must be {self.items}, found {_show(item)}")


def _is(value: Any, types: tuple[str, ...]) -> bool:
    """``value`` has one of the JSON ``types`` (a bool is not a number; a number is finite)."""
    if isinstance(value, bool):
        return "boolean" in types
    if not isinstance(value, tuple(t for name in types for t in JSON_TYPES[name])):
        return False
    return not isinstance(value, float) or math.isfinite(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def key(*types: str, unit: str | None = None, doc: str = "", **options: Any) -> Any:
    """Declare a record field: ``sm_count: int | None = key("integer", doc="streaming multiprocessors")``."""
    return field(default=None, metadata={"key": Key("", tuple(types), unit, doc, **options)})


_REGISTRIES: dict[type, dict[str, Key]] = {}


@dataclass(frozen=True, kw_only=True)
class Record(Mapping):
    """Base of the typed sections; see the module docstring."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    present: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    SECTION: ClassVar[str] = ""  # where the record sits in the document, for messages and the docs

    @classmethod
    def registry(cls) -> dict[str, Key]:
        """name -> Key, in declaration order."""
        if cls not in _REGISTRIES:
            _REGISTRIES[cls] = {f.name: _named(f.metadata["key"], f.name) for f in fields(cls) if "key" in f.metadata}
        return _REGISTRIES[cls]

    def __post_init__(self) -> None:
        where = f"{self.SECTION}." if self.SECTION else ""
        for name, spec in self.registry().items():
            value = getattr(self, name)
            spec.check(value, where)
            if value is None:
                continue
            if spec.record is not None and spec.keyed:
                value = {str(k): _as_record(spec.record, v, f"{where}{name}.{k}") for k, v in value.items()}
            elif spec.record is not None:
                value = _as_record(spec.record, value, f"{where}{name}")
            elif isinstance(value, list):
                value = tuple(value)  # frozen all the way to the first level of lists
            object.__setattr__(self, name, value)
        self.check()

    def check(self) -> None:
        """Rules across keys; a subclass raises ValueError."""

    @classmethod
    def from_dict(cls, document: Any, where: str | None = None) -> Record:
        if isinstance(document, cls):
            return document
        if not isinstance(document, Mapping):
            raise ValueError(f"{where or cls.SECTION or cls.__name__} must be an object, found {_show(document)}")
        known = cls.registry()
        values = {name: document[name] for name in known if name in document}
        extra = {k: v for k, v in document.items() if k not in known}
        return cls(**values, extra=extra, present=frozenset(document))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.registry():
            value = getattr(self, name)
            if value is None and name not in self.present:
                continue
            out[name] = _document(value)
        out.update(self.extra)
        return out

    def format(self, name: str) -> str:
        """The value of ``name`` as every output prints it (its key's formatter and unit)."""
        return self.registry()[name].format(getattr(self, name))

    # --- the read-only mapping of the document form -----------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        if name in self.registry():
            value = getattr(self, name)
            if value is None and name not in self.present:
                raise KeyError(name)
            return value
        return self.extra[name]

    def __iter__(self) -> Iterator[str]:
        for name in self.registry():
            if getattr(self, name) is not None or name in self.present:
                yield name
        yield from self.extra

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _named(spec: Key, name: str) -> Key:
    return replace(spec, name=name)


def _as_record(record: type, value: Any, where: str) -> Record:
    """A nested record; its errors name the path in this document (``peak.bf16``, not ``peak.<dtype>``)."""
    try:
        return record.from_dict(value, where)
    except ValueError as exc:
        text = str(exc)
        if record.SECTION and text.startswith(record.SECTION + "."):
            text = where + text[len(record.SECTION):]
        raise ValueError(text) from None


def _document(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_document(v) for v in value]
    if isinstance(value, dict):
        return {k: _document(v) for k, v in value.items()}
    return value
