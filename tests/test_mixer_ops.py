"""The recurrent and sparse mixers' sweep ops: state_update (Gated DeltaNet, Mamba-2) and sparse_attention (DSA's
decode): counted as the step model counts a layer, their torch kernels against float64 (checks that can fail),
measured on the CPU by ``gpubench sweep``, fitted and reported; the measured decode's sweep points for them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from microbench.cli.app import main
from microbench.points.config import ConfigError, SweepConfig
from microbench.points.plan import PointSpec
from microbench.timing import ops
from microbench.timing.mixers import recurrent_math as rm
from microbench.timing.mixers.recurrent import PromptScanWorkload, RecurrentLayer, StateUpdateWorkload
from microbench.timing.mixers.sparse_attention import SparseAttentionWorkload, SparseLayer
from roofline.core.counting import MixerShape, count_work
from roofline.decode.step import DecodeSetup
from roofline.result.document import Point
from roofline.result.io import load_result
from roofline.result.json_schema import json_schema, validate
from roofline.specs.hf_config import load_hf_config
from roofline.step.batch import Batch
from roofline.step.launches import StepModel

DATA = Path(__file__).parent / "data"
GDN = MixerShape("gdn", 4, groups=2, conv_kernel=4, state_dtype="fp32")
MAMBA = MixerShape("mamba2", 8, groups=2, conv_kernel=4, state_dtype="fp32")
DSA = MixerShape("dsa", 4, rope=16, index_heads=2, index_dim=32, topk=16)


def _launch_keys(config: str, tp: int, batch: int, context: int):
    step = StepModel.of(load_hf_config(DATA / config), tp)
    setup = DecodeSetup(step, context)
    return step, [(launch, setup.point_keys(launch)) for launch in step.attention_launches(setup.batch(batch))]


@pytest.mark.parametrize("config, op", [("tiny-qwen3.5-config.json", "state_update"),
                                        ("tiny-nemotron-h-config.json", "state_update"),
                                        ("tiny-dsa-config.json", "sparse_attention")])
def test_a_layer_point_counts_what_the_step_model_counts_for_the_layer(config, op):
    """The sweep point decode times a layer by has the layer's own FLOP and bytes: one place counts both."""
    for tp in (1, 2):
        for batch, context in ((1, 16), (8, 100)):
            step, pairs = _launch_keys(config, tp, batch, context)
            mixed = [(launch, keys) for launch, keys in pairs if keys[0][0] == op]
            assert mixed, f"{config} has no {op} launch"
            for launch, [(key_op, dtype, tokens, n, k, mixer)] in mixed:
                point = count_work(key_op, dtype, tokens, n, k, mixer=mixer)
                assert (point.flop, point.bytes) == (launch.work.flop, launch.work.bytes)


def test_dsa_reads_the_top_k_latents_and_every_indexer_key():
    short, long = (count_work("sparse_attention", "bf16", 2, context, 32, mixer=DSA) for context in (16, 4096))
    # past top-k the latent attention stops growing; the indexer's fp8 keys (+ a 4-byte scale) keep growing
    grown = long.weight_bytes - short.weight_bytes
    assert grown == 2 * (4096 - 16) * (32 + 4)


@pytest.mark.parametrize("bad, message", [
    (dict(kind="gdn", heads=4, groups=3, conv_kernel=4, state_dtype="fp32"), "multiple of 3 groups"),
    (dict(kind="gdn", heads=4, groups=2, conv_kernel=4, state_dtype="fp8"), "state is kept in"),
    (dict(kind="dsa", heads=4, rope=16, index_heads=2, index_dim=32), "topk must be a positive integer"),
    (dict(kind="mamba2", heads=4, groups=2, conv_kernel=4, state_dtype="fp32", topk=3), "has no topk"),
    (dict(kind="kda", heads=4), "unknown mixer"),
])
def test_mixer_shapes_are_checked(bad, message):
    with pytest.raises(ValueError, match=message):
        MixerShape(**bad)


def test_a_point_keeps_its_mixer_through_json_and_the_schema():
    point = Point("state_update", "bf16", 4, 32, 32, "torch", "ok", samples_s=(1e-4,), mixer=GDN.to_dict())
    back = Point.from_dict(json.loads(json.dumps(point.to_dict())))
    assert back.mixer == GDN and back.plan_key == point.plan_key and back.bytes == point.bytes
    assert validate(point.to_dict(), json_schema()["$defs"]["PointDocument"], json_schema()) == []
    with pytest.raises(ValueError, match="need one"):
        Point("sparse_attention", "bf16", 4, 32, 32, "torch", "ok", samples_s=(1e-4,))
    with pytest.raises(ValueError, match="belongs to"):
        Point("gemm", "bf16", 4, 32, 32, "torch", "ok", samples_s=(1e-4,), mixer=GDN)


def _state_workload(mixer: MixerShape, dtype: str, batch: int) -> StateUpdateWorkload:
    spec = PointSpec("state_update", dtype, batch, 16, 32, mixer=mixer)
    return StateUpdateWorkload(torch, spec, "cpu", 2, 0, ops.random_tensor, ops.seed_for)


@pytest.mark.parametrize("mixer", [GDN, MAMBA], ids=["gdn", "mamba2"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_state_update_matches_float64_and_updates_the_state_in_place(mixer, dtype):
    workload = _state_workload(mixer, dtype, 3)
    before = workload.state[0].clone()
    check = workload.check(1)
    assert check["passed"] and check["rel_err"] < check["tolerance"], check
    assert not torch.equal(before, workload.state[0])  # read and written where it lives
    assert workload.kernel.startswith("torch reference") and "torch conv update" in workload.kernel


@pytest.mark.parametrize("mixer", [GDN, MAMBA], ids=["gdn", "mamba2"])
def test_the_check_fails_a_wrong_state_update(mixer, monkeypatch):
    """A kernel that forgets the decay (the state's gate) is caught: the check compares against the definition."""
    workload = _state_workload(mixer, "fp32", 2)
    if mixer.kind == "gdn":
        workload.g = [g * 0 for g in workload.g]  # the kernel sees no decay, the reference sees the kept g...
        kept = workload.kept

        def with_decay(i, sequences):  # ...the real one
            out = kept(i, sequences)
            out["g"] = out["g"] - 1.0
            return out

        monkeypatch.setattr(workload, "kept", with_decay)
    else:
        monkeypatch.setattr(workload, "d", workload.d + 1.0)  # a skip connection the reference does not have
        kept = workload.kept

        def without_skip(i, sequences):
            out = kept(i, sequences)
            out["d"] = out["d"] - 1.0
            return out

        monkeypatch.setattr(workload, "kept", without_skip)
    check = workload.check(1)
    assert not check["passed"] and check["rel_err"] > check["tolerance"]


@pytest.mark.parametrize("kind", ["gdn", "mamba2"])
def test_the_chunked_scan_is_the_recurrence(kind):
    """The prompt's chunked form (fla's and SSD's algebra) against the token-by-token recurrence, in float64, past
    several chunk boundaries and from a nonzero state."""
    g = torch.Generator().manual_seed(3)
    batch, length, chunk = 2, 37, 8
    if kind == "gdn":
        heads, groups, dk, dv = 4, 2, 8, 6
        q = rm.per_head(rm.l2_normalised(torch, torch.randn(batch, length, groups, dk, generator=g).double()), heads)
        k = rm.per_head(rm.l2_normalised(torch, torch.randn(batch, length, groups, dk, generator=g).double()), heads)
        v = torch.randn(batch, length, heads, dv, generator=g).double()
        decay = -torch.nn.functional.softplus(torch.randn(batch, length, heads, generator=g).double())
        beta = torch.sigmoid(torch.randn(batch, length, heads, generator=g).double())
        state = torch.randn(batch, heads, dk, dv, generator=g).double()
        want = rm.gdn_recurrence(torch, state, q, k, v, decay, beta, 0.3)
        got = rm.gdn_chunked(torch, q, k, v, decay, beta, 0.3, chunk, state)
    else:
        heads, groups, p, n = 4, 2, 6, 5
        x, z = (torch.randn(batch, length, heads, p, generator=g).double() for _ in range(2))
        dt = torch.randn(batch, length, heads, generator=g).double()
        b, c = (torch.randn(batch, length, groups, n, generator=g).double() for _ in range(2))
        a, d, bias = -torch.rand(heads, generator=g).double() - 0.5, torch.randn(heads).double(), torch.zeros(heads)
        state = torch.randn(batch, heads, p, n, generator=g).double()
        want = rm.mamba_recurrence(torch, state, x, dt, a, b, c, d, z, bias.double())
        got = rm.mamba_chunked(torch, x, dt, a, b, c, d, z, bias.double(), chunk, state)
    for w, h in zip(want, got, strict=True):  # outputs, final state (the chunked form runs in fp32)
        assert float((w - h.double()).norm() / w.norm()) < 1e-5


@pytest.mark.parametrize("mixer", [GDN, MAMBA], ids=["gdn", "mamba2"])
def test_a_prompt_scan_writes_the_state_a_decode_continues_from(mixer):
    layer = RecurrentLayer.of(16, 32, mixer)
    workload = PromptScanWorkload(torch, layer, "fp32", 21, "cpu", 1, 0, ops.random_tensor, ops.seed_for, chunk=8)
    check = workload.check(1)
    assert check["passed"], check
    assert "chunked" in workload.kernel or "SSD" in workload.kernel


@pytest.mark.parametrize("q_len, kv_len", [(1, 64), (1, 8), (5, 40)])
def test_sparse_attention_attends_the_indexer_top_k(q_len, kv_len):
    layer = SparseLayer.of(32, DSA)
    workload = SparseAttentionWorkload(torch, layer, "fp32", 3, q_len, kv_len, "cpu", 1, 0, ops.random_tensor,
                                       ops.seed_for, scores_budget_bytes=4096)
    check = workload.check(1)
    assert check["passed"], check
    assert workload.out[0].shape == (3, q_len * layer.heads, layer.latent)


def test_the_sparse_check_fails_a_selection_that_is_not_the_top_k(monkeypatch):
    workload = SparseAttentionWorkload(torch, SparseLayer.of(32, DSA), "fp32", 2, 1, 64, "cpu", 1, 0,
                                       ops.random_tensor, ops.seed_for)
    lowest = workload.scores  # the kernel keeps the lowest-scoring keys instead

    def inverted(i, start, end):
        return -lowest(i, start, end)

    monkeypatch.setattr(workload, "scores", inverted)
    check = workload.check(1)
    assert not check["passed"] and "were not" in check["reference"]


def test_sweep_config_names_each_mixer_flag():
    points = SweepConfig(device="cpu", ops=("state_update",), mixer="mamba2", heads=8, groups=2,
                         shapes=((16, 32),), batches=(1, 2)).points("cpu")
    assert {p.mixer for p in points} == {MixerShape("mamba2", 8, groups=2, conv_kernel=4, state_dtype="fp32")}
    for options, message in ((dict(mixer="gdn", heads=4, groups=2, shapes=((8, 8),)), "add --op state_update"),
                             (dict(ops=("state_update",), mixer="gdn", heads=4, shapes=((8, 8),)), "--groups"),
                             (dict(ops=("state_update",), mixer="gdn", heads=4, groups=3, shapes=((8, 8),)),
                              "multiple of 3 groups"),
                             (dict(ops=("sparse_attention",), heads=4), "--heads goes with")):
        with pytest.raises(ConfigError, match=message):
            SweepConfig(device="cpu", **options)
    # the default sweep stays the matmuls; asked for, the device's mixer series
    assert {p.op for p in SweepConfig(device="cpu", quick=True).points("cpu")} == {"gemv", "gemm", "bmm", "grouped"}
    asked = SweepConfig(device="cpu", quick=True, ops=("state_update", "sparse_attention")).points("cpu")
    assert {p.mixer.kind for p in asked if p.mixer} == {"gdn", "mamba2", "dsa"}


def test_decode_refuses_a_speculative_step_through_a_recurrent_layer():
    from roofline.specs.gpus import SpecError
    from roofline.step.speculative import parse_spec_decode

    step = StepModel.of(load_hf_config(DATA / "tiny-qwen3.5-config.json"))
    setup = DecodeSetup(step, 64, parse_spec_decode("draft=2,accept=geometric:0.7"))
    launch = next(x for x in step.attention_launches(setup.batch(2)) if x.op == "linear_attention")
    with pytest.raises(SpecError, match="give --analytic with --spec-decode"):
        setup.point_keys(launch)


@pytest.fixture(scope="module")
def mixer_sweep(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixers") / "R.json"
    run = CliRunner().invoke(main, ["sweep", "--device", "cpu", "--op", "state_update,sparse_attention", "--quick",
                                    "--dtype", "fp32", "--batch", "1,2,4,8", "--budget", "0.02", "--no-ceilings",
                                    "-o", str(path)])
    assert run.exit_code == 0, run.output
    return path


@pytest.mark.slow  # the sweep takes ~10 s on two shared cores
def test_sweep_measures_the_mixer_ops_on_the_cpu_correctly(mixer_sweep):
    points = load_result(mixer_sweep).points
    assert {(p.op, p.mixer.kind) for p in points if p.mixer} == {("state_update", "gdn"), ("state_update", "mamba2"),
                                                                ("sparse_attention", "dsa")}
    assert all(p.ok and p.correct for p in points)
    assert all(p.kernel and p.kernel.startswith("torch") for p in points)
    for p in points:
        assert p.bytes == count_work(p.op, p.dtype, p.batch, p.n, p.k, mixer=p.mixer).bytes


@pytest.mark.slow
def test_fit_and_report_give_each_mixer_series_its_bandwidth(mixer_sweep, tmp_path):
    run = CliRunner().invoke(main, ["fit", str(mixer_sweep), "--format", "json"])
    assert run.exit_code == 0, run.output
    series = json.loads(run.output)["series"]
    assert {s["mixer"]["kind"] for s in series} == {"gdn", "mamba2", "dsa"}
    for s in series:  # each sequence's own state or cache: flat intensity, a bandwidth and no crossover
        assert s["status"] == "memory-bound-at-every-batch" and s["bandwidth_bytes_per_s"] > 0, s
    table = CliRunner().invoke(main, ["fit", str(mixer_sweep)])
    assert "gdn 4h/2g conv4" in table.output and "Gated DeltaNet" in table.output
    report = CliRunner().invoke(main, ["report", str(mixer_sweep), "-o", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert "state_update" in (tmp_path / "report" / "report.md").read_text()


def test_a_measured_decode_meets_the_sweep_point_of_a_mixer_launch():
    """The decode's launch keys and the sweep's points meet: a point of the layer's shape times the layer."""
    step = StepModel.of(load_hf_config(DATA / "tiny-qwen3.5-config.json"))
    launch = next(x for x in step.attention_launches(Batch.decode(4, 32)) if x.op == "linear_attention")
    [key] = DecodeSetup(step, 32).point_keys(launch)
    point = Point(key[0], key[1], key[2], key[3], key[4], "torch", "ok", samples_s=(1e-4,), mixer=key[5].to_dict())
    assert point.launch_key == key
