"""Shared test helpers: builders for results and points, a seeded clock, GPU skipping, and the session's shared
real runs and committed documents (each made once for every test that only reads it)."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from roofline.result.document import Point, Result


class SeededClock:
    """A fake clock that advances only when a fake sample is taken: statistics without real time."""

    def __init__(self, seed: int = 0, median_s: float = 1e-3, spread: float = 0.02):
        self.rng = random.Random(seed)
        self.t = 0.0
        self.median_s = median_s
        self.spread = spread
        self.calls = 0

    def now_s(self) -> float:
        return self.t

    def sample(self) -> list[float]:
        self.calls += 1
        value = self.median_s * self.rng.lognormvariate(0, self.spread)
        self.t += value
        return [value]


def make_point(op="gemm", dtype="bf16", batch=1, n=4096, k=4096, time_s=1e-4, status="ok", samples=11,
               backend="torch", **extra) -> Point:
    """An ok point whose samples scatter ±1% around ``time_s`` (deterministic)."""
    if status != "ok":
        return Point(op=op, dtype=dtype, batch=batch, n=n, k=k, backend=backend, status=status,
                     reason=extra.pop("reason", "test"), **extra)
    values = tuple(time_s * (1 + 0.01 * ((i * 7) % 5 - 2) / 2) for i in range(samples))
    return Point(op=op, dtype=dtype, batch=batch, n=n, k=k, backend=backend, status="ok",
                 timer=extra.pop("timer", "perf_counter"), samples_s=values, **extra)


def make_result(points=(), device=None, ceilings=None, telemetry=None, settings=None, **extra) -> Result:
    return Result(
        tool={"name": "gpubench", "version": "test"},
        created_at="2026-01-01T00:00:00.000Z",
        argv=("gpubench", "test"),
        host={"hostname": "test"},
        device=device or {"kind": "cpu", "name": "test cpu", "sku": None},
        settings=settings or {"timer": "perf_counter"},
        ceilings=ceilings or {},
        points=tuple(points),
        telemetry=telemetry or {"source": "none", "reason": "test"},
        **extra,
    )


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


requires_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU on this machine (run on a GPU host)")


def _database_installed() -> bool:
    from roofline.reference import database

    return database.installed()


# The reference tier: tests that read NVIDIA's aiconfigurator-core database (the [reference] extra).  Marked, so
# the README's `pytest` leaves them to `pytest -m reference`, and skipped, saying why, where the extra is absent.
NEEDS_DATABASE = (pytest.mark.reference,
                  pytest.mark.skipif(not _database_installed(), reason="the [reference] extra (aiconfigurator-core, "
                                     "Python 3.11 to 3.13) is not installed"))


def needs_database(test):
    for mark in NEEDS_DATABASE:
        test = mark(test)
    return test


ROOT = Path(__file__).resolve().parent.parent
COMMITTED_CPU_RESULT = ROOT / "results" / "cpu-amd-epyc-2core-20261201.json"
TINY_LLAMA = {"_name_or_path": "tiny-llama-test", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1024, "hidden_act": "silu"}


@pytest.fixture(scope="session", autouse=True)
def reference_rows_cache(tmp_path_factory) -> Path:
    """The reference tables' rows that gpubench keeps between processes (roofline.reference.rows_cache) go to a
    folder of this session's, never the user's ~/.cache (commands the tests start in subprocesses inherit it)."""
    folder = tmp_path_factory.mktemp("reference-rows")
    os.environ["GPUBENCH_CACHE_DIR"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def committed_cpu_result(tmp_path_factory) -> Path:
    """A copy of a committed real CPU sweep (gemv, gemm and bmm in fp32 and bf16, with measured ceilings): for
    tests that read a result document and are not about measuring one.  A copy, so no command writes beside
    the committed file."""
    copy = tmp_path_factory.mktemp("committed") / "cpu.json"
    shutil.copyfile(COMMITTED_CPU_RESULT, copy)
    return copy


@pytest.fixture(scope="session")
def measured_decode(tmp_path_factory):
    """One real measured ``gpubench decode`` of a tiny Llama on the CPU (batches 1, 4, 16), shared by the
    tests that read what it wrote or printed: (output folder, printed text)."""
    from click.testing import CliRunner

    from microbench.cli.app import main

    folder = tmp_path_factory.mktemp("decode")
    config = folder / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    run = CliRunner().invoke(main, ["decode", "--hf-config", str(config), "--context", "128", "--batch", "1,4,16",
                                    "--device", "cpu", "--dtype", "fp32", "--budget", "0.03",
                                    "-o", str(folder / "out")], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    return folder / "out", run.output


@pytest.fixture(scope="session")
def quick_sweep(tmp_path_factory):
    """One real ``gpubench sweep --device cpu --quick --report`` (ceilings, every op, the report beside it),
    shared by the tests that check what a fresh sweep writes, prints and validates as: (result file, output)."""
    from click.testing import CliRunner

    from microbench.cli.app import main

    output = tmp_path_factory.mktemp("sweep") / "x.json"
    result = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--quick", "--report", "-o", str(output)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return output, result.output
