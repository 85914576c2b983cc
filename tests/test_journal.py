"""Proportional saves (#15.10): the document once, then one journal line per point; folded at the end, and
by load_result when a sweep was killed.  Bytes are counted through the writer's seam, never timed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.result.io import ResultError, check_output, journal_path, load_result, result_to_json, save_result
from roofline.result.journal import ResultWriter
from tests.conftest import make_point, make_result

ROOT = Path(__file__).resolve().parent.parent
ROW_KEYS = ("sm_clock_hz", "power_w", "memory_clock_hz", "temperature_c")


def rows(start: int, count: int) -> list[dict]:
    return [{"t_s": 0.05 * i, **{key: 1000.0 + i for key in ROW_KEYS}} for i in range(start, start + count)]


def telemetry(count: int) -> dict:
    return {"source": "nvml-basic", "interval_s": 0.05, "reason": None, "timeline": rows(0, count)}


def grow(path: Path, points: int, on_write=None, rows_per_point: int = 5):
    """Write a sweep of ``points`` through the journal; return the writer and the result one full save holds."""
    writer = ResultWriter(path, on_write)
    result = make_result(telemetry=telemetry(0))
    writer.start(result)
    for index in range(points):
        point = make_point("gemv", "fp32", 1, 1024 + index, 1024, 2e-5,
                           telemetry={"window_s": [0.1 * index, 0.1 * index + 0.05], "readings": 2,
                                      "throttled": False, "clock_event_reasons": []})
        result = result.with_point(point)
        writer.append(point=point, telemetry=telemetry(rows_per_point * (index + 1)))
    return writer, result.with_telemetry(telemetry(rows_per_point * points))


def test_each_save_costs_the_same_bytes_however_long_the_sweep(tmp_path):
    written: list[tuple[Path, int]] = []
    writer, full = grow(tmp_path / "r.json", 300, lambda path, nbytes: written.append((path, nbytes)))
    journal = [nbytes for path, nbytes in written if path == journal_path(tmp_path / "r.json")]
    appends = journal[1:]  # journal[0]: its header; the document itself was written once, before it
    assert len(appends) == 300
    first, last = sum(appends[:20]) / 20, sum(appends[-20:]) / 20
    assert last <= 1.02 * first, (first, last)  # flat, not growing with the points before it
    # What one whole-document save would cost by then: what every save cost before the journal.
    assert len(result_to_json(full)) > 100 * last


def test_the_folded_document_is_what_one_full_save_writes(tmp_path):
    path = tmp_path / "r.json"
    writer, full = grow(path, 12)
    ceilings = {"spec": {"sku": None, "reason": "test"}}
    writer.append(ceilings=ceilings)
    full = full.with_ceilings(ceilings)
    loaded = load_result(path)  # a killed sweep: document + journal, folded in memory
    assert loaded == full and result_to_json(loaded) == result_to_json(full)
    writer.finish(full)
    assert path.read_text() == result_to_json(full)
    assert not journal_path(path).exists()
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_a_torn_last_line_is_the_point_in_flight_and_a_stale_journal_adds_nothing(tmp_path):
    path = tmp_path / "r.json"
    grow(path, 3)
    with open(journal_path(path), "ab") as stream:
        stream.write(b'{"point": {"op": "gemv", "dty')  # killed mid-write
    assert len(load_result(path).points) == 3
    save_result(make_result(), path)  # the fold was written, the journal's removal was not
    assert len(load_result(path).points) == 0


@pytest.mark.parametrize("journal", [b"", b'{"kind": "gpubench-result-jour'], ids=["empty", "torn header"])
def test_a_journal_killed_before_its_header_was_written_adds_nothing(tmp_path, journal):
    # Killed between creating the journal and finishing its first line: the result is the document as it is.
    path = tmp_path / "r.json"
    save_result(make_result(), path)
    journal_path(path).write_bytes(journal)
    assert load_result(path).points == ()


def test_a_corrupt_journal_line_is_a_one_line_error(tmp_path):
    path = tmp_path / "r.json"
    grow(path, 2)
    text = journal_path(path).read_text().splitlines()
    text.insert(2, "{not json")
    journal_path(path).write_text("\n".join(text) + "\n")
    with pytest.raises(ResultError) as info:
        load_result(path)
    assert "line 3" in str(info.value) and "\n" not in str(info.value)


def test_a_journal_path_that_is_not_ours_is_never_replaced(tmp_path):
    path = tmp_path / "r.json"
    journal_path(path).write_text("someone's notes\n")
    with pytest.raises(ResultError, match="not a gpubench journal"):
        check_output(path)
    journal_path(path).unlink()
    journal_path(path).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ResultError, match="symbolic link"):
        check_output(path)
    with pytest.raises(ResultError, match="symbolic link"):
        ResultWriter(path).start(make_result())


def wait_for(condition, timeout_s: float = 180) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if condition():
                return
        except ResultError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not reached within {timeout_s} s")


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_resumes_and_finishes_with_every_point(tmp_path):
    output = tmp_path / "run.json"
    plan = ["--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "512x1024", "--batch", "1:32:+1",
            "--budget", "0.05", "--no-ceilings", "--l2", "warm"]  # one weight copy a point: about signals, not timing
    process = subprocess.Popen([sys.executable, "-m", "microbench.cli", "sweep", *plan, "-o", str(output)],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: journal_path(output).exists() and len(load_result(output).points) >= 3)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert journal_path(output).exists()  # no fold ran: SIGKILL gives no chance to
    before = load_result(output)
    assert 3 <= len(before.points) < 32
    run = CliRunner().invoke(main, ["sweep", "--resume", str(output)], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    assert not journal_path(output).exists()
    after = load_result(output)
    assert sorted(p.batch for p in after.points) == list(range(1, 33))
    assert after.points[:len(before.points)] == before.points  # nothing measured twice, nothing lost
    assert output.read_text() == result_to_json(after)  # one self-contained document


class Killed(Exception):
    """Stands for SIGKILL inside run_profile: no handler runs, nothing is folded."""


def test_a_profile_journals_each_item_and_a_killed_one_resumes_from_the_journal(tmp_path):
    from microbench.serving.profile_run import partial_path, prepare_profile, run_profile
    from microbench.timing.observer import SweepObserver
    from tests.test_profile_measured import after_items, tiny_plan

    output = tmp_path / "profile.json"
    run = prepare_profile(tiny_plan(), output, SweepObserver())
    total = len(run.items)

    def die() -> None:
        raise Killed

    with pytest.raises(Killed):
        run_profile(run, lambda n: None, after_items(run, 3, die))
    assert len(json.loads(partial_path(output).read_text())["measured"]) == 0  # written once, at the start
    assert len(journal_path(partial_path(output)).read_text().splitlines()) == 1 + 3  # header + one per item
    resumed = prepare_profile(tiny_plan(), output, SweepObserver(), resume=True)
    assert len(resumed.items) == total - 3 and len(resumed.measured) == 3
    assert len(json.loads(partial_path(output).read_text())["measured"]) == 3  # folded by the resume
