"""The docs say what the commands print: every command README.md and docs/ show with its output is run here, and
its output must still read as shown.  Also: README.md stays a front page (under 12 KB, its set-up commands on the
first screen, the test command the one CI runs), and every relative link in the docs leads to a file and heading
that exist.

How a doc shows output: a fenced ``console`` block whose first line is ``$ gpubench ...`` (a trailing ``\\``
continues the command on the next line), followed by what the command prints on stdout.  A line holding only
``...`` stands for lines left out; every other line must be exactly what the command prints, in order, the block's
first and last lines at the output's first and last unless ``...`` opens or closes it.

Each command runs as a user runs it, in a fresh process (its own folder, ``tests/`` and ``results/`` linked in, so
paths print as shown), with no terminal (tables laid out to 150 columns) and without the ``[reference]`` extra (the
README's set-up does not install it; where it is installed, ``--efficiency auto`` takes other efficiencies).
Commands that only read documents are run whole.  A measured ``sweep`` cannot be run again to the same numbers, so a
``sweep`` block must name, with ``-o``, a committed result made by exactly that command line, and what it shows is
what the sweep prints at its end from that file, drawn again by today's code.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "CHANGELOG.md", *ROOT.glob("docs/**/*.md")])
README_LIMIT_BYTES = 12 * 1024
FIRST_SCREEN_LINES = 60
# The README's test command, verbatim: .ci/run runs this line.
TEST_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest"
SWEEP_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && gpubench sweep"
# Commands whose output is a function of their arguments and the committed files alone.
READ_ONLY = {"fit", "decode", "simulate", "profile", "plan", "compare"}
ELIDED = "..."
# A gpubench command as a user runs it, without the [reference] extra: where it is installed here, hide it.
RUNNER = ("import sys; sys.modules['aiconfigurator_core'] = None; "
          "from microbench.cli.app import main; main(prog_name='gpubench')")


@dataclass(frozen=True)
class Shown:
    """One console block: where it is, the command's arguments after ``gpubench``, and the lines shown."""

    page: Path
    line: int
    args: tuple[str, ...]
    lines: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def console_blocks(page: Path) -> list[Shown]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```console\n(.*?)^```", text, re.S | re.M):
        rows = match.group(1).splitlines()
        command = ""
        while rows:
            row = rows.pop(0)
            command += row.rstrip("\\").rstrip() + " " if row.endswith("\\") else row
            if not row.endswith("\\"):
                break
        line = text.count("\n", 0, match.start()) + 1
        assert command.startswith("$ gpubench "), f"{page.name}:{line}: a console block opens with $ gpubench ..."
        found.append(Shown(page, line, tuple(shlex.split(command[2:]))[1:], tuple(r.rstrip() for r in rows)))
    return found


SHOWN = [block for page in PAGES if page.exists() for block in console_blocks(page)]


def matches(shown: tuple[str, ...], printed: list[str]) -> str | None:
    """None when ``printed`` reads as ``shown`` (with ``...`` for lines left out), else what differs."""
    segments: list[list[str]] = [[]]
    for line in shown:
        if line == ELIDED:
            segments.append([])
        else:
            segments[-1].append(line)
    at = 0
    for index, segment in enumerate(segments):
        if not segment:
            continue
        anchored = index == 0  # no "..." before it: the output's first line
        starts = [at] if anchored else [i for i in range(at, len(printed) - len(segment) + 1)
                                        if printed[i:i + len(segment)] == segment]
        if not starts or printed[starts[0]:starts[0] + len(segment)] != segment:
            wanted = segment[0] if anchored else next(
                (line for line in segment if line not in printed[at:]), segment[0])
            return f"the doc shows {wanted!r}, which the command no longer prints there"
        at = starts[0] + len(segment)
    if segments[-1] and at != len(printed):
        return f"the command prints more after the block's last line: {printed[at]!r}"
    return None


_printed: dict[tuple[str, ...], list[str]] = {}


def run_gpubench(args: tuple[str, ...], tmp_path: Path) -> list[str]:
    """What ``gpubench ARGS`` prints on stdout, run in a fresh process in a folder of its own."""
    if args not in _printed:
        for name in ("tests", "results"):
            (tmp_path / name).symlink_to(ROOT / name)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env["PYTHONPATH"] = str(ROOT)
        run = subprocess.run([sys.executable, "-c", RUNNER, *args], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, f"gpubench {shlex.join(args)} exited {run.returncode}: {run.stderr[-2000:]}"
        _printed[args] = [line.rstrip() for line in run.stdout.splitlines()]
    return _printed[args]


def sweep_summary(args: tuple[str, ...]) -> list[str]:
    """What ``gpubench sweep ARGS`` printed at its end, drawn again from the committed result it wrote."""
    from microbench.cli.render import print_sweep_summary
    from roofline.result.io import load_result

    assert "-o" in args, "a sweep shown with its output names its committed result with -o"
    output = Path(args[args.index("-o") + 1])
    result = load_result(ROOT / output)
    assert tuple(result.argv[1:]) == ("sweep", *args), \
        f"{output} was made by {shlex.join(result.argv[1:])}, not the command shown"
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_sweep_summary(result, output)
    lines = [line.rstrip() for line in printed.getvalue().splitlines()]
    if "--report" in args:
        lines.append(f"report: {output.with_name(output.stem + '-report') / 'report.html'}")
    return lines


def test_the_docs_show_commands_with_their_output():
    assert len(SHOWN) >= 5, [block.name for block in SHOWN]
    assert {block.page for block in SHOWN} >= {README, ROOT / "docs" / "decode.md", ROOT / "docs" / "analysis.md"}


@pytest.mark.parametrize("block", SHOWN, ids=lambda block: block.name)
def test_each_command_shown_still_prints_what_the_doc_shows(block, tmp_path, monkeypatch):
    command = block.args[0]
    if command == "sweep":

        monkeypatch.setenv("COLUMNS", "150")  # as a sweep printed to a pipe lays its table out
        printed = sweep_summary(block.args[1:])
    else:
        assert command in READ_ONLY, f"{block.name}: gpubench {command} measures; show a command that reads documents"
        assert command != "decode" or "--analytic" in block.args, f"{block.name}: a measured decode"
        assert command != "profile" or "--analytic" in block.args, f"{block.name}: a measured profile"
        printed = run_gpubench(block.args, tmp_path)
    differs = matches(block.lines, printed)
    assert differs is None, f"{block.name}: gpubench {shlex.join(block.args)}: {differs}"


def test_the_readme_is_a_front_page_with_both_set_up_commands_on_its_first_screen():
    size = len(README.read_bytes())
    assert size < README_LIMIT_BYTES, f"README.md is {size} bytes; move detail to docs/"
    first_screen = "\n".join(README.read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN_LINES])
    assert SWEEP_COMMAND in first_screen and TEST_COMMAND in first_screen
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), "CI runs the README's test command"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(match.group(1)) for match in re.finditer(r"^#+ (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", [p for p in PAGES if p.exists()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_readme_links_to_every_docs_page():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in links(README)}
    pages = {p.resolve() for p in ROOT.glob("docs/*.md")} | {(ROOT / "docs" / "reference" / "README.md").resolve()}
    assert pages - linked == set(), f"README.md does not link to {sorted(p.name for p in pages - linked)}"
