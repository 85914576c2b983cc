"""What is at ``-o`` is never clobbered: only a regular file is ever replaced (or a new path written); a FIFO,
a symlink, a device node or a directory is refused with exit 2 and left as it was.  Every command with
``-o`` goes through the same check, and ``sweep -o`` over a finished result needs ``--force``.  An output folder
is replaced whole, and only when it is new, empty or the same command's earlier output."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.result.io import ResultError, check_output, load_result, save_result
from tests.conftest import make_point, make_result

TINY_SWEEP = ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "64x64", "--batch", "1",
              "--budget", "0.02", "--no-ceilings"]


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.json"
    os.mkfifo(path)
    return path


def _symlink(tmp_path: Path) -> Path:
    target = tmp_path / "target.json"
    target.write_text("precious\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    return link


def _char_device(tmp_path: Path) -> Path:
    """A /dev/null-like node in tmp (root may create one); else /dev/null itself, which must survive."""
    path = tmp_path / "null.json"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        return Path("/dev/null")
    return path


def _unchanged(path: Path, before: os.stat_result, tmp_path: Path) -> None:
    after = os.lstat(path)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    if path.is_symlink():
        assert (tmp_path / "target.json").read_text() == "precious\n"


@pytest.mark.parametrize("make", [_fifo, _symlink, _char_device], ids=["fifo", "symlink", "char-device"])
def test_sweep_refuses_what_is_not_a_regular_file(tmp_path, make):
    target = make(tmp_path)
    before = os.lstat(target)
    result = run(*TINY_SWEEP, "-o", str(target))
    assert result.exit_code == 2, result.output
    assert "only replaces regular files" in result.output
    _unchanged(target, before, tmp_path)


@pytest.mark.parametrize("make", [_fifo, _symlink, _char_device], ids=["fifo", "symlink", "char-device"])
def test_save_result_never_renames_over_a_special_file(tmp_path, make):
    """The last line of defence: even a caller that skipped the check cannot replace a device or a FIFO."""
    target = make(tmp_path)
    before = os.lstat(target)
    with pytest.raises(ResultError, match="only replaces regular files"):
        save_result(make_result([make_point()]), target)
    _unchanged(target, before, tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_sweep_over_a_finished_result_needs_force(tmp_path):
    output = tmp_path / "done.json"
    assert run(*TINY_SWEEP, "-o", str(output)).exit_code == 0
    first = output.read_text()
    again = run(*TINY_SWEEP, "-o", str(output))
    assert again.exit_code == 2 and "already exists" in again.output and "--force" in again.output
    assert output.read_text() == first
    forced = run(*TINY_SWEEP, "--force", "-o", str(output))
    assert forced.exit_code == 0, forced.output
    assert load_result(output).points and output.read_text() != first  # a new run (new timestamps) replaced it


@pytest.mark.parametrize("make", [_fifo, _symlink], ids=["fifo", "symlink"])
def test_every_file_output_goes_through_the_check(tmp_path, make):
    target = make(tmp_path)
    before = os.lstat(target)
    csv = tmp_path / "in.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\ngemm,bf16,1,64,64,1e-5\n")
    for args in (["import", str(csv), "--device-name", "x", "-o", str(target)],
                 ["ceilings", "--device", "cpu", "--dtype", "fp32", "--quick", "--budget", "0.01", "-o", str(target)]):
        result = run(*args)
        assert result.exit_code == 2 and "only replaces regular files" in result.output, (args, result.output)
        _unchanged(target, before, tmp_path)


def _saved_result(tmp_path: Path) -> Path:
    path = tmp_path / "r.json"
    save_result(make_result([make_point("gemv", "bf16", 1, 4096, 4096, 2e-5),
                             make_point("gemm", "bf16", 8, 4096, 4096, 2.1e-5)]), path)
    return path


@pytest.mark.parametrize("command", ["report", "compare", "decode"])
def test_folder_outputs_refuse_an_existing_file(tmp_path, command):
    blocker = tmp_path / "blocker"
    blocker.write_text("keep me\n")
    result_file = _saved_result(tmp_path)
    args = {"report": ["report", str(result_file)], "compare": ["compare", str(result_file)],
            "decode": ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h200-sxm", "--batch", "1,2"]}
    result = run(*args[command], "-o", str(blocker))
    assert result.exit_code == 2, result.output
    assert "not a folder" in result.output
    assert blocker.read_text() == "keep me\n"


@pytest.mark.parametrize("command", ["compare", "decode"])
def test_folder_outputs_that_cannot_be_written(tmp_path, command):
    if os.geteuid() == 0:
        folder = Path("/sys/gpubench-cannot-write-here")  # root writes any mode; sysfs refuses everyone
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        folder = locked / "out"
    result_file = _saved_result(tmp_path)
    args = {"compare": ["compare", str(result_file)],
            "decode": ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h200-sxm", "--batch", "1,2"]}
    result = run(*args[command], "-o", str(folder))
    assert result.exit_code == 2, result.output
    assert "cannot write" in result.output


def test_check_output_accepts_new_paths_and_regular_files(tmp_path):
    check_output(tmp_path / "new" / "x.json")
    existing = tmp_path / "x.json"
    existing.write_text("{}")
    check_output(existing)
    with pytest.raises(ResultError, match="already exists"):
        check_output(existing, overwrite=False)
    with pytest.raises(ResultError, match="is a directory"):
        check_output(tmp_path)
    check_output(tmp_path / "folder", folder=True)
    assert (tmp_path / "folder").is_dir()


@pytest.mark.parametrize("name", ["report.html", "analysis.json", "report.md"])
@pytest.mark.parametrize("make", [_fifo, _symlink], ids=["fifo", "symlink"])
def test_a_report_never_writes_through_a_link_or_into_a_fifo_inside_its_folder(tmp_path, make, name):
    # The folder itself passes the check; a file inside it that is a link to a result (or a FIFO) is refused,
    # where a plain write_text wrote the HTML into the linked result.
    folder = tmp_path / "out"
    folder.mkdir()
    inside = folder / name
    os.rename(make(tmp_path), inside)  # the link keeps pointing at tmp_path/target.json
    before = os.lstat(inside)
    result = run("report", str(_saved_result(tmp_path)), "-o", str(folder))
    assert result.exit_code == 2, result.output
    assert "only replaces regular files" in result.output and result.output.count("\n") == 1, result.output
    _unchanged(inside, before, tmp_path)


# --- an output folder is written whole: only a new or empty folder, or the same command's earlier output ----------

TINY_CONFIG = str(Path(__file__).resolve().parent / "data" / "tiny-llama-config.json")
SIMULATE = ["simulate", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "--requests", "3"]


def _folder_commands(tmp_path: Path) -> dict[str, list[str]]:
    """Every command that writes a folder, with its inputs made in ``tmp_path``, without its ``-o``."""
    profile = tmp_path / "p.json"
    made = run("profile", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "-o", str(profile))
    assert made.exit_code == 0, made.output
    result_file = _saved_result(tmp_path)
    return {"simulate": SIMULATE,
            "plan": ["plan", str(profile), "--rate", "1", "--slo", "ttft_p90=2", "--requests", "10"],
            "decode": ["decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--batch", "1,2"],
            "report": ["report", str(result_file)], "compare": ["compare", str(result_file)],
            "validate": ["validate", "--hf-config", TINY_CONFIG, "--device", "cpu"]}


FOLDER_COMMANDS = ["simulate", "plan", "decode", "report", "compare", "validate"]


@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_a_folder_of_other_files_is_refused_and_left_as_it_was(tmp_path, command):
    """The command would replace its folder whole: a folder of the user's files is refused before anything runs,
    not written into (nor, as a whole, replaced)."""
    args = _folder_commands(tmp_path)[command]
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    result = run(*args, "-o", str(folder))
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert (f"{folder}: holds files (notes.txt) and is not a gpubench {command} output" in result.output
            and "give a new or empty folder" in result.output), result.output
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_plan_into_a_simulations_folder_is_refused_and_keeps_its_figures(tmp_path):
    """plan there wrote plan.json into the simulation's folder and removed the simulation's figures as an
    earlier report of its own."""
    commands = _folder_commands(tmp_path)
    sim = tmp_path / "sim"
    assert run(*commands["simulate"], "-o", str(sim)).exit_code == 0
    before = {p.name: p.read_bytes() for p in sim.iterdir()}
    assert any(name.endswith(".png") for name in before)
    result = run(*commands["plan"], "-o", str(sim))
    assert result.exit_code == 2 and "is not a gpubench plan output (no plan.json of one)" in result.output
    assert {p.name: p.read_bytes() for p in sim.iterdir()} == before


@pytest.mark.parametrize("command", ["simulate", "plan", "decode", "report", "compare"])
def test_an_empty_o_is_the_current_folder_and_is_refused(tmp_path, monkeypatch, command):
    """``-o ""`` wrote into the folder the user was in (a plan there removed a simulation's figures)."""
    args = _folder_commands(tmp_path)[command]
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for empty in ("", "."):
        result = run(*args, "-o", empty)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert "is the folder you are in" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_an_earlier_run_of_the_same_command_is_replaced_whole(tmp_path):
    """The same command's folder is replaced: nothing of the earlier run stays beside the new one's files."""
    out = tmp_path / "out"
    first = run("decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--batch", "1,2", "-o", str(out))
    assert first.exit_code == 0, first.output
    again = run("decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--batch", "1,4", "-o", str(out))
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.iterdir()) == ["decode.json", "decode.png"]
    assert [row["batch"] for row in json.loads((out / "decode.json").read_text())["analytic"]["rows"]] == [1, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no lock, staging or old folder left


def test_sweep_report_into_a_folder_of_other_files_is_refused_before_measuring(tmp_path):
    output = tmp_path / "r.json"
    folder = tmp_path / "r-report"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    result = run(*TINY_SWEEP, "--report", "-o", str(output))
    assert result.exit_code == 2 and "is not a gpubench report output" in result.output, result.output
    assert not output.exists() and sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_a_staging_folder_left_by_a_killed_run_goes_with_the_next_run(tmp_path):
    """A run killed with SIGKILL cannot remove its staging folder; the next run into the same folder does (its
    process is gone), and leaves a live run's alone."""
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".out.partial-{dead.pid}"
    left.mkdir()
    (left / "decode.json").write_text("{}")
    live = tmp_path / f".out.partial-{os.getppid()}"  # the test runner's parent: alive, and never this run
    live.mkdir()
    result = run("decode", "--analytic", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--batch", "1,2",
                 "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "out"]
