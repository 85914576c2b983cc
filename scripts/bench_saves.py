"""Bytes a sweep writes to save itself: the journal (now) against a whole-document save after every point
(before), replayed from a real result's points in the order they were measured.

    PYTHONPATH=. python scripts/bench_saves.py [RESULT.json]   (default: results/cpu-amd-epyc-2core-20261201.json)

No timing: it counts bytes through ResultWriter's ``on_write`` seam, so the figures are the same on any machine.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from roofline.result.io import load_result, result_to_json
from roofline.result.journal import ResultWriter


def main() -> None:
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "results/cpu-amd-epyc-2core-20261201.json")
    full = load_result(source)
    written: list[int] = []
    whole_saves: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        writer = ResultWriter(Path(folder) / "replay.json", lambda path, nbytes: written.append(nbytes))
        growing = type(full).from_dict({**full.to_dict(), "points": []})
        writer.start(growing)
        for point in full.points:
            growing = growing.with_point(point)
            writer.append(point=point)
            whole_saves.append(len(result_to_json(growing)))
        appends = written[2:]  # written[0]: the document once; written[1]: the journal's header
        writer.finish(growing)
    print(f"{source}: {len(full.points)} points")
    print(f"journal: {min(appends)}-{max(appends)} B per save, {sum(written)} B in all (the final fold included)")
    print(f"whole document after every point: {whole_saves[0]}-{whole_saves[-1]} B per save, "
          f"{sum(whole_saves)} B in all")


if __name__ == "__main__":
    main()
