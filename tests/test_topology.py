"""Topology and collectives: NCCL's per-collective latency on the all-to-all, NVLink domains and the scale-out link
past them (a ring all-reduce and an all-to-all across domains, by hand), the spec sheets that say so (each figure
with its source, a bad one refused at load naming the file and the key), and a decode whose expert-parallel group
spans two HGX boards costed, and said, on the scale-out link."""

from __future__ import annotations

import json
import math
import re

import pytest
from click.testing import CliRunner

from microbench.cli.app import main
from roofline.core.roof import (
    ScaleOutLink,
    all_to_all_across_time_s,
    all_to_all_time_s,
    ring_all_reduce_across_time_s,
    ring_all_reduce_time_s,
)
from roofline.specs.gpus import SpecError, load_gpu_spec, load_gpu_spec_file, load_gpu_specs, profiles_dir
from tests.conftest import ROOT, needs_database

# One HGX H200 board's NVLink and its ConnectX-7 NIC, as profiles/gpus/h200-sxm.toml gives them.
NVLINK, HOP, BASE = 450e9, 0.6e-6, 6.6e-6
IB = ScaleOutLink(bytes_per_s=50e9, hop_latency_s=2.7e-6, net_overhead_s=1.0e-6)
NEW_SHEETS = ("gb200", "gb300", "b300", "mi300x", "mi325x", "mi355x")
KIMI_K2 = ROOT / "tests" / "data" / "hf-configs" / "kimi-k2.json"
QWEN3_30B = ROOT / "tests" / "data" / "hf-configs" / "qwen3-30b-a3b.json"


def test_the_all_to_all_pays_the_base_latency_by_hand():
    # 7/8 of 8 MB over 1 GB/s, one step's latency and NCCL's 6.6 us launch: 7 ms + 1 us + 6.6 us.
    assert all_to_all_time_s(8e6, 8, 1e9, 1e-6, 6.6e-6) == pytest.approx(7e-3 + 1e-6 + 6.6e-6)
    assert all_to_all_time_s(8e6, 1, 1e9, 1e-6, 6.6e-6) == 0.0  # one rank sends nothing
    link = load_gpu_spec("h200-sxm").interconnect
    # 512 bytes from each of 8 H200s: the base latency and one NVLink step are nearly all of it.
    assert link.all_to_all_time_s(512, 8) == pytest.approx(6.6e-6 + 0.6e-6 + 7 / 8 * 512 / 450e9)


def test_a_ring_all_reduce_across_two_hgx_boards_by_hand():
    # 16 GPUs on two domains of 8: 30 ring steps, 2 of them over the network at 2.7 us, the other 28 at NCCL's 1 us
    # net overhead (above NVLink's 0.6), and every byte at the NIC's 50 GB/s: 30/16 x 1 MB / 50 GB/s = 37.5 us.
    expected = 6.6e-6 + 30 / 16 * 1e6 / 50e9 + 28 * 1.0e-6 + 2 * 2.7e-6
    assert ring_all_reduce_across_time_s(1e6, 16, 8, NVLINK, HOP, BASE, IB) == pytest.approx(expected)
    assert expected == pytest.approx(77.5e-6)
    # Within one domain it is the ring on NVLink, to the bit.
    assert ring_all_reduce_across_time_s(1e6, 8, 8, NVLINK, HOP, BASE, IB) == \
        ring_all_reduce_time_s(1e6, 8, NVLINK, HOP, BASE)
    link = load_gpu_spec("h200-sxm").interconnect
    assert link.all_reduce_time_s(1e6, 16) == pytest.approx(expected)
    assert link.domains(16) == 2 and link.domains(8) == 1


def test_an_all_to_all_across_two_domains_by_hand():
    # 16 GPUs, 1.6 MB from each: 100 kB to every peer, 7 peers over NVLink (0.7 MB / 450 GB/s = 1.6 us) while 8 go
    # through the NIC (0.8 MB / 50 GB/s = 16 us): the NIC's share, the network's step latency and the launch.
    expected = 6.6e-6 + 8 * 1e5 / 50e9 + 2.7e-6
    assert all_to_all_across_time_s(1.6e6, 16, 8, NVLINK, HOP, BASE, IB) == pytest.approx(expected)
    assert expected == pytest.approx(25.3e-6)
    # 12 GPUs: a full board of 8 and 4 on the next; those 4 send 8/12 of their message through their NICs.
    assert all_to_all_across_time_s(1.2e6, 12, 8, NVLINK, HOP, BASE, IB) == \
        pytest.approx(6.6e-6 + 8 * 1e5 / 50e9 + 2.7e-6)
    assert all_to_all_across_time_s(1.6e6, 8, 8, NVLINK, HOP, BASE, IB) == \
        all_to_all_time_s(1.6e6, 8, NVLINK, HOP, BASE)
    assert load_gpu_spec("h200-sxm").interconnect.all_to_all_time_s(1.6e6, 16) == pytest.approx(expected)


def test_an_nvl72_keeps_sixteen_gpus_on_nvlink_and_says_which_link_a_group_crosses():
    gb200, h200 = load_gpu_spec("gb200").interconnect, load_gpu_spec("h200-sxm").interconnect
    assert gb200.domain_gpus == 72 and gb200.crossing(16) == "NVLink 5" and gb200.domains(144) == 2
    assert h200.crossing(8) == "NVLink 4"
    assert h200.crossing(16) == "scale-out InfiniBand NDR 400 Gb/s between 2 NVLink 4 domains of 8"
    # A sheet with no domain (a PCIe card's) costs every group on its link, as before.
    l4 = load_gpu_spec("l4").interconnect
    assert l4.domain_gpus is None and l4.domains(64) == 1 and l4.crossing(64) == l4.kind


@pytest.mark.parametrize("sku", NEW_SHEETS)
def test_each_new_sheet_loads_and_every_figure_has_a_source(sku):
    spec = load_gpu_spec(sku)
    sources = [spec.bandwidth_source, spec.peak_source, spec.reported_source, spec.tdp_source,
               spec.achievable.bandwidth_source, spec.achievable.peak_source, *spec.achievable.peak_basis.values()]
    link, out = spec.interconnect, spec.interconnect.scale_out
    assert out is not None and link.domain_gpus in (8, 72)
    sources += [link.link_source, link.latency_source, link.base_latency_source, link.domain_source,
                out.link_source, out.latency_source, out.net_overhead_source, out.deployment]
    assert all(len(source) > 20 for source in sources), sku
    assert spec.tdp_w and 700 <= spec.tdp_w <= 1400 and spec.peak_flop_per_s["bf16"] >= 1.3e15
    assert "each way" in link.link_source and "baseLat" in link.base_latency_source
    assert out.deployment.startswith("typical, not the SKU"), sku  # a NIC is a deployment's, not the GPU's
    assert set(spec.achievable.peak_flop_per_s) == set(spec.peak_flop_per_s)


def test_the_amd_sheets_are_analytic_only_and_say_so():
    for sku in ("mi300x", "mi325x", "mi355x"):
        spec = load_gpu_spec(sku)
        text = (profiles_dir() / "gpus" / f"{sku}.toml").read_text(encoding="utf-8")
        assert spec.reference_systems == {} and "An analytic SKU only" in text
        assert "RCCL" in spec.interconnect.base_latency_source  # AMD's collectives are RCCL's, costed by its model
        assert "fp4" not in spec.peak_flop_per_s  # nvfp4 has no units on these parts
    for sku in ("gb200", "gb300", "b300"):
        assert load_gpu_spec(sku).reference_systems, sku


def test_every_sheet_with_a_domain_has_a_way_out_with_its_sources():
    for sku, spec in load_gpu_specs().items():
        link = spec.interconnect
        assert (link.domain_gpus is None) == (link.scale_out is None), sku
        if link.scale_out is not None:
            assert link.domain_source and link.scale_out.link_source and link.scale_out.latency_source, sku
            assert link.scale_out.link_bytes_per_s < link.link_bytes_per_s, sku  # a NIC is slower than NVLink


def _own_sheet(tmp_path, edit) -> tuple:
    text = (profiles_dir() / "gpus" / "h200-sxm.toml").read_text(encoding="utf-8")
    path = tmp_path / "my-h200.toml"
    path.write_text(edit(text), encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        load_gpu_spec_file(path)
    return path, str(caught.value)


@pytest.mark.parametrize("key, value, words", [
    ("domain_gpus", "8.5", "interconnect.domain_gpus = 8.5: give a whole number from 1 to 100,000"),
    ("domain_gpus", "0", "interconnect.domain_gpus = 0: give a whole number from 1 to 100,000"),
    ("domain_gpus", "true", "interconnect.domain_gpus = True: give a whole number"),
])
def test_a_bad_domain_size_is_refused_at_load_naming_the_file_and_the_key(tmp_path, key, value, words):
    path, message = _own_sheet(tmp_path, lambda text: re.sub(rf"^{key} = .*$", f"{key} = {value}", text,
                                                             flags=re.MULTILINE))
    assert message.startswith(f"--gpu-spec {path}: {words}") and "\n" not in message, message


@pytest.mark.parametrize("key, value", [("link_bytes_per_s", "0"), ("link_bytes_per_s", "nan"),
                                        ("hop_latency_s", "-1"), ("net_overhead_s", '"fast"')])
def test_a_bad_scale_out_figure_is_refused_at_load_naming_the_file_and_the_key(tmp_path, key, value):
    def edit(text: str) -> str:
        head = text.index("[scale_out]")
        line = re.compile(rf"^{key} = .*$", re.MULTILINE).search(text, head)
        assert line is not None
        return text[:line.start()] + f"{key} = {value}" + text[line.end():]
    path, message = _own_sheet(tmp_path, edit)
    assert message.startswith(f"--gpu-spec {path}: scale_out.{key} = ") and "give a number from" in message, message


def test_a_domain_without_a_way_out_is_refused(tmp_path):
    path, message = _own_sheet(tmp_path, lambda text: text[:text.index("\n# Past one NVLink domain")] +
                               text[text.index("\n# The board's power limit"):])
    assert message == (f"--gpu-spec {path}: malformed (give interconnect.domain_gpus and a [scale_out] table "
                       "together (a group larger than the domain crosses the scale-out link), or neither)")


def test_kimi_k2_fp8_at_ep_16_on_h200_costs_its_all_to_alls_on_the_scale_out_link(tmp_path):
    """An HGX H200 board is one NVLink domain of 8: EP 16 spans two, so each all-to-all sends half of what leaves a
    GPU through its 400 Gb/s NIC; the summary names that link."""
    run = CliRunner().invoke(main, ["decode", "--analytic", "--gpu", "h200-sxm", "--hf-config", str(KIMI_K2),
                                    "--ep", "16", "--batch", "1,64", "-o", str(tmp_path / "d")])
    assert run.exit_code == 0, run.output
    document = json.loads((tmp_path / "d" / "decode.json").read_text())
    part = document["analytic"]
    [exchange] = part["comm"]["collectives"]
    assert exchange["kind"] == "all_to_all" and exchange["ranks"] == 16 and exchange["per_step"] == 2 * 60
    assert exchange["crosses"] == "scale-out InfiniBand NDR 400 Gb/s between 2 NVLink 4 domains of 8"
    assert part["comm"]["interconnect"]["scale_out"]["link_bytes_per_s"] == 50e9
    # Batch 1: one token a rank, its 7168 bf16 values sent once to each GPU holding one of its 8 experts (384
    # experts, 24 a GPU): a peer holds one with probability 1 - C(360, 8) / C(384, 8), about 0.40, so 5,780 bytes
    # to each peer on average: 8 peers on the other board through the NIC (0.92 us), the network's 2.7 us step and
    # NCCL's 6.6 us launch.
    held = 1 - math.comb(360, 8) / math.comb(384, 8)
    per_peer = 2 * 7168 * held
    one = 6.6e-6 + 8 * per_peer / 50e9 + 2.7e-6
    assert part["rows"][0]["comm_time_s"] == pytest.approx(120 * one)
    # On one board the same exchange would cost 120 x (6.6 + 0.6 + 15 peers' bytes / 450 GB/s) us: the scale-out link
    # makes it 1.4x; without the base latency, one board's would be well under a microsecond each.
    within = 120 * (6.6e-6 + 0.6e-6 + 15 * per_peer / 450e9)
    assert part["rows"][0]["comm_time_s"] / within == pytest.approx(1.39, abs=0.01)
    summary = next(line for line in run.output.splitlines() if line.startswith("analytic, "))
    assert ("the step's 120 all-to-alls over 16 GPUs (scale-out InfiniBand NDR 400 Gb/s between 2 NVLink 4 domains "
            "of 8) take 1.23 ms") in summary, summary


def test_the_analytic_profile_costs_a_spanning_group_on_the_scale_out_link_and_says_so():
    from roofline.serving.profiles.analytic import comm_tables
    from roofline.specs.models import load_model
    from roofline.step.launches import StepModel

    gpu = load_gpu_spec("h200-sxm")
    reduce, _ = comm_tables(StepModel.of(load_model("llama-3-70b"), 8), gpu, (1, 64))
    assert reduce is not None and "span" not in reduce.source
    reduce, _ = comm_tables(StepModel.of(load_model("llama-3-70b"), 16), gpu, (1, 64))
    assert reduce is not None and "16 GPUs span 2 domains of 8, joined by InfiniBand NDR 400 Gb/s" in reduce.source
    assert reduce.time_s[0] == pytest.approx(gpu.interconnect.all_reduce_time_s(2 * 8192, 16))


# aiconfigurator-core 0.12.0's nccl-tests alltoall_perf rows on eight H200s (NCCL 2.26.2, half): each rank's send
# buffer in bytes, the median of the rows at that size in microseconds. The issue quoted them as 8.3-10.3 us.
H200_ALLTOALL_8 = {512: 9.49, 1024: 8.97, 2048: 9.65, 4096: 11.03, 8192: 8.47, 16384: 8.21, 32768: 10.33}


@needs_database
def test_the_analytic_all_to_all_against_the_databases_measured_rows():
    """The spec sheet's all-to-all on 8 H200s against NCCL's measured one: at 512 B-32 kB both are the launch and
    step latencies (the sheet's 7.2 us against the database's 8.2-11.0, 0.65-0.88x); without NCCL's base latency the
    sheet said 0.6 us, a fourteenth."""
    from roofline.reference.comm import AllToAllTable
    from roofline.reference.database import open_database

    gpu = load_gpu_spec("h200-sxm")
    table = AllToAllTable.read(open_database(), gpu, 8)
    assert table.source.engine == "nccl" and table.source.engine_version == "2.26.2"
    assert table.source.device == "NVIDIA H200" and "alltoall_perf" in table.source.family
    measured = dict(zip(table.sizes_bytes, table.time_s, strict=True))
    for size, microseconds in H200_ALLTOALL_8.items():
        assert measured[size] * 1e6 == pytest.approx(microseconds, abs=0.01), size
        ratio = gpu.interconnect.all_to_all_time_s(size, 8) / measured[size]
        assert 0.64 <= ratio <= 0.9, (size, ratio)
    # Past the latency floor the link's bandwidth shows: 512 MB from each GPU, measured 1.46 ms, the sheet 1.05 ms.
    largest = table.sizes_bytes[-1]
    assert largest == 2**29 and gpu.interconnect.all_to_all_time_s(largest, 8) / table.time_s[-1] == \
        pytest.approx(0.72, abs=0.02)
    # A message past the largest row: that row's time plus the link's time for the rest.
    assert table.time_for(2**30, gpu.interconnect) == pytest.approx(
        table.time_s[-1] + 7 / 8 * 2**29 / gpu.interconnect.link_bytes_per_s)


@needs_database
def test_the_reference_profile_reads_nccls_all_to_all_where_the_database_has_it():
    from roofline.serving.profiles.reference import reference_profile
    from roofline.specs.hf_config import load_hf_config

    gpu, model = load_gpu_spec("h200-sxm"), load_hf_config(QWEN3_30B)
    exchange = reference_profile(model, tp=1, ep=8, dtype="bf16", kv_dtype="bf16", max_tokens=64, max_context=1024,
                                 gpu=gpu).all_to_all
    assert exchange is not None and exchange.measured and "alltoall_perf" in exchange.source
    # One token a GPU: its 2048 bf16 values to each of the 8 GPUs holding one of its 8 experts (16 of the 128 a GPU:
    # with probability 1 - C(112, 8) / C(128, 8), about 0.66): 21,600 bytes from each, between the database's rows.
    sent = 2 * 2048 * 8 * (1 - math.comb(112, 8) / math.comb(128, 8))
    between = H200_ALLTOALL_8[16384] + (sent - 16384) / 16384 * (H200_ALLTOALL_8[32768] - H200_ALLTOALL_8[16384])
    assert exchange.at(1) == pytest.approx(between * 1e-6, abs=0.01e-6)
    # EP 16 spans two boards, and the database timed no all-to-all over 16 GPUs: the spec sheet's, across the NIC.
    wide = reference_profile(model, tp=1, ep=16, dtype="bf16", kv_dtype="bf16", max_tokens=64, max_context=1024,
                             gpu=gpu).all_to_all
    assert wide is not None and not wide.measured and "no all-to-all over 16 GPUs" in wide.source
    assert "joined by InfiniBand NDR 400 Gb/s" in wide.source
    wide_sent = 2 * 2048 * 16 * (1 - math.comb(120, 8) / math.comb(128, 8))
    assert wide.at(1) == pytest.approx(gpu.interconnect.all_to_all_time_s(wide_sent, 16))
