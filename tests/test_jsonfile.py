"""The safe JSON reader (roofline.core.jsonfile): a size cap and a nesting cap, one line for each refusal, and the
depth it counts being the depth the parser sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.core.errors import BadInputError
from roofline.core.jsonfile import MAX_JSON_DEPTH, JsonFileError, nesting_depth, parse_json, read_json_file

ROOT = Path(__file__).resolve().parent.parent


def _depth(value) -> int:
    """The nesting of a parsed value, walked: what nesting_depth must agree with."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@pytest.mark.parametrize("text", ['1', '"[[[{"', '[]', '{"a": [1, {"b": "]]]"}]}', '[[], [[]], {}]',
                                  '{"k\\"[": ["\\\\", "{"]}', '[[[[[[0]]]]]]'])
def test_the_depth_counted_on_the_text_is_the_parsed_values(text):
    assert nesting_depth(text) == _depth(json.loads(text))


def test_every_committed_json_file_nests_well_below_the_cap():
    """MAX_JSON_DEPTH's comment: the deepest committed document nests 9 levels (a GuideLLM report)."""
    depths = {}
    for path in [*ROOT.glob("tests/**/*.json"), *ROOT.glob("results/**/*.json")]:
        depths[path.relative_to(ROOT)] = nesting_depth(path.read_text(encoding="utf-8"))
    deepest = max(depths, key=lambda p: depths[p])
    assert depths[deepest] == 9 and "guidellm" in deepest.name, (deepest, depths[deepest])
    assert depths[deepest] < MAX_JSON_DEPTH


def test_a_document_nested_100000_deep_is_one_line_naming_it(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(JsonFileError, match=r"deep.json: nested 100,000 levels deep; no document this reads nests "
                                            r"more than 64") as caught:
        read_json_file(path, max_bytes=10**6)
    assert "\n" not in str(caught.value)
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") is not None  # the cap itself reads


@pytest.mark.parametrize("content, words", [(b"x" * 11, "larger than 10 bytes"), (b"\xff\xfe", "not UTF-8 text"),
                                            (b"{1: 2}", "not valid JSON"), (b"", "not valid JSON")])
def test_a_file_too_large_not_text_or_not_json_is_one_line(tmp_path, content, words):
    path = tmp_path / "f.json"
    path.write_bytes(content)
    with pytest.raises(JsonFileError, match=words):
        read_json_file(path, max_bytes=10)
    with pytest.raises(JsonFileError, match="cannot read"):
        read_json_file(tmp_path / "absent.json", max_bytes=10)


def test_a_byte_order_mark_is_not_json_and_is_skipped(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": 1}).encode())
    assert read_json_file(path, max_bytes=100) == {"a": 1}


def test_a_drafter_config_nested_100000_deep_is_one_line(tmp_path):
    """--spec-decode drafter=F.json reads F.json with load_hf_config."""
    from roofline.specs.hf_config import load_hf_config

    path = tmp_path / "drafter.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInputError, match="nested 100,000 levels deep"):
        load_hf_config(path)
