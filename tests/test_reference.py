"""The reference database (NVIDIA's aiconfigurator-core, the optional ``[reference]`` extra): found without importing
it, its GEMM rows imported as a result that fit, report and compare read, a shape looked up in a table (measured,
interpolated, split, refused), and every refusal one line.  Tests that read the database skip, saying why, where the
extra is not installed (it needs Python 3.11 to 3.13)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from conftest import needs_database

from microbench.cli.app import main
from roofline.reference import database
from roofline.reference.database import ReferenceDataError
from roofline.specs.gpus import load_gpu_spec


def _h200_rows(m: int, n: int, k: int, dtype: str = "bfloat16") -> list[float]:
    """The database's own rows of one shape, read here with pyarrow apart from gpubench's reader (latency, ms)."""
    import pyarrow.parquet as pq

    db = database.open_database()
    path, _ = db.table("h200_sxm", "gemm", "vllm", "gemm_perf.parquet")
    table = pq.read_table(path, filters=[("gemm_dtype", "=", dtype), ("m", "=", m), ("n", "=", n), ("k", "=", k)])
    return table.column("latency").to_pylist()


def test_without_the_extra_every_reference_command_says_how_to_install_it(monkeypatch, tmp_path):
    real = database.importlib.util.find_spec
    monkeypatch.setattr(database.importlib.util, "find_spec",
                        lambda name, *a: None if name == database.MODULE else real(name, *a))
    database.open_database.cache_clear()
    try:
        assert not database.installed()
        run = CliRunner().invoke(main, ["import", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "-o",
                                        str(tmp_path / "r.json")])
    finally:
        database.open_database.cache_clear()
    assert run.exit_code == 2
    assert run.output.strip().splitlines() == [
        "gpubench: error: the reference data aiconfigurator-core is not installed: pip install "
        "'gpubench-roofline[reference]' (aiconfigurator-core needs Python 3.11 to 3.13)"]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--reference", "vidur", "--gpu", "h200-sxm"], "--reference vidur: unknown reference; choose from aiconfigurator"),
    (["--reference", "aiconfigurator"], "--reference aiconfigurator needs --gpu SKU"),
    (["--reference", "aiconfigurator", "--gpu", "h200-sxm", "--engine", "tgi"], "--engine tgi: choose from vllm"),
    (["x.csv", "--reference", "aiconfigurator", "--gpu", "h200-sxm"], "drop CSV_FILE"),
    (["x.csv", "--device-name", "H200", "--gpu", "h200-sxm"], "--gpu belongs to --reference"),
    (["x.csv"], "give CSV_FILE and --device-name"),
])
def test_import_refuses_what_it_cannot_take_in_one_line(tmp_path, args, message):
    run = CliRunner().invoke(main, ["import", *args, "-o", str(tmp_path / "r.json")])
    assert run.exit_code == 2, run.output
    assert len(run.output.strip().splitlines()) == 1 and message in run.output, run.output
    assert not (tmp_path / "r.json").exists()


@needs_database
def test_the_database_is_read_in_the_version_it_names_its_current_one():
    db = database.open_database()
    path, version = db.table("h200_sxm", "gemm", "vllm", "gemm_perf.parquet")
    assert version == "0.24.0" and path.parent.name == "0.24.0"  # query_versions.yaml: vllm current 0.24.0
    _, version = db.table("a100_sxm", "gemm", "vllm", "gemm_perf.parquet")
    assert version == "0.14.0"  # its override
    assert database._version_key("1.3.0rc20") < database._version_key("1.3.0") < database._version_key("1.3.0.post1")
    with pytest.raises(ReferenceDataError, match="no data for h100-nvl"):
        db.system(load_gpu_spec("h100-nvl"))


@needs_database
def test_each_sku_mapped_to_a_system_is_the_gpu_its_rows_were_measured_on():
    """The spec sheet's [reference] system must hold rows whose device name its own name pattern matches: a wrong
    mapping would put another GPU's times on this one."""
    from roofline.reference.gemm import GemmTable
    from roofline.specs.gpus import load_gpu_specs

    mapped = {sku: spec for sku, spec in load_gpu_specs().items() if spec.reference_systems}
    assert set(mapped) == {"h200-sxm", "h100-sxm", "b200", "a100-sxm-80gb", "l40s", "gb200", "gb300", "b300"}
    for sku, spec in mapped.items():
        table = GemmTable.read(database.open_database(), spec, "vllm", "bf16")
        assert spec.matches(table.source.device, None), (sku, table.source.device)


@needs_database
def test_import_then_fit_gives_the_series_crossover_with_an_interval(tmp_path):
    output = tmp_path / "R.json"
    run = CliRunner().invoke(main, ["import", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--engine",
                                    "vllm", "--dtype", "bf16", "--shape", "10240x8192", "-o", str(output)])
    assert run.exit_code == 0, run.output
    document = json.loads(output.read_text())
    assert document["origin"] == "imported"
    reference = document["settings"]["reference"]
    assert reference["package"] == "aiconfigurator-core" and reference["engine"] == "vllm"
    assert reference["engine_version"] == "0.24.0" and reference["measured_by"].startswith("NVIDIA")
    assert reference["package_version"] == database.open_database().version
    one = next(p for p in document["points"] if p["batch"] == 1)
    assert one["samples_s"] == pytest.approx([v * 1e-3 for v in _h200_rows(1, 10240, 8192)])  # ms -> s, one row
    fit = CliRunner().invoke(main, ["fit", str(output), "--json"])
    assert fit.exit_code == 0, fit.output
    analysis = json.loads(fit.output)
    series = analysis["series"][0]
    low, high = series["critical_batch_ci95"]
    assert series["status"] == "ok" and low is not None and low <= series["critical_batch"] <= high
    # The spec sheet's ridge puts an H200's bf16 10240x8192 at 216: cuBLAS reaches a little less than its peak.
    assert 150 < series["critical_batch"] < 400
    assert analysis["reference"]["engine"] == "vllm"
    table = CliRunner().invoke(main, ["fit", str(output)])
    assert "reference data from aiconfigurator-core" in table.output and "measured by NVIDIA" in table.output


@needs_database
def test_a_shape_the_database_lacks_is_refused_naming_the_nearest(tmp_path):
    run = CliRunner().invoke(main, ["import", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--shape",
                                    "8192x28672", "-o", str(tmp_path / "r.json")])
    assert run.exit_code == 2
    assert "8192x28672: vllm 0.24.0's bf16 table on h200_sxm did not measure it (nearest: " in run.output
    run = CliRunner().invoke(main, ["import", "--reference", "aiconfigurator", "--gpu", "h200-sxm", "--dtype",
                                    "w4a16", "-o", str(tmp_path / "r.json")])
    assert run.exit_code == 2 and "not w4a16" in run.output


@needs_database
def test_a_lookup_is_measured_interpolated_split_or_refused():
    from roofline.reference.gemm import GemmTable, OutsideTable

    table = GemmTable.read(database.open_database(), load_gpu_spec("h200-sxm"), "vllm", "bf16")
    measured = table.lookup(16, 8192, 8192)
    assert measured.how == "measured" and measured.time_s == table.latency_s[(16, 8192, 8192)]
    # 14336 lies half way from 12288 to 16384: linear in n between the two rows.
    lo, hi = table.latency_s[(16, 12288, 8192)], table.latency_s[(16, 16384, 8192)]
    between = table.lookup(16, 14336, 8192)
    assert between.how == "interpolated" and between.time_s == pytest.approx((lo + hi) / 2)
    # In m and n at once: the four corners' bilinear mean.
    corners = [table.latency_s[(m, n, 8192)] for m in (17, 32) for n in (12288, 16384)]
    assert table.lookup(24.5, 14336, 8192).time_s == pytest.approx(sum(corners) / 4)
    # Wider than the widest measured (65536): two matrices of half the columns each.
    half = table.lookup(1, 64128, 8192).time_s
    assert table.lookup(1, 128256, 8192) == type(measured)(2 * half, "split")
    with pytest.raises(OutsideTable, match="m=40000 is outside the measured 1..32768"):
        table.lookup(40000, 8192, 8192)
    with pytest.raises(OutsideTable, match="k=16 is outside"):
        table.lookup(1, 8192, 16)
    with pytest.raises(OutsideTable, match="n=8 is outside the measured 32..65536"):
        table.lookup(1, 8, 8192)  # a router's 8 columns: below the table, refused rather than guessed


@needs_database
def test_a_dtype_with_several_kernels_takes_the_busiest_and_says_so():
    from roofline.reference.gemm import GemmTable

    table = GemmTable.read(database.open_database(), load_gpu_spec("h200-sxm"), "vllm", "fp8-block")
    assert table.source.kernel == "DeepGemmFp8BlockScaledMMKernel"  # 23,882 rows against 4,736 and 7,123
    assert "DeepGemmFp8BlockScaledMMKernel" in table.source.describe()


@needs_database
def test_compare_puts_a_gpu_sweep_beside_the_reference_of_its_sku(tmp_path):
    """The committed H200 sweep against the database's H200 rows: the reference is the baseline, each verdict's
    reference time is the database's own row (read apart with pyarrow), and what it lacks is said, not filled."""
    import statistics

    sweep = "tests/data/h200/first-run-sweep.json"
    run = CliRunner().invoke(main, ["compare", sweep, "--reference", "aiconfigurator", "--format", "json",
                                    "-o", str(tmp_path / "cmp")])
    assert run.exit_code == 0, run.output
    comparison = json.loads(run.output)["comparison"]
    assert comparison["baseline"] == "aiconfigurator:h200-sxm"
    reference_ms = statistics.median(_h200_rows(1, 10240, 8192))
    first = next(line for line in comparison["reference_verdicts"] if "at batch 1 on bf16 10240x8192" in line)
    assert f"reference {reference_ms * 1e3:.1f} us" in first
    group = next(g for g in comparison["groups"] if (g["n"], g["k"]) == (10240, 8192))
    local = next(r for r in group["rows"] if r["file"] == sweep)
    assert group["speed_vs_baseline"][sweep]["1"] == pytest.approx(reference_ms / 1e3 / local["times_s"]["1"])
    assert any("8192x28672: not in the reference" in line for line in comparison["not_comparable"])
    assert any("the reference has no batch 24" in line for line in comparison["not_comparable"])
    assert (tmp_path / "cmp" / "compare.md").read_text().count("## Against the reference") == 1


def test_compare_against_a_reference_refuses_what_it_cannot_compare_in_one_line(tmp_path):
    cpu = "results/cpu-amd-epyc-2core-20261202.json"
    for args, message in ((["--engine", "vllm"], "--engine names the reference's engine"),
                          (["--reference", "aiconfigurator"], "compares GPU results of a known SKU")):
        if "compares GPU" in message and not database.installed():
            continue
        run = CliRunner().invoke(main, ["compare", cpu, *args])
        assert run.exit_code == 2, run.output
        assert run.output.count("\n") == 1 and message in run.output, run.output


@needs_database
def test_a_table_in_an_older_layout_is_said_as_such_not_as_missing_data(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "data" / "a100_sxm" / "attention"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"batch_size": [1, 2], "latency": [0.1, 0.2]}), folder / "t.parquet")
    db = database.Database(tmp_path, "test")
    with pytest.raises(ReferenceDataError, match="an older table layout, without the columns window_size"):
        db.read(folder / "t.parquet", ["batch_size", "latency"], {"window_size": 0})


@needs_database
def test_a_gemm_cell_measured_again_takes_its_median_and_other_kernels_and_bad_rows_are_left_out(tmp_path):
    """A synthetic table read through GemmTable: a cell of one row is that row; a cell of three rows their median
    (not the first, not the last); the busiest kernel's rows only; a NaN, zero or null latency dropped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from roofline.reference.gemm import GemmTable

    folder = tmp_path / "data" / "sys" / "gemm" / "vllm" / "1.0"
    folder.mkdir(parents=True)
    rows = [  # m, n, k, latency (ms), kernel, dtype
        (1, 8, 16, 0.5, "main", "bfloat16"),
        (2, 8, 16, 0.9, "main", "bfloat16"), (2, 8, 16, 0.1, "main", "bfloat16"), (2, 8, 16, 0.3, "main", "bfloat16"),
        (4, 8, 16, 7.0, "other", "bfloat16"), (4, 8, 16, 0.7, "main", "bfloat16"),
        (8, 8, 16, float("nan"), "main", "bfloat16"), (8, 8, 16, 0.0, "main", "bfloat16"),
        (8, 8, 16, None, "main", "bfloat16"),
        (1, 8, 16, 9.0, "main", "fp8"),
    ]
    columns = dict(zip(["m", "n", "k", "latency", "kernel_source", "gemm_dtype"], zip(*rows, strict=True), strict=True))
    table = pa.table({**{name: list(values) for name, values in columns.items()}, "device": ["dev"] * len(rows)})
    pq.write_table(table, folder / "gemm_perf.parquet")
    (tmp_path / "query_versions.yaml").write_text("defaults: {vllm: {current: '1.0'}}\n")
    gemm = GemmTable._read(database.Database(tmp_path, "test"), "sys", "vllm", "bf16")
    assert gemm.source.kernel == "main"
    assert gemm.latency_s == pytest.approx({(1, 8, 16): 0.5e-3, (2, 8, 16): 0.3e-3, (4, 8, 16): 0.7e-3})


@needs_database
def test_a_tables_rows_are_kept_for_the_next_process_and_read_again_when_the_table_changes(tmp_path, monkeypatch):
    """roofline.reference.rows_cache: a second read (the lru cache cleared, as in a new process) finds the rows kept
    without importing pyarrow; a changed table is read again; a damaged or unwritable cache is never an error."""
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    from roofline.reference import rows_cache

    monkeypatch.setenv(rows_cache.ENV, str(tmp_path / "cache"))
    table = tmp_path / "data" / "t.parquet"
    table.parent.mkdir()
    pq.write_table(pa.table({"batch_size": [1, 2, 4], "latency": [0.1, 0.2, 0.4], "window_size": [0, 8, 0]}), table)
    db = database.Database(tmp_path, "test")
    first = db.read(table, ["batch_size", "latency"], {"window_size": 0})
    assert first == {"batch_size": [1, 4], "latency": [0.1, 0.4]}
    assert len(list((tmp_path / "cache").glob("*.marshal"))) == 1

    database._read_rows.cache_clear()
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # an import of it now fails: the rows must be kept
    assert db.read(table, ["batch_size", "latency"], {"window_size": 0}) == first
    monkeypatch.delitem(sys.modules, "pyarrow.parquet")

    database._read_rows.cache_clear()
    pq.write_table(pa.table({"batch_size": [1], "latency": [0.5], "window_size": [0]}), table)
    os.utime(table, ns=(1, 1))  # another modification time, whatever the clock's resolution
    assert db.read(table, ["batch_size", "latency"], {"window_size": 0}) == {"batch_size": [1], "latency": [0.5]}

    for kept in (tmp_path / "cache").glob("*.marshal"):
        kept.write_bytes(b"\x00damaged")
    database._read_rows.cache_clear()
    assert db.read(table, ["batch_size", "latency"], {"window_size": 0}) == {"batch_size": [1], "latency": [0.5]}

    (tmp_path / "blocked").write_text("a file where the cache folder would be")
    monkeypatch.setenv(rows_cache.ENV, str(tmp_path / "blocked"))
    database._read_rows.cache_clear()
    assert db.read(table, ["latency"]) == {"latency": [0.5]}
    monkeypatch.setenv(rows_cache.ENV, "")  # set empty: off
    assert rows_cache.folder() is None


# Interpolation checked off the midpoints on synthetic tables (no database needed): tables whose values are linear
# in each axis, so every interpolated value is known exactly and swapped weights or a wrong anchor show.
def _source():
    from roofline.reference.database import TableSource

    return TableSource("test", "synthetic", "gemm", "vllm", "0", "synthetic.parquet", "test device", "test kernel")


def test_a_gemm_lookup_between_measured_shapes_weighs_each_corner_by_its_nearness():
    from itertools import product

    from roofline.reference.gemm import GemmTable

    cube = {(m, n, k): float(m + n + k) for m, n, k in product((1, 3), (10, 20), (100, 300))}
    table = GemmTable("bf16", _source(), cube)
    lookup = table.lookup(1.5, 12, 250)
    assert lookup.how == "interpolated" and lookup.time_s == pytest.approx(1.5 + 12 + 250)
    assert table.lookup(3, 20, 100).time_s == 123 and table.lookup(3, 20, 100).how == "measured"
    assert table.lookup(2.5, 40, 150).how == "split"  # n past the widest: two matrices of 20 columns
    assert table.lookup(2.5, 40, 150).time_s == pytest.approx(2 * (2.5 + 20 + 150))


def test_attention_between_measured_points_and_a_decode_past_the_largest_batch_extrapolates_from_it():
    from roofline.reference.attention import AttentionTable

    def time(batch, length):  # linear in each: bilinear interpolation and linear extrapolation are exact on it
        return 2.0 * batch + 0.5 * length

    cells = {(b, s): time(b, s) for b in (1, 4, 8) for s in (128, 1024)}
    decode = AttentionTable("generation", _source(), dict(cells))
    assert decode.time_s(3, 512) == pytest.approx(time(3, 512))
    assert decode.time_s(12, 128) == pytest.approx(time(12, 128))  # from the two largest batches, 4 and 8
    assert decode.extrapolated == 1
    prefill = AttentionTable("context", _source(), dict(cells))
    assert prefill.time_s(6, 1000) == pytest.approx(time(6, 1000))
    with pytest.raises(ReferenceDataError):
        prefill.time_s(12, 128)  # a prompt batch past the measured is refused, never extrapolated
