"""pins.yaml edited in place: only the changed values change, every comment, blank line and quote stays."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.models.pins import pins_from_text
from buildkit.models.pinsedit import PinsEditor
from tests.support.paths import REPO_ROOT
from tests.support.textdiff import changed_lines

NEW_NEMO = "1" * 40
NEW_VLLM = "2" * 40


def test_the_reference_pins_round_trip_byte_for_byte_but_the_changed_values():
    text = (REPO_ROOT / "pins.yaml").read_text()
    assert PinsEditor(text, "pins.yaml").text() == text  # no edit: the same bytes
    editor = PinsEditor(text, "pins.yaml")
    editor.set_commit(("nemo_rl", "ref"), NEW_NEMO)
    editor.set_commit(("vllm", "ref"), NEW_VLLM)
    editor.delete_entry(("vllm", "pr"))
    editor.remove_items(("nemo_rl", "patches"), {0})
    new = editor.text()
    removed, added = changed_lines(text, new)
    assert added == [
        f'  ref: "{NEW_NEMO}"  # quoted: unquoted hex can read as a number in YAML',
        "  patches: []",
        f'  ref: "{NEW_VLLM}"',
    ]
    assert removed[0] == '  ref: "946862e7"  # quoted: unquoted hex can read as a number in YAML'
    assert "  pr: 24322" in removed and len(removed) == 8  # the ref lines, the pr line and the patch's 5 lines
    # Every comment is still there, and the blank lines between sections.
    assert [line for line in text.splitlines() if line.lstrip().startswith("#")] == [
        line for line in new.splitlines() if line.lstrip().startswith("#")
    ]
    assert new.count("\n\n") == text.count("\n\n")
    pins = pins_from_text(new, Path("pins.yaml"))
    assert pins.nemo_rl.ref == NEW_NEMO and pins.vllm.ref == NEW_VLLM and pins.vllm.pr is None
    assert pins.nemo_rl.patches == []


def test_single_quotes_stay_single_and_a_plain_ref_gets_quoted():
    text = "nemo_rl:\n  repo: x\n  ref: main   # follow main\nvllm:\n  ref: '4a5299c9'\n"
    editor = PinsEditor(text, "p.yaml")
    editor.set_commit(("nemo_rl", "ref"), NEW_NEMO)
    editor.set_commit(("vllm", "ref"), NEW_VLLM)
    assert editor.text() == (
        f"nemo_rl:\n  repo: x\n  ref: \"{NEW_NEMO}\"   # follow main\nvllm:\n  ref: '{NEW_VLLM}'\n"
    )


def test_a_pr_without_a_ref_becomes_the_ref_in_its_place():
    text = "vllm:\n  repo: x\n  pr: 24322  # the PR\n  # after\nwheel: {}\n"
    editor = PinsEditor(text, "p.yaml")
    editor.replace_entry(("vllm", "pr"), "ref", NEW_VLLM)
    assert editor.text() == f'vllm:\n  repo: x\n  ref: "{NEW_VLLM}"  # the PR\n  # after\nwheel: {{}}\n'


def test_removing_list_items_keeps_the_others_and_every_comment():
    text = (
        "nemo_rl:\n  patches:\n    # first\n    - file: a.patch\n      reason: a\n"
        "    # second\n    - file: b.patch\n      reason: >-\n        b\n        b\n\n    - file: c.patch\n"
        "      reason: c  # last\n\nvllm: {}\n"
    )
    editor = PinsEditor(text, "p.yaml")
    editor.remove_items(("nemo_rl", "patches"), {1, 2})
    # A comment is never deleted (the reviewer decides): only the items' own lines go.
    assert editor.text() == (
        "nemo_rl:\n  patches:\n    # first\n    - file: a.patch\n      reason: a\n    # second\n\nvllm: {}\n"
    )


def test_flow_style_is_refused_with_a_hint_not_rewritten():
    editor = PinsEditor("nemo_rl: {repo: x, ref: main}\n", "p.yaml")
    with pytest.raises(InputError, match=r"cannot edit nemo_rl\.ref in place"):
        editor.set_commit(("nemo_rl", "ref"), NEW_NEMO)
