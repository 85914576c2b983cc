"""The file readers a user's input goes through, fuzzed: nested and odd-typed JSON in a trace (CSV and Mooncake
.jsonl) and in calibrate's benchmark files (vLLM's, GuideLLM's), odd TOML in a --gpu-spec sheet.  Each either
reads the file or refuses it with the project's one bad-input error (``BadInputError`` or a subclass: one line);
any other exception is a bug (issue 37: ``RecursionError``, ``AttributeError``, ``ValueError`` from int(2.5), ...).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline.calibrate.bench import read_bench
from roofline.core.errors import BadInputError
from roofline.serving.workload import load_trace
from roofline.specs.gpus import load_gpu_spec_file, profiles_dir

DATA = Path(__file__).parent / "data"
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Any JSON value, nested a few levels: every type where the readers expect another.
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)
# Arrays nested past Python's recursion limit (and past the readers' nesting cap), as text.
DEEP_TEXT = st.integers(min_value=60, max_value=20_000).map(lambda depth: "[" * depth + "]" * depth)


def reads_or_refuses(read, *args) -> None:
    """The reader's contract: a value, or a BadInputError in one line; any other exception fails the test."""
    try:
        read(*args)
    except BadInputError as exc:
        assert "\n" not in str(exc), str(exc)


# --- traces -----------------------------------------------------------------------------------------------------

MOONCAKE_ROW = {"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}


@FUZZ
@given(key=st.sampled_from([*MOONCAKE_ROW, "extra"]), value=JSON_VALUES, whole=st.none() | JSON_VALUES,
       deep=st.none() | DEEP_TEXT)
def test_a_mooncake_trace_reads_or_refuses_whatever_its_lines_hold(tmp_path, key, value, whole, deep):
    lines = [json.dumps(MOONCAKE_ROW), json.dumps({**MOONCAKE_ROW, key: value})]
    lines += [json.dumps(whole)] if whole is not None else []
    lines += [deep] if deep is not None else []
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    reads_or_refuses(load_trace, path)


@FUZZ
@given(header=st.lists(st.sampled_from(["arrival_s", "prompt_tokens", "output_tokens", "x"]), min_size=1,
                       max_size=4),
       rows=st.lists(st.lists(st.text(max_size=8) | st.floats(allow_nan=True).map(str)
                              | st.integers(-10**30, 10**30).map(str), min_size=0, max_size=4), max_size=4))
def test_a_csv_trace_reads_or_refuses_whatever_its_cells_hold(tmp_path, header, rows):
    stream = io.StringIO()
    writer = csv.writer(stream)
    writer.writerow(header)
    writer.writerows(rows)
    path = tmp_path / "trace.csv"
    path.write_text(stream.getvalue(), encoding="utf-8")
    reads_or_refuses(load_trace, path)


# --- calibrate's benchmark files ------------------------------------------------------------------------------

def _vllm() -> dict:
    return {"backend": "vllm", "model_id": "m", "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None,
            "num_prompts": 3, "duration": 1.0, "input_lens": [10, 20, 30], "output_lens": [4, 2, 3],
            "ttfts": [0.05, 0.04, 0.07], "itls": [[0.01, 0.02, 0.01], [0.01], [0.03, 0.01]], "errors": ["", "", ""]}


@FUZZ
@given(key=st.sampled_from(list(_vllm())), index=st.integers(0, 3), inner=st.integers(0, 2), value=JSON_VALUES,
       depth=st.sampled_from(["key", "item", "inner"]), closed=st.booleans())
def test_a_vllm_result_reads_or_refuses_whatever_its_keys_hold(tmp_path, key, index, inner, value, depth, closed):
    # closed: a closed loop of 2 (rate inf, max_concurrency 2), whose send times are read from the latencies
    document = {**_vllm(), **({"request_rate": "inf", "max_concurrency": 2} if closed else {})}
    target = document[key]
    if depth == "key" or not isinstance(target, list) or index >= len(target):
        document[key] = value
    elif depth == "inner" and isinstance(target[index], list) and inner < len(target[index]):
        target[index][inner] = value
    else:
        target[index] = value
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    reads_or_refuses(read_bench, path)


def _guidellm() -> dict:
    """The committed GuideLLM report, cut to one benchmark of three requests (the fuzz's own copy)."""
    document = json.loads((DATA / "engine-bench" / "guidellm-calibration.json").read_text(encoding="utf-8"))
    benchmark = document["benchmarks"][0]
    benchmark["requests"]["successful"] = benchmark["requests"]["successful"][:3]
    document["benchmarks"] = [benchmark]
    return document


GUIDELLM = _guidellm()
REQUEST_KEYS = ["info", "request_start_time", "prompt_tokens", "output_tokens"]
TIMING_KEYS = ["first_token_iteration", "last_token_iteration"]


@FUZZ
@given(where=st.sampled_from(["metadata", "benchmarks", "benchmark", "config", "requests", "successful", "row",
                              *REQUEST_KEYS, *TIMING_KEYS, "timings", "errored"]),
       value=JSON_VALUES)
def test_a_guidellm_report_reads_or_refuses_whatever_its_keys_hold(tmp_path, where, value):
    document = copy.deepcopy(GUIDELLM)
    benchmark = document["benchmarks"][0]
    row = benchmark["requests"]["successful"][1]
    if where in ("metadata", "benchmarks"):
        document[where] = value
    elif where == "benchmark":
        document["benchmarks"][0] = value
    elif where == "config":
        benchmark["config"] = value
    elif where in ("requests",):
        benchmark["requests"] = value
    elif where in ("successful", "errored"):
        benchmark["requests"][where] = value
    elif where == "row":
        benchmark["requests"]["successful"][1] = value
    elif where in REQUEST_KEYS:
        row[where] = value
    elif where == "timings":
        row["info"]["timings"] = value
    else:
        row["info"]["timings"][where] = value
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    reads_or_refuses(read_bench, path)


@FUZZ
@given(deep=DEEP_TEXT, sglang=st.booleans())
def test_a_benchmark_file_nested_deep_is_refused_in_one_line(tmp_path, deep, sglang):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_vllm()) + "\n" + deep if sglang else deep, encoding="utf-8")
    with pytest.raises(BadInputError, match="nested"):
        read_bench(path)


# --- a --gpu-spec sheet ----------------------------------------------------------------------------------------

SHEET = (profiles_dir() / "gpus" / "a100-pcie-80gb.toml").read_text(encoding="utf-8")
ASSIGNMENTS = [m.start() for m in re.finditer(r"^[A-Za-z_0-9]+ = ", SHEET, flags=re.MULTILINE)]
TOML_VALUES = (st.sampled_from(["nan", "inf", "-inf", "0", "-1", "1e300", "1e-300", '"fast"', "true", "[1, 2]",
                                "{ a = 1 }", "[]", '""', "2024-01-01", "[[1], [2]]", '{ x = "y" }'])
               | st.integers(-10**40, 10**40).map(str) | st.floats(allow_nan=False).map(repr)
               | st.integers(1, 3000).map(lambda depth: "[" * depth + "]" * depth))


@FUZZ
@given(line=st.sampled_from(ASSIGNMENTS), value=TOML_VALUES, drop=st.booleans())
def test_a_gpu_spec_sheet_reads_or_refuses_whatever_its_figures_hold(tmp_path, line, value, drop):
    end = SHEET.index("\n", line)
    key = SHEET[line:end].split(" = ")[0]
    text = SHEET[:line] + ("" if drop else f"{key} = {value}") + SHEET[end:]
    path = tmp_path / "fuzz-gpu.toml"
    path.write_text(text, encoding="utf-8")
    reads_or_refuses(load_gpu_spec_file, path)
