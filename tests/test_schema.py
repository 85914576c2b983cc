import json
import os

import pytest

from roofline.result.document import SCHEMA_VERSION, Point
from roofline.result.io import ResultError, load_result, result_to_json, save_result
from tests.conftest import make_point, make_result

GOLDEN_V1 = os.path.join(os.path.dirname(__file__), "golden", "result_v1.json")


def sample_result():
    return make_result([
        make_point("gemv", "bf16", 1, 4096, 4096, 2e-5),
        make_point("gemm", "bf16", 64, 4096, 4096, 3e-5,
                   correctness={"rel_err": 1e-3, "tolerance": 1e-2, "passed": True}),
        make_point("bmm", "fp32", 8, 512, 128, 1e-5),
        make_point("gemm", "fp8", 16, 4096, 4096, status="unsupported", reason="needs a GPU"),
    ])


def test_round_trip_is_exact(tmp_path):
    result = sample_result()
    path = tmp_path / "r.json"
    save_result(result, path)
    loaded = load_result(path)
    assert loaded == result
    assert result_to_json(loaded) == path.read_text()


def test_document_has_si_keys_and_derived_rates(tmp_path):
    document = json.loads(result_to_json(sample_result()))
    point = document["points"][1]
    assert point["flop"] == 2 * 64 * 4096 * 4096
    assert point["bytes"] == 2 * (4096 * 4096 + 64 * 4096 + 64 * 4096)
    assert point["time_s"] == pytest.approx(3e-5, rel=0.01)
    assert point["bytes_per_s"] == pytest.approx(point["bytes"] / point["time_s"])
    assert set(point["stats"]) == {"n", "median_s", "q1_s", "q3_s", "min_s", "mean_s", "ci95_s"}


def test_golden_v1_still_loads():
    result = load_result(GOLDEN_V1)
    assert result.schema_version == SCHEMA_VERSION == 1
    assert [p.op for p in result.points] == ["gemv", "gemm", "bmm", "gemm"]
    assert result.points[1].stats.median_s == pytest.approx(3e-5, rel=0.01)
    assert result.points[3].status == "unsupported"


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "r.json"
    save_result(sample_result(), path)
    save_result(sample_result(), path)
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    save_result(sample_result(), path)
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        save_result(make_result(), path)
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["r.json"]


def _write(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema_version=99), "newer"),
    (lambda d: d.pop("schema_version"), "schema_version"),
    (lambda d: d.pop("device"), "missing field"),
    (lambda d: d["points"][0].update(op="conv"), "unknown op"),
    (lambda d: d["points"][0].update(batch=-1), "batch"),
    (lambda d: d["points"][0].update(samples_s=[1.0, -2.0]), "samples_s"),
    (lambda d: d["points"][1].update(flop=12), "disagrees"),
    (lambda d: d["points"][1].update(status="done"), "status"),
    (lambda d: d["device"].update(kind="tpu"), "device.kind"),
])
def test_invalid_documents_give_one_line_errors(tmp_path, mutate, message):
    document = json.loads(result_to_json(sample_result()))
    mutate(document)
    with pytest.raises(ResultError) as info:
        load_result(_write(tmp_path, json.dumps(document)))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"schema_version": 1, "x": NaN}', "\x00\x01"])
def test_corrupt_files(tmp_path, text):
    with pytest.raises(ResultError) as info:
        load_result(_write(tmp_path, text))
    assert "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ResultError, match="no such file"):
        load_result(tmp_path / "nope.json")
    with pytest.raises(ResultError, match="directory"):
        load_result(tmp_path)


def test_nan_samples_cannot_be_saved():
    with pytest.raises(ValueError):
        Point(op="gemm", dtype="bf16", batch=1, n=8, k=8, backend="torch", status="ok",
              samples_s=(float("nan"),))


def test_non_ok_point_needs_a_reason():
    with pytest.raises(ValueError):
        Point(op="gemm", dtype="bf16", batch=1, n=8, k=8, backend="torch", status="oom")
