"""Text a person reads: help without printf escapes, messages in readable units on one line each, flags
named as they are spelled, and one formatter for quantities (roofline.core.units)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.core.units import interval_digits, quantity, seconds, si, si_bytes, significant
from roofline.result.io import save_result
from tests.conftest import make_point, make_result

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value, unit, text", [
    (16896, "B", "16.9 kB"), (1.6e10, "B", "16 GB"), (16000008192.0, "B", "16 GB"), (14_320_000, "B", "14.3 MB"),
    (999.6e3, "B", "1 MB"), (4.8e12, "B/s", "4.8 TB/s"), (0.5, "FLOP/byte", "0.5 FLOP/byte"), (2e19, "B", "20 EB"),
    (1e24, "B", "1000000 EB"), (0, "W", "0 W"), (None, "W", "–"),
])
def test_quantity(value, unit, text):
    assert quantity(value, unit) == text


@pytest.mark.parametrize("value, text", [(3.95, "3.95 s"), (3956.0, "3960 s"), (0.0395, "39.5 ms"),
                                         (2.04e-5, "20.4 µs"), (9.996e-3, "10 ms"), (5e-10, "0.5 ns")])
def test_seconds(value, text):
    assert seconds(value) == text


def test_significant_never_uses_an_exponent():
    for value in (1e-7, 3.14159e-4, 1.0, 123456.0, 9.9999e5, 1e21):
        assert "e" not in significant(value)
    assert significant(0.014321) == "0.0143" and significant(1234.6, 4) == "1235"
    assert si_bytes(8448) == "8.45 kB"


@pytest.mark.parametrize("value, low, high, digits", [
    (4.28e12, 4.2795e12, 4.2844e12, 3),  # ±0.06%: three digits, as the fixed rule printed
    (4.243, 4.187, 4.299, 2),  # ±0.056: the tenths are known, the hundredths are not
    (709.6, 687.3, 711.0, 1),  # ±12: the tens are noise
    (12.46, 4.5, 12.8, 1),  # never fewer than one
    (100.0, 99.99, 100.01, 4), (100.0, 100.0, 100.0, 4),  # never more than four
    (100.0, None, 101.0, 3), (100.0, 99.0, float("inf"), 3), (None, 1.0, 2.0, 3),  # no interval: the fixed three
])
def test_a_figure_takes_its_digits_from_its_interval(value, low, high, digits):
    assert interval_digits(value, low, high) == digits


def test_the_fit_table_prints_each_fitted_figure_to_its_interval():
    from roofline.analysis.series import analyse
    from roofline.report.tables import series_table
    from roofline.result.io import load_result

    analysis = analyse(load_result(ROOT / "tests/data/h200/first-run-sweep.json"))
    header, rows = series_table(analysis)
    for s, row in zip(analysis["series"], rows, strict=True):
        bandwidth = row[header.index("bandwidth")]
        assert bandwidth == si(s["bandwidth_bytes_per_s"], "B/s", interval_digits(s["bandwidth_bytes_per_s"],
                                                                                    *s["bandwidth_ci95"]))
    gemv = rows[[s["op"] for s in analysis["series"]].index("gemv")]
    gemm = next(r for s, r in zip(analysis["series"], rows, strict=True) if (s["op"], s["n"]) == ("gemm", 8192))
    assert gemv[2] == "4.28 TB/s"  # one point's median CI of ±0.06%: three digits
    assert gemm[2] == "4.2 TB/s" and gemm[4] == "700 TFLOP/s"  # bootstrap intervals of ±1.3% and ±1.7%


def test_the_sweep_summary_prints_each_rate_to_its_points_interval():
    from roofline.analysis.summary import summarize_series
    from roofline.result.io import load_result

    rows = [r for r in summarize_series(load_result(ROOT / "tests/data/h200/first-run-sweep.json")) if r.low_batch]
    assert rows
    for row in rows:
        low, high = row.low_batch_bytes_per_s_ci95
        assert low <= row.low_batch_bytes_per_s <= high
        low, high = row.peak_flop_per_s_ci95
        assert low <= row.peak_flop_per_s <= high


def test_sweep_help_has_no_printf_escapes_and_lists_all_devices():
    # A wide terminal: help text is wrapped, and we read it, not its line breaks.
    text = " ".join(CliRunner().invoke(main, ["sweep", "--help"], terminal_width=200).output.split())
    assert "95% CI" in text and "%%" not in text
    assert "auto | cpu | cuda | cuda:N | all" in text


def test_resume_conflict_names_flags_as_they_are_spelled(tmp_path):
    path = tmp_path / "r.json"
    save_result(make_result([make_point()]), path)
    result = CliRunner().invoke(main, ["sweep", "--resume", str(path), "--dtype", "fp32", "--op", "gemm",
                                       "--l2", "warm", "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 2
    assert "--op, --dtype, --l2, --output" in result.output and "--dtypes" not in result.output


def test_stderr_messages_are_single_lines_without_a_leading_blank_when_piped(tmp_path):
    """Through a pipe (not a terminal): the first line is the message, and a long one is not folded at 80."""
    out = subprocess.run([sys.executable, "-m", "microbench.cli", "sweep", "--device", "cpu", "--op", "gemm",
                          "--dtype", "fp32", "--shape", "64x64", "--batch", "1", "--no-ceilings",
                          "--max-memory", "1K", "-o", str(tmp_path / "x.json")],
                         cwd=ROOT, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert lines[0].startswith("gpubench: error: --max-memory 1 kB is below"), out.stderr
    assert len(lines) == 1 and len(lines[0]) > 80


def test_printed_sentences_are_not_folded_when_stdout_is_piped():
    """A sentence on stdout (a warning, a verdict) stays one line through a pipe, however long; tables still
    lay out to the console's width."""
    sentence = "warning: " + " ".join(["word"] * 60)  # 300 characters
    script = ("from microbench.cli.render import stdout; from rich.table import Table\n"
              f"stdout.print({sentence!r})\n"
              "t = Table('a', 'b'); t.add_row('x' * 100, 'y' * 100); stdout.print(t)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == sentence
    assert max(len(line) for line in lines[1:]) <= 150


@pytest.mark.slow
def test_decode_summary_reads_once_in_readable_units(measured_decode):
    run = CliRunner().invoke(main, ["decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h200-sxm",
                                    "--efficiency", "flat", "--batch", "1,2", "--json"])
    assert run.exit_code == 0, run.output
    summary = json.loads(run.output)["summary"][0]
    assert summary.startswith("analytic, achievable ceilings: NVIDIA H200")
    assert "e+" not in summary and " GB" in summary and " ms per token" in summary
    folder, _ = measured_decode  # the document --json prints is the one decode.json holds
    line = json.loads((folder / "decode.json").read_text())["summary"][0]
    assert line.startswith("measured on ") and "measured, measured" not in line
