"""What is at ``-o`` is never clobbered: only a regular file is ever replaced (or a new path written); a FIFO,
a symlink, a device node or a directory is refused with exit 2 and left as it was.  Every command with
``-o`` goes through the same check, and ``sweep -o`` over a finished result needs ``--force``."""

from __future__ import annotations

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
