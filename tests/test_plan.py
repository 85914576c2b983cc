import pytest

from microbench.points.plan import DEFAULT_BATCHES, PlanError, build_plan, parse_batches, parse_shape


def test_default_batches_include_powers_and_non_powers():
    assert DEFAULT_BATCHES[0] == 1 and DEFAULT_BATCHES[-1] == 1024
    assert {24, 48, 96, 192, 384, 640} <= set(DEFAULT_BATCHES)
    assert len(DEFAULT_BATCHES) == 17


@pytest.mark.parametrize("text, expected", [
    ("1,2,24", [1, 2, 24]),
    ("1:4096:x2", [2**i for i in range(13)]),
    ("1:16", [1, 2, 4, 8, 16]),
    ("8:32:+8", [8, 16, 24, 32]),
    ("8:32:8, 1", [1, 8, 16, 24, 32]),
    ("3:30:x3", [3, 9, 27]),
])
def test_parse_batches(text, expected):
    assert parse_batches(text) == expected


@pytest.mark.parametrize("text", ["0", "-4", "a", "1,,2", "16:1", "1:8:x1", "1:2:3:4", "1.5", "2:8:+0"])
def test_bad_batches(text):
    with pytest.raises(PlanError):
        parse_batches(text)


def test_parse_shape():
    assert parse_shape("8192x28672") == (8192, 28672)
    assert parse_shape(" 64 X 32 ") == (64, 32)
    for bad in ("8192", "8192x", "0x4", "ax4", "1x2x3"):
        with pytest.raises(PlanError):
            parse_shape(bad)


def test_plan_puts_gemv_once_per_shape_and_groups_series():
    plan = build_plan(["gemv", "gemm", "bmm"], ["bf16"], [(64, 32)], [(16, 8)], [1, 2, 4])
    labels = [(p.op, p.batch, p.n) for p in plan]
    assert labels == [("gemv", 1, 64), ("gemm", 1, 64), ("gemm", 2, 64), ("gemm", 4, 64),
                      ("bmm", 1, 16), ("bmm", 2, 16), ("bmm", 4, 16)]


def test_plan_rejects_unknown_names():
    with pytest.raises(PlanError, match="op"):
        build_plan(["conv"], ["bf16"], [(8, 8)], [(8, 8)], [1])
    with pytest.raises(PlanError, match="dtype"):
        build_plan(["gemm"], ["int3"], [(8, 8)], [(8, 8)], [1])
