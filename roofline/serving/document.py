"""The simulation document (``simulation.json``, versioned like results) and ``requests.csv``.

Per policy the document keeps the summary, the capacity search and a timeline binned to at most
``TIMELINE_BINS`` points (batch, KV occupancy, MBU, MFU, share of compute-bound steps), so a run of 10,000
requests stays a small file; per-request times go to ``requests.csv``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roofline.report.page import PAGE_FILES, page_files
from roofline.result.folders import FolderKind
from roofline.result.io import write_output_file
from roofline.serving.metrics import step_arrays
from roofline.serving.profile_doc import StepProfile, save_json_atomic
from roofline.serving.simulate import SimulationRun

SCHEMA_VERSION = 1
KIND = "gpubench-simulation"
TIMELINE_BINS = 200
# What ``gpubench simulate -o`` writes: an earlier simulation's folder is replaced whole by the next one's.
SIMULATION_FOLDER = FolderKind("simulate", "simulation.json", kind=KIND, files=("requests.csv", *PAGE_FILES),
                               page=page_files)


def timeline(run: SimulationRun, profile: StepProfile, kv_capacity_tokens: int | None) -> dict[str, list[float]]:
    """Step quantities averaged over time bins (weighted by step time)."""
    s = step_arrays(run, ("start_s", "time_s", "sequences", "kv_tokens", "flop", "bytes", "compute_bound",
                          "linear_s", "attention_s", "other_s", "overhead_s"))
    # First start to last end: a fleet's steps come replica after replica, not in time order.
    edges = np.linspace(s["start_s"].min(), (s["start_s"] + s["time_s"]).max(), TIMELINE_BINS + 1)
    which = np.clip(np.searchsorted(edges, s["start_s"], side="right") - 1, 0, TIMELINE_BINS - 1)
    weight = np.bincount(which, weights=s["time_s"], minlength=TIMELINE_BINS)
    keep = weight > 0

    def mean(values: np.ndarray) -> np.ndarray:
        return np.bincount(which, weights=values * s["time_s"], minlength=TIMELINE_BINS)[keep] / weight[keep]

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(which, weights=values, minlength=TIMELINE_BINS)[keep] / weight[keep]

    roof = profile.roof
    out = {"t_s": ((edges[:-1] + edges[1:]) / 2)[keep].tolist(), "batch": mean(s["sequences"]).tolist(),
           "compute_bound_share": mean(s["compute_bound"]).tolist(),
           "kv_occupancy": (mean(s["kv_tokens"]) / kv_capacity_tokens).tolist() if kv_capacity_tokens else None,
           "mbu": (total(s["bytes"]) / roof["bandwidth_bytes_per_s"]).tolist() if roof else None,
           "mfu": (total(s["flop"]) / roof["peak_flop_per_s"]).tolist() if roof else None}
    return out


def composition(run: SimulationRun, with_comm: bool = False) -> dict[str, float]:
    """Where the busy time went: seconds in linears, attention, other kernels and engine overhead, with
    ``with_comm`` (a profile that costs tensor-parallel all-reduces) in those all-reduces, and with speculative
    decoding in the drafter's steps."""
    parts = ("linear_s", "attention_s", "other_s", "overhead_s") + (("comm_s",) if with_comm else ()) + \
        (("draft_s",) if run.speculation else ())
    s = step_arrays(run, parts)
    return {f"{name}": float(values.sum()) for name, values in s.items()}


def profile_identity(profile: StepProfile, path: str | None) -> dict[str, Any]:
    """Which step profile a document was made from: its file (None: made from a spec sheet) and identity."""
    return {"path": path, "source": profile.source, "basis": profile.basis, "model": profile.model, "tp": profile.tp,
            "dtype": profile.dtype, "kv_dtype": profile.kv_dtype, "lm_head_dtype": profile.head_dtype,
            "memory": profile.memory, "roof": profile.roof, "device": profile.device,
            **({"ep": profile.ep, "routing": profile.routing} if profile.grouped else {})}


def simulation_document(entries: list[dict[str, Any]], profile: StepProfile, profile_path: str | None,
                        workload: dict[str, Any], mem_fraction: float, tool: dict[str, Any], host: dict[str, Any],
                        argv: tuple[str, ...], fleet: dict[str, Any] | None = None,
                        load_sweep: dict[str, Any] | None = None,
                        spec_decode: dict[str, Any] | None = None,
                        engine_time: dict[str, Any] | None = None) -> dict[str, Any]:
    """``entries``: per policy ``{"run", "summary", "capacity"?, "rates"?, "energy"?, "fleet"?}``; ``fleet``: the
    layout of a fleet's replicas (``roofline.fleet``; None: one replica, and no fleet keys); ``load_sweep``:
    ``--sweep-load``'s points and front (``roofline.serving.capacity.load_sweep``; None: no key); ``spec_decode``:
    the speculative decoding simulated (None: none, and no key); ``engine_time``: whose engine time the steps carry
    (``roofline.serving.profiles.engine_time.EngineTime.to_dict``; None: no key)."""
    runs = []
    for entry in entries:
        run, summary = entry["run"], entry["summary"]
        runs.append({"policy": run.policy, "summary": summary,
                     "overhead": run.overhead.to_dict() if run.overhead else None,
                     "kv_blocks_total": run.kv_blocks_total,
                     "composition_s": composition(run, with_comm=profile.comm is not None),
                     "timeline": timeline(run, profile, summary["kv_tokens_capacity"]),
                     "capacity": entry["capacity"].to_dict() if entry.get("capacity") else None,
                     "rates": entry.get("rates") or [],
                     **({"energy": entry["energy"]} if entry.get("energy") else {}),
                     **({"fleet": entry["fleet"]} if entry.get("fleet") else {})})
    return {
        "schema_version": SCHEMA_VERSION, "kind": KIND, "tool": tool,
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "argv": list(argv),
        "host": host,
        "profile": profile_identity(profile, profile_path),
        **({"engine_time": engine_time} if engine_time else {}),
        "workload": workload, "mem_fraction": mem_fraction, **({"fleet": fleet} if fleet else {}),
        **({"spec_decode": spec_decode} if spec_decode else {}), "runs": runs,
        **({"load_sweep": load_sweep} if load_sweep else {}),
    }


def save_simulation(document: dict[str, Any], path: str | os.PathLike) -> None:
    save_json_atomic(document, path)


REQUEST_COLUMNS = ("policy", "id", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s", "finish_s",
                   "ttft_s", "tpot_s", "e2e_s", "preemptions", "cached_tokens", "queue_s", "prefill_s")


PLACEMENT_COLUMNS = ("replica", "decode_replica")


def write_requests_csv(runs: list[SimulationRun], path: Path,
                       placements: list[Sequence[tuple[int, int | None]]] | None = None) -> None:
    """One row per request per policy, written atomically and never over a link or special file.  A fleet's
    ``placements`` (per run, per request in id order: its replica and its decode replica, None when it has
    none) add the two columns of ``PLACEMENT_COLUMNS``."""
    stream = io.StringIO(newline="")
    writer = csv.writer(stream)
    writer.writerow(REQUEST_COLUMNS + (PLACEMENT_COLUMNS if placements else ()))
    for index, run in enumerate(runs):
        for row, r in enumerate(run.requests):
            where = placements[index][row] if placements else None
            writer.writerow([run.policy["policy"], r.id, f"{r.arrival_s:.9g}", r.prompt_tokens, r.output_tokens,
                             f"{r.first_token_s:.9g}", f"{r.finish_s:.9g}", f"{r.ttft_s:.9g}",
                             "" if r.tpot_s is None else f"{r.tpot_s:.9g}", f"{r.e2e_s:.9g}", r.preemptions,
                             r.cached_tokens, f"{r.queue_s:.9g}", f"{r.prefill_s:.9g}",
                             *(() if where is None else (where[0], "" if where[1] is None else where[1]))])
    write_output_file(path, stream.getvalue())
