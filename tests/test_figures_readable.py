"""Figures as a reader sees them once drawn: legends inside the figure and off the points, tick labels that do
not run into each other, log axes that keep labelled ticks over any span."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from serving_helpers import token_linear_profile  # noqa: E402

from roofline.analysis.formats import BEYOND  # noqa: E402
from roofline.analysis.series import analyse  # noqa: E402
from roofline.report.format_plot import format_figure  # noqa: E402
from roofline.report.plots import roofline_figure  # noqa: E402
from roofline.report.ticks import ReadableLogLocator  # noqa: E402
from roofline.result.io import load_result  # noqa: E402
from roofline.serving.policies import parse_policy  # noqa: E402
from roofline.serving.report import itl_figure, latency_figure  # noqa: E402
from roofline.serving.simulate import simulate  # noqa: E402
from roofline.serving.workload import make_workload  # noqa: E402
from tests.conftest import make_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# A real CPU sweep whose measured roof is the sweep's own fastest point: the roof's label is long, and the gemv
# and bmm points sit at the lowest intensities, bottom left.
CPU_SWEEP = ROOT / "results" / "cpu-amd-epyc-2core-20261202-ci5.json"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _labelled_ticks(axis):
    """The tick labels drawn with text within the axis' view, major and minor (matplotlib labels the minor
    ticks of a log axis that spans about a decade)."""
    low, high = sorted(axis.get_view_interval())
    ticks = [*zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=True),
             *zip(axis.get_minorticklocs(), axis.get_minorticklabels(), strict=True)]
    return [label for tick, label in ticks if label.get_text() and low <= tick <= high]


def _assert_apart(labels):
    """No two labels' boxes as drawn (the figure drawn first) overlap."""
    boxes = [label.get_window_extent() for label in labels]
    for (a, first), (b, second) in itertools.combinations(zip(labels, boxes, strict=True), 2):
        assert not first.overlaps(second), f"tick labels {a.get_text()!r} and {b.get_text()!r} overlap"


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "w4a16"])
def test_the_roofline_legend_stays_in_the_figure_and_off_every_point(dtype):
    result = load_result(CPU_SWEEP)
    figure = roofline_figure(result, analyse(result), dtype)
    assert figure is not None
    figure.canvas.draw()
    ax = figure.axes[0]
    drawn = ax.get_legend()
    assert drawn is not None
    legend = drawn.get_window_extent()
    box = figure.bbox
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and box.y0 <= legend.y0 and legend.y1 <= box.y1, \
        (legend, box)
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " "):
            continue
        points = ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()]))
        hidden = [tuple(p) for p in points if legend.contains(*p)]
        assert not hidden, f"{line.get_label()!r}: points under the legend"


def _format_layer(speedups: list[float]):
    """A layer measured in bf16 and w4a16 whose speed-up runs through ``speedups``, one batch each (the axis
    is what is tested: the break-even is left out as if beyond the batches)."""
    batches = [2 ** i for i in range(len(speedups))]
    series = [{"backend": "torch", "n": 64, "k": 64, "op": "gemm", "dtype": dtype,
               "points": [{"batch": b, "time_s": 1e-3 * b / (s if dtype == "w4a16" else 1)}
                          for b, s in zip(batches, speedups, strict=True)]} for dtype in ("bf16", "w4a16")]
    comparison = {"format": "w4a16", "baseline": "bf16", "backend": "torch", "n": 64, "k": 64,
                  "batches": batches, "speedup": speedups, "speedup_ci95": [[0.9 * s, 1.1 * s] for s in speedups],
                  "status": BEYOND, "break_even_batch": None, "break_even_ci95": [None, None]}
    return {"series": series}, [comparison]


@pytest.mark.parametrize("speedups", [list(np.geomspace(2.0 ** 10, 2.0 ** -10, 11)), [4.0, 2.5, 1.6, 1.1, 0.8, 0.5],
                                      [1.05, 1.0, 0.97, 0.95]])
def test_the_speedup_axis_keeps_readable_labelled_ticks_over_any_span(speedups):
    result = make_result()
    analysis, comparisons = _format_layer(speedups)
    figure = format_figure(result, analysis, comparisons)
    figure.canvas.draw()
    right = figure.axes[1]
    labels = _labelled_ticks(right.yaxis)
    assert len(labels) >= 2, [label.get_text() for label in labels]
    assert len(labels) <= 9
    _assert_apart(labels)
    assert all(label.get_text().endswith("×") for label in labels)


def test_the_locator_picks_ticks_from_nice_values_within_the_range():
    ticks = ReadableLogLocator(base=2).tick_values(2.0 ** -10, 2.0 ** 10)
    assert 2 <= len(ticks) <= 8 and 1.0 in ticks
    assert all(float(np.log2(t)).is_integer() for t in ticks)
    assert ReadableLogLocator(base=10).tick_values(0.02, 0.03) == [0.02, 0.03]
    narrow = ReadableLogLocator(base=10).tick_values(0.0212, 0.0224)
    assert len(narrow) >= 2 and all(0.0212 <= t <= 0.0224 for t in narrow)


def _runs():
    """Paged and chunked serving of prompts from 100 to 1000 tokens: steps of 18 ms plus 50 µs a token, so the
    latencies span about a decade (20 ms to 0.2 s), where matplotlib labels 3, 4 and 6 x 10^-2 side by side."""
    profile = token_linear_profile(0.018, 0.00005)
    workload = make_workload(120, "poisson:2", "uniform:100:1000", "exp:60:200", seed=1)
    return [simulate(profile, workload, parse_policy(name), None, 0.9) for name in ("paged", "chunked:budget=256")]


def test_latency_and_itl_tick_labels_do_not_overlap_and_say_their_unit():
    runs = _runs()
    for figure in (latency_figure(runs), itl_figure(runs)):
        assert figure is not None
        figure.canvas.draw()
        for ax in figure.axes:
            labels = _labelled_ticks(ax.xaxis)
            assert len(labels) >= 2, [label.get_text() for label in labels]
            _assert_apart(labels)
            assert all(label.get_text().endswith(("s", "ms", "µs")) for label in labels)


def test_the_decode_figure_labels_tokens_per_s_as_plain_numbers_that_do_not_overlap(tmp_path):
    from click.testing import CliRunner

    from microbench.cli.app import main
    from roofline.decode.plot import decode_figure

    run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h200-sxm", "--model", "llama-3-8b",
                                    "-o", str(tmp_path / "d")])
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "d" / "decode.json").read_text(encoding="utf-8"))
    figure = decode_figure(document)
    figure.canvas.draw()
    labels = _labelled_ticks(figure.axes[0].yaxis)
    assert len(labels) >= 2
    _assert_apart(labels)
    assert all(label.get_text().replace(".", "").isdigit() for label in labels), [t.get_text() for t in labels]


def test_a_table_cell_keeps_each_figure_with_its_unit_on_one_line():
    from roofline.report import page

    blocks: list[page.Block] = [page.Table(("peak", "cliffs"), (("100 GFLOP/s", "264, 520, 584"),))]
    text = page.html_page("t", "", blocks, {})
    assert "<td>100&nbsp;GFLOP/s</td>" in text and "<td>264, 520, 584</td>" in text  # lists may still wrap
    assert "| 100 GFLOP/s | 264, 520, 584 |" in page.markdown("t", blocks, {})
