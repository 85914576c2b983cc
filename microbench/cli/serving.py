"""The serving commands: ``gpubench profile`` (``--analytic`` here; measured on the device by the engine
side) and ``gpubench simulate``.  Thin: parse, call ``roofline.serving``, print.  Never imports torch.

``microbench/cli/app.py`` adds ``simulate`` and hands ``profile`` to ``engine.register``, which wraps it as the
``--analytic`` branch of the measured command.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import Any

import click

from roofline.core.errors import BadInputError

SIMULATE_DEFAULT_POLICY = ("continuous",)


def _errors():
    from microbench.cli.edges import bad_input_errors

    return bad_input_errors()


def _bad(exc: Exception):
    from microbench.cli.edges import BadInput

    return BadInput(str(exc))


def _tool_host() -> tuple[dict[str, Any], dict[str, Any]]:
    from microbench.device.provenance import host_info, tool_info

    return tool_info(), host_info()


def build_analytic_profile(model: str | None, hf_config: Path | None, sku: str | None, from_result: Path | None,
                           tp: int, dtype: str, kv_dtype: str | None, max_tokens: int, max_context: int):
    """The analytic step profile (spec sheet of ``sku``, or the fits of ``from_result``)."""
    from microbench.sweep.plan import PlanError
    from roofline.result.io import load_result
    from roofline.serving.analytic import analytic_profile
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.models import load_hf_config, load_model

    if bool(model) == bool(hf_config):
        raise PlanError("give one of --model NAME or --hf-config PATH")
    if not sku and from_result is None:
        raise PlanError("--analytic needs --gpu SKU (or --from RESULT.json)")
    profile = load_model(model) if model else load_hf_config(hf_config)
    result = load_result(from_result) if from_result is not None else None
    sku = sku or (result.device.get("sku") if result is not None else None)
    tool, host = _tool_host()
    return analytic_profile(profile, tp=tp, dtype=dtype, kv_dtype=kv_dtype or dtype, max_tokens=max_tokens,
                            max_context=max_context, gpu=load_gpu_spec(sku) if sku else None, result=result,
                            result_name=from_result.name if from_result else "", tool=tool, host=host,
                            argv=tuple(sys.argv))


def _model_options(command):
    for option in reversed([
        click.option("--model", default=None, help="model id from profiles/models (llama-3-8b, opt-13b, ...)"),
        click.option("--hf-config", type=click.Path(path_type=Path), default=None, help="a config.json on disk"),
        click.option("--tp", type=int, default=1, show_default=True, help="tensor-parallel GPUs"),
        click.option("--dtype", default="bf16", show_default=True, help="weights and activations"),
        click.option("--kv-dtype", default=None, help="KV cache dtype [--dtype]"),
        click.option("--gpu", "sku", default=None, help="SKU whose spec sheet the analytic profile uses"),
        click.option("--from", "from_result", type=click.Path(path_type=Path), default=None,
                     help="a sweep result: its fitted roofline per series instead of the spec sheet"),
        click.option("--max-tokens", type=int, default=8192, show_default=True, help="largest tokens in a step"),
        click.option("--max-context", type=int, default=8192, show_default=True, help="largest context"),
    ]):
        command = option(command)
    return command


@click.command()
@_model_options
@click.option("--analytic", is_flag=True, help="from the spec sheet (--gpu) or a sweep's fits (--from), no timers")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="the step profile (JSON)")
def profile(model, hf_config, tp, dtype, kv_dtype, sku, from_result, max_tokens, max_context, analytic, output):
    """Everything one engine step of a model costs, as kernel-time tables: a step profile for `simulate`."""
    from roofline.serving.profile_doc import check_profile_output, save_profile

    try:
        check_profile_output(output)
        document = build_analytic_profile(model, hf_config, sku, from_result, tp, dtype, kv_dtype, max_tokens,
                                          max_context)
        save_profile(document, output)
    except _errors() as exc:
        raise _bad(exc) from None
    click.echo(f"step profile of {document.model['name']} ({document.basis}) saved to {output}")


def _load_workload(trace, requests, arrivals, prompt, output_lengths, seed):
    from roofline.serving.workload import load_trace, make_workload

    if trace is not None:
        return load_trace(trace), {"trace": str(trace)}
    spec = {"requests": requests, "arrivals": arrivals, "prompt": prompt, "output": output_lengths, "seed": seed}
    return make_workload(requests, arrivals, prompt, output_lengths, seed), spec


# The --overhead-* flags, each the EngineOverhead term it sets.
OVERHEAD_FLAGS = {"per_step_s": "--overhead-s", "per_sequence_s": "--overhead-per-seq-s",
                  "per_cached_token_s": "--overhead-per-cached-token-s",
                  "per_prefill_step_s": "--overhead-per-prefill-s"}


def _overhead(profile, given: dict[str, float | None]):
    """The profile's calibrated overhead with the terms given on the command line replaced (the rest kept)."""
    from dataclasses import replace

    from roofline.serving.profile_doc import MAX_KERNEL_S, EngineOverhead

    given = {term: value for term, value in given.items() if value is not None}
    for term, value in given.items():  # EngineOverhead's own bound, worded with the flag
        if not math.isfinite(value) or not 0 <= value <= MAX_KERNEL_S:
            raise BadInputError(f"{OVERHEAD_FLAGS[term]} {value:g}: give seconds from 0 to {MAX_KERNEL_S:g}")
    if not given:
        return profile.engine_overhead
    base = profile.engine_overhead or EngineOverhead(0.0, 0.0, "")
    flags = ", ".join(OVERHEAD_FLAGS[term] for term in given)
    fitted_on = f"{base.fitted_on}; {flags} given on the command line" if base.fitted_on else f"{flags} given"
    return replace(base, **given, fitted_on=fitted_on)


def _parse_rates(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BadInputError(f"--rates {text!r}: give requests/s as a comma list (0.5,1,2)") from None
    if any(r <= 0 for r in rates):
        raise BadInputError("--rates must be positive")
    return rates


def run_policies(profile, requests, policies, overhead, mem_fraction, slo, rates, seed) -> list[dict[str, Any]]:
    """Simulate each policy; with an SLO, also search its capacity; with rates, draw its curve."""
    from roofline.serving.capacity import rate_point, search_capacity
    from roofline.serving.metrics import summarize
    from roofline.serving.simulate import simulate
    from roofline.serving.workload import with_arrivals

    entries = []
    for policy in policies:
        def run_at(workload, policy=policy):
            return simulate(profile, workload, policy, overhead, mem_fraction)

        run = run_at(requests)
        entry: dict[str, Any] = {"run": run, "summary": summarize(run, profile, mem_fraction, slo), "rates": []}
        for rate in rates:
            entry["rates"].append(rate_point(rate, run_at(with_arrivals(requests, f"poisson:{rate!r}", seed))))
        if slo is not None:
            burst = run_at(with_arrivals(requests, "burst"))
            saturated = summarize(burst, profile, mem_fraction)["requests_per_s"]
            entry["capacity"] = search_capacity(requests, slo, run_at, saturated, seed, burst=burst)
            entry["rates"] += [{k: v for k, v in p.items() if k != "checks"} for p in entry["capacity"].tried]
        entries.append(entry)
    return entries


# The options that build an analytic profile: beside a PROFILE.json they would be silently ignored.
PROFILE_BUILDING = ("model", "hf_config", "tp", "dtype", "kv_dtype", "sku", "from_result", "max_tokens",
                    "max_context")
FLAG_NAMES = {"sku": "--gpu", "from_result": "--from"}


def _check_profile_source(ctx: click.Context, profile_file: Path | None, analytic: bool) -> None:
    if profile_file and analytic:
        raise BadInputError("give a PROFILE.json or --analytic (with --gpu SKU --model NAME), not both")
    if not profile_file and not analytic:
        raise BadInputError("give a PROFILE.json, or --analytic with --gpu SKU --model NAME")
    given = [name for name in PROFILE_BUILDING
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if profile_file and given:
        flags = ", ".join(FLAG_NAMES.get(g, "--" + g.replace("_", "-")) for g in given)
        raise BadInputError(f"{flags}: these build an --analytic profile, and {profile_file} already fixes the model "
                            "and its shapes; drop them")


@contextlib.contextmanager
def _output_folder(folder: Path):
    """Check the output folder and its files before simulating (a link, /sys or /proc must not lose the run);
    a folder this check created is removed again when the simulation then refuses the input."""
    from roofline.result.io import check_output

    created = not folder.exists() and not folder.is_symlink()
    check_output(folder, folder=True)
    try:
        for name in ("simulation.json", "requests.csv"):
            check_output(folder / name)
        yield
    except BaseException:
        if created and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        raise


def _print_table(document: dict[str, Any]) -> None:
    from roofline.serving.report import summary_table, verdict_lines

    header, rows = summary_table(document)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for line in [header] + rows:
        click.echo("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths,
                                                                                                        strict=True))))
    for line in verdict_lines(document):
        click.echo(line)


@click.command()
@click.pass_context
@click.argument("profile_file", type=click.Path(path_type=Path), required=False)
@click.option("--analytic", is_flag=True, help="build the profile from the spec sheet (--gpu, --model) instead")
@_model_options
@click.option("--requests", "n_requests", type=int, default=1000, show_default=True, help="requests to generate")
@click.option("--arrivals", default="burst", show_default=True, help="burst | poisson:RATE (requests/s)")
@click.option("--prompt", default="fixed:512", show_default=True,
              help="prompt lengths: fixed:N | uniform:A:B | exp:MEAN[:CAP] | lognormal:MEDIAN:SIGMA[:CAP]")
@click.option("--output", "output_lengths", default="exp:128:512", show_default=True,
              help="output lengths, as --prompt")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--trace", type=click.Path(path_type=Path), default=None,
              help="CSV arrival_s,prompt_tokens,output_tokens")
@click.option("--policy", "policies", multiple=True, help="static:batch=B | continuous[:max-batch=B] | "
              "paged[:block=16] | chunked:budget=T (repeatable: compared side by side) [continuous]")
@click.option("--overhead-s", "per_step_s", type=float, default=None,
              help="engine overhead per step (each --overhead-* replaces that term of the profile's calibrated one)")
@click.option("--overhead-per-seq-s", "per_sequence_s", type=float, default=None,
              help="engine overhead per sequence in a step")
@click.option("--overhead-per-cached-token-s", "per_cached_token_s", type=float, default=None,
              help="engine overhead per cached token the step's sequences attend to")
@click.option("--overhead-per-prefill-s", "per_prefill_step_s", type=float, default=None,
              help="engine overhead once more for a step that runs prefill")
@click.option("--mem-fraction", type=float, default=0.9, show_default=True, help="share of memory for weights + KV")
@click.option("--slo", default=None, help="latency objectives, e.g. ttft_p90=2,tpot_p99=0.1: goodput and capacity")
@click.option("--rates", default=None, help="also simulate these Poisson rates (requests/s) for the latency curve")
@click.option("-o", "--out-dir", type=click.Path(path_type=Path), default=None,
              help="folder for simulation.json, requests.csv and the report [results/sim-<model>-<UTC time>]")
@click.option("--no-report", is_flag=True, help="write simulation.json and requests.csv only")
@click.option("--json", "as_json", is_flag=True, help="print the per-policy summaries as JSON")
def simulate(ctx, profile_file, analytic, model, hf_config, tp, dtype, kv_dtype, sku, from_result, max_tokens,
             max_context, n_requests, arrivals, prompt, output_lengths, seed, trace, policies, per_step_s,
             per_sequence_s, per_cached_token_s, per_prefill_step_s, mem_fraction, slo, rates, out_dir, no_report,
             as_json) -> None:
    """Simulate one replica serving a workload under batching policies: throughput, latency, the binding limit."""
    from roofline.serving.document import save_simulation, simulation_document, write_requests_csv
    from roofline.serving.metrics import Slo
    from roofline.serving.policies import parse_policy
    from roofline.serving.profile_doc import load_profile
    from roofline.serving.workload import check_seed

    try:
        _check_profile_source(ctx, profile_file, analytic)
        check_seed(seed)
        if not 0 < mem_fraction <= 1:
            raise BadInputError("--mem-fraction must be in (0, 1]")
        if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
            raise BadInputError(f"-o {out_dir}: is a file; give a folder for simulation.json and the report")
        step_profile = load_profile(profile_file) if profile_file else build_analytic_profile(
            model, hf_config, sku, from_result, tp, dtype, kv_dtype, max_tokens, max_context)
        parsed = [parse_policy(p) for p in (policies or SIMULATE_DEFAULT_POLICY)]
        requests, workload = _load_workload(trace, n_requests, arrivals, prompt, output_lengths, seed)
        overhead = _overhead(step_profile, {"per_step_s": per_step_s, "per_sequence_s": per_sequence_s,
                                            "per_cached_token_s": per_cached_token_s,
                                            "per_prefill_step_s": per_prefill_step_s})
        parsed_slo, parsed_rates = Slo.parse(slo) if slo else None, _parse_rates(rates)
        folder = out_dir or Path("results") / (f"sim-{step_profile.model.get('id') or 'model'}-"
                                               f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}")
        with _output_folder(folder):
            entries = run_policies(step_profile, requests, parsed, overhead, mem_fraction, parsed_slo, parsed_rates,
                                   seed)
    except _errors() as exc:
        raise _bad(exc) from None
    tool, host = _tool_host()
    document = simulation_document(entries, step_profile, str(profile_file) if profile_file else None, workload,
                                   mem_fraction, tool, host, tuple(sys.argv))
    if as_json:
        click.echo(json.dumps([{"policy": e["policy"], "summary": e["summary"], "capacity": e["capacity"]}
                               for e in document["runs"]], indent=1, allow_nan=False))
    else:
        _print_table(document)
    runs = [e["run"] for e in entries]
    try:
        save_simulation(document, folder / "simulation.json")
        write_requests_csv(runs, folder / "requests.csv")
        if not no_report:
            from roofline.serving.report import write_report

            write_report(document, runs, folder)
    except _errors() as exc:
        raise _bad(exc) from None
    click.echo(f"saved {folder / 'simulation.json'}, requests.csv" + ("" if no_report else " and the report"),
               err=as_json)
