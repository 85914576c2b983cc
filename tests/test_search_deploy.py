"""The launch files ``gpubench search`` writes: every flag is one the named engine release declares (its list in
profiles/engines/, read from that release's source), for every kind of configuration the space holds; and, where
vLLM is installed, vLLM's own argument parser takes the emitted flags (opt-in: skipped elsewhere, saying why)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from roofline.search.deploy import (
    ENGINES,
    UnknownFlag,
    check_flags,
    deploy_files,
    engine_record,
    flags_of,
    sglang_argv,
    trtllm_argv,
    vllm_argv,
)
from roofline.search.space import ModelInfo, Setting
from roofline.specs.models import load_model

INFO = ModelInfo(load_model("llama-3-8b"), "bf16", "bf16", 0, None, None, "", "meta-llama/Meta-Llama-3-8B", "test")
SETTINGS = [
    Setting("h200-sxm", 1, 1, "bf16", 64, 2048),
    Setting("h200-sxm", 4, 1, "fp8", 256, 8192),
    Setting("h200-sxm", 8, 8, "fp8", 256, 2048, "draft=1,accept=geometric:0.85"),  # EP = TP, MTP
    Setting("h200-sxm", 2, 8, "bf16", 64, 2048),  # TP 2 x DP 4, EP 8
    Setting("h200-sxm", 1, 8, "fp8", 64, 8192, "draft=2,accept=geometric:0.8"),  # TP 1 x DP 8
]


def _answer(setting: Setting, split: bool = False) -> dict:
    return {"setting": setting.to_dict(), "sentence": "at 1 requests/s the test's choice", "replicas": 3,
            "prefill_replicas": 1 if split else None, "decode_replicas": 2 if split else None}


def test_each_engines_record_names_its_release_repository_and_source():
    for engine in ENGINES:
        record = engine_record(engine)
        assert record["version"] and record["repository"].count("/") == 1 and record["paths"]
        assert len(record["flags"]) > 30 and all(flag.startswith("--") for flag in record["flags"])
    assert engine_record("vllm")["version"] == "0.33.0" and engine_record("sglang")["version"] == "0.5.23"
    assert len(engine_record("trtllm")["commit"]) == 40


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
@pytest.mark.parametrize("role", [None, "prefill", "decode"])
def test_every_emitted_flag_is_in_the_engines_recorded_list(setting, role):
    vllm = vllm_argv(setting, INFO, role, 4096, 0.9)
    sglang = sglang_argv(setting, INFO, role, 4096, 0.9)
    check_flags("vllm", vllm)
    check_flags("sglang", sglang)
    check_flags("trtllm", trtllm_argv(setting, 4096, 0.8))
    assert {"--tensor-parallel-size", "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype"} <= \
        set(flags_of(vllm))
    assert ("--enable-expert-parallel" in vllm) == (setting.ep > 1)
    assert ("--data-parallel-size" in vllm) == (setting.attention_dp > 1)
    assert sglang[sglang.index("--tp-size") + 1] == str(setting.tp * setting.attention_dp)
    if setting.spec:
        config = json.loads(vllm[vllm.index("--speculative-config") + 1])
        assert set(config) <= set(engine_record("vllm")["config_keys"]["--speculative-config"])
        assert config["method"] in engine_record("vllm")["choices"]["--speculative-config method"]
    assert vllm[vllm.index("--kv-cache-dtype") + 1] in engine_record("vllm")["choices"]["--kv-cache-dtype"]
    assert sglang[sglang.index("--kv-cache-dtype") + 1] in engine_record("sglang")["choices"]["--kv-cache-dtype"]
    if role:
        transfer = json.loads(vllm[vllm.index("--kv-transfer-config") + 1])
        assert set(transfer) <= set(engine_record("vllm")["config_keys"]["--kv-transfer-config"])
        assert transfer["kv_connector"] in engine_record("vllm")["choices"]["--kv-transfer-config kv_connector"]


def test_a_flag_the_release_does_not_declare_is_refused_not_written():
    with pytest.raises(UnknownFlag, match="--no-such-flag"):
        check_flags("vllm", ["--tensor-parallel-size", "2", "--no-such-flag"])


@pytest.mark.parametrize("split", [False, True])
def test_deploy_writes_each_engines_script_and_the_manifest(split):
    files = deploy_files(_answer(SETTINGS[1], split), INFO, 1000, 0.9, 20e9, 140e9)
    roles = ["-prefill", "-decode"] if split else [""]
    for role in roles:
        for engine in ("vllm", "sglang"):
            script = files[f"{engine}{role}.sh"]
            assert script.startswith("#!/bin/sh") and "meta-llama/Meta-Llama-3-8B" in script
            assert engine_record(engine)["version"] in script
    assert ("trtllm.sh" in files) == (not split)
    assert "replicas: 1" in files["k8s.yaml"] if split else "replicas: 3" in files["k8s.yaml"]
    assert "nvidia.com/gpu: 4" in files["k8s.yaml"] and "--max-model-len 1024" in files["k8s.yaml"]
    # every flag in every script is a recorded one
    for name, text in files.items():
        engine = name.split("-")[0].removesuffix(".sh")
        if name.endswith(".sh"):
            check_flags(engine, [t for line in text.splitlines() for t in line.split() if t.startswith("--")])


def test_tensorrt_llm_gets_no_script_for_a_split_it_cannot_express():
    files = deploy_files(_answer(SETTINGS[3]), INFO, 1000, 0.9, 20e9, 140e9)
    assert "trtllm.sh" not in files and "no TensorRT-LLM form" in files["README.md"]
    files = deploy_files(_answer(replace(SETTINGS[4])), INFO, 1000, 0.9, 20e9, 140e9)
    assert "enable_attention_dp: true" in files["trtllm.yaml"] and "decoding_type: MTP" in files["trtllm.yaml"]


def test_vllms_own_parser_takes_every_emitted_flag():
    """Opt-in: needs the vllm package (heavy; not installed by default: pip install vllm==0.33.0)."""
    try:
        from vllm.engine.arg_utils import EngineArgs  # pyright: ignore[reportMissingImports]
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # pyright: ignore[reportMissingImports]
    except Exception as exc:  # noqa: BLE001 - ImportError, or vllm failing to start without a GPU build
        pytest.skip(f"vllm cannot be imported here ({type(exc).__name__}: {exc}); pip install vllm==0.33.0 to "
                    "check the emitted flags against its own parser")
    for setting in SETTINGS:
        for role in (None, "prefill"):
            parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
            argv = vllm_argv(setting, INFO, role, 4096, 0.9)
            parsed = parser.parse_args(["--model", "meta-llama/Meta-Llama-3-8B", *argv])
            assert parsed.tensor_parallel_size == setting.tp and parsed.max_num_seqs == setting.max_batch
