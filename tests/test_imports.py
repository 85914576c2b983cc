"""The import graph, read from the source (ast, nothing executed): CLI -> config -> measure -> result -> analyse.

Only the CLI imports the sweep loop; everything else that measures
opens its session through ``microbench.timing.session`` and reports through ``microbench.timing.observer``.  Nothing
under ``roofline/`` imports ``microbench``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAY_IMPORT_SWEEP = {"microbench/cli/app.py", "microbench/sweep/loop.py"}


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


def test_only_the_cli_imports_the_sweep_loop():
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


# --- the rooms (docs/architecture.md): each sub-package a room, what each may import, no cycle ---

PACKAGES = ("microbench", "roofline")
# Which other rooms of the same package each room may import (microbench rooms may import any roofline room).
ROOM_IMPORTS = {
    "roofline.core": set(),
    "roofline.specs": {"roofline.core"},
    "roofline.step": {"roofline.core", "roofline.specs"},
    "roofline.result": {"roofline.core", "roofline.specs"},
    "roofline.reference": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result"},
    "roofline.analysis": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result"},
    "roofline.report": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result", "roofline.analysis"},
    "roofline.compare": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result", "roofline.analysis",
                         "roofline.report", "roofline.reference"},
    "roofline.decode": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result", "roofline.report",
                        "roofline.reference"},
    "roofline.serving": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result", "roofline.analysis",
                         "roofline.report", "roofline.decode", "roofline.reference"},
    "roofline.fleet": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result", "roofline.analysis",
                       "roofline.report", "roofline.decode", "roofline.serving"},
    "roofline.calibrate": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result",
                           "roofline.analysis", "roofline.report", "roofline.decode", "roofline.serving"},
    "roofline.search": {"roofline.core", "roofline.specs", "roofline.step", "roofline.result", "roofline.analysis",
                        "roofline.report", "roofline.decode", "roofline.serving", "roofline.fleet"},
    "microbench.telemetry": set(),
    "microbench.device": {"microbench.telemetry"},
    "microbench.points": set(),
    "microbench.timing": {"microbench.device", "microbench.telemetry", "microbench.points"},
    "microbench.sweep": {"microbench.points", "microbench.timing", "microbench.device", "microbench.telemetry"},
    "microbench.decode": {"microbench.points", "microbench.sweep", "microbench.timing", "microbench.device"},
    "microbench.serving": {"microbench.points", "microbench.sweep", "microbench.timing", "microbench.device",
                           "microbench.telemetry"},
    "microbench.cli": {"microbench.points", "microbench.sweep", "microbench.timing", "microbench.device",
                       "microbench.telemetry", "microbench.decode", "microbench.serving"},
}
MAX_MODULES_PER_ROOM = 15


def project_modules() -> dict[str, Path]:
    """Every module of the two packages by dotted name (a package by its own name)."""
    found = {}
    for path in _sources(*PACKAGES):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (at module level or inside functions)."""
    return {name: {m for m in imported_modules(path) if m in modules and m != name}
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def room_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_module_import_graph_has_no_cycle():
    assert cycles(import_graph(project_modules())) == []


def test_the_cycle_check_can_fail():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_each_room_imports_only_the_rooms_it_may():
    graph = import_graph(project_modules())
    wrong = []
    for module, imports in graph.items():
        room = room_of(module)
        if room in PACKAGES:
            continue  # the package's own __init__
        for imported in imports:
            other = room_of(imported)
            if other == room or other in PACKAGES or (room.startswith("microbench.") and other.startswith("roofline.")):
                continue
            if other not in ROOM_IMPORTS[room]:
                wrong.append(f"{module} -> {imported}")
    assert wrong == []


def test_every_room_says_what_lives_there_and_stays_small():
    modules = project_modules()
    rooms = sorted({room_of(m) for m in modules} - set(PACKAGES))
    assert set(rooms) == set(ROOM_IMPORTS), "a room is missing from ROOM_IMPORTS (and docs/architecture.md)"
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for room in rooms:
        init = ROOT / room.replace(".", "/") / "__init__.py"
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert docstring and len(docstring) > 40, f"{init} has no opening docstring saying what lives there"
        count = sum(1 for m in modules if m.startswith(room + ".") and m.count(".") == 2)
        assert count <= MAX_MODULES_PER_ROOM, f"{room} holds {count} modules"
        assert f"`{room}`" in architecture, f"docs/architecture.md does not list {room}"
