"""What a fleet adds to a simulation's document: the layout, and per policy each replica's own figures (taken
from the serving room's ``summarize`` of that replica's run) and how evenly the router spread the requests.

The pooled summary is ``summarize`` of the pooled run, unchanged: latencies over every request, throughput
over the fleet's makespan, and the step figures (batch, KV occupancy, MBU/MFU, shares of busy time) over every
replica's steps, which makes them a replica's average.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from roofline.fleet.replicas import FleetLayout, FleetRun
from roofline.serving.metrics import summarize
from roofline.serving.profile_doc import StepProfile
from roofline.serving.simulate import SimulationRun


def layout_record(layout: FleetLayout) -> dict[str, Any]:
    """The document's ``fleet``: how many replicas, the router, and a split's pools and KV link."""
    return {"replicas": layout.size, "router": layout.router,
            "prefill_replicas": layout.split[0] if layout.split else None,
            "decode_replicas": layout.split[1] if layout.split else None,
            "kv_link": layout.link.to_dict() if layout.split and layout.link else None}


def load_imbalance(requests_per_replica: list[int]) -> float:
    """The busiest replica's requests over the mean replica's (1: perfectly even)."""
    mean = float(np.mean(requests_per_replica))
    return max(requests_per_replica) / mean if mean else 1.0


def fleet_section(run: FleetRun, profile: StepProfile, mem_fraction: float) -> dict[str, Any]:
    """A policy's ``fleet``: the load imbalance of each pool, the KV handovers' times, and every replica."""
    replicas = [replica_entry(index, role, replica, profile, mem_fraction, run.makespan_s)
                for index, (role, replica) in enumerate(zip(run.roles, run.replica_runs, strict=True))]
    front = [e["requests"] for e in replicas if e["role"] != "decode"]
    back = [e["requests"] for e in replicas if e["role"] == "decode"]
    transfers = np.asarray(run.transfer_s, dtype=float)
    return {"load_imbalance": load_imbalance(front),
            "decode_load_imbalance": load_imbalance(back) if back else None,
            "kv_transfer_s": {"count": len(transfers), "mean_s": float(transfers.mean()),
                              "max_s": float(transfers.max())} if len(transfers) else None,
            "replicas": replicas}


def replica_entry(index: int, role: str, run: SimulationRun, profile: StepProfile, mem_fraction: float,
                  fleet_makespan_s: float) -> dict[str, Any]:
    """One replica's figures, over its own requests from their arrival there (a decode replica's from their
    handover, so it has no TTFT of its own)."""
    entry: dict[str, Any] = {"replica": index, "role": role, "requests": len(run.requests), "output_tokens": 0,
                             "busy_s": 0.0, "busy_share": 0.0, "ttft_p90_s": None, "tpot_p99_s": None,
                             "itl_p99_s": None, "e2e_p99_s": None, "batch_mean": None, "kv_occupancy_mean": None,
                             "preemptions": 0}
    if not run.requests:
        return entry
    s = summarize(run, profile, mem_fraction)
    # A decode replica's requests bring their first token from the prefill replica: it generated the rest.
    generated = s["output_tokens"] - (len(run.requests) if role == "decode" else 0)
    entry.update({"output_tokens": generated, "busy_s": s["busy_s"],
                  "busy_share": s["busy_s"] / fleet_makespan_s if fleet_makespan_s > 0 else 0.0,
                  "ttft_p90_s": None if role == "decode" else s["ttft"]["p90_s"], "tpot_p99_s": s["tpot"]["p99_s"],
                  "itl_p99_s": s["itl"]["p99_s"], "e2e_p99_s": s["e2e"]["p99_s"], "batch_mean": s["batch_mean"],
                  "kv_occupancy_mean": s["kv_occupancy_mean"], "preemptions": s["preemptions"]})
    return entry
