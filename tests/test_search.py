"""``gpubench search``: its config refusals, the space and what it prunes before simulating (by hand), the journal
an interrupted search resumes from, the front and the choices on records made by hand, and whole searches (slow:
a small one end to end, and an interrupt by a real SIGINT then --resume)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roofline.core.errors import BadInputError
from roofline.search.config import SearchConfig
from roofline.search.document import choose, mark_front
from roofline.search.pool import SearchJournal
from roofline.search.space import Setting, build_space, identity, model_info, parallelisms
from roofline.serving.metrics import Slo
from roofline.serving.workload import Request
from roofline.specs.hf_config import load_hf_config
from roofline.specs.models import load_model

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "hf-configs"
SLO = Slo.parse("ttft_p90=1,tpot_p99=0.05")


def _config(**fields) -> SearchConfig:
    return SearchConfig(**{"model": "llama-3-70b", "skus": ("h100-sxm",), "rates": (20.0,), "slo": SLO, **fields})


REQUESTS = [Request(i, 0.0, 512, 512) for i in range(4)]


@pytest.mark.parametrize("fields, message", [
    ({"model": None}, "give one of --model NAME or --hf-config PATH"),
    ({"skus": ()}, "--gpu: give a SKU"),
    ({"skus": ("h100-sxm", "h100-sxm")}, "given twice"),
    ({"tps": "1,3x"}, "--tp '1,3x': give whole numbers"),
    ({"tps": "16"}, "--tp '16': give whole numbers from 1 to 8"),
    ({"kv_dtypes": "int4"}, "--kv-dtype int4"),
    ({"prices": (("b200", 3.0),)}, "--gpu-hour-usd prices b200, which is not searched"),
    ({"resume": True}, "--resume continues the search journalled beside -o DIR"),
    ({"speculation": "off", "spec_decode": "draft=1,accept=geometric:0.8"}, "would never be tried"),
    ({"workers": 0}, "--workers 0"),
])
def test_bad_input_is_one_line(fields, message):
    with pytest.raises(BadInputError, match=message.replace("(", r"\(").replace("[", r"\[")):
        _config(**fields)


def test_the_cli_refuses_in_one_line_with_exit_2():
    run = subprocess.run([sys.executable, "-m", "microbench.cli", "search", "--model", "llama-3-70b", "--rate", "1",
                          "--slo", "ttft_p90=1"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "--gpu" in run.stderr


def test_the_splits_tried_dense_and_mixture():
    dense, moe = load_model("llama-3-70b"), load_hf_config(CONFIGS / "deepseek-v3.json")
    assert parallelisms(dense, (1, 2, 4, 8), (1, 2, 4, 8), 8) == [(1, 1), (2, 1), (4, 1), (8, 1)]
    # a mixture: TP alone, EP = TP (DP 1), EP = TP x DP, within a node of 8
    assert parallelisms(moe, (1, 2, 4, 8), (1, 2, 4, 8), 8) == [
        (1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (2, 8), (4, 1), (4, 4), (4, 8), (8, 1), (8, 8)]


def test_llama_70b_at_tp_1_is_pruned_for_memory_by_hand():
    """Llama-3-70B's matrices in bf16: 80 layers x (8192 x (8192 + 2 x 1024 + 8192) + 3 x 8192 x 28672) + the LM
    head 128256 x 8192 = 69.50e9 parameters, 139 GB, over 0.9 of the H100's 85.5 GB (81559 MiB); at TP 2 each GPU
    holds 69.5 GB, and a 1024-token sequence's KV (80 layers x 2 x 4 KV heads x 128 x 2 bytes x 1024 = 168 MB)
    fits beside it."""
    config = _config(tps="1,2", kv_dtypes="bf16", max_batches="64", budgets="2048", speculation="off")
    info = model_info(config)
    groups, pruned, space = build_space(config, info, REQUESTS)
    params = 80 * (8192 * (8192 + 2 * 1024 + 8192) + 3 * 8192 * 28672) + 128256 * 8192
    assert params == 69_501_714_432
    assert [(p.reason, p.what) for p in pruned] == [("memory", "h100-sxm, TP 1, KV bf16")]
    assert "weights 139 GB a GPU over the 77 GB of h100-sxm" in pruned[0].why
    assert [g.first.key for g in groups] == ["h100-sxm/tp2/ep1/kv-bf16/mb64/cb2048/spec-off"]
    assert space["configurations"] == 2 and space["longest_context_tokens"] == 1024
    assert any("pipeline parallelism" in line for line in space["not_modelled"])


def test_deepseek_v3_fits_no_single_h100_node_and_speculates_with_its_mtp_head():
    config = _config(model=None, hf_config=CONFIGS / "deepseek-v3.json", skus=("h100-sxm", "h200-sxm"))
    info = model_info(config)
    assert info.dtype == "fp8-block" and info.mtp_layers == 1 and info.speculation == "draft=1,accept=geometric:0.85"
    assert info.served is None and "MODEL" in info.served_note
    groups, pruned, _ = build_space(config, info, REQUESTS)
    assert {g.first.sku for g in groups} == {"h200-sxm"}
    assert all(g.first.gpus == 8 for g in groups)  # 671B parameters in fp8: a whole H200 node
    assert {p.sku for p in pruned if p.reason == "memory"} == {"h100-sxm", "h200-sxm"}
    assert {(g.first.tp, g.first.ep) for g in groups} == {(1, 8), (2, 8), (4, 8), (8, 1), (8, 8)}
    assert {g.first.spec for g in groups} == {None, "draft=1,accept=geometric:0.85"}


def test_a_hybrid_with_an_mtp_head_but_no_published_acceptance_does_not_speculate_by_default():
    config = _config(model=None, hf_config=CONFIGS / "qwen3.5-397b-a17b.json", skus=("h200-sxm",))
    info = model_info(config)
    assert info.spec.hybrid and info.mtp_layers == 1 and info.speculation is None
    assert "no published acceptance rate" in info.speculation_source
    with pytest.raises(BadInputError, match="--speculation on: .*--spec-decode"):
        model_info(_config(model=None, hf_config=CONFIGS / "qwen3.5-397b-a17b.json", speculation="on"))


def test_the_journal_resumes_only_the_same_search_and_drops_a_torn_line(tmp_path):
    out = tmp_path / "out"
    journal = SearchJournal(out, b"search A")
    journal.start([{"key": "a"}])
    journal.append([{"key": "b"}])
    journal.close()
    with open(journal.path, "ab") as stream:
        stream.write(b'{"key": "c", "torn')  # killed mid-write
    assert [r["key"] for r in SearchJournal(out, b"search A").read()] == ["a", "b"]
    with pytest.raises(BadInputError, match="journals a search with other options"):
        SearchJournal(out, b"search B").read()
    assert SearchJournal(tmp_path / "none", b"x").read() == []


def test_the_identity_changes_with_what_changes_the_answer():
    config = _config(tps="2", speculation="off")
    info = model_info(config)
    _, _, space = build_space(config, info, REQUESTS)
    base = identity(config, info, space)
    assert identity(_config(tps="2", speculation="off", workers=1), info, space) == base  # how, not what
    assert identity(_config(tps="2", speculation="off", rates=(30.0,)), info, space) != base
    other = _config(tps="2", speculation="off", engine="none")
    assert identity(other, info, build_space(other, info, REQUESTS)[2]) != base  # another engine's time


def test_every_candidate_carries_the_engine_time_of_engine_and_none_carries_none():
    """The default --engine's preset is every candidate's engine time, said in the space; --engine none drops it."""
    from roofline.search.evaluate import profile_of
    from roofline.search.run import prepare_search

    for engine, preset in (("vllm", "vllm"), ("sglang", "sglang"), ("none", None)):
        config = _config(tps="2", speculation="off", engine=engine, kv_dtypes="bf16", requests=8)
        searching = prepare_search(config, None, Path("unused"))
        setting = searching.groups[0].settings[0]
        overhead = profile_of(searching.context, setting).engine_overhead
        assert (overhead.preset if overhead else None) == preset
        assert (preset or "kernels only") in searching.space["engine_time"]


def _point(rate, met, per_gpu, per_user, usd=None):
    return {"rate_requests_per_s": rate, "met": met, "gpus": 4, "replicas": 2, "prefill_replicas": None,
            "decode_replicas": None, "tokens_per_s": per_gpu * 4, "tokens_per_s_per_gpu": per_gpu,
            "tokens_per_s_per_user": per_user, "usd_per_million_output_tokens": usd,
            "tokens_per_usd": None if usd is None else 1e6 / usd, "slo_s": {}}


def _config_entry(sku, tp, point):
    setting = Setting(sku, tp, 1, "bf16", 64, 2048).to_dict()
    return {"key": f"{sku}{tp}", "setting": setting, "layout": "aggregated", "points": [point]}


def test_the_front_and_the_choice_per_sku_by_hand():
    configs = [_config_entry("a", 1, _point(5.0, True, 100, 50)),   # dominated by a2
               _config_entry("a", 2, _point(5.0, True, 120, 60)),   # on the front
               _config_entry("b", 1, _point(5.0, True, 200, 20)),   # on the front: most per GPU
               _config_entry("b", 2, _point(5.0, False, 0, 0))]     # not met
    mark_front(configs, (5.0,))
    assert [c["points"][0]["on_front"] for c in configs] == [False, True, True, None]
    assert choose(configs, 5.0)["key"] == "b1"
    assert choose(configs, 5.0, "a")["key"] == "a2"
    assert choose(configs, 9.0)["met"] is False


def test_with_every_point_priced_the_choice_is_the_cheapest_on_the_front():
    configs = [_config_entry("a", 1, _point(5.0, True, 100, 50, usd=2.0)),
               _config_entry("b", 1, _point(5.0, True, 200, 20, usd=3.0))]
    mark_front(configs, (5.0,))
    assert choose(configs, 5.0)["key"] == "a1"


SMALL = ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--tp", "1,2", "--kv-dtype", "bf16", "--max-batch", "64",
         "--chunk-budget", "2048,4096", "--requests", "100", "--rate", "5", "--slo", "ttft_p90=1,tpot_p99=0.05",
         "--aggregated-only"]


def _search(args, **kwargs):
    return subprocess.run([sys.executable, "-m", "microbench.cli", "search", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600, **kwargs)


@pytest.mark.slow
def test_a_small_search_prints_a_front_a_choice_and_writes_deploy(tmp_path):
    run = _search([*SMALL, "--workers", "2", "-o", str(tmp_path / "out")])
    assert run.returncode == 0, run.stderr
    assert "Pareto front at 5 requests/s" in run.stdout and "on h100-sxm the most tokens/s per GPU" in run.stdout
    document = json.loads((tmp_path / "out" / "search.json").read_text())
    assert document["kind"] == "gpubench-search" and document["answers"][0]["met"]
    assert document["answers"][0]["binding_limit"] and document["answers"][0]["crossover"]
    assert "vllm preset" in document["space"]["engine_time"]  # the default --engine's time, said
    deploy = tmp_path / "out" / "deploy"
    assert "vllm preset" in (deploy / "README.md").read_text()
    assert {"vllm.sh", "sglang.sh", "k8s.yaml"} <= {p.name for p in deploy.iterdir()}
    assert os.access(deploy / "vllm.sh", os.X_OK)
    assert (tmp_path / "out" / "front.png").exists() and not (tmp_path / "out.journal").exists()


@pytest.mark.slow
def test_an_interrupted_search_keeps_what_it_finished_and_resume_continues(tmp_path):
    """A real SIGINT once the journal holds a configuration: exit 130, no output folder, the journal kept; the
    same command with --resume simulates only the rest."""
    out = tmp_path / "out"
    journal = tmp_path / "out.journal"
    args = [*SMALL, "--chunk-budget", "1024,2048,4096,8192", "--workers", "1", "-o", str(out)]
    process = subprocess.Popen([sys.executable, "-m", "microbench.cli", "search", *args], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if journal.exists() and len(journal.read_bytes().splitlines()) >= 2:  # the header and one record
            break
        time.sleep(0.05)
    assert process.poll() is None, process.communicate()
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "interrupted by SIGINT" in stderr and "--resume" in stderr
    assert not out.exists()
    kept = [json.loads(line)["key"] for line in journal.read_bytes().splitlines()[1:]]
    assert 1 <= len(kept) < 8
    resumed = _search([*args, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert f"({len(kept)} kept from" in resumed.stderr
    document = json.loads((out / "search.json").read_text())
    assert document["timing"]["resumed"] == len(kept) and not journal.exists()
    assert {c["setting"]["key"] for c in document["configurations"]} >= set(kept)
