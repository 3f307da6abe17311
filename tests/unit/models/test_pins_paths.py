"""One pins file, one lock, one build folder (issue 32, point 3): the default lock and build folder are named after
the pins file, and a lock written from another pins file is never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.models.paths import Paths


@pytest.mark.parametrize(
    ("pins", "lock", "build_dir"),
    [
        ("pins.yaml", "pins.lock", "build"),
        ("pins.yml", "pins.lock", "build"),
        ("pins-gb200.yaml", "pins-gb200.lock", "build-pins-gb200"),
        ("gb200.yml", "gb200.lock", "build-gb200"),
        ("smoke.yaml", "smoke.lock", "build-smoke"),  # a sibling of build/, never build/smoke/ (the smoke outputs)
        ("x.lock", "x.lock.lock", "build-x.lock"),  # never the pins file itself
        (".yaml", ".yaml.lock", "build-.yaml"),
    ],
)
def test_the_defaults_are_named_after_the_pins_file(tmp_path, pins, lock, build_dir):
    paths = Paths.of(tmp_path / pins)
    assert (paths.lock, paths.build_dir) == (tmp_path / lock, tmp_path / build_dir)
    assert paths.lock != paths.pins


def test_given_paths_win(tmp_path):
    paths = Paths.of(tmp_path / "pins-gb200.yaml", tmp_path / "a.lock", tmp_path / "out")
    assert (paths.lock, paths.build_dir) == (tmp_path / "a.lock", tmp_path / "out")


def _second_pins(root: Path) -> Path:
    """pins-gb200.yaml: the reference pins with another tag (other pins, same upstreams)."""
    text = (root / "pins.yaml").read_text()
    assert "tag: nemo-rl:v0.5.0-spec-decode" in text
    other = root / "pins-gb200.yaml"
    other.write_text(text.replace("tag: nemo-rl:v0.5.0-spec-decode", "tag: nemo-rl:v0.5.0-gb200"))
    return other


def test_two_pins_files_keep_two_locks_and_two_build_folders(project):
    root, cli = project
    _second_pins(root)
    assert cli("resolve").code == 0
    first = (root / "pins.lock").read_bytes()
    done = cli("resolve", "--pins", "pins-gb200.yaml")
    assert done.code == 0, done.output
    assert f"wrote {'pins-gb200.lock'}" in done.stderr
    assert (root / "pins.lock").read_bytes() == first  # the first lock untouched
    assert json.loads(first)["pins_file"] == "pins.yaml"
    second = json.loads((root / "pins-gb200.lock").read_text())
    assert second["pins_file"] == "pins-gb200.yaml" and second["build"]["tag"] == "nemo-rl:v0.5.0-gb200"
    assert (root / "build" / "resolve.json").is_file() and (root / "build-pins-gb200" / "resolve.json").is_file()
    # Each lock is current for its own pins.
    assert cli("resolve", "--offline", "--check").code == 0
    assert cli("resolve", "--offline", "--check", "--pins", "pins-gb200.yaml").code == 0


def test_a_lock_written_from_other_pins_is_not_overwritten(project):
    root, cli = project
    _second_pins(root)
    assert cli("resolve").code == 0
    first = (root / "pins.lock").read_bytes()
    refused = cli("resolve", "--pins", "pins-gb200.yaml", "--lock", "pins.lock")
    assert refused.code == 2, refused.output
    assert "pins.lock was written from pins.yaml, not pins-gb200.yaml: refused to overwrite it" in refused.stderr
    assert "--lock pins-gb200.lock" in refused.stderr and "delete pins.lock" in refused.stderr
    assert "Traceback" not in refused.output and refused.stdout == ""
    assert (root / "pins.lock").read_bytes() == first
    assert not (root / "build-pins-gb200").exists()
    # The build, which resolves a stale lock, refuses the same way before anything else.
    built = cli("build", "--dry-run", "--pins", "pins-gb200.yaml", "--lock", "pins.lock")
    assert built.code == 2 and "refused to overwrite it" in built.stderr, built.output
    assert (root / "pins.lock").read_bytes() == first
    # The lock's own pins, changed, still replace it (the normal way of moving a pin).
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("v0.5.0-spec-decode", "v0.5.1"))
    again = cli("resolve")
    assert again.code == 0, again.output
    assert json.loads((root / "pins.lock").read_text())["build"]["tag"] == "nemo-rl:v0.5.1"


def test_a_lock_that_names_no_pins_file_is_replaced_with_a_note(project):
    """A lock from before locks named their pins file cannot tell whose it is: replacing it is said."""
    root, cli = project
    assert cli("resolve").code == 0
    data = json.loads((root / "pins.lock").read_text())
    del data["pins_file"]
    data["pins_sha256"] = "0" * 64  # written from other pins
    (root / "pins.lock").write_text(json.dumps(data, indent=2) + "\n")
    done = cli("resolve")
    assert done.code == 0, done.output
    assert "does not name the pins file it was written from" in done.stderr
    assert json.loads((root / "pins.lock").read_text())["pins_file"] == "pins.yaml"
