"""A command's options as data: one ``Option`` per config field, in a table the CLI declares its flags from.

Each command's config module (``DecodeConfig``, ``SimulateConfig``, ...) holds a ``FLAGS`` table: config field ->
``Option`` (the flag as typed, its kind, default and help).  The row is the one declaration of the option: the CLI
turns each row into a click option under the field's name, the config's field takes its default from the row
(``FLAGS["tp"].default``), so a refusal, the "given on the command line" checks, ``-h`` and a config built in
code all read the same row (``tests/test_options_declared.py`` holds every command to it).  Plain Python (no
click here): the analysing side declares its commands' options too, and importing a table costs nothing.
``number_refusal`` is the one rule for a number typed by a person: finite, and within its bounds;
``check_dtypes`` and ``resolved_kv_dtype`` the one rule for ``--dtype`` and ``--kv-dtype``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from roofline.core.counting import DTYPES, KV_DTYPES, activation_dtype, is_weight_only
from roofline.core.errors import BadInputError
from roofline.core.units import significant

KINDS = ("text", "int", "float", "number", "path", "flag", "off", "choice")


class OptionError(BadInputError):
    """An option that does not make a command: one line naming the flag, exit 2."""


@dataclass(frozen=True)
class Option:
    """One command-line option.  ``kind``: text (parsed by the config), int, float (any float), number (finite, in
    (low, high] or (low, high) with ``below_high``), path, flag (on when typed), off (a flag that turns its field
    off: ``--no-telemetry``), choice (one of ``choices``).  ``default``: the config field's default, and what the
    command takes when the flag is not typed; ``hidden``: not in ``-h`` (how a command hands work to itself)."""

    flags: tuple[str, ...]
    kind: str = "text"
    default: Any = None
    help: str | None = None
    show_default: bool = False
    required: bool = False
    multiple: bool = False
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    below_high: bool = False
    metavar: str | None = None
    hidden: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown option kind {self.kind!r}")
        if self.kind == "flag" and self.default is None:  # a flag not typed is off: its field's default
            object.__setattr__(self, "default", False)

    @property
    def spelled(self) -> str:
        """The flag as a person types it (the long spelling)."""
        return self.flags[-1]


def spelled(table: Mapping[str, Option], names: Collection[str]) -> str:
    """The flags of ``names`` as typed, in the table's order: ``--dtype, --gpu``."""
    return ", ".join(table[name].spelled for name in table if name in names)


def given_among(given: Collection[str], names: Collection[str]) -> list[str]:
    """Which of ``names`` were typed on the command line, in ``names``' order."""
    return [name for name in names if name in given]


def number_refusal(value: float, low: float | None = None, high: float | None = None,
                   below_high: bool = False) -> str | None:
    """Why a number cannot be taken (None: it can): nan and inf are refused before anything starts, and a
    bound is exclusive below and inclusive above (exclusive with ``below_high``)."""
    if not math.isfinite(value):
        return "give a finite number"
    if low is not None and value <= low:
        return f"must be more than {significant(low)}"
    if high is not None and (value >= high if below_high else value > high):
        return f"must be {'below' if below_high else 'at most'} {significant(high)}"
    return None


# Every --seed: numpy's SeedSequence takes integers from 0 up, torch.manual_seed up to 2^64 - 1, and validate
# seeds its calibration workload with seed + 1.
SEED_LIMIT = 2**63


def check_seed(seed: int) -> int:
    """The one rule for a seed typed by a person: an integer from 0 to 2^63 - 1."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise OptionError(f"--seed {seed!r}: give an integer, 0 or more and below 2^63")
    return seed


def check_dtypes(dtype: str | None, kv_dtype: str | None) -> None:
    """``--dtype`` any dtype or weight-only format; ``--kv-dtype`` a dtype a KV cache is stored in (a KV cache
    holds activations, never integer weights).  None: not given."""
    if dtype is not None and dtype not in DTYPES:
        raise OptionError(f"--dtype {dtype}: unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if kv_dtype is None or kv_dtype in KV_DTYPES:
        return
    if is_weight_only(kv_dtype):
        raise OptionError(f"--kv-dtype {kv_dtype}: a weight-only format stores weights, not a KV cache; "
                          f"choose from {', '.join(KV_DTYPES)}")
    raise OptionError(f"--kv-dtype {kv_dtype}: unknown dtype {kv_dtype!r}; choose from {', '.join(KV_DTYPES)}")


def resolved_kv_dtype(dtype: str, kv_dtype: str | None) -> str:
    """The KV cache's dtype: ``--kv-dtype``, else the dtype the key and value projections write (bf16 for fp8 and
    every quantized format, whose linears write bf16: vLLM's ``kv_cache_dtype=auto``)."""
    return kv_dtype or activation_dtype(dtype)
