"""Provenance: the git sha only when the package's own folder is a checkout of gpubench, else a content hash."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from microbench.device.provenance import content_hash, tool_info

ROOT = Path(__file__).resolve().parent.parent


def copy_of_the_package(where: Path) -> Path:
    where.mkdir(parents=True)
    for package in ("microbench", "roofline"):
        shutil.copytree(ROOT / package, where / package, ignore=shutil.ignore_patterns("__pycache__"))
    return where


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def parent_repository(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    parent = tmp_path / "parent"
    parent.mkdir()
    git(parent, "init", "-q")
    (parent / "other.txt").write_text("another project\n")
    git(parent, "add", "other.txt")
    git(parent, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "other project")
    return parent


def test_a_copy_inside_another_checkout_does_not_claim_its_sha(parent_repository):
    """The first H200 run recorded the sha of the folder above the copy of gpubench."""
    copy = copy_of_the_package(parent_repository / "gpubench")
    tool = tool_info(copy)
    assert tool["git_sha"] is None and tool["git_dirty"] is None
    assert tool["provenance"].startswith("content hash")
    assert tool["content_sha256"] == content_hash(ROOT)  # the same files: the same hash


def test_the_content_hash_changes_with_any_package_file(tmp_path):
    copy = copy_of_the_package(tmp_path / "copy")
    before = content_hash(copy)
    (copy / "microbench" / "timing" / "kernels" / "stream.cu").write_text("// changed\n", encoding="utf-8")
    changed = content_hash(copy)
    assert changed != before
    (copy / "microbench" / "notes.txt").write_text("not a package file")  # .txt is not hashed
    assert content_hash(copy) == changed


def test_a_checkout_of_this_project_records_its_sha():
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--show-toplevel"],
                                                     capture_output=True).returncode != 0:
        pytest.skip("not running from a git checkout")
    tool = tool_info()
    assert tool["git_sha"] == git(ROOT, "rev-parse", "HEAD")
    assert tool["provenance"] == "git checkout of gpubench" and len(tool["content_sha256"]) == 64
