"""A real engine benchmarked by a real load generator, on this CPU, for ``gpubench calibrate``'s tests: Hugging
Face transformers' own OpenAI-compatible server (``transformers serve --continuous-batching``) serving a tiny
random-weight Llama saved here with a BPE tokenizer trained here (nothing is downloaded), driven by GuideLLM
(``guidellm run``, from PyPI: the ``calibrate`` extra).

Notes on the pair, as found (transformers 5.17-5.24, guidellm 0.8.1): the server refuses ``ignore_eos`` (422),
which GuideLLM sends whenever a request carries its own output length, so the output length is the backend's
``max_tokens`` (one per run) and the model's generation config has no EOS, so every request generates exactly
that many tokens; the server's KV cache is sized on the command line (left alone it takes most of the host's
memory); GuideLLM's synthetic prompts are Faker text cut to a token count by the tokenizer, so the tokenizer
must encode any lower-case English into tokens that are not special (a WordLevel vocabulary of made-up words
decoded every prompt to nothing).  Run as a script to run the benchmarks again and keep their files:
``python tests/engine_bench.py DIR`` (DIR absolute: GuideLLM runs in it and reads the model by its path).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# The two workloads: calibrated on the first, the second predicted (other prompt and output lengths, rate).  The
# calibration is closed loops of 1, 4 and then 12 requests in flight (three benchmarks in one report), so the fit
# sees steps of one sequence to the dozen the prediction reaches: GuideLLM's seeded Poisson sends its requests in
# bunches (11 within 60 ms in a run of 48), and a fit on batches of 1 and 4 alone predicted that batch's steps
# twice too long (the server's gap grew 2.8 -> 5.6 ms from 1 to 4 sequences, to only 6.4 ms at 11).
CALIBRATION = {"profile": "kind=concurrent,streams=1", "streams": "1,4,12", "requests": 12, "prompt": (32, 4, 64, 20),
               "output": 32}
PREDICTION = {"profile": "kind=poisson,rate=4", "requests": 16, "prompt": (48, 32, 64, 12), "output": 64}
# Both are run in turn ROUNDS times against one server, calibration then prediction: this 2-core machine's cores
# switch between two speeds 1.7x apart for seconds at a time, so one benchmark's window can run at another speed
# than the next one's; in rounds, the calibration and the prediction share the same mix of both.  Measured
# (scripts/bench_engine_calibrate.py): each round alone (its calibration, its prediction) was off by up to
# -46..+54% on TPOT p50; the rounds together by -0.8%, -1.9% and -16.1% in runs of four rounds, -6.5%, +11.7%
# and -5.8% in runs of eight, +8.6% in a run of twelve (8 minutes: twelve narrow the spread of eight by a
# fifth, as 1/sqrt(rounds) does).
ROUNDS = 12
# The server's continuous batching: a step holds at most this many tokens (the simulator's chunked budget).
MAX_BATCH_TOKENS = 256
POLICY = f"chunked:budget={MAX_BATCH_TOKENS}:max-batch=64"
WORDS = ("the of and to in is was for on that with as by at from his her an be had are not but which this were "
         "have one all they their been has more when who there so some into time other what its only about after "
         "over such then also most these first two where many before must back years much your way well down "
         "should because each just those people how too little state good very make world still own see men work "
         "long get here between both life being under never day same another know while last might us great old "
         "year off come since against go came right used take three").split()


def missing_packages() -> str | None:
    """Why the real engine cannot run here (None: it can): the serving and calibrate extras."""
    import importlib.util

    for name in ("transformers", "torch", "fastapi", "uvicorn", "openai", "guidellm"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install -e '.[calibrate]')"
    if shutil.which("guidellm", path=str(Path(sys.executable).parent)) is None:
        return "the guidellm command is not beside this Python"
    return None


def make_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A 2-layer Llama with random weights and a BPE tokenizer trained on a few words, saved in ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(seed)
    corpus = [" ".join(rng.choice(WORDS) + rng.choice(["", "", "", ",", ".", "!", "?", ";", ":"])
                       for _ in range(12)) for _ in range(400)]
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]", end_of_word_suffix="</w>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.BPEDecoder(suffix="</w>")
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=512, special_tokens=["[UNK]"],
        initial_alphabet=list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"-()"),
        end_of_word_suffix="</w>", show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=512, vocab_size=tokenizer.get_vocab_size(), tie_word_embeddings=False,
                         max_position_embeddings=1024, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None  # every request generates its max_tokens
    model.save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def raised_priority() -> None:
    """In the child before it runs: ahead of the machine's other processes where allowed (root), so a shared
    machine's other work stalls the server and the load generator less (the times are wall-clock, over HTTP)."""
    try:
        os.nice(-10)
    except OSError:
        pass


def on_core(index: int):
    """A child's set-up: raised priority, and pinned to the ``index``-th core this process may use where it may
    use two or more, so the server and the load generator each have a core and never take turns on one."""
    def prepare() -> None:
        raised_priority()
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= 2:
            os.sched_setaffinity(0, {cores[index % len(cores)]})
    return prepare


def offline_env() -> dict[str, str]:
    """One torch thread for the server (the load generator has the other core), and no network."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_server(model: Path, log: Path, timeout_s: float = 180) -> Server:
    """``transformers serve`` with continuous batching on the CPU, its KV cache sized here; returns once it has
    answered one completion (the continuous-batching manager starts on the first request)."""
    port = free_port()
    command = [str(Path(sys.executable).parent / "transformers"), "serve", str(model), "--continuous-batching",
               "--device", "cpu", "--host", "127.0.0.1", "--port", str(port), "--cb-num-blocks", "64",
               "--cb-block-size", "32", "--cb-max-batch-tokens", str(MAX_BATCH_TOKENS)]
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=offline_env(),
                                   preexec_fn=on_core(0))
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout_s
    body = json.dumps({"model": str(model), "prompt": "the world of work", "max_tokens": 8}).encode()
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"transformers serve exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            request = urllib.request.Request(f"{server.url}/v1/completions", body,
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                json.loads(answer.read())
            break
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"transformers serve did not answer in {timeout_s:.0f} s") from None
            time.sleep(1)
    warm_up(server, model)
    return server


def warm_up(server: Server, model: Path, requests: int = 8) -> None:
    """Requests of both workloads' sizes at once, before any benchmark: the server's first long prompts and
    first large batch took hundreds of milliseconds more than later ones (measured: a 263 ms first token alone)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> None:
        prompt = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(8 + 8 * i))
        body = json.dumps({"model": str(model), "prompt": prompt, "max_tokens": 16}).encode()
        request = urllib.request.Request(f"{server.url}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()

    for _ in range(2):
        with ThreadPoolExecutor(requests) as pool:
            list(pool.map(one, range(requests)))


def run_guidellm(server: Server, model: Path, workload: dict, output: Path, timeout_s: float = 300) -> Path:
    """One GuideLLM run (its ``profile``: Poisson arrivals or closed loops of ``streams``; synthetic prompts of the
    given token counts, each request ``output`` tokens) against the server; its JSON report at ``output``."""
    mean, low, high, sd = workload["prompt"]
    command = [str(Path(sys.executable).parent / "guidellm"), "run",
               "--backend", f"kind=openai_http,target={server.url},model={model},request_format=/v1/completions,"
                            f"max_tokens={workload['output']}",
               "--tokenizer", f"kind=huggingface_auto,model={model}",
               "--profile", workload["profile"],
               *(["--override", "profile.streams", workload["streams"]] if "streams" in workload else []),
               "--constraint", f"kind=max_requests,count={workload['requests']}",
               "--data", f"kind=synthetic_text,prompt_tokens={mean},prompt_tokens_min={low},"
                         f"prompt_tokens_max={high},prompt_tokens_stdev={sd}",
               "--output", f"kind=json,path={output}", "--disable-console-interactive"]
    # One worker process (GuideLLM's default is up to 10, each spawned and importing GuideLLM anew: 4 s apiece on
    # the one core it has here): its asyncio loop keeps a dozen streams in flight, and a run takes 12 s, not 21.
    env = {**offline_env(), "GUIDELLM__MAX_WORKER_PROCESSES": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s,
                          cwd=output.parent, preexec_fn=on_core(1))
    if done.returncode != 0 or not output.exists():
        raise RuntimeError(f"guidellm failed ({done.returncode}): {(done.stdout + done.stderr)[-3000:]}")
    return output


def measure_profile(folder: Path):
    """The tiny model's step profile measured here, as the prediction's kernels (one torch thread, fp32, grids up
    to the server's batch and context): ``folder/profile.json``; returns the command's click result.  In this
    process, with its torch threads put back after (the profile's ``--threads 1`` sets them)."""
    import torch
    from click.testing import CliRunner

    from microbench.cli.app import main

    before = torch.get_num_threads()
    try:
        return CliRunner().invoke(main, ["profile", "--hf-config", str(folder / "tiny" / "config.json"), "--device",
                                         "cpu", "--dtype", "fp32", "--max-tokens", "256", "--max-context", "256",
                                         "--max-batch", "16", "--budget", "0.01", "--threads", "1", "-o",
                                         str(folder / "profile.json")])
    finally:
        torch.set_num_threads(before)


def benchmark_rounds(folder: Path, rounds: int = ROUNDS) -> dict[str, list[Path]]:
    """The tiny model served, then ``rounds`` of the calibration and the prediction benchmark run against it in
    turn: ``guidellm-calibration-R.json`` and ``guidellm-prediction-R.json``, GuideLLM's reports, R from 0."""
    folder = folder.resolve()  # GuideLLM runs in it and reads the model by its path
    model = make_tiny_model(folder / "tiny")
    server = start_server(model, folder / "serve.log")
    files: dict[str, list[Path]] = {"calibration": [], "prediction": []}
    try:
        for index in range(rounds):
            for name, workload in (("calibration", CALIBRATION), ("prediction", PREDICTION)):
                files[name].append(run_guidellm(server, model, workload, folder / f"guidellm-{name}-{index}.json"))
        return files
    finally:
        server.stop()


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for name, paths in benchmark_rounds(target).items():
        print(name, *paths)
