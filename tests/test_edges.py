"""Hostile and careless input at the edges: one line and exit 2, never a traceback, and nothing created;
a programming error stays a programming error (not "bad input").  Named inputs are never optional."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.result.io import ResultError, load_result, result_to_json, save_result
from tests.conftest import make_point, make_result

TINY = json.loads((Path(__file__).parent / "data" / "tiny-llama-config.json").read_text())


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _result(tmp_path: Path, name: str = "r.json", **device) -> Path:
    path = tmp_path / name
    save_result(make_result([make_point("gemv", "bf16", 1, 4096, 4096, 2e-5),
                             make_point("gemm", "bf16", 8, 4096, 4096, 2.1e-5)],
                            device={"kind": "cuda", "name": "test gpu", "sku": None, **device}), path)
    return path


# --- 15.2: no tracebacks ---------------------------------------------------------------------------------

def test_import_of_an_impossibly_short_time_drops_it(tmp_path):
    csv = tmp_path / "tiny.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\ngemm,bf16,1,4096,4096,1e-300\ngemm,bf16,1,4096,4096,2e-5\n"
                   "gemm,bf16,2,4096,4096,1e-300\n")
    result = run("import", str(csv), "--device-name", "x", "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    points = {p.batch: p for p in load_result(tmp_path / "r.json").points}
    assert points[1].ok and points[1].stats.n == 1
    assert points[2].status == "error" and "too short" in points[2].reason
    assert "dropped 1" in result.output


def test_an_import_none_of_whose_times_is_valid_writes_nothing(tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\ngemm,bf16,1,4096,4096,0\ngemm,bf16,2,4096,4096,nan\n"
                   "gemm,bf16,4,4096,4096,1e-300\n")
    result = run("import", str(csv), "--device-name", "x", "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "none of its 3 time(s) can be imported" in result.output
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 1e308), ("num_hidden_layers", 2.5),
                                          ("num_hidden_layers", 10**30), ("hidden_size", "256"),
                                          ("head_dim", 0), ("num_attention_heads", 3)])
def test_malformed_hf_configs_are_refused_naming_the_field_and_the_model(tmp_path, field, value):
    folder = tmp_path / "snapshots"
    folder.mkdir()
    config = folder / "config.json"
    config.write_text(json.dumps({**TINY, field: value}))
    result = run("decode", "--hf-config", str(config), "--analytic", "--gpu", "h200-sxm", "--batch", "1")
    assert result.exit_code == 2, result.output
    wanted = "hidden_size" if field == "num_attention_heads" else field
    assert wanted in result.output and "tiny-llama-test" in result.output
    assert "snapshots" not in result.output.replace(str(config), "")  # named by the config, not the folder


def test_a_model_without_a_name_is_named_by_its_type_or_file(tmp_path):
    config = tmp_path / "config.json"
    bare = {k: v for k, v in TINY.items() if k != "_name_or_path"}
    config.write_text(json.dumps({**bare, "model_type": "llama", "head_dim": 0}))
    result = run("decode", "--hf-config", str(config), "--analytic", "--gpu", "h200-sxm", "--batch", "1")
    assert result.exit_code == 2 and "model llama" in result.output


def test_points_null_is_a_plain_error(tmp_path):
    path = _result(tmp_path)
    document = json.loads(path.read_text())
    document["points"] = None
    path.write_text(json.dumps(document))
    with pytest.raises(ResultError, match="points must be a list"):
        load_result(path)
    result = run("fit", str(path))
    assert result.exit_code == 2 and "points must be a list" in result.output and "NoneType" not in result.output


@pytest.mark.parametrize("field, value, says", [
    ("backend", [], "backend must be text, found []"),  # an unhashable list: a TypeError in fit before
    ("correctness", 0, "correctness must be an object or null, found 0"),  # an AttributeError in fit before
    ("timer", 5, "timer must be text or null"),
    ("attempt", 0, "attempt must be 1 or more"),
])
@pytest.mark.parametrize("command", ["fit", "report", "compare"])
def test_a_point_field_of_the_wrong_type_is_one_line_for_every_reader(tmp_path, field, value, says, command):
    path = _result(tmp_path)
    document = json.loads(path.read_text())
    document["points"][0][field] = value
    path.write_text(json.dumps(document))
    result = run(command, str(path), *(["-o", str(tmp_path / "out")] if command == "report" else []))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert says in result.output and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("command", ["sweep", "ceilings", "decode"])
def test_budget_must_be_a_finite_number_before_anything_is_created(tmp_path, command, value):
    output = tmp_path / "new" / "x.json"
    args = {"sweep": ["sweep", "--device", "cpu", "--quick", "-o", str(output)],
            "ceilings": ["ceilings", "--device", "cpu", "-o", str(output)],
            "decode": ["decode", "--hf-config", "x.json", "--device", "cpu", "-o", str(output.parent)]}[command]
    result = run(*args, "--budget", value)
    assert result.exit_code == 2, result.output
    assert "--budget" in result.output and "finite" in result.output
    assert not output.parent.exists()


@pytest.mark.parametrize("option, value", [("--target-ci", "nan"), ("--telemetry-interval", "inf"),
                                           ("--telemetry-interval", "nan")])
def test_other_sweep_numbers_must_be_finite(tmp_path, option, value):
    result = run("sweep", "--device", "cpu", "--quick", option, value, "-o", str(tmp_path / "n" / "x.json"))
    assert result.exit_code == 2 and option in result.output
    assert not (tmp_path / "n").exists()


def test_a_programming_error_is_not_reported_as_bad_input(tmp_path, monkeypatch):
    """ValueError from inside the tool is a bug: a traceback (exit 1), not "gpubench: error:" and exit 2."""
    from microbench.sweep import loop as sweep

    def broken(config, observer):
        raise ValueError("an internal bug")

    monkeypatch.setattr(sweep, "prepare_sweep", broken)
    result = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--quick", "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 1 and isinstance(result.exception, ValueError)
    assert "gpubench: error" not in result.output


# --- 15.3: named inputs are not optional -------------------------------------------------------------------

def test_compare_with_a_named_file_missing_is_exit_2(tmp_path):
    good = _result(tmp_path)
    result = run("compare", str(good), str(tmp_path / "nope.json"))
    assert result.exit_code == 2 and "nope.json" in result.output and "no such file" in result.output


def test_compare_with_a_named_file_of_a_newer_schema_is_exit_2(tmp_path):
    good = _result(tmp_path)
    newer = tmp_path / "newer.json"
    document = json.loads(result_to_json(load_result(good)))
    newer.write_text(json.dumps({**document, "schema_version": 99}))
    result = run("compare", str(good), str(newer))
    assert result.exit_code == 2 and "newer.json" in result.output and "schema_version 99" in result.output


def test_compare_skips_unusable_files_found_in_a_folder_and_counts_them(tmp_path):
    folder = tmp_path / "fleet"
    folder.mkdir()
    _result(folder, "a.json", uuid="GPU-a")
    _result(folder, "b.json", uuid="GPU-b")
    (folder / "junk.json").write_text("{not json")
    result = run("compare", str(folder), "--format", "json")
    assert result.exit_code == 0, result.output
    assert "skipped 1 of 3 file(s) found in folders" in result.output
    assert "junk.json" in result.output


def test_compare_a_a_lists_a_once(tmp_path):
    good = _result(tmp_path)
    result = run("compare", str(good), str(good), str(tmp_path / "." / "r.json"), "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output[: result.output.rindex("}") + 1])
    assert [len(g["rows"]) for g in document["comparison"]["groups"]] == [1]
    assert len(document["fleet"]["units"]) == 1


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_mad_k_must_be_a_finite_positive_number(tmp_path, value):
    good = _result(tmp_path)
    result = run("compare", str(good), "--mad-k", value, "--fail-on-outlier")
    assert result.exit_code == 2 and "--mad-k" in result.output


@pytest.mark.parametrize("args, names", [
    (["decode", "--budget", "nan"], "'--budget': 'nan': give a finite number"),
    (["decode", "--mem-fraction", "1.5"], "'--mem-fraction': '1.5': must be at most 1"),
    (["decode", "--tp", "two"], "'--tp': 'two' is not a valid integer"),
    (["compare", "--mad-k", "lots", "a.json"], "'--mad-k': 'lots' is not a number"),
    (["simulate", "--mem-fraction", "x"], "'--mem-fraction': 'x' is not a valid float"),
    (["fit"], "Missing argument 'RESULT_FILE'"),
    (["report", "--nope", "r.json"], "No such option '--nope'"),
    (["benchmark"], "No such command 'benchmark'"),
])
def test_what_click_refuses_is_one_line_and_exit_2_too(tmp_path, monkeypatch, args, names):
    # Not click's usage block: the same "gpubench: error:" line as every other refusal, with where to get help.
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, args, prog_name="gpubench")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpubench: error: gpubench"), result.output
    assert names in lines[0] and "See 'gpubench" in lines[0], result.output
    assert list(tmp_path.iterdir()) == []


def test_no_arguments_still_shows_the_help():
    result = CliRunner().invoke(main, [], prog_name="gpubench")
    assert "Usage: gpubench" in result.output and "sweep" in result.output


def test_csv_with_a_utf8_bom_is_read(tmp_path):
    csv = tmp_path / "excel.csv"
    csv.write_bytes("op,dtype,batch,n,k,time_s\r\ngemm,bf16,1,4096,4096,2e-5\r\n".encode("utf-8-sig"))
    result = run("import", str(csv), "--device-name", "x", "-o", str(tmp_path / "r.json"))
    assert result.exit_code == 0, result.output
    assert load_result(tmp_path / "r.json").points[0].ok


# --- 15.4: ask for what is measured ------------------------------------------------------------------------

def test_gemv_alone_with_other_batches_is_refused(tmp_path):
    result = run("sweep", "--device", "cpu", "--op", "gemv", "--batch", "1,2,4", "-o", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "gemv is batch 1" in result.output and "--op gemm" in result.output
    assert not (tmp_path / "x.json").exists()


def test_a_memory_cap_below_every_point_is_refused_in_readable_units(tmp_path):
    result = run("sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "64x64", "--batch", "1,2",
                 "--no-ceilings", "--max-memory", "1K", "-o", str(tmp_path / "x.json"))
    assert result.exit_code == 2, result.output
    assert "--max-memory 1 kB" in result.output and "16.9 kB" in result.output
    assert not (tmp_path / "x.json").exists()


def test_a_context_whose_kv_cache_cannot_hold_one_sequence_is_an_error():
    result = run("decode", "--model", "llama-3-8b", "--analytic", "--gpu", "h200-sxm", "--context", "100000000",
                 "--batch", "1,2")
    assert result.exit_code == 2, result.output
    assert "--context 100000000" in result.output and "one sequence" in result.output
    assert "caps the batch at 0" not in result.output


# --- 15.1 leftovers: ceilings -o and import -o replace an existing file only with --force --------------------

def test_import_over_an_existing_file_needs_force(tmp_path):
    csv = tmp_path / "in.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\ngemm,bf16,1,4096,4096,2e-5\n")
    existing = _result(tmp_path, "kept.json")
    before = existing.read_text()
    refused = run("import", str(csv), "--device-name", "x", "-o", str(existing))
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
    assert "already exists; --force replaces it" in refused.output and existing.read_text() == before
    forced = run("import", str(csv), "--device-name", "x", "--force", "-o", str(existing))
    assert forced.exit_code == 0, forced.output
    assert load_result(existing).origin == "imported"


def test_ceilings_over_an_existing_file_needs_force(tmp_path):
    """And the forced run is the real ceilings command on the CPU: it measures and prints both ceilings."""
    existing = _result(tmp_path, "kept.json")
    before = existing.read_text()
    args = ["ceilings", "--device", "cpu", "--dtype", "fp32", "--quick", "--budget", "0.01", "-o", str(existing)]
    refused = run(*args)
    assert refused.exit_code == 2 and refused.output.count("\n") == 1, refused.output
    assert "already exists; --force replaces it" in refused.output and existing.read_text() == before
    forced = run(*args, "--force")
    assert forced.exit_code == 0, forced.output
    assert "copy bandwidth" in forced.output and "fp32 matmul peak" in forced.output
    assert load_result(existing).ceilings["measured"]["copy"]["bytes_per_s"] > 0


@pytest.mark.parametrize("rows, says", [
    ("gemv,fp16,1,4096\n", "line 2: 4 of the 6 columns op,dtype,batch,n,k,time_s"),  # a TypeError before
    ("gemv,fp16,1,4096,4096,1e-5\ngemv,fp16,x,4096,4096,1e-5\n", "line 3: op,dtype,batch,n,k must be"),
])
def test_a_bad_csv_row_is_one_line_naming_the_file_and_line(tmp_path, rows, says):
    csv = tmp_path / "short.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\n" + rows)
    result = run("import", str(csv), "-o", str(tmp_path / "x.json"), "--device-name", "X")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"{csv} {says}" in result.output, result.output
    assert not (tmp_path / "x.json").exists()


def test_an_hf_config_with_a_byte_order_mark_is_read(tmp_path):
    config = tmp_path / "config.json"
    config.write_bytes(json.dumps(TINY).encode("utf-8-sig"))
    result = run("decode", "--hf-config", str(config), "--analytic", "--gpu", "h200-sxm", "--batch", "1")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", [["fit"], ["compare"], ["report"]])
def test_a_step_profile_given_as_a_result_is_named_for_what_it_is(tmp_path, command):
    profile = tmp_path / "profile.json"
    tiny = Path(__file__).resolve().parent / "data" / "tiny-llama-config.json"
    made = run("profile", "--analytic", "--gpu", "h100-sxm", "--hf-config", str(tiny),
               "-o", str(profile))
    assert made.exit_code == 0, made.output
    result = run(*command, str(profile), *(["-o", str(tmp_path / "out")] if command == ["report"] else []))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "a step profile (gpubench profile; give it to gpubench simulate), not a sweep result" in result.output


# --- -o names the filesystem cannot hold, and an input given as its own output ------------------------------------

TINY_CONFIG = str(Path(__file__).parent / "data" / "tiny-llama-config.json")


def _writing_commands(tmp_path: Path) -> dict[str, list[str]]:
    """Every command that writes, its inputs made in ``tmp_path``, without its ``-o``."""
    csv = tmp_path / "in.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\ngemm,bf16,1,4096,4096,2e-5\n")
    profile = tmp_path / "p.json"
    assert run("profile", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "-o", str(profile)
               ).exit_code == 0
    result_file = _result(tmp_path)
    return {"sweep": ["sweep", "--device", "cpu", "--op", "gemm", "--dtype", "fp32", "--shape", "64x64", "--batch",
                      "1", "--budget", "0.02", "--no-ceilings"],
            "ceilings": ["ceilings", "--device", "cpu", "--dtype", "fp32", "--quick", "--budget", "0.01"],
            "import": ["import", str(csv), "--device-name", "x"],
            "profile": ["profile", "--hf-config", TINY_CONFIG, "--device", "cpu"],
            "profile-analytic": ["profile", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG],
            "validate": ["validate", "--hf-config", TINY_CONFIG, "--device", "cpu"],
            "decode": ["decode", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "--batch", "1"],
            "simulate": ["simulate", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "--requests", "3"],
            "plan": ["plan", str(profile), "--rate", "1", "--slo", "ttft_p90=2", "--requests", "10"],
            "report": ["report", str(result_file)], "compare": ["compare", str(result_file)]}


# 256 bytes: more than any name (File name too long, a traceback, in every command); 255: a folder that ran
# without its lock (<name>.lock could not be made); 246: the measured profile's <name>.partial overflowed.
LONG_NAMES = [(command, 256) for command in ("sweep", "ceilings", "import", "profile", "profile-analytic",
                                             "validate", "decode", "simulate", "plan", "report", "compare")]
LONG_NAMES += [("simulate", 255), ("profile", 246)]


@pytest.mark.parametrize("command, length", LONG_NAMES, ids=[f"{c}-{n}" for c, n in LONG_NAMES])
def test_an_output_name_too_long_for_the_filesystem_is_one_line_before_anything_runs(tmp_path, command, length):
    args = _writing_commands(tmp_path)[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / ("x" * (length - 5) + ".json")
    result = run(*args, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert f"its name is {length} bytes; give one of at most 223" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_folder_name_too_long_inside_the_output_path_is_one_line(tmp_path):
    out = tmp_path / ("d" * 300) / "sim"
    result = run("simulate", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "--requests", "3",
                 "-o", str(out))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "is 300 bytes, more than the 255 a name can have here" in result.output, result.output
    assert list(tmp_path.iterdir()) == []


def test_the_longest_name_taken_is_written(tmp_path):
    out = tmp_path / ("x" * 218 + ".json")  # 223 bytes: room for <name>.partial.journal and the temp files
    result = run("profile", "--analytic", "--gpu", "h100-sxm", "--hf-config", TINY_CONFIG, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["kind"] == "gpubench-step-profile"


def test_import_refuses_to_write_over_the_csv_it_reads(tmp_path):
    csv = tmp_path / "data.csv"
    csv.write_text("op,dtype,batch,n,k,time_s\ngemm,bf16,1,4096,4096,2e-5\n")
    for output in (csv, tmp_path / "." / "data.csv"):
        result = run("import", str(csv), "--device-name", "x", "--force", "-o", str(output))
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert f"-o {output} is the CSV being imported" in result.output, result.output
    assert csv.read_text() == "op,dtype,batch,n,k,time_s\ngemm,bf16,1,4096,4096,2e-5\n"
