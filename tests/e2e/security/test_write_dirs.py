"""Every folder buildkit writes into is held to build/'s rule (issue 40, point 5 and "What failed" 4): a two-platform
project wrote `render`'s Dockerfile, prepare.json and render.json through a symlinked build/linux-arm64/ into the
link's target, because only build/ itself was checked. Now a symlink (or anything but a directory) at a per-platform
folder, at logs/ or smoke/, or at any folder below them, is one line, exit 2, before anything is written. And
`report -o LINK`, LINK a symlink to a directory, is refused instead of replacing the link."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.fake_upstreams import VLLM_SHA, WHEEL_ARM, WheelFile, cudart_for, minimal_elf, two_platforms
from tests.support.measured import measured
from tests.support.nemo_repo import use_remote
from tests.support.projects import golden_project

if TYPE_CHECKING:  # for the hints only
    from tests.conftest import Cli


def _two_platform_project(project, remote, upstreams) -> tuple[Path, Cli]:
    """The reference pins for H100 (linux/amd64) and GB200 (linux/arm64), resolved on the loopback stand-ins."""
    root, _ = project
    arm = upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"]
    assert isinstance(arm, WheelFile)
    arm.library = minimal_elf(cudart_for("default"), 183)  # EM_AARCH64: the aarch64 stand-in holds aarch64 code
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    return use_remote(project, remote)


def _tree(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")) if directory.exists() else []


def _plant(root: Path, where: str, kind: str, elsewhere: Path) -> Path:
    planted = root / where
    planted.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        planted.symlink_to(elsewhere, target_is_directory=True)
    elif kind == "dangling symlink":
        planted.symlink_to(elsewhere / "gone")
    else:
        planted.write_text("a file, not a folder\n")
    return planted


# (the folder planted, what is there): the per-platform folders, and folders below them
CASES = [
    ("build/linux-arm64", "symlink"),
    ("build/linux-amd64", "symlink"),
    ("build/linux-arm64", "dangling symlink"),
    ("build/linux-arm64", "regular file"),
    ("build/linux-arm64/smoke", "symlink"),
    ("build/linux-amd64/logs", "symlink"),
]


def test_render_never_writes_through_a_planted_platform_folder(project, remote, upstreams, tmp_path):
    root, _cli = _two_platform_project(project, remote, upstreams)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("theirs\n")
    assert _tree(root / "build") == ["resolve.json"]
    for where, kind in CASES:
        planted = _plant(root, where, kind, elsewhere)
        before = _tree(root / "build")
        run = measured(_cli, "render", timeout=120)
        said = "a symlink" if "symlink" in kind else "a regular file, not a directory"
        run.assert_refused(2, f"{where}: a folder buildkit writes into is {said}", "refused", "hint:")
        assert _tree(elsewhere) == ["keep"] and (elsewhere / "keep").read_text() == "theirs\n", (where, kind)
        assert _tree(root / "build") == before, f"{where} ({kind}): nothing is written, for either platform"
        planted.unlink()
        for made in (root / "build" / "linux-arm64", root / "build" / "linux-amd64"):
            if made.is_dir() and not any(made.iterdir()):
                made.rmdir()
    rendered = _cli("render")
    assert rendered.code == 0, rendered.output[-3000:]
    for folder in ("linux-amd64", "linux-arm64"):
        assert (root / "build" / folder / "Dockerfile").is_file() and not (root / "build" / folder).is_symlink()
    assert _tree(elsewhere) == ["keep"]


@pytest.mark.parametrize("where", ["build/logs", "build/smoke", "build/smoke/repro", "build/repro"])
def test_a_single_platform_projects_folders_are_held_too(cli, tmp_path, where):
    """The report's recorded project: build/ is real, a folder below it is a link. Every command refuses it, as it
    refuses a symlinked build/ (tests/e2e/security/test_pins_discovery.py)."""
    project = golden_project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if where == "build/smoke/repro":
        (project / "build" / "smoke").mkdir(exist_ok=True)
    elif (project / where).exists():
        os.rename(project / where, tmp_path / "moved")
    (project / where).symlink_to(elsewhere, target_is_directory=True)
    run = measured(cli, "report", "--pins", str(project / "pins.yaml"))
    run.assert_refused(2, f"{project / where}: a folder buildkit writes into is a symlink (to {elsewhere}): refused")
    assert list(elsewhere.iterdir()) == []


def test_report_o_a_symlink_to_a_directory_is_refused(cli, tmp_path):
    project = golden_project(tmp_path)
    target = tmp_path / "reports"
    target.mkdir()
    (target / "old.md").write_text("theirs\n")
    link = tmp_path / "report.md"
    link.symlink_to(target, target_is_directory=True)
    record = project / "build" / "smoke-record.json"
    args = ("report", "--pins", str(project / "pins.yaml"), "--record", str(record), "-o", str(link))
    run = measured(cli, *args)
    run.assert_refused(2, f"{link} is a directory through a symlink, not a regular file: refusing to replace it")
    assert link.is_symlink() and os.readlink(link) == str(target), "the link is left as it was"
    assert _tree(target) == ["old.md"] and (target / "old.md").read_text() == "theirs\n"
    assert not list(tmp_path.glob(".report.md.*.tmp")), "no temp file is left"
    # A plain directory is refused by the rename itself, as before (exit 2, "that path is a directory").
    plain = measured(cli, *args[:-1], str(target))
    plain.assert_refused(2, "that path is a directory")
    assert _tree(target) == ["old.md"]
