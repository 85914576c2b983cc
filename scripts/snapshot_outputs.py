"""Write what the read-only commands print for every committed result, so two trees can be diffed.

``python scripts/snapshot_outputs.py OUTDIR`` runs ``fit`` (table and ``--json``), ``report`` (its
Markdown and analysis.json), ``compare`` (table, Markdown and JSON) over every committed sweep result,
and a few analytic ``decode``/``profile``/``simulate`` runs, each through ``python -m microbench.cli``
as a user would, into OUTDIR/<name>.txt.  Run it on two checkouts and ``diff -r`` the folders: a change
that only moves code leaves them identical.  Nothing here is timed, and nothing under ``results/`` is
written.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = sorted([*ROOT.glob("results/*.json"), ROOT / "tests/data/h200/first-run-sweep.json"])
COLUMNS = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def gpubench(*args: str) -> str:
    """One command's stdout, stderr and exit code as text (paths under the temporary folder masked)."""
    import os
    env = {**os.environ, **COLUMNS}
    done = subprocess.run([sys.executable, "-m", "microbench.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)
    return f"$ gpubench {' '.join(args)}\nexit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def snapshot(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)

        def masked(text: str) -> str:
            return text.replace(str(scratch), "<tmp>")

        for result in RESULTS:
            rel = str(result.relative_to(ROOT))
            name = result.stem
            (out / f"fit-{name}.txt").write_text(gpubench("fit", rel))
            (out / f"fit-json-{name}.txt").write_text(gpubench("fit", rel, "--json"))
            report_dir = scratch / f"report-{name}"
            text = masked(gpubench("report", rel, "-o", str(report_dir)))
            for kept in ("report.md", "analysis.json"):
                path = report_dir / kept
                text += f"--- {kept}\n" + (path.read_text() if path.exists() else "(absent)\n")
            (out / f"report-{name}.txt").write_text(text)
        rels = [str(r.relative_to(ROOT)) for r in RESULTS]
        for fmt in ("table", "md", "json"):
            (out / f"compare-{fmt}.txt").write_text(gpubench("compare", *rels, "--format", fmt))
        analytic = {
            "decode-h100-llama3-8b": ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b"],
            "decode-h100-llama3-70b-tp8": ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-70b",
                                           "--tp", "8", "--json"],
            "simulate-h100-llama3-8b": ["simulate", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                                        "--requests", "200", "--no-report", "--json",
                                        "-o", str(scratch / "sim")],
        }
        for name, args in analytic.items():
            (out / f"{name}.txt").write_text(masked(gpubench(*args)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/snapshot_outputs.py OUTDIR")
    snapshot(Path(sys.argv[1]))
