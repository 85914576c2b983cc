"""Every option of every command is declared once: a row of its command's table (flags, kind, default, help) from
which the click option is made, the config's field takes its default, and docs/cli.md's synopsis is checked; and the
policies and routers are each one registry that the parser, the help and the documents' schemas read."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import click
import pytest

from microbench.cli.app import FIT_FLAGS, IMPORT_FLAGS, REPORT_FLAGS, main
from microbench.cli.edges import DeclaredOption, given
from microbench.decode.config import FLAGS as DECODE_FLAGS
from microbench.decode.config import DecodeConfig
from microbench.points import plan
from microbench.points.config import CEILINGS_FLAGS, SweepConfig
from microbench.points.config import FLAGS as SWEEP_FLAGS
from microbench.serving.profile_config import FLAGS as PROFILE_FLAGS
from microbench.serving.profile_config import ProfileConfig
from microbench.serving.validate_options import FLAGS as VALIDATE_FLAGS
from microbench.serving.validate_options import ValidateConfig
from roofline.calibrate.config import FLAGS as CALIBRATE_FLAGS
from roofline.compare.config import FLAGS as COMPARE_FLAGS
from roofline.compare.config import CompareConfig
from roofline.core.counting import DTYPES
from roofline.core.errors import BadInputError
from roofline.fleet.plan_config import FLAGS as PLAN_FLAGS
from roofline.fleet.plan_config import PlanConfig
from roofline.fleet.router import Router
from roofline.search.config import FLAGS as SEARCH_FLAGS
from roofline.search.config import SearchConfig
from roofline.serving.metrics import Slo
from roofline.serving.policies import POLICIES, POLICY_KINDS, ROUTER_NAMES, ROUTERS, SWITCHES, WORDS, parse_policy
from roofline.serving.schemas.registry import schema
from roofline.serving.simulate_config import FLAGS as SIMULATE_FLAGS
from roofline.serving.simulate_config import SimulateConfig

ROOT = Path(__file__).resolve().parent.parent

TABLES = {"sweep": SWEEP_FLAGS, "ceilings": CEILINGS_FLAGS, "fit": FIT_FLAGS, "report": REPORT_FLAGS,
          "import": IMPORT_FLAGS, "compare": COMPARE_FLAGS, "decode": DECODE_FLAGS, "devices": {},
          "simulate": SIMULATE_FLAGS, "plan": PLAN_FLAGS, "profile": PROFILE_FLAGS, "validate": VALIDATE_FLAGS,
          "calibrate": CALIBRATE_FLAGS, "search": SEARCH_FLAGS}


def _options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


def test_every_command_has_a_table():
    assert set(main.commands) == set(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_option_of_a_command_is_made_from_a_row_of_its_table(name):
    """No option is written by hand beside the table: each is the table's own row (the same object), all of them,
    in the table's order (the order -h lists them)."""
    options = _options(main.commands[name])
    hand_written = [p.name for p in options if not isinstance(p, DeclaredOption)]
    assert hand_written == []
    assert [(p.name, p.row) for p in options if isinstance(p, DeclaredOption)] == list(TABLES[name].items())
    for param in options:
        assert isinstance(param, DeclaredOption)
        assert tuple(param.opts) == param.row.flags and param.help == param.row.help


# Fields the config parses from the option's text (--batch 1:8, --rates 1,2, --spec a,b): their default is the
# parse of the row's, which the test below checks through the command line.
PARSED = {DecodeConfig: {"batches"}, SimulateConfig: {"rates", "sweep_load"}, PlanConfig: {"rates", "prices"},
          CompareConfig: {"specs"}, SearchConfig: {"rates", "prices"}}
CONFIGS = [(SweepConfig, SWEEP_FLAGS), (DecodeConfig, DECODE_FLAGS), (ProfileConfig, PROFILE_FLAGS),
           (ValidateConfig, VALIDATE_FLAGS), (SimulateConfig, SIMULATE_FLAGS), (PlanConfig, PLAN_FLAGS),
           (CompareConfig, COMPARE_FLAGS), (SearchConfig, SEARCH_FLAGS)]


@pytest.mark.parametrize("config, table", CONFIGS, ids=[c.__name__ for c, _ in CONFIGS])
def test_each_config_field_with_a_flag_defaults_to_its_row(config, table):
    flagged = [f for f in fields(config)
               if f.name in table and f.name not in PARSED.get(config, ()) and not table[f.name].required]
    assert flagged, "the table names the config's fields"
    assert {f.name: f.default for f in flagged} == {f.name: table[f.name].default for f in flagged}


NOTHING_TYPED = [
    ("sweep", [], lambda: SweepConfig()),
    ("ceilings", [], lambda: SweepConfig(ops=(), save=False)),
    ("decode", ["--model", "llama-3-8b"], lambda: DecodeConfig(model="llama-3-8b")),
    ("compare", ["a.json"], lambda: CompareConfig(inputs=(Path("a.json"),))),
    ("simulate", ["p.json"], lambda: SimulateConfig(profile_file=Path("p.json"))),
    ("plan", ["p.json", "--rate", "2", "--slo", "ttft_p90=1"],
     lambda: PlanConfig(profile_files=(Path("p.json"),), rates=(2.0,), slo=Slo.parse("ttft_p90=1"))),
    ("profile", ["--model", "llama-3-8b", "-o", "p.json"],
     lambda: ProfileConfig(output=Path("p.json"), model="llama-3-8b")),
    ("validate", ["--model", "llama-3-8b", "-o", "out"],
     lambda: ValidateConfig(model="llama-3-8b", out_dir=Path("out"))),
    ("search", ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--rate", "2", "--slo", "ttft_p90=1"],
     lambda: SearchConfig(model="llama-3-8b", skus=("h100-sxm",), rates=(2.0,), slo=Slo.parse("ttft_p90=1"))),
]


@pytest.mark.parametrize("name, args, expected", NOTHING_TYPED, ids=[n for n, _, _ in NOTHING_TYPED])
def test_a_command_line_that_types_nothing_builds_the_configs_own_defaults(name, args, expected):
    """What click hands over when an option is not typed (the row's default, through the option's type) makes
    the same config as the library's defaults: -h, the command and a config built in code say one thing."""
    command = main.commands[name]
    ctx = command.make_context(name, list(args))
    builder = {"sweep": SweepConfig, "ceilings": SweepConfig, "decode": DecodeConfig, "compare": CompareConfig,
               "simulate": SimulateConfig, "plan": PlanConfig, "profile": ProfileConfig,
               "validate": ValidateConfig, "search": SearchConfig}[name]
    fixed = {"ops": (), "save": False} if name == "ceilings" else {}
    assert builder.from_options(ctx.params, given(ctx), **fixed) == expected()


def _synopsis() -> dict[str, str]:
    """docs/cli.md's command synopsis: each command's lines, joined."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    block = text.split("## Synopsis\n\n```\n", 1)[1].split("```", 1)[0]
    commands: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        if line.startswith("gpubench "):
            name = line.split()[1]
        commands[name] = commands.get(name, "") + " " + line
    return commands


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_cli_pages_synopsis_lists_every_flag_of_every_command_and_no_other(name):
    synopsis = _synopsis()
    assert name in synopsis, f"docs/cli.md's synopsis has no gpubench {name}"
    typed = set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", synopsis[name]))
    shown = [option for option in TABLES[name].values() if not option.hidden]
    assert [option.spelled for option in shown if not typed & set(option.flags)] == []
    assert typed - {flag for option in shown for flag in option.flags} == set()


def test_the_sweeps_dtype_help_lists_every_dtype_and_each_devices_defaults():
    text = " ".join(SWEEP_FLAGS["dtypes"].help.split())
    assert text.startswith(", ".join(DTYPES) + " ")
    for kind, label in (("cuda", "GPU"), ("cpu", "CPU")):
        full, quick = plan.defaults_for(kind, False).dtypes, plan.defaults_for(kind, True).dtypes
        assert f"{label}: {','.join(full)} (--quick: {','.join(quick)})" in text
    assert "w8a16" in text and "w4a16" in text
    ceilings = CEILINGS_FLAGS["dtypes"].help
    assert all(",".join(plan.CEILING_DTYPES[kind]) in ceilings for kind in ("cuda", "cpu"))


def _enums(node, key: str, beside: str | None = None) -> list[list[str]]:
    """Every enum a schema gives the property ``key`` (of a record that also has ``beside``), anywhere in it."""
    found = []
    if isinstance(node, dict):
        properties = node.get("properties", {})
        if key in properties and "enum" in properties[key] and (beside is None or beside in properties):
            found.append(properties[key]["enum"])
        for value in node.values():
            found += _enums(value, key, beside)
    elif isinstance(node, list):
        for value in node:
            found += _enums(value, key, beside)
    return found


def test_every_policy_is_one_registry_entry_that_the_parser_help_and_schema_read():
    syntax = [policy.syntax() for policy in POLICIES.values()]
    for table in (SIMULATE_FLAGS, PLAN_FLAGS):
        assert " | ".join(syntax) in table["policies"].help
    kinds = _enums(schema("simulation"), "kind", beside="max_batch")
    assert kinds and all(tuple(enum) == POLICY_KINDS == tuple(POLICIES) for enum in kinds)
    # Each policy parses from its own syntax, every option filled in, and is the registry's class.
    for kind, policy in POLICIES.items():
        text = kind + "".join(f":{name}={'on' if name in SWITCHES else WORDS[name][-1] if name in WORDS else 3}"
                              for name in policy.OPTIONS)
        parsed = parse_policy(text)
        assert type(parsed) is policy and parsed.to_dict()["kind"] == kind
    with pytest.raises(BadInputError, match="use static:batch=B, continuous, paged or chunked:budget=T"):
        parse_policy("fifo")


def test_every_router_is_one_registry_entry_that_the_option_help_schema_and_fleet_read():
    assert ROUTER_NAMES == tuple(ROUTERS)
    for table in (SIMULATE_FLAGS, PLAN_FLAGS):
        assert table["router"].choices == ROUTER_NAMES and table["router"].default == ROUTER_NAMES[0]
        assert all(f"{name}, {rule.help}" in table["router"].help for name, rule in ROUTERS.items())
    for document in ("simulation", "plan"):
        enums = _enums(schema(document), "router")
        assert enums and all(tuple(enum) == ROUTER_NAMES for enum in enums)
    assert [Router(name).reads_state for name in ROUTER_NAMES] == [rule.load is not None for rule in ROUTERS.values()]
