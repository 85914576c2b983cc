"""The roofline formula, written down once: ``t = max(bytes/BW, flop/P)``, its ridge ``P/BW``, and the
attainable FLOP/s ``min(BW·I, P)`` at an intensity; and beside it the costs of moving bytes between GPUs: a ring
all-reduce, which a tensor-parallel step adds to its kernels, an all-to-all, which expert parallelism adds, each within
one NVLink domain or across several on the scale-out link, and one transfer over one link, which a KV cache handed
from a prefill replica to a decode replica takes.

Every module that draws, fits, compares or models a roofline calls these (fit, analysis, plots, decode,
compare), so a change of convention (a peak that is unknown, a bandwidth-only roof) lands everywhere at
once.  Works on floats and on numpy arrays alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def roof_time_s(flop, nbytes, bandwidth_bytes_per_s: float, peak_flop_per_s: float | None):
    """Time on the roof: the slower of moving the bytes and doing the FLOP.  ``peak`` None: bytes only."""
    memory = np.asarray(nbytes, dtype=float) / bandwidth_bytes_per_s
    if not peak_flop_per_s:
        return memory if memory.ndim else float(memory)
    out = np.maximum(memory, np.asarray(flop, dtype=float) / peak_flop_per_s)
    return out if out.ndim else float(out)


def ring_all_reduce_time_s(message_bytes: float, ranks: int, link_bytes_per_s: float, hop_latency_s: float,
                           base_latency_s: float = 0.0) -> float:
    """One ring all-reduce of ``message_bytes`` on every rank:
    ``base + 2(N-1)/N · bytes / BW + 2(N-1) · hop latency``.

    A ring reduce-scatter then all-gather sends 2(N-1) chunks of bytes/N one way along each link, one ring step
    at a time (``BW``: one direction of one GPU's link).  ``base_latency_s`` is the fixed cost of launching one
    collective whatever its size (NCCL's own cost model charges it, ``baseLat``, before the steps' latencies): what
    a decode step's small all-reduces mostly pay.  One rank has nothing to reduce: 0."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return base_latency_s + steps / ranks * message_bytes / link_bytes_per_s + steps * hop_latency_s


def all_to_all_time_s(message_bytes: float, ranks: int, link_bytes_per_s: float, hop_latency_s: float,
                      base_latency_s: float = 0.0) -> float:
    """One all-to-all (an expert-parallel dispatch or combine) of ``message_bytes`` from each rank:
    ``base + (N-1)/N · bytes / BW + hop latency``.

    The ``(N-1)/N`` of the message bound for other GPUs crosses this GPU's link (``BW``: one direction), the sends
    to every peer at once over a switch, so one step's latency; ``base_latency_s`` is the fixed cost of launching one
    collective, charged as the all-reduce's is (NCCL's all-to-all is its grouped send/receive, launched once).  One
    rank sends nothing: 0."""
    if ranks <= 1:
        return 0.0
    return base_latency_s + (ranks - 1) / ranks * message_bytes / link_bytes_per_s + hop_latency_s


@dataclass(frozen=True)
class ScaleOutLink:
    """What a collective crosses between NVLink domains, per GPU: its NIC's bandwidth one way, the latency of one
    ring step over the network, and the floor NCCL puts under every other step of a ring that leaves the domain
    (its net overhead)."""

    bytes_per_s: float
    hop_latency_s: float
    net_overhead_s: float


def domains_spanned(ranks: int, domain_gpus: int) -> int:
    """How many NVLink domains of ``domain_gpus`` a group of ``ranks`` GPUs placed contiguously spans."""
    return -(-ranks // domain_gpus)


def ring_all_reduce_across_time_s(message_bytes: float, ranks: int, domain_gpus: int, link_bytes_per_s: float,
                                  hop_latency_s: float, base_latency_s: float, scale_out: ScaleOutLink) -> float:
    """One ring all-reduce of ``message_bytes`` over ``ranks`` GPUs that span ``D`` NVLink domains of
    ``domain_gpus``, costed as NCCL's own model costs its ring between nodes (src/graph/tuning.cc, ncclTopoTuneModel):

    ``base + 2(N-1)/N · bytes / min(BW, BW_net) + (2(N-1) - 2(D-1)) · max(hop, overhead) + 2(D-1) · hop_net``

    A ring through several nodes runs every channel at the speed its NIC allows (src/graph/search.cc sets a ring's
    intra- and inter-node speed to one figure), so the whole ring moves at the slower link; 2(D-1) of its steps
    cross the network at the network's step latency, and the rest stay in a domain, each at least NCCL's net overhead
    (its CPU's cost of driving the network, charged on every step of a ring that leaves the node).  Within one domain
    it is ``ring_all_reduce_time_s``."""
    domains = domains_spanned(ranks, domain_gpus)
    if ranks <= 1 or domains <= 1:
        return ring_all_reduce_time_s(message_bytes, ranks, link_bytes_per_s, hop_latency_s, base_latency_s)
    steps, network_steps = 2 * (ranks - 1), 2 * (domains - 1)
    bandwidth = min(link_bytes_per_s, scale_out.bytes_per_s)
    return (base_latency_s + steps / ranks * message_bytes / bandwidth
            + (steps - network_steps) * max(hop_latency_s, scale_out.net_overhead_s)
            + network_steps * scale_out.hop_latency_s)


def all_to_all_across_time_s(message_bytes: float, ranks: int, domain_gpus: int, link_bytes_per_s: float,
                             hop_latency_s: float, base_latency_s: float, scale_out: ScaleOutLink) -> float:
    """One all-to-all of ``message_bytes`` from each of ``ranks`` GPUs that span several NVLink domains of
    ``domain_gpus``:
    ``base + max((d-1)/N · bytes / BW, (N-d)/N · bytes / BW_net) + hop_net``.

    Each rank sends ``bytes/N`` to every peer at once: the ``d-1`` peers of its own domain (``d``: the group's ranks
    in it) over NVLink, the ``N-d`` in other domains through its NIC, both together, so the slower share sets the time
    and the network's step latency the last arrival; the slowest rank sets the collective's (with a domain only partly
    in the group, its few ranks send the most through their NICs).  Within one domain it is ``all_to_all_time_s``."""
    domains = domains_spanned(ranks, domain_gpus)
    if ranks <= 1 or domains <= 1:
        return all_to_all_time_s(message_bytes, ranks, link_bytes_per_s, hop_latency_s, base_latency_s)
    share = message_bytes / ranks
    groups = {domain_gpus, ranks - (domains - 1) * domain_gpus}  # a full domain, and the last, maybe partial, one
    slowest = max(max((local - 1) * share / link_bytes_per_s, (ranks - local) * share / scale_out.bytes_per_s)
                  for local in groups)
    return base_latency_s + slowest + scale_out.hop_latency_s


def transfer_time_s(message_bytes: float, link_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """One transfer of ``message_bytes`` over one link, one way: ``latency + bytes / BW``."""
    return latency_s + message_bytes / link_bytes_per_s


def attainable_flop_per_s(intensity_flop_per_byte, bandwidth_bytes_per_s: float | None,
                          peak_flop_per_s: float | None):
    """``min(BW·I, P)``; None without a bandwidth (nothing to bound by)."""
    if not bandwidth_bytes_per_s:
        return None
    memory = np.asarray(intensity_flop_per_byte, dtype=float) * bandwidth_bytes_per_s
    out = np.minimum(memory, peak_flop_per_s) if peak_flop_per_s else memory
    return out if out.ndim else float(out)


def ridge_flop_per_byte(peak_flop_per_s: float | None, bandwidth_bytes_per_s: float | None) -> float | None:
    """The intensity where the two roofs meet; None when either is unknown."""
    if not peak_flop_per_s or not bandwidth_bytes_per_s:
        return None
    return peak_flop_per_s / bandwidth_bytes_per_s


@dataclass(frozen=True)
class Roof:
    """A roofline: attainable FLOP/s at an intensity.  ``peak`` None means bandwidth only."""

    bandwidth_bytes_per_s: float | None
    peak_flop_per_s: float | None

    @property
    def ridge_flop_per_byte(self) -> float | None:
        return ridge_flop_per_byte(self.peak_flop_per_s, self.bandwidth_bytes_per_s)

    def attainable(self, intensity: float) -> float | None:
        return attainable_flop_per_s(intensity, self.bandwidth_bytes_per_s, self.peak_flop_per_s)

    def time_s(self, flop, nbytes):
        return roof_time_s(flop, nbytes, self.bandwidth_bytes_per_s, self.peak_flop_per_s)
