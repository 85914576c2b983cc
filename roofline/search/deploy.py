"""``deploy/``: how to start the chosen configuration, per engine, for a named release of each, and a Kubernetes
manifest of the chosen replicas.

Every flag written is one the engine's release declares: its list is in ``profiles/engines/<engine>.json``, read
from that release's source (``scripts/engine_flags.py``: vLLM's ``vllm/engine/arg_utils.py``, SGLang's
``server_args.py`` and its argument groups; TensorRT-LLM's ``commands/serve.py`` and its LLM API args), and a flag
that is not there stops the search (``check_flags``) rather than being written.  The mapping, per configuration:

- vLLM: ``vllm serve MODEL --tensor-parallel-size TP`` (+ ``--data-parallel-size DP --enable-expert-parallel`` for
  EP = TP x DP, or ``--enable-expert-parallel`` alone for EP = TP), ``--max-num-seqs B``,
  ``--max-num-batched-tokens T`` with ``--enable-chunked-prefill``, ``--kv-cache-dtype``,
  ``--gpu-memory-utilization``, ``--max-model-len``, ``--speculative-config '{"method": "mtp", ...}'``; prefill and
  decode apart: ``--kv-transfer-config`` with NixlConnector.
- SGLang: ``python -m sglang.launch_server --model-path MODEL --tp-size TP*DP`` (+ ``--attn-dp-size DP``,
  ``--ep-size EP``), ``--max-running-requests B``, ``--chunked-prefill-size T``, ``--kv-cache-dtype``,
  ``--mem-fraction-static``, ``--context-length``, NEXTN speculation; apart: ``--disaggregation-mode``.
- TensorRT-LLM: ``trtllm-serve serve MODEL --backend pytorch --tp_size --ep_size --max_batch_size --max_num_tokens
  --max_seq_len --kv_cache_free_gpu_memory_fraction --config trtllm.yaml`` (``enable_attention_dp``,
  ``kv_cache_config.dtype``, MTP ``speculative_config``).  Its attention data parallelism runs one rank per group
  (attention TP 1): a split of TP > 1 with DP > 1 has no TensorRT-LLM form, and none is written for it; nor for
  prefill and decode apart (``trtllm-serve disaggregated`` takes a cluster file of its own).
"""

from __future__ import annotations

import json
import math
import shlex
from functools import cache
from typing import Any

from roofline.search.space import ModelInfo, Setting
from roofline.specs.gpus import profiles_dir

ENGINES = ("vllm", "sglang", "trtllm")
NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
PORTS = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}
# The OpenAI-compatible server images each project publishes, tagged by release.
IMAGES = {"vllm": "vllm/vllm-openai:v{version}", "sglang": "lmsysorg/sglang:v{version}"}
VLLM_KV = {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}
SGLANG_KV = {"bf16": "bf16", "fp8": "fp8_e4m3"}
TRTLLM_KV = {"bf16": "auto", "fp8": "fp8"}


class UnknownFlag(RuntimeError):
    """A flag that the engine's recorded release does not declare: gpubench's own bug, never written."""


@cache
def engine_record(engine: str) -> dict[str, Any]:
    """``profiles/engines/<engine>.json``: version, repository, commit, paths read, flags."""
    return json.loads((profiles_dir() / "engines" / f"{engine}.json").read_text(encoding="utf-8"))


def flags_of(argv: list[str]) -> list[str]:
    return [token for token in argv if token.startswith("--")]


def check_flags(engine: str, argv: list[str]) -> None:
    known = set(engine_record(engine)["flags"])
    unknown = [flag for flag in flags_of(argv) if flag not in known]
    if unknown:
        record = engine_record(engine)
        raise UnknownFlag(f"{NAMES[engine]} {record['version']} declares no {', '.join(unknown)} "
                          f"(profiles/engines/{engine}.json)")


def served_length(context_tokens: int) -> int:
    """The longest sequence the engines are told to hold: the workload's, up to a multiple of 1024."""
    return 1024 * math.ceil(context_tokens / 1024)


def vllm_argv(s: Setting, info: ModelInfo, role: str | None, max_len: int, mem_fraction: float) -> list[str]:
    argv = ["--tensor-parallel-size", str(s.tp)]
    if s.ep > 1:
        argv += (["--data-parallel-size", str(s.attention_dp)] if s.attention_dp > 1 else []) + \
            ["--enable-expert-parallel"]
    argv += ["--max-num-seqs", str(s.max_batch), "--max-num-batched-tokens", str(s.budget),
             "--enable-chunked-prefill", "--kv-cache-dtype", VLLM_KV[s.kv_dtype],
             "--gpu-memory-utilization", f"{mem_fraction:g}", "--max-model-len", str(max_len)]
    if info.user_dtype == "fp8" and info.checkpoint_dtype != "fp8":
        argv += ["--quantization", "fp8"]
    if s.spec:
        draft = _draft(s)
        choices = engine_record("vllm")["choices"]["--speculative-config method"]
        assert "mtp" in choices
        argv += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": draft})]
    if role is not None:
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    return argv


def sglang_argv(s: Setting, info: ModelInfo, role: str | None, max_len: int, mem_fraction: float) -> list[str]:
    argv = ["--tp-size", str(s.tp * s.attention_dp)]
    if s.attention_dp > 1:
        argv += ["--attn-dp-size", str(s.attention_dp)]
    if s.ep > 1:
        argv += ["--ep-size", str(s.ep)]
    argv += ["--max-running-requests", str(s.max_batch), "--chunked-prefill-size", str(s.budget),
             "--kv-cache-dtype", SGLANG_KV[s.kv_dtype], "--mem-fraction-static", f"{mem_fraction:g}",
             "--context-length", str(max_len)]
    if info.user_dtype == "fp8" and info.checkpoint_dtype != "fp8":
        argv += ["--quantization", "fp8"]
    if s.spec:
        draft = _draft(s)
        argv += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(draft),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(draft + 1)]
    if role is not None:
        argv += ["--disaggregation-mode", role]
    return argv + ["--host", "0.0.0.0", "--port", str(PORTS["sglang"])]


def trtllm_argv(s: Setting, max_len: int, free_fraction: float) -> list[str]:
    gpus = s.tp * s.attention_dp
    argv = ["--backend", "pytorch", "--tp_size", str(gpus)]
    if s.ep > 1:
        argv += ["--ep_size", str(s.ep)]
    return argv + ["--max_batch_size", str(s.max_batch), "--max_num_tokens", str(s.budget), "--max_seq_len",
                   str(max_len), "--kv_cache_free_gpu_memory_fraction", f"{free_fraction:.2f}", "--host", "0.0.0.0",
                   "--port", str(PORTS["trtllm"]), "--config", "trtllm.yaml"]


def trtllm_yaml(s: Setting) -> str:
    lines = ["enable_chunked_prefill: true", f"enable_attention_dp: {'true' if s.attention_dp > 1 else 'false'}",
             "kv_cache_config:", f"  dtype: {TRTLLM_KV[s.kv_dtype]}"]
    if s.spec:
        lines += ["speculative_config:", "  decoding_type: MTP", f"  num_nextn_predict_layers: {_draft(s)}"]
    return "\n".join(lines) + "\n"


def _draft(s: Setting) -> int:
    from roofline.step.speculative import parse_spec_decode

    spec = parse_spec_decode(s.spec)
    assert spec is not None
    return spec.draft


def _model_line(info: ModelInfo) -> str:
    if info.served:
        return f'MODEL="${{MODEL:-{info.served}}}"  # {info.served_note}'
    return f'MODEL="${{MODEL:?{info.served_note}}}"'


def _header(engine: str, answer: dict[str, Any], fleet: str) -> list[str]:
    record = engine_record(engine)
    commit = f" at commit {record['commit']}" if record.get("commit") else ""
    return ["#!/bin/sh",
            f"# {NAMES[engine]} {record['version']} ({record['repository']}{commit}): every flag below is declared by "
            f"that release ({', '.join(record['paths'][:2])}{' ...' if len(record['paths']) > 2 else ''}; the list: "
            f"profiles/engines/{engine}.json).",
            f"# Chosen by gpubench search: {answer['sentence']}.",
            f"# {fleet}",
            "set -eu"]


def _script(engine: str, answer: dict[str, Any], info: ModelInfo, fleet: str, command: list[str]) -> str:
    lines = _header(engine, answer, fleet) + [_model_line(info)]
    quoted = [shlex.quote(token) if token != "$MODEL" else '"$MODEL"' for token in command]
    first = next(i for i, token in enumerate(command) if token.startswith("--"))
    rows, i = [" ".join(quoted[:first])], first
    while i < len(quoted):  # a flag and its value on one line
        takes = i + 1 < len(quoted) and not command[i + 1].startswith("--")
        rows.append(" ".join(quoted[i:i + 1 + takes]))
        i += 1 + takes
    return "\n".join(lines) + "\nexec " + " \\\n    ".join(rows) + "\n"


def _roles(answer: dict[str, Any]) -> list[tuple[str | None, int]]:
    if answer["prefill_replicas"] is not None:
        return [("prefill", answer["prefill_replicas"]), ("decode", answer["decode_replicas"])]
    return [(None, answer["replicas"])]


def deploy_files(answer: dict[str, Any], info: ModelInfo, context_tokens: int, mem_fraction: float,
                 weight_bytes: float, device_bytes: float | None, engine_time: str = "") -> dict[str, str]:
    """The launch script of each engine (per role where prefill and decode are apart), TensorRT-LLM's YAML and
    the Kubernetes manifest, by file name; ``engine_time`` says whose engine time the choice was simulated with
    (search's ``--engine``), since another engine's would move it."""
    s = Setting.from_dict(answer["setting"])
    max_len = served_length(context_tokens)
    files: dict[str, str] = {}
    notes = [f"The choice was simulated with this engine time every step: {engine_time}. Another engine's time "
             "moves the answer; search again with its --engine."] if engine_time else []
    for role, replicas in _roles(answer):
        suffix = f"-{role}" if role else ""
        fleet = (f"One {role or 'serving'} replica on {s.gpus} GPU{'s' if s.gpus > 1 else ''} "
                 f"({s.split_words()}); the fleet runs {replicas} of them behind a router (k8s.yaml).")
        vllm = vllm_argv(s, info, role, max_len, mem_fraction)
        check_flags("vllm", vllm)
        files[f"vllm{suffix}.sh"] = _script("vllm", answer, info, fleet, ["vllm", "serve", "$MODEL", *vllm])
        sglang = sglang_argv(s, info, role, max_len, mem_fraction)
        check_flags("sglang", sglang)
        files[f"sglang{suffix}.sh"] = _script("sglang", answer, info, fleet,
                                              ["python", "-m", "sglang.launch_server", "--model-path", "$MODEL",
                                               *sglang])
        check_flags("sglang", ["--model-path"])
    if answer["prefill_replicas"] is not None:
        notes.append("TensorRT-LLM: prefill and decode apart run under trtllm-serve disaggregated with a cluster "
                     "file of its own; no script is written for it.")
    elif s.tp > 1 and s.attention_dp > 1:
        notes.append(f"TensorRT-LLM: its attention data parallelism runs attention at TP 1; {s.split_words()} has "
                     "no TensorRT-LLM form, and no script is written for it.")
    else:
        free = 0.9 if not device_bytes else max(0.05, min(0.95, (mem_fraction * device_bytes - weight_bytes) /
                                                          (device_bytes - weight_bytes)))
        trt = trtllm_argv(s, max_len, free)
        check_flags("trtllm", trt)
        fleet = (f"One replica on {s.gpus} GPU{'s' if s.gpus > 1 else ''} ({s.split_words()}); the fleet runs "
                 f"{answer['replicas']} of them. --kv_cache_free_gpu_memory_fraction is the share of the memory left "
                 f"after the weights that {mem_fraction:g} of the whole leaves to the KV cache.")
        files["trtllm.sh"] = _script("trtllm", answer, info, fleet, ["trtllm-serve", "serve", "$MODEL", *trt])
        files["trtllm.yaml"] = (f"# TensorRT-LLM {engine_record('trtllm')['version']}: LLM API options for "
                                "trtllm-serve --config (keys: profiles/engines/trtllm.json config_keys)\n"
                                + trtllm_yaml(s))
    files["k8s.yaml"] = manifest(answer, info, max_len, mem_fraction)
    files["README.md"] = readme(answer, files, notes)
    return files


def manifest(answer: dict[str, Any], info: ModelInfo, max_len: int, mem_fraction: float) -> str:
    """A Deployment per role (one for a single pool) of the chosen replicas, each pod the replica's GPUs running
    vLLM's server image, and a Service in front, in the form of scripts/k8s/'s templates."""
    s = Setting.from_dict(answer["setting"])
    version = engine_record("vllm")["version"]
    docs = [f"# The chosen fleet on Kubernetes: {answer['sentence']}.\n"
            f"# vLLM {version}'s OpenAI-compatible image, one pod per replica, each with the replica's "
            f"{s.gpus} GPU{'s' if s.gpus > 1 else ''}. Set MODEL's value to the checkpoint, and the claim to a volume\n"
            "# holding it (or a Hugging Face cache); route requests to the Service (prefill and decode apart need\n"
            "# a router that sends each request's prefill and decode to the two pools: not included)."]
    for role, replicas in _roles(answer):
        name = "gpubench-search" + (f"-{role}" if role else "")
        argv = ["vllm", "serve", "$(MODEL)", *vllm_argv(s, info, role, max_len, mem_fraction)]
        args = " ".join(shlex.quote(t) if t != "$(MODEL)" else t for t in argv)
        docs.append(f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
        - name: vllm
          image: {IMAGES['vllm'].format(version=version)}
          command: ["/bin/sh", "-c"]
          args:
            - >-
              {args}
          env:
            - name: MODEL
              value: {json.dumps(info.served or "REPLACE-WITH-THE-CHECKPOINT")}
          ports:
            - containerPort: {PORTS['vllm']}
          resources:
            limits:
              nvidia.com/gpu: {s.gpus}
          volumeMounts:
            - name: models
              mountPath: /root/.cache/huggingface
            - name: shm
              mountPath: /dev/shm
      volumes:
        - name: models
          persistentVolumeClaim:
            claimName: gpubench-models
        - name: shm
          emptyDir:
            medium: Memory
---
apiVersion: v1
kind: Service
metadata:
  name: {name}
spec:
  selector:
    app: {name}
  ports:
    - port: {PORTS['vllm']}
      targetPort: {PORTS['vllm']}""")
    return "\n---\n".join(docs) + "\n"


def readme(answer: dict[str, Any], files: dict[str, str], notes: list[str]) -> str:
    lines = ["# Deploying the chosen configuration", "", answer["sentence"][0].upper() + answer["sentence"][1:] + ".",
             "", "| engine | release | repository | commit | flags read from |", "|---|---|---|---|---|"]
    for engine in ENGINES:
        r = engine_record(engine)
        lines.append(f"| {NAMES[engine]} | {r['version']} | {r['repository']} | {r.get('commit') or '–'} | "
                     f"{', '.join(r['paths'][:2])}{' …' if len(r['paths']) > 2 else ''} |")
    lines += ["", "Files: " + ", ".join(sorted(files)) + ".", *(["", *notes] if notes else [])]
    return "\n".join(lines) + "\n"
