"""Makes this folder's benchmark files (README.md says what each is and which source it follows).

The GuideLLM files are cut from the real GuideLLM 0.8.1 report kept in ../engine-bench/ (its request records,
its timings and its settings as GuideLLM wrote them) and changed where the README says; the vLLM file is made
from scratch, its keys as ``vllm bench serve --save-result --save-detailed`` writes them at vllm-project/vllm
009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1 (``vllm/benchmarks/serve.py``: ``benchmark``, ``calculate_metrics``,
``main_async``).  Run ``python tests/data/calibrate/make_files.py`` to write them again (the same bytes).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REAL = HERE.parent / "engine-bench" / "guidellm-calibration.json"
KEPT = 8  # requests kept of each real benchmark (the first sent)
PREFIX_TOKENS = 128


def _report(benchmark_index: int) -> tuple[dict, dict]:
    """The real report with one benchmark, its first ``KEPT`` requests; the aggregates GuideLLM computed over all
    12 (``metrics``) and each request's prompt and output text left out (``request_args`` and ``output`` are
    ``str | None`` in 0.8.1's ``GenerativeRequestStats``: null)."""
    report = json.loads(REAL.read_text(encoding="utf-8"))
    benchmark = report["benchmarks"][benchmark_index]
    rows = sorted(benchmark["requests"]["successful"], key=lambda r: r["request_start_time"])[:KEPT]
    for row in rows:
        row["request_args"] = row["output"] = None
    benchmark["requests"] = {"successful": rows, "errored": [], "incomplete": [], "total": None}
    benchmark.pop("metrics")
    report["benchmarks"] = [benchmark]
    return report, benchmark


def guidellm_prefix() -> dict:
    """concurrent@4 with every prompt opening with one shared prefix of ``PREFIX_TOKENS`` tokens: the data
    arguments' ``prefix_tokens`` as 0.8.1 saves it (folded into ``prefix_buckets``), and each request's prompt
    counts grown by the prefix (the server's usage counts the prefix GuideLLM prepends)."""
    report, benchmark = _report(1)
    report["config"]["spec"]["data"][0]["prefix_buckets"] = [
        {"bucket_weight": 100, "prefix_count": 1, "prefix_tokens": PREFIX_TOKENS}]
    for row in benchmark["requests"]["successful"]:
        for metrics in (row["input_metrics"],):
            metrics["text_tokens"] += PREFIX_TOKENS
            metrics["total_tokens"] += PREFIX_TOKENS
        row["prompt_tokens"] = row["input_metrics"]["total_tokens"]
        row["total_tokens"] = row["prompt_tokens"] + row["output_tokens"]
        row["tokens_per_second"] = row["total_tokens"] / row["request_latency"]
    return report


def guidellm_synchronous() -> dict:
    """The real concurrent@1 benchmark (one stream: each request sent when the one before it ended) saved as the
    synchronous profile's one benchmark: ``SynchronousProfileArgs`` and ``SynchronousStrategy`` (one worker, one
    request in flight) in place of the concurrent ones."""
    report, benchmark = _report(0)
    profile = report["config"]["spec"]["profile"]
    report["config"]["spec"]["profile"] = {"kind": "synchronous", "rampup_duration": 0.0,
                                           "warmup": profile["warmup"], "cooldown": profile["cooldown"]}
    benchmark["config"]["strategy"] = {"type_": "synchronous", "worker_count": 1, "max_concurrency": 1}
    benchmark["config"]["profile"] = copy.deepcopy(report["config"]["spec"]["profile"])
    return report


def vllm_start_times() -> dict:
    """``vllm bench serve --request-rate 4 --max-concurrency 2 --save-result --save-detailed`` (random dataset,
    ignore_eos) of 8 requests, one failed: sends drawn as ``get_request`` draws them (Poisson gaps rescaled to
    end at 8 / 4 s), each let through ``max_concurrency``'s semaphore when one of the two in flight ends, and
    ``start_times`` the sends it let through (``time.perf_counter()``); made-up times for the tokens."""
    rng = np.random.default_rng(7)
    n, rate, concurrency = 8, 4.0, 2
    gaps = rng.exponential(1 / rate, n)
    arrivals = np.cumsum(gaps) * (n / rate) / np.sum(gaps)
    prompts = rng.integers(16, 64, n).tolist()
    outputs = [48] * n
    ttfts = rng.uniform(0.02, 0.05, n)
    itls = [rng.uniform(0.008, 0.012, out - 1) for out in outputs]
    failed = 5  # refused by the server: no token, output length 0, an error
    base = 81234.5  # perf_counter's origin is arbitrary
    in_flight: list[float] = []
    starts, latencies = [], []
    for i in range(n):
        in_flight.sort()
        start = arrivals[i] if len(in_flight) < concurrency else max(arrivals[i], in_flight.pop(0))
        latency = 0.003 if i == failed else float(ttfts[i] + itls[i].sum() + 0.0004)
        starts.append(start)
        latencies.append(latency)
        in_flight.append(start + latency)
    ok = [i for i in range(n) if i != failed]
    duration = float(max(starts[i] + latencies[i] for i in ok) + 0.01)
    ttft_list = [0.0 if i == failed else float(ttfts[i]) for i in range(n)]
    itl_list = [[] if i == failed else [float(g) for g in itls[i]] for i in range(n)]
    output_lens = [0 if i == failed else outputs[i] for i in range(n)]
    tpots = [(latencies[i] - ttft_list[i]) / (outputs[i] - 1) for i in ok]
    all_itls = [g for i in ok for g in itl_list[i]]
    total_input, total_output = sum(prompts[i] for i in ok), sum(output_lens)
    result = {"date": "20261204-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
              "model_id": "tiny", "tokenizer_id": "tiny", "num_prompts": n, "request_rate": rate, "burstiness": 1.0,
              "max_concurrency": concurrency,
              "duration": duration, "completed": len(ok), "failed": 1, "total_input_tokens": total_input,
              "total_output_tokens": total_output, "request_throughput": len(ok) / duration,
              "request_goodput": None, "output_throughput": total_output / duration,
              "total_token_throughput": (total_input + total_output) / duration,
              "input_lens": prompts, "output_lens": output_lens, "ttfts": ttft_list, "itls": itl_list,
              "latencies": [0.0 if i == failed else latencies[i] for i in range(n)],
              "start_times": [float(base + s) for s in starts],
              "queue_times": [float(s - a) for s, a in zip(starts, arrivals, strict=True)],
              "generated_texts": ["" if i == failed else " x" * outputs[i] for i in range(n)],
              "errors": ["Internal Server Error" if i == failed else "" for i in range(n)],
              "max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0, "rtfx": 0.0}
    # calculate_metrics' peak: output tokens per whole second from the first send, and requests in flight
    first = min(starts[i] for i in ok)
    per_second = np.zeros(int(np.ceil(duration)) + 1)
    for i in ok:
        for t in starts[i] + ttft_list[i] + np.cumsum([0.0, *itl_list[i]]):
            per_second[int(t - first)] += 1
    events = sorted([(starts[i], 1) for i in ok] + [(starts[i] + latencies[i], -1) for i in ok])
    running = np.cumsum([delta for _, delta in events])
    result["max_output_tokens_per_s"] = float(per_second.max())
    result["max_concurrent_requests"] = int(running.max())
    ttft_ok = [ttft_list[i] for i in ok]
    for name, values in (("ttft", ttft_ok), ("tpot", tpots), ("itl", all_itls)):
        result[f"mean_{name}_ms"] = float(np.mean(values)) * 1000
        result[f"median_{name}_ms"] = float(np.median(values)) * 1000
        result[f"std_{name}_ms"] = float(np.std(values)) * 1000
        result[f"p99_{name}_ms"] = float(np.percentile(values, 99)) * 1000
    return result


def main() -> None:
    for name, document in (("guidellm-prefix.json", guidellm_prefix()),
                           ("guidellm-synchronous.json", guidellm_synchronous()),
                           ("vllm-start-times.json", vllm_start_times())):
        (HERE / name).write_text(json.dumps(document), encoding="utf-8")  # one line, as both writers write it


if __name__ == "__main__":
    main()
