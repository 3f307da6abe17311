"""Hostile YAML in pins.yaml is refused before validation, fast, with exit 2 and file:line; messages quote bad
values short."""

from __future__ import annotations

import pytest
import yaml

from buildkit.errors import InputError
from buildkit.models.pins import load_pins
from buildkit.models.yamlload import load_yaml
from tests.conftest import Result
from tests.support.measured import measured
from tests.support.paths import REPO_ROOT

REFERENCE = (REPO_ROOT / "pins.yaml").read_text()
BASE_LINE = "base_image: nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04\n"


def alias_bomb(levels: int = 10) -> str:
    """The billion-laughs shape: each anchor is a list of ten aliases of the previous one."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def run_offline(cli, tmp_path, text: str) -> Result:
    (tmp_path / "pins.yaml").write_text(text)
    return cli("resolve", "--offline")


def load_in_process(cli, tmp_path, text: str) -> Result:
    """load_pins in this process, as the CLI would report it: for the many cases past the CLI ones above."""
    (tmp_path / "pins.yaml").write_text(text)
    with pytest.raises(InputError) as info:
        load_pins(tmp_path / "pins.yaml")
    return Result(info.value.exit_code, "", f"error: {info.value.message}\n")


def assert_refused(result, *needles: str, longest: int = 1000) -> None:
    assert result.code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert len(result.stderr) < longest, result.stderr[:2000]
    for needle in needles:
        assert needle in result.stderr, result.stderr


def test_alias_bomb_is_refused_at_once(cli, tmp_path):
    bomb = alias_bomb()
    (tmp_path / "pins.yaml").write_text(bomb + REFERENCE.replace(BASE_LINE, "base_image: *l9\n"))
    run = measured(cli, "resolve", "--offline")
    assert_refused(run, "pins.yaml:1:", "anchor")
    # Measured in memory, not time: anything that walked the bomb (validation, its message) would meet 10**10 items,
    # past 250 MiB (or measured()'s address-space cap), or never end (its hang guard). Refused at its first anchor.
    assert run.peak_mib < 250


def test_a_single_alias_is_refused_with_its_line(cli, tmp_path):
    text = REFERENCE.replace("  target: release\n", "  target: &t release\n") + "x: *t\n"
    result = run_offline(cli, tmp_path, text)
    line = text.splitlines().index("  target: &t release") + 1
    assert_refused(result, f"pins.yaml:{line}:", "anchor")


def test_an_alias_without_its_anchor_is_refused_too(cli, tmp_path):
    result = load_in_process(cli, tmp_path, REFERENCE.replace(BASE_LINE, "base_image: *nowhere\n"))
    assert_refused(result, "pins.yaml:", "alias")


def test_over_deep_nesting_is_refused_not_a_crash(cli, tmp_path):
    result = run_offline(cli, tmp_path, REFERENCE + "deep: " + "[" * 5000 + "]" * 5000 + "\n")
    assert_refused(result, "pins.yaml:", "nested deeper than")


def test_over_large_file_is_refused(cli, tmp_path):
    result = load_in_process(cli, tmp_path, REFERENCE + "# " + "x" * (2 << 20) + "\n")
    assert_refused(result, "pins.yaml", "larger than")


def test_over_many_values_are_refused():
    with pytest.raises(InputError, match=r"many\.yaml:1: more than 1,000 values"):
        load_yaml("many: [" + "1," * 2000 + "1]\n", "many.yaml", max_nodes=1000)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("pr: " + "9" * 5000, "cannot read"),  # int() refuses more than 4300 digits
        ("pr: 2024-99-99", "cannot read"),  # looks like a date, is not one
    ],
)
def test_values_yaml_cannot_construct_are_input_errors(cli, tmp_path, line, needle):
    result = load_in_process(cli, tmp_path, REFERENCE.replace("  pr: 24322\n", f"  {line}\n"))
    assert_refused(result, "pins.yaml:", needle)


def test_unhashable_key_is_an_input_error(cli, tmp_path):
    result = load_in_process(cli, tmp_path, REFERENCE + "? [a, b]\n: 1\n")
    assert_refused(result, "pins.yaml:", "key")


def test_duplicate_key_is_refused(cli, tmp_path):
    result = load_in_process(cli, tmp_path, REFERENCE + BASE_LINE)
    assert_refused(result, "duplicate key 'base_image'")


@pytest.mark.parametrize(
    "bad",
    [
        '"' + "x" * 100_000 + '"',  # a long string where a number is expected
        "[" + ", ".join(["1"] * 20_000) + "]",  # a long list where a number is expected
        "{" + ", ".join(f"k{i}: {i}" for i in range(5000)) + "}",
    ],
    ids=["string", "list", "mapping"],
)
def test_bad_values_are_quoted_short(cli, tmp_path, bad):
    result = load_in_process(cli, tmp_path, REFERENCE.replace("  pr: 24322\n", f"  pr: {bad}\n"))
    assert_refused(result, "vllm.pr")


def test_long_unknown_key_is_quoted_short(cli, tmp_path):
    # An explicit key (`? key`): YAML limits implicit ones to 1024 characters.
    result = load_in_process(cli, tmp_path, REFERENCE + "? " + "k" * 100_000 + "\n: 1\n")
    assert_refused(result, "unknown key")


def test_many_problems_are_listed_briefly(cli, tmp_path):
    extra = "".join(f"unknown_{i}: 1\n" for i in range(500))
    result = load_in_process(cli, tmp_path, REFERENCE + extra)
    assert_refused(result, "500 problem(s)", "and 480 more", longest=6000)
    assert "unknown_19:" in result.stderr and "unknown_20:" not in result.stderr


# load_yaml itself, as report.py will use it too.


def test_load_yaml_keeps_values_as_written_when_asked():
    data, root = load_yaml("a: 1\nb: [2.50, yes]\nc: 2024-01-01\n", "r.yaml", keep_strings=True)
    assert data == {"a": "1", "b": ["2.50", "yes"], "c": "2024-01-01"}
    assert isinstance(root, yaml.MappingNode) and root.value[1][0].start_mark.line == 1


def test_load_yaml_types_values_by_default():
    data, _ = load_yaml("a: 1\nb: [2.5, true]\n", "p.yaml")
    assert data == {"a": 1, "b": [2.5, True]}


@pytest.mark.parametrize("keep_strings", [False, True])
def test_load_yaml_refuses_aliases_in_both_modes(keep_strings):
    with pytest.raises(InputError, match=r"x\.yaml:2: .*alias"):
        load_yaml("a: 1\nb: *a\n", "x.yaml", keep_strings=keep_strings)


@pytest.mark.parametrize("keep_strings", [False, True])
def test_load_yaml_refuses_duplicate_keys_in_both_modes(keep_strings):
    with pytest.raises(InputError, match=r"x\.yaml:2: .*duplicate key 'a'"):
        load_yaml("a: 1\na: 2\n", "x.yaml", keep_strings=keep_strings)


def test_load_yaml_empty_document():
    assert load_yaml("", "e.yaml") == (None, None)
