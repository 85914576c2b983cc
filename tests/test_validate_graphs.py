"""validate --engine-mode graphs warms every shape before it times anything and simulates what the engine runs:
the static path's batches share one static cache length (one compiled shape per batch size), the warm-up meets
every batch size the timed runs meet, dynamo may compile them all, and the simulation attends the whole static
cache.  Compiling and capturing need a CUDA GPU (tests/test_gpu.py); here the same ``generate`` calls run on the
CPU, where transformers uses the static cache and skips the compile."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the serving extra (transformers) is not installed")

from microbench.serving.engine import transformers_engine as te  # noqa: E402
from roofline.serving.workload import make_workload  # noqa: E402

pytestmark = pytest.mark.slow  # a whole real run: the slow tier (pytest -m slow)

TINY = Path(__file__).parent / "data" / "tiny-llama-config.json"


@pytest.fixture
def tiny_lm():  # a new model per test: transformers keeps the longest static cache a model has made
    import torch

    from roofline.specs.hf_config import load_hf_config

    return te.build_model(torch, load_hf_config(TINY), "fp32", "cpu", 200, 0)


@pytest.fixture
def caches_used(tiny_lm, monkeypatch):
    """(batch size, cache length, the cache object) of every ``generate`` the engine makes."""
    used = []
    generate = tiny_lm.generate

    def spy(ids, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        out = generate(ids, **kwargs)
        used.append((ids.shape[0], cache.get_max_length() if cache is not None else None, cache))
        return out

    monkeypatch.setattr(tiny_lm, "generate", spy)
    return used


def test_every_static_batch_of_a_size_in_graphs_mode_runs_on_one_cache(tiny_lm, caches_used):
    """generate's own static cache was sized per call (prompt + that batch's longest output) and made anew: each
    batch a new shape (a recompile) or new tensors (a re-recorded graph) inside a timed batch."""
    import torch

    requests = make_workload(10, "burst", "fixed:8", "uniform:3:9", 0)
    groups = te.static_groups(requests, 4)
    assert len({max(r.output_tokens for r in g) for g in groups}) > 1  # the batches' own lengths differ
    for group in groups + groups:
        steps = te.run_static_batch(torch, tiny_lm, group, "cpu", "wall", "graphs", cache_tokens=100)
        assert len(steps) == max(r.output_tokens for r in group)
    assert [(size, length) for size, length, _ in caches_used] == [(4, 100), (4, 100), (2, 100)] * 2
    by_size = {}
    for size, _, cache in caches_used:
        by_size.setdefault(size, set()).add(id(cache))
    assert {size: len(ids) for size, ids in by_size.items()} == {4: 1, 2: 1}  # one cache per batch size
    run = te.static_run(groups, [0.1] * 30, 4, "wall", "graphs", cache_tokens=100)
    assert run.settings["cache"] == "static" and run.settings["cache_tokens"] == 100


def test_the_warm_up_meets_every_static_batch_size_the_timed_runs_meet(tiny_lm, caches_used):
    import torch

    from microbench.serving.validate_run import static_batch_sizes

    workloads = {"workload": make_workload(20, "burst", "fixed:8", "uniform:3:9", 0),
                 "calibration": make_workload(10, "burst", "fixed:8", "uniform:3:9", 1)}
    sizes = {"static": [4, 8]}
    shapes = static_batch_sizes(workloads, sizes, {"static": 8, "continuous": 8})
    met = {len(g) for requests, size in ((workloads["calibration"], 4), (workloads["calibration"], 8),
                                         (workloads["workload"], 8)) for g in te.static_groups(requests, size)}
    assert shapes == sorted(met) == [2, 4, 8]
    assert te.warm_static_shapes(torch, tiny_lm, workloads["calibration"], shapes, "cpu", "graphs", 60) == shapes
    warmed = {size: cache for size, _, cache in caches_used}
    assert [(size, length) for size, length, _ in caches_used] == [(2, 60), (4, 60), (8, 60)]
    # The timed batches then run on the very caches the warm-up recorded its graphs on.
    for group in te.static_groups(workloads["workload"], 8):
        te.run_static_batch(torch, tiny_lm, group, "cpu", "wall", "graphs", cache_tokens=60)
    assert all(cache is warmed[size] for size, _, cache in caches_used[3:])
    assert te.warm_static_shapes(torch, tiny_lm, workloads["calibration"], shapes, "cpu", "eager", None) == []


def test_dynamo_may_compile_every_shape():
    import torch

    from microbench.serving.engine.settings import RECOMPILE_MARGIN, allow_compiles

    config = torch._dynamo.config
    before = config.recompile_limit
    try:
        config.recompile_limit = 8
        assert allow_compiles(torch, 12) == 12 + RECOMPILE_MARGIN == config.recompile_limit
        assert allow_compiles(torch, 1) == 12 + RECOMPILE_MARGIN  # never lowered
        assert config.cache_size_limit == config.recompile_limit  # torch's alias: the same setting
    finally:
        config.recompile_limit = before


def test_a_static_cache_is_attended_whole_in_the_simulation():
    """static:batch=B:cache=L: every decode step's attention is that of L keys per sequence, whatever the
    context, as transformers' masked SDPA over the static cache runs it."""
    from serving_helpers import constant_profile

    from roofline.serving.policies import parse_policy
    from roofline.serving.profile_doc import Table2D
    from roofline.serving.simulate import simulate

    grid = (1, 1000)
    # Attention per layer and sequence: context / 1000 s.
    profile = constant_profile(0.0)
    profile = type(profile)(**{**profile.__dict__, "decode_attention": Table2D(
        "linear", "batches", "contexts", grid, grid, ((0.001, 1.0), (0.001, 1.0)))})
    requests = make_workload(1, "burst", "fixed:10", "fixed:3", 0)
    plain = simulate(profile, requests, "static:batch=1", None)
    cached = simulate(profile, requests, "static:batch=1:cache=500", None)
    decode = [s for s in plain.steps if not s.prefill_tokens]
    assert [round(s.time_s, 6) for s in decode] == [0.011, 0.012]  # its own context and the new token
    assert [round(s.time_s, 6) for s in cached.steps if not s.prefill_tokens] == [0.5, 0.5]
    assert parse_policy("static:batch=4:cache=500").to_dict()["cache_tokens"] == 500
    assert "cache_tokens" not in parse_policy("static:batch=4").to_dict()


def test_a_packed_padded_step_runs_its_padded_tokens_and_one_attention_over_its_padded_keys():
    """chunked:...:pad-q=Q:pad-kv=V:kv-cap=C, as transformers' graphs run a step on paged|sdpa: the linears on the
    tokens padded to a multiple of Q (at most the budget), attention one masked SDPA (the chunk table) of those
    queries against the keys read padded to a multiple of V (at most C)."""
    from serving_helpers import token_linear_profile

    from roofline.serving.policies import Packing, parse_policy
    from roofline.serving.profile_doc import Table2D
    from roofline.serving.step_cost import CostModel

    grid = (1, 100_000)
    # Linears: 1 ms per token; chunk attention per layer: 1 µs per (query, 1000 keys) of prefix, bilinear.
    profile = token_linear_profile(0.0, 1e-3)
    profile = type(profile)(**{**profile.__dict__, "chunk_attention": Table2D(
        "linear", "chunk_tokens", "prefix_tokens", grid, grid,
        ((1e-9, 1e-9 * 100_000), (1e-9 * 100_000, 1e-9 * 100_000 * 100_000)))})
    model = CostModel(profile)
    packing = Packing(q_pad=64, q_cap=256, kv_pad=1000, kv_cap=2500)
    assert (packing.queries(3), packing.queries(65), packing.queries(300)) == (64, 128, 256)
    assert (packing.keys(1), packing.keys(1001), packing.keys(9000)) == (1000, 2000, 2500)
    # 3 decodes of contexts 10, 20, 30 (keys read 60 + 3): 64 queries against 1000 keys.
    step = model.cost(3, 63, [], packing)
    plain = model.cost(3, 63, [])
    assert step.linear_s == pytest.approx(64e-3) and plain.linear_s == pytest.approx(3e-3)
    assert step.attention_s == pytest.approx(64 * (1000 - 64) * 1e-9, rel=1e-6)
    assert (step.flop, step.bytes) == (plain.flop, plain.bytes)  # the useful work is counted, not the padding
    policy = parse_policy("chunked:budget=256:max-batch=8:pad-q=64:pad-kv=1000:kv-cap=2500")
    assert policy.packing == packing
    assert policy.to_dict()["pad_q_tokens"] == 64 and policy.to_dict()["kv_cap_tokens"] == 2500
    assert parse_policy("chunked:budget=256").packing is None
    with pytest.raises(Exception, match="pad-q"):
        parse_policy("chunked:budget=256:pad-kv=1000")


def test_graphs_mode_simulates_the_managers_padding_read_from_transformers():
    import transformers

    from microbench.serving.engine.settings import CB_PAGE_TOKENS, cache_blocks, graphs_policy_options

    options = graphs_policy_options(transformers, 16, 300)
    assert options == f":pad-q=64:pad-kv=16384:kv-cap={cache_blocks(16, 300) * CB_PAGE_TOKENS}"
