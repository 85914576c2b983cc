"""The reference database in the commands: ``gpubench import --reference``, ``gpubench profile --reference`` and
``gpubench compare --reference``.  Thin: check the options, call ``roofline.reference`` (and the profile and
comparison built on it), print.  Never imports torch.
"""

from __future__ import annotations

from pathlib import Path

import click

from microbench.cli.edges import BadInput, bad_input
from microbench.cli.guard import writing_to

# More series than this in one import (a whole table, no --shape): said, since a report of them takes minutes.
MANY_SERIES = 40


def parse_shapes(texts: tuple[str, ...]) -> list[tuple[int, int]]:
    """``--shape NxK``, repeatable or a comma list, each once."""
    from microbench.points.plan import parse_shape

    shapes = [parse_shape(part) for text in texts for part in text.split(",") if part.strip()]
    return list(dict.fromkeys(shapes))


def parse_dtypes(texts: tuple[str, ...]) -> list[str]:
    from roofline.core.options import check_dtypes

    dtypes = [part.strip() for text in texts for part in text.split(",") if part.strip()] or ["bf16"]
    for dtype in dtypes:
        check_dtypes(dtype, None)
    return list(dict.fromkeys(dtypes))


def refuse_csv_options(csv_file, device_name, sku, device_kind) -> None:
    """``import --reference`` reads the database: the CSV import's own inputs beside it would be ignored."""
    typed = [flag for flag, value in (("CSV_FILE", csv_file), ("--device-name", device_name), ("--sku", sku),
                                      ("--device-kind", device_kind)) if value is not None]
    if typed:
        raise BadInput(f"--reference reads the reference database: drop {', '.join(typed)} (--gpu names the SKU)")


def import_reference(reference: str, gpu: str | None, engine: str | None, dtypes: tuple[str, ...],
                     shapes: tuple[str, ...], output: Path, force: bool) -> None:
    """``gpubench import --reference NAME --gpu SKU``: the database's GEMM rows as a result file."""
    from microbench.cli.serving import provenance
    from roofline.reference.database import check_engine, check_reference, open_database
    from roofline.reference.importer import reference_result
    from roofline.result.io import check_output, save_result
    from roofline.specs.gpus import load_gpu_spec

    with bad_input(), writing_to(output):
        check_reference(reference)
        if gpu is None:
            raise BadInput(f"--reference {reference} needs --gpu SKU: whose data to import")
        chosen_engine, spec = check_engine(engine), load_gpu_spec(gpu)
        chosen_dtypes, chosen_shapes = parse_dtypes(dtypes), parse_shapes(shapes)
        check_output(output, overwrite=force, resumable=False)
        made = provenance()
        result = reference_result(open_database(), spec, chosen_engine, chosen_dtypes, chosen_shapes or None,
                                  tool=made.tool, host=made.host, argv=made.argv)
        save_result(result, output)
    reference_record = result.settings.reference
    assert reference_record is not None  # reference_result always records its source
    click.echo(f"imported {len(result.points)} reference point(s) of {', '.join(chosen_dtypes)} for {gpu} "
               f"({reference_record.words()}) into {output}")
    for warning in result.settings.import_warnings or ():
        click.echo(f"warning: {warning}", err=True)
    series = {(p.dtype, p.n, p.k) for p in result.points}
    if not chosen_shapes and len(series) > MANY_SERIES:
        click.echo(f"warning: {len(series)} series of {len(result.points):,} points: fit reads them all, but a "
                   "report draws each series and takes minutes; --shape NxK imports the shapes you want", err=True)


def refuse_reference_options(gpu, engine, dtypes, shapes) -> None:
    """The CSV import takes none of ``--reference``'s options."""
    typed = [flag for flag, value in (("--gpu", gpu), ("--engine", engine), ("--dtype", dtypes), ("--shape", shapes))
             if value]
    if typed:
        raise BadInput(f"{', '.join(typed)} {'belong' if len(typed) > 1 else 'belongs'} to --reference; a CSV "
                       "import reads its device from --device-name and its shapes from the file")



def write_reference_profile(config) -> None:
    """``gpubench profile --reference NAME --gpu SKU``: the step profile from the database, saved to ``-o``."""
    from dataclasses import replace

    from microbench.cli.serving import engine_time_line, provenance, warn_if_weights_overflow
    from roofline.reference.database import check_engine
    from roofline.serving.profile_doc import check_profile_output, save_profile
    from roofline.serving.profiles.analytic import with_formats_note
    from roofline.serving.profiles.engine_time import preset_overhead
    from roofline.serving.profiles.reference import reference_profile
    from roofline.specs.engines import kernel_engine
    from roofline.specs.gpus import load_gpu_spec
    from roofline.specs.hf_config import load_hf_config
    from roofline.specs.models import load_model, step_formats

    with bad_input(), writing_to(config.output):
        if bool(config.model) == bool(config.hf_config):
            raise BadInput("give one of --model NAME or --hf-config PATH")
        check_profile_output(config.output)
        model = load_model(config.model) if config.model else load_hf_config(config.hf_config)
        model, dtype, kv_dtype, note = step_formats(model, config.dtype, config.kv_dtype)
        made = provenance()
        profile = reference_profile(model, tp=config.tp, ep=config.ep, routing=config.routing, dtype=dtype,
                                    kv_dtype=kv_dtype, max_tokens=config.max_tokens,
                                    max_context=config.max_context, gpu=load_gpu_spec(config.sku),
                                    engine=check_engine(kernel_engine(config.engine)), tool=made.tool, host=made.host,
                                    argv=made.argv)
        profile = with_formats_note(profile, note)
        # The engine's overhead preset is the profile's engine time (none under --engine none), as --analytic's is.
        profile = replace(profile, engine_overhead=preset_overhead(config.engine, profile.layers))
        save_profile(profile, config.output)
    click.echo(f"step profile of {profile.model['name']} ({profile.basis}) saved to {config.output}")
    click.echo(engine_time_line(profile))
    for name, source in table_sources(profile):
        click.echo(f"  {name}: {source}")
    warn_if_weights_overflow(profile)


def table_sources(profile) -> list[tuple[str, str]]:
    """Each table of a profile and its source, in the document's order."""
    out = [(t.name, t.source) for t in profile.linears] + [("lm_head", profile.lm_head.source)]
    out += [(t.name, t.source) for t in profile.grouped]
    out += [(name, table.source) for name, table in (("decode_attention", profile.decode_attention),
                                                     ("prefill_attention", profile.prefill_attention),
                                                     ("other", profile.other), ("comm", profile.comm),
                                                     ("all_to_all", profile.all_to_all)) if table is not None]
    return out
