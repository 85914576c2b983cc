import pytest

from roofline.core.counting import count_work, critical_intensity_batch


def test_gemm_counts_match_the_design_formula():
    b, n, k = 16, 8192, 28672
    work = count_work("gemm", "bf16", b, n, k)
    assert work.flop == 2 * b * n * k
    assert work.bytes == 2 * (n * k + b * k + b * n)
    assert work.weight_bytes == 2 * n * k


def test_gemv_is_gemm_at_batch_one():
    assert count_work("gemv", "fp16", 1, 4096, 4096) == count_work("gemm", "fp16", 1, 4096, 4096)
    with pytest.raises(ValueError):
        count_work("gemv", "fp16", 2, 4096, 4096)


def test_gemm_intensity_grows_about_b_flop_per_byte_in_bf16():
    small = count_work("gemm", "bf16", 8, 8192, 8192).intensity_flop_per_byte
    assert 7.9 < small < 8.0
    assert count_work("gemm", "bf16", 1024, 8192, 8192).intensity_flop_per_byte > 700


def test_bmm_intensity_does_not_grow_with_batch():
    one = count_work("bmm", "bf16", 1, 4096, 1024).intensity_flop_per_byte
    many = count_work("bmm", "bf16", 1024, 4096, 1024).intensity_flop_per_byte
    assert one == pytest.approx(many)
    assert 0.99 < many < 1.0
    assert count_work("bmm", "bf16", 8, 4096, 1024).flop == 8 * 2 * 4096 * 1024


def test_fp8_reads_one_byte_and_writes_bf16():
    work = count_work("gemm", "fp8", 4, 64, 32)
    assert work.bytes == 1 * (64 * 32 + 4 * 32) + 2 * 4 * 64


def test_critical_batch_solves_for_the_ridge():
    n, k, ridge = 8192, 28672, 206.0
    b = critical_intensity_batch("bf16", n, k, ridge)
    s = 2
    assert 2 * b * n * k / (s * (n * k + b * k + b * n)) == pytest.approx(ridge)
    assert 200 < b < 240  # a bit above the ridge: the B·K and B·N terms add bytes


def test_critical_batch_is_infinite_when_the_ridge_is_unreachable():
    assert critical_intensity_batch("bf16", 64, 64, 100.0) == float("inf")


@pytest.mark.parametrize("args", [("conv", "bf16", 1, 1, 1), ("gemm", "int4", 1, 1, 1), ("gemm", "bf16", 0, 1, 1)])
def test_bad_arguments(args):
    with pytest.raises(ValueError):
        count_work(*args)


def test_w8a16_reads_one_byte_per_weight_plus_a_bf16_scale_per_output_channel():
    b, n, k = 4, 4096, 2048
    work = count_work("gemm", "w8a16", b, n, k)
    assert work.weight_bytes == n * k + 2 * n
    assert work.bytes == n * k + 2 * n + 2 * b * k + 2 * b * n
    assert work.flop == 2 * b * n * k


def test_w4a16_reads_half_a_byte_per_weight_plus_a_scale_and_zero_per_group_of_128():
    n, k = 4096, 2048
    work = count_work("gemv", "w4a16", 1, n, k)
    assert work.weight_bytes == n * k // 2 + n * (k // 128) * 4
    assert work.activation_bytes == 2 * k and work.output_bytes == 2 * n
    # a K that is not a whole number of groups still stores a scale and zero for its last, partial group
    assert count_work("gemv", "w4a16", 1, 8, 200).weight_bytes == 8 * 100 + 8 * 2 * 4


def test_a_weight_only_format_reaches_the_ridge_at_a_proportionally_smaller_batch():
    n, k, ridge = 8192, 28672, 206.0
    bf16, w8, w4 = (critical_intensity_batch(d, n, k, ridge) for d in ("bf16", "w8a16", "w4a16"))
    for dtype, b in (("w8a16", w8), ("w4a16", w4)):
        work = count_work("gemm", dtype, 1, n, k)
        exact = 2 * b * n * k / (work.weight_bytes + 2 * b * k + 2 * b * n)
        assert exact == pytest.approx(ridge)
    assert 0.45 < w8 / bf16 < 0.55 and 0.2 < w4 / bf16 < 0.3


def test_weight_only_formats_multiply_in_bf16_and_keep_a_plain_kv_cache():
    from roofline.core.counting import KV_DTYPES, compute_dtype, gemm_activation_bytes, output_size

    assert compute_dtype("w4a16") == compute_dtype("w8a16") == "bf16" and compute_dtype("fp8") == "fp8"
    assert output_size("w4a16") == output_size("fp8-block") == output_size("fp8") == 2
    assert gemm_activation_bytes("w4a16", 3, 128) == 3 * 128 * 2  # bf16 activations
    assert gemm_activation_bytes("fp8-block", 3, 128) == 3 * (128 + 4)  # fp8 values and one fp32 scale per 128
    assert "w4a16" not in KV_DTYPES and "fp8" in KV_DTYPES
