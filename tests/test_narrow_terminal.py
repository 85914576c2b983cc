"""At 100 columns every table stays readable: a table wider than the terminal is split into parts that fit
(the row's name again in each), so rich never squeezes a column until a word breaks ('inco nclusive'), and
each verdict leads with its answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli import render
from microbench.cli.app import main
from microbench.cli.render import column_groups

ROOT = Path(__file__).resolve().parent.parent
RESULTS = [ROOT / "results" / "cpu-amd-epyc-2core-20261201.json", ROOT / "results" / "cpu-amd-epyc-2core-20261202.json"]
WIDTH = 100
TABLE_EDGES = tuple("┏┃┡│└")


@pytest.fixture
def narrow(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", str(WIDTH))  # the console reads COLUMNS at each print


def _table_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(TABLE_EDGES)]


def test_columns_are_grouped_to_fit_with_the_name_in_each():
    assert column_groups([10, 20, 20, 20], 100) == [[0, 1, 2, 3]]
    assert column_groups([10, 40, 40, 40], 100) == [[0, 1, 2], [0, 3]]
    assert column_groups([10, 200], 100) == [[0, 1]]  # alone and too wide: its own part, wrapped at words
    assert column_groups([10], 100) == [[0]]


def test_compare_at_100_columns_breaks_no_word(narrow):
    run = CliRunner().invoke(main, ["compare", *map(str, RESULTS)])
    assert run.exit_code == 0, run.output
    lines = _table_lines(run.output)
    assert lines and max(len(line) for line in lines) <= WIDTH
    table = "\n".join(lines)
    for word in ("inconclusive", "baseline", "GFLOP/s", "median", "faster", "(perf_counter))"):
        assert word in table, word
    # every piece of a status word belongs to the whole word: none is cut across two lines
    assert table.count("inco") == table.count("inconclusive")
    assert table.count("basel") == table.count("baseline")
    assert "(2/" in run.output  # the wide table was split, not squeezed


def test_fit_at_100_columns_breaks_no_word_and_each_verdict_leads_with_its_answer(narrow):
    run = CliRunner().invoke(main, ["fit", str(RESULTS[1])])
    assert run.exit_code == 0, run.output
    lines = _table_lines(run.output)
    assert lines and max(len(line) for line in lines) <= WIDTH
    assert "gemm fp32 2048×4096" in "\n".join(lines)
    verdicts = [line for line in run.output.splitlines() if line.startswith(("gemm ", "bmm "))]
    assert verdicts
    for verdict in verdicts:
        answer = verdict.split(". ")[0]
        assert len(answer) <= WIDTH and " on AMD EPYC" in answer, answer
    # the answer first, in the words of the sentence (the figures are the committed run's)
    assert re.search(r"^gemm fp32 2048x4096 turns compute-bound at batch ~\d+ \(95% CI \d+–\d+\) on AMD EPYC\.",
                     run.output, flags=re.MULTILINE), run.output


def test_simulate_at_100_columns_splits_its_table(narrow, tmp_path):
    tiny = str(ROOT / "tests" / "data" / "tiny-llama-config.json")
    run = CliRunner().invoke(main, ["simulate", "--analytic", "--gpu", "h100-sxm", "--hf-config", tiny,
                                    "--requests", "20", "--slo", "ttft_p90=1", "--policy", "static:batch=4",
                                    "--policy", "paged", "--no-report", "-o", str(tmp_path / "sim")])
    assert run.exit_code == 0, run.output
    table = run.output[:run.output.index("tiny-llama-test on")]
    assert max(len(line) for line in table.splitlines()) <= WIDTH
    assert table.count("static:batch=4") >= 2  # every part names its rows
    for header in ("tokens/s", "TTFT p50/p90/p99", "KV occ mean/max", "goodput req/s", "capacity req/s"):
        assert header in table


def test_the_sweep_summary_at_100_columns_breaks_no_word(narrow, capsys):
    from roofline.result.io import load_result

    render.print_sweep_summary(load_result(RESULTS[1]), None)
    lines = _table_lines(capsys.readouterr().out)
    assert lines and max(len(line) for line in lines) <= WIDTH
    table = "\n".join(lines)
    assert "gemm bf16 2048×4096" in table and "GFLOP/s" in table and "bytes/s at lowest B" in table
