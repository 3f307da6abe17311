"""Issue 41, point 5: a refusal that belongs to one key names that key and its line, also when a check across keys
(a model validator) makes it: `wheel.arch: aarch64` on amd64 was reported at `pins.yaml:4` (schema_version, the
file's first key) as "(top level)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.models.pins import load_pins
from tests.support.paths import REPO_ROOT

REFERENCE = (REPO_ROOT / "pins.yaml").read_text()
SINGLE = '  platform: linux/amd64\n  cuda_arch_list: "9.0"  # Hopper: H20 / H100\n'


def refusal(tmp_path: Path, text: str) -> tuple[str, list[str]]:
    """The one problem's line of the message, and the file's lines (1-based through `line_of`)."""
    path = tmp_path / "pins.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_pins(path)
    head, *problems = info.value.message.splitlines()
    assert head == f"{path}: 1 problem(s):" and len(problems) == 1, info.value.message
    return problems[0].strip().removeprefix(f"{path}:"), text.splitlines()


def line_of(lines: list[str], start: str) -> int:
    (number,) = [i for i, line in enumerate(lines, 1) if line.lstrip().startswith(start)]
    return number


def test_wheel_arch_against_build_platform_is_said_at_wheel_arch(tmp_path):
    said, lines = refusal(tmp_path, REFERENCE.replace("arch: x86_64", "arch: aarch64"))
    assert said == (
        f"{line_of(lines, 'arch: aarch64')}: wheel.arch: 'aarch64' does not match build.platform 'linux/amd64' "
        "(expected 'x86_64')"
    )
    assert line_of(lines, "arch: aarch64") != line_of(lines, "schema_version")


def test_an_arm64_platform_with_the_default_arch_is_said_at_build_platform(tmp_path):
    """wheel.arch not written (x86_64 by default): the key the person wrote is build.platform."""
    text = REFERENCE.replace("  arch: x86_64\n", "").replace("platform: linux/amd64", "platform: linux/arm64")
    said, lines = refusal(tmp_path, text)
    assert said.startswith(f"{line_of(lines, 'platform: linux/arm64')}: build.platform: 'linux/arm64' needs wheel.arch")
    assert "set it under wheel" in said


def test_a_boolean_schema_version_is_said_at_its_key(tmp_path):
    said, lines = refusal(tmp_path, REFERENCE.replace("schema_version: 1", "# moved\nschema_version: true"))
    assert said == f"{line_of(lines, 'schema_version')}: schema_version: expected the integer 1, found true"


@pytest.mark.parametrize(
    ("build", "wheel", "key", "at", "words"),
    [
        (
            "  platform: linux/amd64\n  platforms: {linux/amd64: {cuda_arch_list: '9.0'}}\n",
            None,
            "build.platform",
            "platform: linux/amd64",
            "build.platforms replaces build.platform",
        ),
        ("  platforms: {}\n", None, "build.platforms", "platforms: {}", "expected a mapping of at least one platform"),
        (
            "  platforms: {linux/amd64: {cuda_arch_list: '9.0'}}\n",
            "arch: x86_64",
            "wheel.arch",
            "arch: x86_64",
            "wheel.arch follows build.platforms",
        ),
    ],
    ids=["platform-beside-platforms", "no-platforms", "arch-beside-platforms"],
)
def test_build_platforms_refusals_are_said_at_their_key(tmp_path, build, wheel, key, at, words):
    text = REFERENCE.replace(SINGLE, build)
    if wheel is None:
        text = text.replace("  arch: x86_64\n", "")
    said, lines = refusal(tmp_path, text)
    assert said.startswith(f"{line_of(lines, at)}: {key}: ") and words in said, said


def test_the_cli_names_the_line_too(cli, tmp_path):
    (tmp_path / "pins.yaml").write_text(REFERENCE.replace("arch: x86_64", "arch: aarch64"))
    result = cli("resolve", "--offline")
    line = line_of(REFERENCE.splitlines(), "arch: x86_64")
    assert result.code == 2 and f"pins.yaml:{line}: wheel.arch: 'aarch64' does not match" in result.stderr
