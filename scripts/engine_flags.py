"""Record the launch flags of a named engine release, read from the release's own source (its wheel on PyPI).

    pip download --no-deps -d /tmp/wheels vllm==0.33.0 sglang==0.5.23
    python scripts/engine_flags.py vllm /tmp/wheels/vllm-0.33.0-*.whl
    python scripts/engine_flags.py sglang /tmp/wheels/sglang-0.5.23-*.whl

writes profiles/engines/<engine>.json: the version, repository, commit (where the wheel records one), the files
read, the wheel's name and sha256, and every flag those files declare (sorted), with the choices of the few flags
whose values ``gpubench search`` writes.  Nothing is imported from the engine: its files are read with ``ast``.
``gpubench search`` writes no flag of an engine that is not in its list, and tests/test_search_deploy.py checks
every flag it emits against these lists.

vLLM: ``vllm/engine/arg_utils.py`` (every ``add_argument`` of ``EngineArgs.add_cli_args``: the engine's flags,
the ones ``vllm serve`` takes beside the model), the KV cache dtypes of ``vllm/config/cache.py`` (``CacheDType``)
and the speculative methods of ``vllm/config/speculative.py`` (``SpeculativeMethod``'s literals).
SGLang: ``sglang/srt/server_args.py`` and ``sglang/srt/arg_groups/fields/*.py``: each ``A[T, "help"]`` or
``A[T, Arg(...)]`` field of the namespaces becomes ``--field-name`` (or its ``cli_name``) and its ``aliases``
unless ``no_cli=True`` (``add_cli_args_from_dataclass`` in ``sglang/srt/arg_groups/arg_utils.py``), and
``server_args.py`` adds a few by hand (``parser.add_argument``).
TensorRT-LLM's wheels are not on PyPI (its package there is a 10 kB stub that downloads from NVIDIA's index):
profiles/engines/trtllm.json was written by hand from the source read in the code index, and says so.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOSITORIES = {"vllm": "vllm-project/vllm", "sglang": "sgl-project/sglang"}


def _literals(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def add_argument_flags(source: str) -> set[str]:
    """Every ``--flag`` string given to an ``add_argument`` call (positional arguments only)."""
    flags = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags.update(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                         and a.value.startswith("--"))
    return flags


def literal_alias(source: str, name: str) -> list[str]:
    """The string literals of ``name = Literal[...]`` (nested aliases' names are left out)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return [v for v in _literals(node.value) if v != "Literal"]
    raise SystemExit(f"{name} not found")


def class_fields(source: str, name: str) -> list[str]:
    """The annotated fields of class ``name`` (a config whose JSON a flag takes)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return sorted(s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                          and isinstance(s.target, ast.Name))
    raise SystemExit(f"class {name} not found")


def dataclass_flags(source: str) -> set[str]:
    """SGLang's ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields as their flags (``add_cli_args_from_dataclass``)."""
    flags = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = node.annotation
        if not (isinstance(annotation, ast.Subscript) and getattr(annotation.value, "id", None) == "A"):
            continue
        parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if len(parts) < 2:
            continue
        meta = parts[1]
        name = "--" + node.target.id.replace("_", "-")
        if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
            flags.add(name)
        elif isinstance(meta, ast.Call) and getattr(meta.func, "id", None) == "Arg":
            keywords = {k.arg: k.value for k in meta.keywords}
            if isinstance(keywords.get("no_cli"), ast.Constant) and keywords["no_cli"].value is True:
                continue
            cli = keywords.get("cli_name")
            flags.add(cli.value if isinstance(cli, ast.Constant) else name)
            if "aliases" in keywords:
                flags.update(v for v in _literals(keywords["aliases"]) if v.startswith("-"))
    return flags


def sglang_kv_dtypes(source: str) -> list[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "kv_cache_dtype":
            for call in ast.walk(node.annotation):
                if isinstance(call, ast.Call):
                    for keyword in call.keywords:
                        if keyword.arg == "choices":
                            return _literals(keyword.value)
    raise SystemExit("kv_cache_dtype's choices not found")


def record(engine: str, wheel: Path) -> dict:
    archive = zipfile.ZipFile(wheel)

    def read(path: str) -> str:
        return archive.read(path).decode("utf-8")

    version_file = read(f"{engine}/_version.py")
    version = re.search(r"__version__ = version = '([^']+)'", version_file)
    commit = re.search(r"__commit_id__ = commit_id = '([^']+)'", version_file)
    if version is None:
        raise SystemExit(f"{wheel}: no version in {engine}/_version.py")
    out = {"engine": engine, "version": version.group(1), "repository": REPOSITORIES[engine],
           "commit": commit.group(1).removeprefix("g") if commit else None,
           "commit_note": "abbreviated, as the wheel's _version.py records it" if commit else
           "the wheel's _version.py records no commit",
           "read_from": f"{wheel.name} (PyPI), sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}"}
    if engine == "vllm":
        paths = ["vllm/engine/arg_utils.py"]
        flags = add_argument_flags(read(paths[0]))
        out["choices"] = {"--kv-cache-dtype": literal_alias(read("vllm/config/cache.py"), "CacheDType"),
                          "--speculative-config method": literal_alias(read("vllm/config/speculative.py"),
                                                                       "MTPModelTypes")}
        out["config_keys"] = {
            "--speculative-config": class_fields(read("vllm/config/speculative.py"), "SpeculativeConfig"),
            "--kv-transfer-config": class_fields(read("vllm/config/kv_transfer.py"), "KVTransferConfig")}
        factory = read("vllm/distributed/kv_transfer/kv_connector/factory.py")
        out["choices"]["--kv-transfer-config kv_connector"] = sorted(set(re.findall(
            r'register_connector\(\s*"(\w+)"', factory)))
        paths += ["vllm/config/cache.py", "vllm/config/speculative.py", "vllm/config/kv_transfer.py",
                  "vllm/distributed/kv_transfer/kv_connector/factory.py"]
    else:
        fields = sorted(n for n in archive.namelist() if n.startswith("sglang/srt/arg_groups/fields/")
                        and n.endswith(".py"))
        paths = ["sglang/srt/server_args.py", *fields]
        flags = add_argument_flags(read(paths[0]))
        for path in fields:
            flags |= dataclass_flags(read(path))
        out["choices"] = {"--kv-cache-dtype": sglang_kv_dtypes(read("sglang/srt/arg_groups/fields/model.py"))}
    out["paths"] = paths
    out["flags"] = sorted(flags)
    return out


def main() -> None:
    engine, wheel = sys.argv[1], Path(sys.argv[2])
    document = record(engine, wheel)
    target = ROOT / "profiles" / "engines" / f"{engine}.json"
    target.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"{engine} {document['version']}: {len(document['flags'])} flags from {', '.join(document['paths'][:2])}"
          f"{' ...' if len(document['paths']) > 2 else ''} -> {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
