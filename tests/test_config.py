"""One SweepConfig, validated once before torch is imported: each rejected option or combination is one line
and exit 2; the flags are named in one place; --device all hands its children the config as a record."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.points.config import CHILD_FIELDS, FLAGS, PLAN_FIELDS, ConfigError, SweepConfig

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


REJECTED = [
    (["--force"], "--force only goes with --resume or with -o FILE"),
    (["--resume", "r.json", "--batch", "4", "-o", "x.json"], "--resume takes the plan from r.json; do not also give "
                                                             "--batch, --output"),
    (["--device", "all", "-o", "x.json"], "--device all writes one result per GPU: give -o a folder"),
    (["--op", "gemv", "--batch", "1,2"], "gemv is batch 1 by definition: batches 2 need --op gemm"),
    (["--budget", "nan"], "--budget nan: give a finite number"),
    (["--budget", "abc"], "--budget 'abc' is not a number"),
    (["--budget", "0"], "--budget 0: must be more than 0"),
    (["--target-ci", "1"], "--target-ci 1: must be between 0 and 1 (0.01 is 1%)"),
    (["--target-ci", "inf"], "--target-ci inf: give a finite number"),
    (["--telemetry-interval", "0"], "--telemetry-interval 0: must be more than 0"),
    (["--timer", "fast"], "unknown timer 'fast'; choose from graph, eager"),
    (["--l2", "cold"], "unknown L2 policy 'cold'; choose from rotate, warm"),
    (["--backend", "tpu"], "unknown backend 'tpu'; choose from torch, cupy"),
    (["--device", "tpu"], "unknown device 'tpu'; use auto, cpu, cuda, cuda:N or all"),
    (["--dtype", "int4"], "unknown dtype 'int4'"),
    (["--shape", "8x0"], "shape '8x0' must have positive dimensions"),
    (["--batch", "2000000"], "batch 2000000 is larger than 1048576"),
    (["--max-memory", "0"], "--max-memory must be a positive number of bytes"),
    (["--max-memory", "lots"], "--max-memory 'lots' is not a size"),
    (["--record", "{not json"], "--record is not JSON"),
    (["--record", "{}", "--batch", "4"], "--record carries the whole plan; do not also give --batch"),
    (["--record", json.dumps({"budget_s": "fast"})], "--budget 'fast' is not a number"),
    (["--serial"], "--serial only goes with --device all"),
    (["--op", ""], "--op '': give at least one value"),
    (["--dtype", " , "], "--dtype ' , ': give at least one value"),
    (["--seed", "x"], "Invalid value for '--seed': 'x' is not a valid integer"),  # click's own conversion
    (["--frobnicate"], "No such option '--frobnicate'"),
]


@pytest.mark.parametrize("args, message", REJECTED, ids=[" ".join(a) for a, _ in REJECTED])
def test_each_rejected_sweep_is_one_line_and_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = run("sweep", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpubench: error: ") and message in lines[0], result.output
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_ceilings_force_needs_an_output():
    result = run("ceilings", "--device", "cpu", "--force")
    assert result.exit_code == 2
    assert result.output.strip() == "gpubench: error: --force only goes with -o FILE (to replace it)"


def test_building_and_refusing_configs_does_not_import_torch():
    """Validation happens before anything heavy: the config module, a valid config, and the CLI refusing
    bad options all leave torch unimported (checked in a fresh interpreter)."""
    code = ("import sys; from click.testing import CliRunner; from microbench.points.config import SweepConfig; "
            "from microbench.cli.app import main; "
            "c = SweepConfig.from_options({'ops': ('gemm',), 'dtypes': ('fp32,bf16',), 'shapes': ('64x32',), "
            "'batches': '1:8', 'budget_s': '0.1', 'max_memory_bytes': '1G'}); "
            "assert c.batches == (1, 2, 4, 8) and c.max_memory_bytes == 10**9, c; "
            "codes = [CliRunner().invoke(main, ['sweep', *a]).exit_code for a in "
            "(['--budget', 'inf'], ['--op', 'gemv', '--batch', '4'], ['--force'], ['--timer', 'x'])]; "
            "print(codes, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["[2,", "2,", "2,", "2]", "False"], out.stdout + out.stderr


def test_library_callers_get_the_same_validation():
    with pytest.raises(ConfigError, match="--budget -1: must be more than 0"):
        SweepConfig(budget_s=-1.0)
    with pytest.raises(ConfigError, match="--target-ci nan: give a finite number"):
        SweepConfig(target_rel_ci=float("nan"))
    with pytest.raises(ConfigError, match="gemv is batch 1"):
        SweepConfig(ops=("gemv",), batches=(1, 8))
    with pytest.raises(ConfigError, match="malformed"):
        SweepConfig.from_record({"shapes": 7})


def test_every_sweep_option_is_declared_from_the_one_table():
    sweep = main.commands["sweep"]
    declared = {param.name: tuple(param.opts) for param in sweep.params if param.name != "help"}
    assert declared == {field: option.flags for field, option in FLAGS.items()}
    ceilings = main.commands["ceilings"]
    assert all(tuple(p.opts) == FLAGS[p.name].flags for p in ceilings.params if p.name != "help")
    assert set(PLAN_FIELDS) < set(FLAGS) and set(CHILD_FIELDS) <= set(FLAGS)


def test_the_record_round_trips_and_is_what_each_child_gets(tmp_path):
    from microbench.sweep.multi import child_commands

    options = {"device": "all", "ops": ("gemm",), "dtypes": ("fp32",), "shapes": ("256x128",), "batches": "1,2",
               "budget_s": "0.02", "with_ceilings": False, "report": True, "require_idle": True,
               "output": tmp_path}
    parent = SweepConfig.from_options(options, given=set(options))
    assert SweepConfig.from_record(json.loads(json.dumps(parent.to_record()))) == \
        replace(parent, output=None, report=False, require_idle=False)  # the result keeps the plan only
    (device, argv, output), *_ = child_commands(parent, tmp_path)
    record = argv[argv.index("--record") + 1]
    child = SweepConfig.from_options({"device": device, "output": output, "record": record},
                                     given={"device", "output", "record"})
    assert child == replace(parent, device=device, output=output)
    assert argv[argv.index("--device") + 1] == device and argv[argv.index("-o") + 1] == str(output)
