import pytest

from roofline.specs.gpus import GIB, SpecError, load_gpu_spec, load_gpu_specs, match_gpu_spec

REQUIRED = {"h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "a100-sxm-40gb", "a100-sxm-80gb",
            "a100-pcie-80gb", "l40s", "l4", "b200", "gb200", "b300", "gb300", "mi300x", "mi325x", "mi355x"}


def test_all_required_skus_ship_with_sources():
    profiles = load_gpu_specs()
    assert REQUIRED <= set(profiles)
    for profile in profiles.values():
        assert profile.bandwidth_source and profile.peak_source
        assert profile.bandwidth_bytes_per_s > 1e11
        assert profile.peak_flop_per_s["bf16"] > profile.peak_flop_per_s["fp32"]


@pytest.mark.parametrize("name, memory_gib, sku", [
    ("NVIDIA H100 80GB HBM3", 79.1, "h100-sxm"),
    ("NVIDIA H100 PCIe", 79.2, "h100-pcie"),
    ("NVIDIA H100 NVL", 93.1, "h100-nvl"),
    ("NVIDIA H200", 139.8, "h200-sxm"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", 79.2, "a100-sxm-80gb"),
    ("NVIDIA A100 80GB PCIe", 79.2, "a100-pcie-80gb"),
    ("NVIDIA L40S", 44.4, "l40s"),
    ("NVIDIA L4", 22.0, "l4"),
    ("NVIDIA B200", 178.4, "b200"),
    ("NVIDIA GB200", 185.03, "gb200"),  # 189471 MiB: B200's memory range too, so its pattern must leave GB200 out
    ("NVIDIA B300 SXM6 AC", 268.6, "b300"),
    ("NVIDIA GB300", 277.55, "gb300"),
    ("AMD Instinct MI300X", 191.69, "mi300x"),
    ("AMD Instinct MI355X", 288.0, "mi355x"),
    ("NVIDIA H200 NVL", 139.8, None),
    ("NVIDIA GeForce RTX 4090", 24.0, None),
])
def test_matching_by_name_and_memory(name, memory_gib, sku):
    profile = match_gpu_spec(name, memory_gib * GIB)
    assert (profile.sku if profile else None) == sku


def test_spec_ridges_match_the_reference_table():
    assert load_gpu_spec("h100-sxm").ridge_flop_per_byte("bf16") == pytest.approx(295, abs=1)
    assert load_gpu_spec("h200-sxm").ridge_flop_per_byte("bf16") == pytest.approx(206, abs=1)
    assert load_gpu_spec("a100-sxm-80gb").ridge_flop_per_byte("bf16") == pytest.approx(153, abs=1)
    assert load_gpu_spec("a100-sxm-80gb").ridge_flop_per_byte("fp8") is None


def test_unknown_sku():
    with pytest.raises(SpecError, match="unknown SKU"):
        load_gpu_spec("h900")


def test_every_spec_sheet_has_an_interconnect_with_its_sources():
    for sku, spec in load_gpu_specs().items():
        link = spec.interconnect
        assert link.link_source and link.latency_source and link.base_latency_source, sku
        assert 1e10 <= link.link_bytes_per_s <= 2e12 and 0 < link.hop_latency_s < 1e-5, sku
        assert 0 < link.base_latency_s < 1e-4 and "baseLat" in link.base_latency_source, sku
        # The ring uses one direction: the sheet halves the datasheets' bidirectional sums.
        assert "each way" in link.link_source, sku
    assert load_gpu_spec("h100-sxm").interconnect.link_bytes_per_s == 450e9  # NVLink 4: 900 GB/s both ways
    assert load_gpu_spec("a100-sxm-80gb").interconnect.link_bytes_per_s == 300e9  # NVLink 3: 600 GB/s
    for sku in ("h100-pcie", "l4", "l40s", "a100-pcie-80gb"):
        assert load_gpu_spec(sku).interconnect.kind.startswith("PCIe")


@pytest.mark.parametrize("link", [None, {"kind": "NVLink 4", "link_bytes_per_s": 0, "hop_latency_s": 1e-6,
                                         "link_source": "s", "latency_source": "s", "base_latency_s": 6.6e-6,
                                         "base_latency_source": "s"},
                                  {"kind": "NVLink 4", "link_bytes_per_s": 450e9, "hop_latency_s": 1e-6,
                                   "link_source": "s", "latency_source": "s"}])
def test_a_sheet_without_a_usable_interconnect_is_refused(link):
    from roofline.specs import gpus  # its TOML reader: tomllib, or tomli on Python 3.10
    from roofline.specs.gpus import _parse_gpu_profile, profiles_dir

    data = gpus.tomllib.loads((profiles_dir() / "gpus" / "h100-sxm.toml").read_text(encoding="utf-8"))
    data.pop("interconnect")
    if link is not None:
        data["interconnect"] = link
    with pytest.raises(SpecError, match=r"malformed \(no 'interconnect'\)|interconnect.link_bytes_per_s = 0: give "
                                        r"a number from|malformed \(no 'base_latency_s'\)"):
        _parse_gpu_profile("h100-sxm", data)


def test_every_sheet_has_the_memory_its_board_reports_and_achievable_ceilings_with_their_basis():
    for sku, spec in load_gpu_specs().items():
        # The driver's total is what a device of this SKU reports, so the sheet's own pattern must match it; the
        # datasheet's "80 GB" is GiB-sized HBM or GDDR printed in decimal units, never more than the board holds.
        assert spec.matches(spec.name, spec.reported_bytes), sku
        assert spec.capacity_bytes <= spec.reported_bytes and spec.reported_source, sku
        ach = spec.achievable
        assert 0.6 * spec.bandwidth_bytes_per_s <= ach.bandwidth_bytes_per_s <= spec.bandwidth_bytes_per_s, sku
        assert set(ach.peak_flop_per_s) == set(spec.peak_flop_per_s), sku
        for dtype, peak in ach.peak_flop_per_s.items():
            # The one published FP4 measurement (torchao's NVFP4 matmul at 8192^3 on a B200) reaches 59.7%; the
            # MI300X's mamf-finder bf16 reaches 51.1% (668.4 of 1307.4 TFLOP/s, and its sheet carries the fraction).
            floor = 0.55 if dtype == "fp4" else 0.5 if sku == "mi300x" else 0.6
            assert floor * spec.peak_flop_per_s[dtype] <= peak <= spec.peak_flop_per_s[dtype], (sku, dtype)
            assert ach.peak_basis[dtype].startswith(("measured", "derived")), (sku, dtype)
        assert ach.bandwidth_basis.startswith(("measured", "derived")) and ach.bandwidth_source and ach.peak_source
    assert load_gpu_spec("a100-sxm-80gb").reported_bytes == 81920 * 2**20  # nvidia-smi: 81920 MiB
    assert load_gpu_spec("h200-sxm").reported_bytes == 143771 * 2**20


@pytest.mark.parametrize("edit, what", [
    (lambda d: d["achievable"].update(bandwidth_bytes_per_s=4e12), "above the spec sheet for bandwidth"),
    (lambda d: d["achievable"]["peak_flop_per_s"].update(fp8=0), "no figure or no basis for fp8"),
    (lambda d: d["memory"].pop("reported_bytes"), "reported_bytes"),
])
def test_a_sheet_with_a_bad_achievable_table_or_no_reported_memory_is_refused(edit, what):
    from roofline.specs import gpus
    from roofline.specs.gpus import _parse_gpu_profile, profiles_dir

    data = gpus.tomllib.loads((profiles_dir() / "gpus" / "h100-sxm.toml").read_text(encoding="utf-8"))
    edit(data)
    with pytest.raises(SpecError, match=what):
        _parse_gpu_profile("h100-sxm", data)
