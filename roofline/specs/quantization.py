"""A checkpoint's quantization, read as it is: which of a model's matrices are stored in which format.

Read from the ``quantization_config`` of a ``config.json`` (or of its ``text_config``), or from ModelOpt's
``hf_quant_config.json`` beside it (``<stem>.hf_quant_config.json``, or ``hf_quant_config.json`` in the folder):

- ``fp8`` (DeepSeek-V3, MiniMax, MiMo: ``weight_block_size`` [128, 128] is ``fp8-block``, else ``fp8``) and
  ``mxfp4`` (gpt-oss), each with ``modules_to_not_convert``, matched as transformers matches them (a name from its
  start up to a module boundary, as a regex, or as a suffix);
- ``compressed-tensors`` (Kimi-K2.5's symmetric int4 in groups of 32: ``w4a16-g32``; int4 in groups of 128:
  ``w4a16``; int8 per channel: ``w8a16``; fp8 weights and activations, in 128×128 blocks ``fp8-block``, else
  ``fp8``; fp4 in groups of 16 with activations: ``nvfp4``), with its ``ignore`` list (``re:`` regexes, or names);
- ``modelopt`` (``quant_algo`` NVFP4 or FP8) with its ``exclude_modules`` globs, and its KV cache's FP8;
- ``awq`` and ``gptq`` (4 bits in groups of 128: ``w4a16``).

A part of the model (softmax attention, linear attention, Mamba-2, dense MLPs, routed experts, shared experts, the
router, the LM head) takes a format where none of its modules is excluded, stays in bf16 where all are, and is
refused where only some layers' are (gpubench times a part in one format).  The router and the LM head stay in
bf16 whatever the config says, as gpubench's formats always keep them.  ``--dtype`` replaces all of it, and says so.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.specs.gpus import SpecError

# The parts a format is set for (``ModelSpec.formats``, ``StepModel.stored_dtype``).
PARTS = ("attention", "linear_attention", "mamba2", "mlp", "experts", "shared", "router", "head")
ALWAYS_BF16 = ("router", "head")
# Module names a part's matrices go by, per block, in the families' own spellings; a prefix each of the ways a
# checkpoint nests its language model.
PREFIXES = ("model", "model.language_model", "language_model.model", "backbone")
MODULES = {
    "attention": ("self_attn.o_proj", "mixer.o_proj"),
    "linear_attention": ("linear_attn.out_proj",),
    "mamba2": ("mixer.out_proj",),
    "mlp": ("mlp.down_proj", "mixer.down_proj", "feed_forward.down_proj"),
    "experts": ("mlp.experts.0.down_proj", "mixer.experts.0.down_proj", "block_sparse_moe.experts.0.w2",
                "feed_forward.experts.down_proj"),
    "shared": ("mlp.shared_experts.down_proj", "mlp.shared_expert.down_proj", "mixer.shared_experts.down_proj",
               "feed_forward.shared_expert.down_proj"),
}


@dataclass(frozen=True)
class Formats:
    parts: tuple[tuple[str, str], ...]  # (part, dtype) for the parts not in bf16
    kv: str | None
    notes: tuple[str, ...]


def checkpoint_formats(c: Any, outer: dict[str, Any], path: Path, blocks: list[tuple[str, str]], shared: bool
                       ) -> Formats | None:
    """The formats ``c`` (the language model's config, ``hf_config._Config``) and the file beside it give its parts,
    or None: the checkpoint is in bf16.  ``blocks``: each block's (mixer, MLP) kind names; ``shared``: whether its
    MoE has shared experts."""
    config = c.data.get("quantization_config") or outer.get("quantization_config")
    modelopt = _modelopt_file(path)
    if config is None and modelopt is None:
        return None
    if config is not None and not isinstance(config, dict):
        raise c.refuse(f"quantization_config must be an object, got {type(config).__name__}")
    method = "modelopt" if config is None else config.get("quant_method")
    reader = READERS.get(method)
    if reader is None:
        raise c.refuse(f"quantization_config's quant_method {method!r} cannot be modelled yet (gpubench reads "
                       f"{', '.join(sorted(READERS))})")
    scheme = reader(c, config if config is not None else modelopt, modelopt)
    parts = []
    for part in PARTS:
        names = _part_names(part, blocks)
        if not names or part in ALWAYS_BF16 or (part == "shared" and not shared):
            continue
        formats = {scheme.format_of(block) for block in names}
        if len(formats) > 1:
            raise c.refuse(f"quantization_config stores the {part} of some layers in "
                           f"{' and of others in '.join(sorted(f or 'bf16' for f in formats))}: gpubench times a part "
                           "in one format")
        fmt = formats.pop()
        if fmt is not None and fmt != "bf16":
            parts.append((part, fmt))
    if not parts:
        return Formats((), scheme.kv, (f"{scheme.label}: every matrix gpubench times stays bf16",))
    words = ", ".join(f"{part} {fmt}" for part, fmt in parts)
    return Formats(tuple(parts), scheme.kv, (f"the checkpoint's {scheme.label} stores {words}; the rest bf16",))


def _part_names(part: str, blocks: list[tuple[str, str]]) -> list[list[str]]:
    """Per block holding the part, the names its module may go by (one list each)."""
    holders = {"attention": ("attention", "sliding", "chunked"), "linear_attention": ("linear",),
               "mamba2": ("mamba",)}
    out = []
    for i, (mixer, mlp) in enumerate(blocks):
        held = mixer in holders.get(part, ()) or (part == "mlp" and mlp == "dense") or (
            part in ("experts", "shared") and mlp == "moe")
        if held:
            out.append([f"{p}.layers.{i}.{m}" for p in PREFIXES for m in MODULES[part]])
    return out


@dataclass(frozen=True)
class Scheme:
    """One checkpoint's rule: ``module_format`` gives a module's format by its name (None: left in bf16)."""

    label: str
    module_format: Any  # name -> format or None
    kv: str | None = None

    def format_of(self, names: list[str]) -> str | None:
        """A block's part, by the names its module may go by: bf16 where any spelling is excluded (a pattern is
        written in its family's spelling), else the format."""
        formats = [self.module_format(name) for name in names]
        return None if None in formats else formats[0]


def _excluding(fmt: str, excluded: Any) -> Any:
    return lambda name: None if excluded(name) else fmt


def _transformers_match(patterns: list[str]) -> Any:
    """transformers' ``should_convert_module``: a pattern from the name's start up to a module boundary, as a
    regex, or as the name's suffix."""
    compiled = [re.compile(rf"(?:{p}){BOUNDARY}") for p in patterns]
    return lambda name: any(r.match(name) for r in compiled) or any(name.endswith(p) for p in patterns)


BOUNDARY = r"(?:(?<=\.)|(?=\.|$))"


def _list(c: Any, value: Any, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise c.refuse(f"quantization_config's {key} must be a list of module names")
    return value


def _fp8(c: Any, config: dict[str, Any], _modelopt: Any) -> Scheme:
    block = config.get("weight_block_size")
    if block is not None and block != [128, 128]:
        raise c.refuse(f"quantization_config's weight_block_size {block!r}: gpubench models fp8 in 128×128 blocks")
    fmt = "fp8-block" if block else "fp8"
    skipped = _list(c, config.get("modules_to_not_convert"), "modules_to_not_convert")
    return Scheme(f"fp8 ({'128×128 blocks' if block else 'per tensor'})", _excluding(fmt, _transformers_match(skipped)))


def _mxfp4(c: Any, config: dict[str, Any], _modelopt: Any) -> Scheme:
    skipped = _list(c, config.get("modules_to_not_convert"), "modules_to_not_convert")
    return Scheme("MXFP4", _excluding("mxfp4", _transformers_match(skipped)))


def _int4(c: Any, config: dict[str, Any], _modelopt: Any) -> Scheme:
    bits, group = config.get("bits", config.get("w_bit")), config.get("group_size", config.get("q_group_size"))
    if (bits, group) != (4, 128):
        raise c.refuse(f"quantization_config's {config.get('quant_method')} with {bits} bits in groups of {group}: "
                       "gpubench models 4 bits in groups of 128 (w4a16)")
    skipped = _list(c, config.get("modules_to_not_convert"), "modules_to_not_convert")
    return Scheme(f"{config['quant_method']} int4", _excluding("w4a16", _transformers_match(skipped)))


def _compressed_tensors(c: Any, config: dict[str, Any], _modelopt: Any) -> Scheme:
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise c.refuse("quantization_config (compressed-tensors) has no config_groups")
    rules = []
    for name, group in groups.items():
        if not isinstance(group, dict):
            raise c.refuse(f"quantization_config's config group {name!r} must be an object")
        targets = _list(c, group.get("targets"), f"config_groups.{name}.targets")
        rules.append((targets, _ct_format(c, name, group)))
    ignore = _list(c, config.get("ignore"), "ignore")
    kv = "fp8" if isinstance(config.get("kv_cache_scheme"), dict) and \
        config["kv_cache_scheme"].get("type") == "float" and config["kv_cache_scheme"].get("num_bits") == 8 else None

    def ignored(module: str) -> bool:
        return any(re.match(p[3:], module) if p.startswith("re:") else module == p or module.endswith("." + p)
                   for p in ignore)

    def format_of(module: str) -> str | None:
        if ignored(module):
            return None
        for targets, fmt in rules:
            if any(t == "Linear" or (t.startswith("re:") and re.match(t[3:], module)) for t in targets):
                return fmt
        return None

    fmts = sorted({fmt for _, fmt in rules})
    return Scheme(f"compressed-tensors {'/'.join(fmts)}", format_of, kv)


def _ct_format(c: Any, name: str, group: dict[str, Any]) -> str:
    weights, inputs = group.get("weights") or {}, group.get("input_activations")
    kind, bits = weights.get("type"), weights.get("num_bits")
    strategy, size, symmetric = weights.get("strategy"), weights.get("group_size"), weights.get("symmetric", True)
    if inputs is None and kind == "int":
        if bits == 4 and strategy == "group" and size == 32 and symmetric:
            return "w4a16-g32"
        if bits == 4 and strategy == "group" and size == 128:
            return "w4a16"
        if bits == 8 and strategy == "channel":
            return "w8a16"
    if isinstance(inputs, dict) and kind == "float" and inputs.get("type") == "float":
        if bits == 8:
            return "fp8-block" if strategy == "block" and weights.get("block_structure") == [128, 128] else "fp8"
        if bits == 4 and size == 16:
            return "nvfp4"
    raise c.refuse(f"quantization_config's config group {name!r} ({kind} {bits} bits, {strategy}, group "
                   f"{size}, activations {'quantized' if inputs else 'not quantized'}) cannot be modelled yet")


def _modelopt(c: Any, config: dict[str, Any], modelopt: dict[str, Any] | None) -> Scheme:
    quant = (modelopt or {}).get("quantization") if modelopt is not None else config
    if not isinstance(quant, dict):
        raise c.refuse("ModelOpt's hf_quant_config.json has no quantization object")
    algo = quant.get("quant_algo")
    fmts = {"NVFP4": "nvfp4", "FP8": "fp8"}
    if algo not in fmts:
        raise c.refuse(f"ModelOpt's quant_algo {algo!r} cannot be modelled yet ({', '.join(fmts)})")
    exclude = _list(c, quant.get("exclude_modules"), "exclude_modules")
    kv = "fp8" if quant.get("kv_cache_quant_algo") == "FP8" else None
    return Scheme(f"ModelOpt {algo}", _excluding(fmts[algo], lambda name: any(fnmatch.fnmatchcase(name, p)
                                                                            for p in exclude)), kv)


READERS = {"fp8": _fp8, "mxfp4": _mxfp4, "awq": _int4, "gptq": _int4, "compressed-tensors": _compressed_tensors,
           "modelopt": _modelopt}


def _modelopt_file(path: Path) -> dict[str, Any] | None:
    """ModelOpt's ``hf_quant_config.json`` beside a config (``<stem>.hf_quant_config.json``, or in the folder)."""
    for candidate in (path.with_name(f"{path.stem}.hf_quant_config.json"), path.with_name("hf_quant_config.json")):
        if candidate.is_file():
            try:
                found = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as exc:
                raise SpecError(f"{candidate}: cannot read ModelOpt's quantization config ({exc})") from None
            if not isinstance(found, dict):
                raise SpecError(f"{candidate}: not a ModelOpt quantization config")
            return found
    return None
