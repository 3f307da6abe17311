"""The folders below a build folder are real directories (files.check_folders, Paths.of and Paths.for_platform), and
no atomic write replaces a symlink to a directory (files.check_replaceable): issue 40, point 5 and "What failed" 5.
The CLI cases are tests/e2e/security/test_write_dirs.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.files import check_folders, replaced_atomically, work_dir_beside, write_atomic
from buildkit.models.paths import Paths


def _plant(path: Path, kind: str, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(target, target_is_directory=True)
    elif kind == "dangling symlink":
        path.symlink_to(target / "gone")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("x")


@pytest.mark.parametrize(
    "where, kind, said",
    [
        ("linux-arm64", "symlink", "is a symlink (to "),
        ("linux-arm64", "dangling symlink", "is a symlink (to "),
        ("linux-arm64", "regular file", "is a regular file, not a directory"),
        ("linux-arm64/smoke", "symlink", "is a symlink (to "),
        ("linux-arm64/smoke/repro", "fifo", "is a FIFO, not a directory"),
        ("linux-arm64/logs", "symlink", "is a symlink (to "),
    ],
)
def test_a_platform_folder_or_one_below_it_must_be_a_directory(tmp_path, where, kind, said):
    top, elsewhere = tmp_path / "build", tmp_path / "elsewhere"
    elsewhere.mkdir()
    _plant(top / where, kind, elsewhere)
    paths = Paths.named(tmp_path / "pins.yaml", cache_dir=tmp_path / "cache")
    with pytest.raises(InputError) as caught:
        paths.for_platform("linux/arm64")
    assert caught.value.message.startswith(f"{top / where}: a folder buildkit writes into {said}")
    assert caught.value.message.endswith(": refused") and caught.value.hint
    assert paths.for_platform("linux/amd64").build_dir == top / "linux-amd64"  # the other platform's is fine
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("where", ["logs", "smoke", "smoke/repro", "repro"])
def test_the_top_folders_are_checked_when_the_paths_are_made(tmp_path, where):
    top = tmp_path / "build"
    (top / "smoke").mkdir(parents=True)
    if where == "smoke":
        (top / "smoke").rmdir()
    _plant(top / where, "symlink", tmp_path)
    with pytest.raises(InputError, match="a folder buildkit writes into is a symlink"):
        Paths.of(tmp_path / "pins.yaml")
    named = Paths.named(tmp_path / "pins.yaml")  # a plan shown, never run: nothing on disk is looked at
    assert named.build_dir == top


def test_real_folders_absent_ones_and_named_ones_pass(tmp_path):
    top = tmp_path / "build"
    (top / "linux-amd64" / "logs").mkdir(parents=True)
    paths = Paths.of(tmp_path / "pins.yaml", build_dir=top)
    assert paths.for_platform("linux/amd64").logs == top / "linux-amd64" / "logs"
    assert paths.for_platform("linux/arm64").build_dir == top / "linux-arm64"  # not there yet: made when written
    # A folder not below the build folder is one the user named (render -o DIR/Dockerfile): not this rule's.
    (tmp_path / "named").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    check_folders(top, [tmp_path / "named"])
    # A link target with a line break stays one line.
    (top / "logs").symlink_to("a\nerror: all good")
    with pytest.raises(InputError) as caught:
        check_folders(top, [top / "logs"])
    assert "\n" not in caught.value.message and "a\\x0aerror: all good" in caught.value.message


@pytest.mark.parametrize("writer", ["write_atomic", "replaced_atomically", "work_dir_beside"])
def test_no_write_replaces_a_symlink_to_a_directory(tmp_path, writer):
    target = tmp_path / "reports"
    target.mkdir()
    (target / "old.md").write_text("theirs")
    link = tmp_path / "report.md"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(InputError, match="is a directory through a symlink, not a regular file"):
        if writer == "write_atomic":
            write_atomic(link, "x")
        else:
            with (replaced_atomically if writer == "replaced_atomically" else work_dir_beside)(link):
                raise AssertionError("the block must not run")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert [p.name for p in target.iterdir()] == ["old.md"] and not list(tmp_path.glob(".report.md.*"))
    # A link to a file is still replaced (the link, never its target), and a dangling link too.
    (tmp_path / "file.md").write_text("theirs")
    to_file, dangling = tmp_path / "to-file.md", tmp_path / "dangling.md"
    to_file.symlink_to(tmp_path / "file.md")
    dangling.symlink_to(tmp_path / "gone.md")
    for path in (to_file, dangling):
        write_atomic(path, "new")
        assert not path.is_symlink() and path.read_text() == "new"
    assert (tmp_path / "file.md").read_text() == "theirs"
