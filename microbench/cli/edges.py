"""The CLI's edges: option types that refuse nan and inf, sizes, the output check and the writing of
output folders, and the one-line error they all raise.  Kept apart so the command modules (``app``, ``serving``,
``engine``) only parse and dispatch.
"""

from __future__ import annotations

import contextlib
import errno
import re
from pathlib import Path
from typing import Any

import click

from roofline.core.options import Option, number_refusal
from roofline.result.io import ResultError

# A full disk or an exhausted quota: nothing the user typed is wrong, but the run cannot go on writing.  Left
# to ``microbench.cli.guard.writing_to``, which says it the same way for every command.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class BadInput(click.ClickException):
    """One-line error, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"gpubench: error: {self.message}", err=True)


# ``gpubench`` with no arguments prints the help (click >= 8.2 raises this for it): not an error to shorten.
_HELP_FOR_NO_ARGUMENTS = getattr(click.exceptions, "NoArgsIsHelpError", ())


@contextlib.contextmanager
def _one_line_usage():
    try:
        yield
    except _HELP_FOR_NO_ARGUMENTS:
        raise
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "gpubench"
        message = exc.format_message()
        ended = message if message.endswith((".", "?", ")")) else message + "."
        raise BadInput(f"{where}: {ended} See '{where} -h'.") from None


class OneLineGroup(click.Group):
    """A group whose usage errors (an unknown option, a value click cannot convert, a missing argument) are
    one line and exit 2 like every other refusal, not click's usage block.  The group's own arguments are
    parsed in ``make_context``; a command's, inside ``invoke``."""

    def make_context(self, *args, **kwargs):
        with _one_line_usage():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _one_line_usage():
            return super().invoke(ctx)


class Number(click.ParamType):
    """A finite float, optionally in (low, high]: nan and inf are refused here, before anything starts."""

    name = "number"

    def __init__(self, low: float | None = None, high: float | None = None, below_high: bool = False):
        self.low, self.high, self.below_high = low, high, below_high

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        why = number_refusal(number, self.low, self.high, self.below_high)
        if why is not None:
            self.fail(f"{value!r}: {why}", param, ctx)
        return number


def _click_type(option: Option):
    if option.kind == "number":
        return Number(option.low, option.high, option.below_high)
    if option.kind == "path":
        return click.Path(path_type=Path)
    if option.kind == "choice":
        return click.Choice(list(option.choices))
    # text stays text whatever its default (click would take --telemetry-interval's 0.05 for a float, and word a
    # bad value its own way, not the config's).
    return {"int": int, "float": float, "text": click.STRING}.get(option.kind)


class DeclaredOption(click.Option):
    """A click option made from a table row, which it keeps (``row``): how a test tells that every option of
    every command is declared once, in its command's table."""

    def __init__(self, *args, row: Option, **kwargs):
        super().__init__(*args, **kwargs)
        self.row = row


def _option_strings(command: click.Command) -> set[str]:
    return {name for param in command.params if isinstance(param, click.Option)
            for name in (*param.opts, *param.secondary_opts)}


def refuse_an_option_as_a_value(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A text or path option's value that is itself an option (``--sweep-load --requests 300``: click hands
    ``--requests`` to --sweep-load as its rates, and 300 to the next slot) is a forgotten value: refused in one
    line.  An option here is one of the command's own spellings, or any word that starts with ``--`` and a letter
    (no value of ours does); a negative number (``-1``) is a value."""
    values = value if isinstance(value, tuple) else (value,)
    for text in values:
        if isinstance(text, (str, Path)) and (str(text) in _option_strings(ctx.command)
                                              or re.match(r"--[A-Za-z]", str(text))):
            flag = param.opts[-1] if param.opts else param.name
            raise click.BadParameter(f"{str(text)!r} is an option, not {flag}'s value: give {flag} its value before "
                                     "the next option", ctx=ctx, param=param)
    return value


def click_option(field: str, option: Option):
    """One table row as a click option, its value under the config field's name (a text or a path: never an
    option, ``refuse_an_option_as_a_value``)."""
    how: dict[str, Any] = {"help": option.help}
    if option.kind in ("text", "path"):
        how["callback"] = refuse_an_option_as_a_value
    if option.default is not None:
        how["default"] = option.default
    if option.kind == "flag":
        how["is_flag"] = True
    elif option.kind == "off":
        how.update(is_flag=True, flag_value=False, default=True)
    elif _click_type(option) is not None:
        how["type"] = _click_type(option)
    for name in ("show_default", "required", "multiple", "metavar", "hidden"):
        if getattr(option, name):
            how[name] = getattr(option, name)
    return click.option(*option.flags, field, cls=DeclaredOption, row=option, **how)


def declare(table: dict[str, Option]):
    """A command's options from its table, in the table's order (the order ``-h`` lists them)."""
    def decorate(command):
        for field, option in reversed(table.items()):
            command = click_option(field, option)(command)
        return command

    return decorate


def given(ctx: click.Context) -> set[str]:
    """The options typed on the command line (not defaults)."""
    return {name for name in ctx.params if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}


def write_outputs(folder: Path, files: dict) -> None:
    """Write an output folder's files (text, or matplotlib figures as PNG) into ``folder``, the staging folder
    ``microbench.cli.guard.writing_to`` holds (which says an OS error, a full disk too, in one line)."""
    import io

    import matplotlib.pyplot as plt

    from roofline.result.io import write_output_file

    try:
        for name, content in files.items():
            if not isinstance(content, str):
                buffer = io.BytesIO()
                content.savefig(buffer, format="png")
                plt.close(content)
                content = buffer.getvalue()
            write_output_file(folder / name, content)
    except ResultError as exc:
        raise BadInput(str(exc)) from None


def refuse_what_cannot_run(document: dict, tp: int, context: int, mem_fraction: float) -> None:
    """After the numbers are shown: weights that do not fit, or a context one sequence cannot hold, is exit 2."""
    from roofline.core.units import si_bytes

    part = document.get("measured") or document.get("analytic")
    kv = part["kv"] if part else {}
    where = f"{mem_fraction:.0%} of {si_bytes(kv.get('memory_bytes'))}"
    if kv.get("fits") is False:
        raise BadInput(f"{document['setup']['model']} does not fit: {si_bytes(kv['weight_bytes'])} "
                       f"of weights per GPU at TP {tp} in {where}")
    if kv.get("max_batch") == 0:
        left = mem_fraction * kv["memory_bytes"] - kv["weight_bytes"]
        raise BadInput(f"--context {context}: one sequence's KV cache needs {si_bytes(kv['kv_bytes_per_sequence'])}, "
                       f"more than the {si_bytes(left)} left beside the weights in {where}; shorten --context")


def bad_input_errors():
    """What the library raises for the user's input; anything else (a ValueError too) is a bug."""
    from microbench.device.discovery import DeviceError
    from roofline.core.errors import BadInputError
    from roofline.specs.gpus import SpecError

    return (BadInputError, DeviceError, SpecError)


@contextlib.contextmanager
def bad_input():
    """The library's one-line errors for the user's input become exit 2; anything else stays a bug."""
    try:
        yield
    except bad_input_errors() as exc:
        raise BadInput(str(exc)) from None


def interrupted_by(signum: int) -> str:
    """``interrupted by SIGINT``: the signal by name, as ``microbench.cli.guard`` says it."""
    import signal

    try:
        return f"interrupted by {signal.Signals(signum).name}"
    except ValueError:
        return f"interrupted by signal {signum}"
