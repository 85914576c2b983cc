"""The skeleton every report shares: figures to PNG bytes, then one page written twice, as report.md (the PNGs
beside it) and as a self-contained report.html (the PNGs inline), from the same blocks in the same order.

The sweep report (``roofline.report.result_report``) and the simulation report (``roofline.serving.report``)
differ only in their blocks and their style sheet.
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.result.io import write_output_file


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Bullets:
    lines: tuple[str, ...]
    css_class: str | None = None  # the HTML list's class (``warn`` colours warnings)


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Paragraph:
    markdown: str
    html: str  # already escaped: the caller marks up its own inline code


@dataclass(frozen=True)
class Images:
    """Every rendered figure, in the order drawn: a link per PNG in Markdown, inline data in HTML."""


Block = Heading | Bullets | Table | Paragraph | Images


def figure_pngs(figures: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """PNG bytes per figure name, and the names whose figure is None (nothing to draw); each figure closed."""
    import matplotlib.pyplot as plt

    images, missing = {}, []
    for name, figure in figures.items():
        if figure is None:
            missing.append(name)
            continue
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        plt.close(figure)
        images[name] = buffer.getvalue()
    return images, missing


def markdown(title: str, blocks: list[Block], images: dict[str, bytes]) -> str:
    out = [f"# {title}"]
    for block in blocks:
        if isinstance(block, Heading):
            out += ["", f"## {block.text}"]
        elif isinstance(block, Bullets):
            out += [""] + [f"- {line}" for line in block.lines]
        elif isinstance(block, Table):
            out += ["", "| " + " | ".join(block.header) + " |", "|" + "---|" * len(block.header)]
            out += ["| " + " | ".join(row) + " |" for row in block.rows]
        elif isinstance(block, Paragraph):
            out += ["", block.markdown]
        else:
            for name in images:
                out += ["", f"![{name}]({name}.png)"]
    return "\n".join(out) + "\n"


def html_page(title: str, css: str, blocks: list[Block], images: dict[str, bytes]) -> str:
    esc = html.escape
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{esc(title)}</title>"
             f"<style>{css}</style></head><body>", f"<h1>{esc(title)}</h1>"]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h2>{esc(block.text)}</h2>")
        elif isinstance(block, Bullets):
            css_class = f" class='{block.css_class}'" if block.css_class else ""
            parts.append(f"<ul{css_class}>" + "".join(f"<li>{esc(line)}</li>" for line in block.lines) + "</ul>")
        elif isinstance(block, Table):
            parts.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in block.header) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{_unbroken(esc(c))}</td>" for c in row) + "</tr>" for row in block.rows]
            parts.append("</table>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{block.html}</p>")
        else:
            parts += [f"<img alt='{esc(name)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'>"
                      for name, data in images.items()]
    parts.append("</body></html>\n")
    return "".join(parts)


# A number and the unit after it ("100 GFLOP/s", "2.7 TB/s", "21.5 ms"): one line in a table cell, which may
# still wrap between figures ("264, 520, 584").
_NUMBER_AND_UNIT = re.compile(r"(\d) (?=[A-Za-zµ%])")


def _unbroken(cell: str) -> str:
    return _NUMBER_AND_UNIT.sub("\\1&nbsp;", cell)


def write_page(folder: Path, title: str, css: str, blocks: list[Block], images: dict[str, bytes]) -> None:
    """The PNGs, report.md and report.html, each through ``write_output_file``: a link or FIFO in the folder is
    refused, not replaced."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in images.items():
        write_output_file(folder / f"{name}.png", data)
    write_output_file(folder / "report.md", markdown(title, blocks, images))
    write_output_file(folder / "report.html", html_page(title, css, blocks, images))


# The page's own files; the PNGs beside them are named by the figures report.md shows.
PAGE_FILES = ("report.md", "report.html")
# An image report.md shows from its own folder: a bare file name, never a path out of the folder.
_IMAGE_REFERENCE = re.compile(r"!\[[^\]]*\]\(([^)/\\]+\.png)\)")


def page_files(folder: Path) -> set[str]:
    """The files of the page in ``folder`` as written there: report.md, report.html and the PNGs report.md
    shows.  What a later run compares with what it writes, to remove an earlier page's leftovers."""
    markdown_file = folder / "report.md"
    if not markdown_file.is_file() or markdown_file.is_symlink():
        return set()
    try:
        text = markdown_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    names = {"report.md"} | {name for name in _IMAGE_REFERENCE.findall(text) if (folder / name).is_file()}
    return names | ({"report.html"} if (folder / "report.html").is_file() else set())
