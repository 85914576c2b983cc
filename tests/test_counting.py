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
