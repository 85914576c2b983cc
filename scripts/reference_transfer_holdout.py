"""How well a covered SKU's efficiencies carry to another SKU of its generation (``roofline.reference.transfer``),
measured by holding out each system of the reference database in turn.

    PYTHONPATH=. python scripts/reference_transfer_holdout.py [--engine vllm]

For every system the installed aiconfigurator-core database covers whose generation it covers twice or more, the
system is held out and its nearest sibling of the generation (datasheet bandwidth and bf16 peak, as
``nearest_covered`` picks) predicts it: each of the held-out system's measured rows, on a shape, batch and dtype the
sibling measured too, is predicted as the sibling's time times the row's datasheet roofline on the held-out system
over its roofline on the sibling (its efficiency carried).  Printed per held-out system and table (the bf16 GEMM
table; the bf16 fused MoE table under balanced routing; bf16 generation attention): the rows compared and the
predicted over measured time at the median and the 10th and 90th percentiles.  Datasheet figures are the
database's own system files' (``systems/<system>.yaml``: ``mem_bw``, ``bfloat16_tc_flops``, NVIDIA's), which
agree with gpubench's spec sheets where both have the SKU.  Reads the database only; no GPU.
"""

from __future__ import annotations

import argparse
import math

from roofline.core.counting import count_work, grouped_work
from roofline.core.roof import roof_time_s
from roofline.reference.database import MS, Database, ReferenceDataError, _yaml, open_database
from roofline.reference.transfer import generation


def sheet(db: Database, system: str) -> tuple[float, float] | None:
    gpu = (_yaml(db.root / f"{system}.yaml").get("gpu") or {})
    if not gpu.get("mem_bw") or not gpu.get("bfloat16_tc_flops"):
        return None
    return float(gpu["mem_bw"]), float(gpu["bfloat16_tc_flops"])


def rows(db: Database, system: str, engine: str, family: str, filename: str, columns: list[str],
         equal: dict) -> dict[tuple, float]:
    """The table's rows of one kernel (the busiest) as key -> seconds (median of repeats)."""
    try:
        path, _ = db.table(system, family, engine, filename)
        read = db.read(path, [*columns, "latency", "kernel_source"], equal)
    except ReferenceDataError:
        return {}
    if not read["latency"]:
        return {}
    counts: dict[str, int] = {}
    for k in read["kernel_source"]:
        counts[k] = counts.get(k, 0) + 1
    kernel = max(sorted(counts), key=lambda k: counts[k])
    out: dict[tuple, list[float]] = {}
    for i, latency in enumerate(read["latency"]):
        if read["kernel_source"][i] == kernel and latency and latency > 0:
            out.setdefault(tuple(read[c][i] for c in columns), []).append(float(latency) * MS)
    return {key: sorted(v)[len(v) // 2] for key, v in out.items()}


def gemm_roof(key: tuple, bw: float, peak: float) -> float:
    m, n, k = key
    work = count_work("gemm", "bf16", int(m), int(n), int(k))
    return float(roof_time_s(work.flop, work.bytes, bw, peak))


def moe_roof(key: tuple, bw: float, peak: float) -> float:
    tokens, hidden, inter, topk, experts, tp, ep = key
    local, width = experts // ep, inter // tp
    rows_ = max(tokens * topk / ep, 1.0) if ep > 1 else tokens
    k = 1 if ep > 1 else min(topk, local)
    touched = min(local, rows_ * k)
    return sum(float(roof_time_s(w.flop, w.bytes, bw, peak)) for w in (
        grouped_work("bf16", rows_, 2 * width, hidden, local, k, touched),  # pyright: ignore[reportArgumentType]
        grouped_work("bf16", rows_, hidden, width, local, k, touched)))  # pyright: ignore[reportArgumentType]


def attention_roof(key: tuple, bw: float, peak: float) -> float:
    batch, step, heads, kv_heads, head_dim = key
    kv = batch * step * kv_heads * 2 * head_dim * 2  # K and V read once, bf16
    flop = 4 * batch * step * heads * head_dim
    return float(roof_time_s(flop, kv, bw, peak))


TABLES = {
    "gemm bf16": (("gemm", "gemm_perf.parquet", ["m", "n", "k"], {"gemm_dtype": "bfloat16"}), gemm_roof),
    "fused MoE bf16": (("moe", "moe_perf.parquet", ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                                                      "moe_tp_size", "moe_ep_size"],
                        {"moe_dtype": "bfloat16", "distribution": "balanced"}), moe_roof),
    "generation attention bf16": (("attention", "generation_attention_perf.parquet",
                                   ["batch_size", "step", "num_heads", "num_key_value_heads", "head_dim"],
                                   {"kv_cache_dtype": "bfloat16", "window_size": 0}), attention_roof),
}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engine", default="vllm")
    args = parser.parse_args()
    db = open_database()
    systems = sorted(p.name for p in (db.root / "data").iterdir() if p.is_dir() and any(p.rglob("*.parquet")))
    sheets = {s: sheet(db, s) for s in systems}
    by_gen: dict[str, list[str]] = {}
    for s in systems:
        gen = generation(s)
        if gen is not None and sheets[s] is not None:
            by_gen.setdefault(gen, []).append(s)
    print(f"{db.label}, {args.engine}'s tables: each system held out and predicted from its nearest sibling")
    print("| held out | carried from | table | rows | predicted / measured: p10 | median | p90 |")
    print("|---|---|---|---|---|---|---|")
    for gen, members in sorted(by_gen.items()):
        for held in members:
            bw, peak = sheets[held]  # type: ignore[misc]

            def distance(other: str, bw: float = bw, peak: float = peak) -> float:
                obw, opeak = sheets[other]  # type: ignore[misc]
                return abs(math.log(obw / bw)) + abs(math.log(opeak / peak))
            peers = [m for m in members if m != held]
            if not peers:
                continue
            source = min(peers, key=lambda other: (distance(other), other))
            sbw, speak = sheets[source]  # type: ignore[misc]
            for name, ((family, filename, columns, equal), roof) in TABLES.items():
                mine = rows(db, held, args.engine, family, filename, columns, equal)
                theirs = rows(db, source, args.engine, family, filename, columns, equal)
                ratios = [theirs[key] * roof(key, bw, peak) / roof(key, sbw, speak) / time_s
                          for key, time_s in mine.items() if key in theirs]
                if not ratios:
                    print(f"| {held} ({gen}) | {source} | {name} | 0 | – | – | – |")
                    continue
                print(f"| {held} ({gen}) | {source} | {name} | {len(ratios)} | {quantile(ratios, 0.1):.2f} | "
                      f"{quantile(ratios, 0.5):.2f} | {quantile(ratios, 0.9):.2f} |", flush=True)


if __name__ == "__main__":
    main()
