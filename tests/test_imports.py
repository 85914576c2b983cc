"""The import graph, read from the source (ast, nothing executed): CLI -> config -> measure -> result -> analyse.

Only the CLI, and resume (which continues a sweep), import the sweep loop; everything else that measures
opens its session through ``microbench.timing.session`` and reports through ``microbench.timing.observer``.  Nothing
under ``roofline/`` imports ``microbench``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAY_IMPORT_SWEEP = {"microbench/cli/app.py", "microbench/sweep/resume.py", "microbench/sweep/loop.py"}


def imported_modules(path: Path, package: str | None = None) -> set[str]:
    """Every module a file imports, anywhere in it (functions too), with relative imports resolved against
    ``package`` (the file's own) and ``from package import module`` counted as the module; ``__import__("x")``
    calls as well."""
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__" and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            found.add(node.args[0].value)
    return found


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_only_the_cli_and_resume_import_the_sweep_loop():
    reaching = [str(p.relative_to(ROOT)) for p in _sources("microbench", "scripts")
                if "microbench.sweep.loop" in imported_modules(p) and str(p.relative_to(ROOT)) not in MAY_IMPORT_SWEEP]
    assert reaching == []


def test_roofline_never_imports_microbench():
    reaching = [str(p.relative_to(ROOT)) for p in _sources("roofline")
                if any(m == "microbench" or m.startswith("microbench.") for m in imported_modules(p))]
    assert reaching == []


def test_the_walk_sees_every_way_of_importing(tmp_path):
    """The check above can fail: each spelling of an import of the sweep loop is found."""
    spellings = ["from microbench.sweep.loop import run_sweep", "import microbench.sweep.loop",
                 "from microbench.sweep import plan, loop", "from . import loop", "from .loop import prepare_sweep",
                 "def f():\n    from microbench.sweep.loop import sweep_job", "__import__('microbench.sweep.loop')"]
    for index, line in enumerate(spellings):
        probe = tmp_path / f"probe_{index}.py"
        probe.write_text(line + "\n")
        assert "microbench.sweep.loop" in imported_modules(probe, package="microbench.sweep"), line
    assert "microbench.sweep.loop" not in imported_modules(ROOT / "microbench" / "timing" / "measure.py")
