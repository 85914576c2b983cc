"""``gpubench profile`` measured: time every kernel of one engine step of a model on this device.

Linear layers and a mixture's experts are the sweep's own ``gemm`` and ``grouped`` points
(``measure.measure_point``: rotation over cold weights, the correctness check, CUDA graphs or ``perf_counter``,
the adaptive stopping rule; on the CPU the same operands and check, timed on the profile's ``--clock`` as every
other item is); attention and the rest of the step are workloads of ``profile_kernels`` timed with the same
timers and the same rule.

Like a sweep it is resumable and interruptible: ``<output>.partial`` (the plan and what is measured) is
written once, then each item is journalled as one line beside it (``roofline.result.journal``, so a save costs one
item, not everything so far); a signal finishes the item in flight, folds the journal into the partial file
and stops, and ``--resume -o <output>`` continues (folding a journal a kill left behind).  The profile document
itself is written once, complete, at the end.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microbench.device.discovery import resolve_device
from microbench.device.provenance import host_info, tool_info
from microbench.points.config import SweepConfig
from microbench.points.plan import PlanError, PointSpec
from microbench.serving import profile_mixers
from microbench.serving.allreduce import profile_comm_table
from microbench.serving.profile_kernels import MLA_SCORES_BUDGET_BYTES, AttentionWorkload, OtherWorkload, kv_bytes
from microbench.serving.profile_plan import Item, ProfilePlan, attention_shape, grids_for, plan_items
from microbench.serving.profile_power import CPU_HAS_NO_POWER, measured_power
from microbench.timing import ops
from microbench.timing.adaptive import measure
from microbench.timing.grouped import Assignment, GroupedWorkload, touched_bytes
from microbench.timing.grouped import bytes_per_copy as grouped_bytes_per_copy
from microbench.timing.grouped import support_problem as grouped_problem
from microbench.timing.measure import measure_point, prepared_timer, release_timers, utc_now
from microbench.timing.observer import Interrupted, SweepObserver
from microbench.timing.session import open_session
from microbench.timing.timers import CpuTimer
from roofline.core.counting import DTYPE_SIZES, count_work
from roofline.core.options import resolved_kv_dtype
from roofline.result.io import journal_entries, journal_path, write_output_file
from roofline.result.journal import Journal
from roofline.serving.profile_doc import CommTable, StepProfile, check_profile_output, save_profile
from roofline.step.launches import StepModel
from roofline.step.memory import kv_bytes_per_token, weight_bytes
from roofline.step.routing import Routing

# Seconds of sampling per item unless --budget: an 8B model's ~300 items on an H200 in a few minutes, a tiny
# model's on two CPU cores in seconds.
DEFAULT_BUDGET_S = {"cuda": 0.2, "cpu": 0.1}
# --energy: NVML read as often as a sweep reads it (a timed phase then lasts at least a few readings)
ENERGY_INTERVAL_S = 0.05
PARTIAL_KIND = "gpubench-step-profile-partial"
PARTIAL_JOURNAL_KIND = "gpubench-step-profile-partial-journal"
# The CPU timer's clock: wall time, or this thread's CPU time (other processes' turns on a shared CPU excluded).
CPU_CLOCKS_NS = {"wall": time.perf_counter_ns, "thread-cpu": time.thread_time_ns}
# A resumed profile must be measured on the same device as the part already measured.
DEVICE_KEYS = ("kind", "name", "uuid", "memory_bytes", "threads")


def partial_path(output: Path) -> Path:
    return Path(f"{output}.partial")


@dataclass
class ProfileRun:
    plan: ProfilePlan
    output: Path
    argv: tuple[str, ...]
    measured: dict[str, dict[str, Any]] = field(default_factory=dict)
    session: Any = None
    items: list[Item] = field(default_factory=list)
    started_at: str = ""
    journal: Journal | None = None


def prepare_profile(plan: ProfilePlan, output: Path, observer: SweepObserver, argv: tuple[str, ...] = (),
                    resume: bool = False) -> ProfileRun:
    """Check everything, open the device, and load what a partial file already holds (``resume``)."""
    partial = partial_path(Path(output))
    if resume:
        run = _load_partial(partial, argv)
    else:
        plan.check()
        run = ProfileRun(plan, Path(output), argv, started_at=utc_now())
    if not resume and partial.exists():
        raise PlanError(f"{partial} holds a profile in progress: continue it with --resume -o {output}, or delete it")
    check_profile_output(run.output)  # the measured and the analytic profile share one -o rule
    kind = resolve_device(run.plan.device).kind
    budget = run.plan.budget_s or DEFAULT_BUDGET_S[kind]
    config = SweepConfig(device=run.plan.device, ops=(), budget_s=budget, save=False, with_ceilings=False,
                         telemetry=False, seed=run.plan.seed, argv=argv)
    run.session = open_session(config, observer)
    run.session.l2_policy = l2_policy_for(run.session, run.plan)
    if run.plan.energy and kind != "cpu":  # NVML's power over each linear's timed phase (profile_power)
        run.session.start_telemetry(True, ENERGY_INTERVAL_S)
    elif run.plan.energy:  # said before measuring, not found in the profile after a long run
        observer.on_notice(f"--energy: {CPU_HAS_NO_POWER}; the profile is measured, with no power table")
    if run.plan.clock == "thread-cpu" and (kind != "cpu" or run.session.torch.get_num_threads() != 1):
        raise PlanError("--clock thread-cpu times this thread's CPU time: only on the CPU with one torch thread")
    if resume:
        before = json.loads(partial.read_text(encoding="utf-8"))["device"]
        differs = [k for k in DEVICE_KEYS if before.get(k) != run.session.device.get(k)]
        if differs:
            raise PlanError(f"{partial} was measured on another device ({', '.join(differs)} differ)")
    model = run.plan.check()
    run.items = [item for item in plan_items(run.plan, model) if item.key not in run.measured]
    _save_partial(run)
    return run


def l2_policy_for(session, plan: ProfilePlan) -> str:
    """Cold weights only where the engine sees them cold: a model whose weights fit in the device's last
    cache (a tiny model on a CPU) reads them warm step after step, and so is measured warm."""
    model = plan.check()
    weights = weight_bytes(plan.step_model(model, session.choice.kind))
    cache = session.cache_bytes or 0
    return "warm" if weights <= cache else "rotate"


def _load_partial(partial: Path, argv: tuple[str, ...]) -> ProfileRun:
    try:
        data = partial.read_bytes()
        record = json.loads(data)
    except (OSError, ValueError) as exc:
        raise PlanError(f"{partial}: no profile in progress to resume ({exc})") from None
    if not isinstance(record, dict) or record.get("kind") != PARTIAL_KIND:
        raise PlanError(f"{partial}: not a partial profile")
    measured = dict(record.get("measured") or {})
    journal = journal_path(partial)
    if journal.is_file() and not journal.is_symlink():  # a kill left items journalled but not folded
        for entry in journal_entries(data, journal.read_bytes(), str(journal), PARTIAL_JOURNAL_KIND):
            measured[entry["key"]] = entry["measured"]
    plan = ProfilePlan.from_record(record.get("plan") or {})
    return ProfileRun(plan, Path(str(partial)[: -len(".partial")]), argv, measured,
                      started_at=record.get("started_at", utc_now()))


def _save_partial(run: ProfileRun, journal: bool = True) -> None:
    """The whole partial file, then (unless stopping) an empty journal for the items to come."""
    data = json.dumps({"kind": PARTIAL_KIND, "plan": run.plan.to_record(), "started_at": run.started_at,
                       "device": run.session.device, "measured": run.measured}, indent=1, allow_nan=False) + "\n"
    write_output_file(partial_path(run.output), data.encode("utf-8"))
    if run.journal is not None:
        run.journal.remove()
    if journal:
        run.journal = Journal(journal_path(partial_path(run.output)))
        run.journal.start(data.encode("utf-8"), PARTIAL_JOURNAL_KIND)


def run_profile(run: ProfileRun, on_start: Callable[[int], None], on_item: Callable[[Item, dict], None]
                ) -> StepProfile:
    """Measure every remaining item (saving after each), then write and return the profile."""
    session = run.session
    on_start(len(run.items))
    dtype = run.plan.resolved_dtype(session.choice.kind)
    model = run.plan.check()
    journal = run.journal
    if journal is None:
        raise RuntimeError("run_profile before the partial file and its journal were started")
    try:
        for item in run.items:
            run.measured[item.key] = measure_item(session, run.plan, model, item, dtype)
            journal.append([{"key": item.key, "measured": run.measured[item.key]}])
            on_item(item, run.measured[item.key])
            if session.stop.is_set():
                _save_partial(run, journal=False)  # folded: the partial file alone holds everything measured
                raise Interrupted(getattr(session.stop, "signum", 2), partial_path(run.output))
    finally:
        session.weights.clear()
        session.stop_telemetry()
    # The all-reduces between ranks are timed once all of this device's kernels are (not journalled: seconds).
    comm = profile_comm_table(run.plan.tp, session.choice.kind, session.device.get("sku"), model, dtype,
                              grids_for(run.plan).tokens)
    profile = assemble_profile(run, model, dtype, comm, expert_exchange(run, model, session.device.get("sku")))
    save_profile(profile, run.output)
    partial_path(run.output).unlink(missing_ok=True)
    journal.remove()
    return profile


def linear_spec(step: StepModel, item: Item) -> PointSpec:
    """The sweep point that times a linear or grouped item: the step model's matrix in the dtype it is stored in
    (a quantized format's LM head in bf16), a grouped one over this GPU's experts under the plan's routing."""
    if item.kind == "grouped":
        g = next(g for g in step.grouped if g.name == item.name)
        return PointSpec("grouped", g.dtype, item.a, g.n, g.k, "torch", g.experts, min(g.topk, g.experts),
                         step.routing.spelled)
    linear = next(lin for lin in step.linears if lin.name == item.name)
    return PointSpec("gemm", linear.dtype, item.a, linear.n, linear.k)


def measure_item(session, plan: ProfilePlan, model, item: Item, dtype: str) -> dict[str, Any]:
    """Median and samples of one item; a kernel that cannot run here is bad input for this profile."""
    if item.kind in ("linear", "grouped"):
        spec = linear_spec(plan.step_model(model, session.choice.kind), item)
        if session.choice.kind == "cpu":
            return _measure_cpu_gemm(session, spec, plan.clock)
        point = measure_point(session, spec)
        if not point.ok:
            raise PlanError(f"{item.name} at {item.a} tokens: {point.status}: {point.reason}")
        median_s = point.stats.median_s  # pyright: ignore[reportOptionalMemberAccess]  # an ok point has samples
        return {"time_s": median_s, "samples_s": list(point.samples_s), "timer": point.timer,
                "stop_reason": point.stop_reason, "rel_err": (point.correctness or {}).get("rel_err"),
                # --energy: the median NVML power reading over the timed phase (None: no reading inside it)
                **({"power_w": ((point.telemetry or {}).get("power_w") or {}).get("median")} if plan.energy else {}),
                **({"kernel": point.kernel, "touched": point.touched} if item.kind == "grouped" else {})}
    # Attention and the other kernels run on activations: bf16 beside a weight-only format, unless --kv-dtype.
    workload = _build_workload(session, plan, model, item, resolved_kv_dtype(dtype, plan.kv_dtype))
    measured = _measure_workload(session, workload, plan.clock)
    kernel = getattr(workload, "kernel", None)  # a mixer's or DSA's workload names what ran
    return {**measured, "kernel": kernel} if isinstance(kernel, str) and item.kind != "other" else measured


def _measure_workload(session, workload, clock: str) -> dict[str, Any]:
    """The sweep's timers and stopping rule; on the CPU, ``CpuTimer`` on the chosen clock."""
    if session.choice.kind == "cpu":
        timer = CpuTimer(workload.launch, workload.copies, clock_ns=CPU_CLOCKS_NS[clock])
        timer.prepare()
    else:
        timer = prepared_timer(session, workload)
    try:
        result = measure(timer.sample, session.rule, session.clock)
        session.synchronize()
    finally:
        release_timers(session, [timer])
    samples = sorted(result.samples_s)
    return {"time_s": samples[len(samples) // 2], "samples_s": list(result.samples_s),
            "timer": f"{timer.name} ({clock})" if session.choice.kind == "cpu" else timer.name,
            "stop_reason": result.stop_reason, "copies": workload.copies}


def _measure_cpu_gemm(session, spec: PointSpec, clock: str) -> dict[str, Any]:
    """A sweep gemm or grouped point (same operands, rotation and correctness check) timed on the profile's clock,
    as the engine is: a grouped one records the kernel it picked and the experts its routing touched."""
    grouped = spec.op == "grouped"
    problem = grouped_problem(spec.dtype, spec.topk, spec.experts) if grouped else \
        ops.support_problem(spec, session.device)
    if problem:
        raise PlanError(f"{spec.label}: {problem}")
    if grouped:
        touched = Assignment.draw(Routing.parse(spec.routing), spec.experts, spec.topk, spec.batch,
                                  ops.seed_for(session.seed, "routing", spec.label)).touched
        copies = _copies(session, grouped_bytes_per_copy(spec), f"grouped {spec.label}", touched_bytes(spec, touched))
        session.weights.clear()  # a grouped point holds its experts itself
    else:
        copies = _copies(session, ops.bytes_per_copy(spec), f"gemm {spec.label}",
                         count_work("gemm", spec.dtype, spec.batch, spec.n, spec.k).weight_bytes)
    try:
        experts = GroupedWorkload(session.torch, spec, "cpu", copies, session.seed, ops.random_tensor,
                                  ops.seed_for) if grouped else None
        workload = experts or ops.build_workload(session.torch, spec, "cpu", copies, session.seed, session.weights)
    except Exception as exc:  # noqa: BLE001 - as measure_point records a point it cannot build: one line, exit 2
        raise PlanError(f"{spec.label}: cannot build it on the CPU ({type(exc).__name__}: {exc})") from None
    correctness = workload.check(ops.seed_for(session.seed, "check", spec.label))  # a grouped one picks its kernel
    if not correctness["passed"]:
        raise PlanError(f"{spec.op} {spec.label} failed its correctness check (relative error "
                        f"{correctness['rel_err']})")
    measured = {**_measure_workload(session, workload, clock), "rel_err": correctness["rel_err"]}
    return {**measured, "kernel": experts.kernel, "touched": experts.assignment.touched} if experts else measured


def _build_workload(session, plan: ProfilePlan, model, item: Item, dtype: str):
    torch, device = session.torch, session.choice.torch_name
    size = DTYPE_SIZES[dtype][0]
    if item.kind == "other":
        shape = plan.step_model(model, session.choice.kind).elementwise()
        rows = min(item.a, plan.max_batch)
        per_copy = size * item.a * (3 * shape.hidden + (2 if shape.gated else 1) * shape.width
                                    + (shape.heads + shape.kv_heads) * shape.rope_dim) + size * rows * shape.vocab
        copies = _copies(session, per_copy, f"other work at {item.a} tokens")
        return OtherWorkload(torch, shape, item.a, dtype, device, copies, session.seed, sample_rows=rows)
    step = plan.step_model(model, session.choice.kind)
    copies_for = functools.partial(_copies, session)
    if item.kind in ("mixer_decode", "mixer_prefill"):
        return profile_mixers.mixer_workload(session, step, item, dtype, copies_for)
    if profile_mixers.is_sparse(step.main_mixer):  # DSA: every main table times the sparse attention
        return profile_mixers.main_sparse_workload(session, step, item, copies_for)
    shape = attention_shape(model, plan.tp)
    batch, q_len, kv_len = {"decode": (item.a, 1, item.b), "prefill": (1, item.a, item.a),
                            "chunk": (1, item.a, item.a + item.b)}[item.kind]
    per_copy = kv_bytes(shape, batch, kv_len, dtype) + 2 * size * batch * shape.heads * q_len * shape.head_dim
    if shape.mla:  # queries and outputs of latent (+ rope) values per head
        per_copy = kv_bytes(shape, batch, kv_len, dtype) + size * batch * shape.heads * q_len * 2 * shape.cached_values
    if q_len > 1 and shape.mla:  # its scores, their masked copy and softmax's, one chunk of queries at a time
        per_copy += 3 * min(size * batch * shape.heads * q_len * kv_len, MLA_SCORES_BUDGET_BYTES)
    elif q_len > 1:  # the scores of one (query, key) block are materialised by the non-fused paths
        per_copy += 4 * shape.heads * q_len * kv_len
    copies = _copies(session, per_copy, f"{item.kind} attention {batch}×{q_len}×{kv_len}")
    return AttentionWorkload(torch, shape, batch, q_len, kv_len, dtype, item.name, device, copies, session.seed)


def _copies(session, per_copy_bytes: int, what: str, cold_bytes: int | None = None) -> int:
    if per_copy_bytes > session.free_memory_bytes():
        raise PlanError(f"{what} needs {per_copy_bytes / 1e9:.2f} GB, the device can give "
                        f"{session.free_memory_bytes() / 1e9:.2f} GB; lower --max-tokens/--max-context/--max-batch")
    if session.l2_policy == "warm":
        return 1
    return ops.rotation_copies(cold_bytes or per_copy_bytes, session.cache_bytes, per_copy_bytes,
                               session.memory_cap_bytes())


def _times(run: ProfileRun, kind: str, name: str, pairs) -> list[float]:
    return [run.measured[Item(kind, name, a, b).key]["time_s"] for a, b in pairs]


def expert_exchange(run: ProfileRun, model, sku: str | None) -> CommTable | None:
    """Expert parallelism's all-to-alls: one device times none between several, so the matched SKU's spec sheet
    costs them (none matched: not counted)."""
    if run.plan.ep <= 1 or not sku:
        return None
    from roofline.serving.profiles.analytic import comm_tables
    from roofline.specs.gpus import load_gpu_spec

    step = run.plan.step_model(model, run.session.choice.kind)
    return comm_tables(step, load_gpu_spec(sku), grids_for(run.plan).tokens)[1]


def assemble_profile(run: ProfileRun, model, dtype: str, comm: CommTable | None = None,
                     exchange: CommTable | None = None) -> StepProfile:
    """The profile document from the measured medians (``docs/serving.md``); ``comm``: the all-reduces' table,
    ``exchange``: the all-to-alls'."""
    plan, session = run.plan, run.session
    grids = grids_for(plan)
    step = plan.step_model(model, session.choice.kind)
    kv_dtype = step.cache_dtype
    linears = []
    for linear in step.linears:
        tokens = grids.lm_head_tokens if linear.part == "head" else grids.tokens
        table = {"name": linear.name, "n": linear.n, "k": linear.k, "per_layer": 1, "tokens": list(tokens),
                 "time_s": _times(run, "linear", linear.name, [(t, 0) for t in tokens])}
        linears.append(table if linear.layers == model.layers or linear.part == "head"
                       else {**table, "layers": linear.layers})
    lm_head = linears.pop()
    grouped = [{"name": g.name, "n": g.n, "k": g.k, "experts": g.experts, "topk": min(g.topk, g.experts),
                "layers": g.layers, "tokens": list(grids.tokens),
                "kernel": run.measured[Item("grouped", g.name, grids.tokens[-1]).key].get("kernel") or "",
                "time_s": _times(run, "grouped", g.name, [(t, 0) for t in grids.tokens])} for g in step.grouped]
    kernel = profile_mixers.SPARSE_KERNEL if profile_mixers.is_sparse(step.main_mixer) else plan.attention
    kernels = {"/".join(key.split("/")[:2]): entry["kernel"] for key, entry in run.measured.items()
               if key.startswith("mixer_") and entry.get("kernel")}
    mixers = profile_mixers.mixer_tables(step, grids, lambda kind, name, pairs: _times(run, kind, name, pairs),
                                         kernels, f"measured on {session.choice.kind}")
    document = {
        "schema_version": 1, "kind": "gpubench-step-profile", "tool": tool_info(), "created_at": utc_now(),
        "argv": list(run.argv), "host": host_info(), "device": session.device, "source": "measured",
        "basis": f"torch timers on {session.choice.kind} ({session.choice.torch_name}), "
                 f"{'cache-warm' if session.l2_policy == 'warm' else 'cold'} weights"
                 + (", thread CPU time" if plan.clock == "thread-cpu" else ""),
        "model": {**model.to_record(), "dtype_measured": dtype},
        "tp": plan.tp, "dtype": dtype, "kv_dtype": kv_dtype,
        "memory": {"device_bytes": session.total_memory_bytes(), "weight_bytes": weight_bytes(step),
                   "kv_bytes_per_token": kv_bytes_per_token(step)},
        "roof": measured_roof(run, step),
        "linears": linears,
        "lm_head": {**{key: lm_head[key] for key in ("n", "k", "tokens", "time_s")},
                    "dtype": step.stored_dtype("head")},
        **({"ep": plan.ep, "routing": step.routing.spelled, "grouped": grouped} if grouped else {}),
        "decode_attention": {"kernel": kernel, "batches": list(grids.batches), "contexts": list(grids.contexts),
                             "time_s": [_times(run, "decode", plan.attention, [(b, c) for c in grids.contexts])
                                        for b in grids.batches]},
        "prefill_attention": {"kernel": kernel, "prompt_tokens": list(grids.prompts),
                              "time_s": _times(run, "prefill", plan.attention, [(p, 0) for p in grids.prompts])},
        "chunk_attention": {"kernel": kernel, "chunk_tokens": list(grids.chunks), "prefix_tokens": list(grids.prefixes),
                            "time_s": [_times(run, "chunk", plan.attention, [(c, p) for p in grids.prefixes])
                                       for c in grids.chunks]},
        "other": {"tokens": list(grids.tokens), "time_s": _times(run, "other", "step", [(t, 0) for t in grids.tokens])},
        **({"mixers": mixers} if mixers else {}),
        "engine_overhead": None,
        **({"comm": comm.to_dict()} if comm is not None else {}),
        **({"all_to_all": exchange.to_dict()} if exchange is not None else {}),
        "power": measured_power(session.choice.kind, plan.energy, _energy_by_tokens(run, step, model, grids.tokens),
                                f"{session.device.get('name') or session.choice.kind}, measured by this profile"),
    }
    return StepProfile.from_dict(document)


def _energy_by_tokens(run: ProfileRun, step: StepModel, model, tokens) -> dict[int, list]:
    """Per token count, each of the step's linears and expert sets: (watts or None, seconds per launch, layers it
    runs in), for ``measured_power``; the LM head (on a grid of its own) is left out."""
    parts = [("linear", lin.name, lin.layers) for lin in step.linears if lin.part != "head"] + \
        [("grouped", g.name, g.layers) for g in step.grouped]
    out: dict[int, list] = {}
    for count in tokens:
        entries = [(run.measured.get(Item(kind, name, count).key) or {}, layers) for kind, name, layers in parts]
        out[count] = [(e.get("power_w"), e.get("time_s") or 0.0, layers or model.layers) for e, layers in entries]
    return out


def measured_roof(run: ProfileRun, step: StepModel) -> dict[str, Any] | None:
    """What compute-bound is judged against: the best bandwidth and FLOP/s the step's own GEMMs reached."""
    best_bw = best_flop = 0.0
    for linear in step.linears:
        for key, entry in run.measured.items():
            if key.startswith(f"linear/{linear.name}/"):
                tokens = int(key.split("/")[2])
                work = count_work("gemm", linear.dtype, tokens, linear.n, linear.k)
                best_bw = max(best_bw, work.bytes / entry["time_s"])
                best_flop = max(best_flop, work.flop / entry["time_s"])
    if not best_bw or not best_flop:
        return None
    return {"bandwidth_bytes_per_s": best_bw, "peak_flop_per_s": best_flop,
            "basis": "best of this profile's own GEMMs (bytes/s at few tokens, FLOP/s at many)"}
