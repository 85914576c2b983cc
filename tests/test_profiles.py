import pytest

from roofline.specs.gpus import GIB, SpecError, load_gpu_spec, load_gpu_specs, match_gpu_spec

REQUIRED = {"h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "a100-sxm-40gb", "a100-sxm-80gb",
            "a100-pcie-80gb", "l40s", "l4", "b200"}


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
