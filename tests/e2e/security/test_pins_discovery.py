"""Which pins.yaml a command uses when none is named (issue 29): found above the working directory only inside the
user's own git repository, or when the file and its directory are the user's (git's safe.directory rule); said on
stderr; and records never written through a symlinked build/. Real directories owned by another uid (chown, as
root), real `git init` repositories, the real CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Cli
from tests.support.paths import REPO_ROOT

OTHER = 54321  # a uid nobody on the machine has
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to another uid (chown): needs root")


def _pins_in(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    pins = directory / "pins.yaml"
    pins.write_text((REPO_ROOT / "pins.yaml").read_text())
    shutil.copytree(REPO_ROOT / "patches", directory / "patches")
    return pins


def _below(cli: Cli, directory: Path) -> Cli:
    cli.cwd = directory / "work" / "deep"
    cli.cwd.mkdir(parents=True)
    return cli


@as_root
def test_another_users_pins_above_are_refused_outside_a_repository(cli, tmp_path):
    shared = tmp_path / "shared"  # like /tmp: not a repository, someone else's
    pins = _pins_in(shared)
    _below(cli, shared)
    for path in (pins, shared):
        os.chown(path, OTHER, OTHER)
    refused = cli("resolve", "--offline")
    assert refused.code == 2, refused.output
    assert "Traceback" not in refused.output and refused.stdout == ""
    assert f"{pins}: found above the working directory" in refused.stderr
    assert f"owned by uid {OTHER}, not you" in refused.stderr
    assert f"--pins {pins}" in refused.stderr and f"cd {shared}" in refused.stderr
    assert "using" not in refused.stderr and "pins.lock" not in refused.stderr  # never read

    os.chown(pins, 0, 0)  # the file is mine, its directory is not: someone else can still replace it
    refused = cli("resolve", "--offline")
    assert refused.code == 2 and f"{shared} is owned by uid {OTHER}" in refused.stderr, refused.output

    os.chown(shared, 0, 0)  # both mine: used, and said
    used = cli("resolve", "--offline")
    assert f"buildkit: using {pins}" in used.stderr.splitlines(), used.stderr
    assert "owned by" not in used.stderr and "pins.lock" in used.stderr  # read: no lock beside it yet

    named = cli("resolve", "--offline", "--pins", str(pins))  # named, not found: nothing to say
    assert "using" not in named.stderr and "pins.lock" in named.stderr, named.stderr


@as_root
def test_inside_the_users_repository_pins_above_are_used_and_the_search_stops_at_its_top(cli, tmp_path):
    above = _pins_in(tmp_path)  # above the repository: never looked at, whoever owns it
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    pins = _pins_in(repo)
    os.chown(pins, OTHER, OTHER)  # a teammate's file in my checkout: the repository is mine
    _below(cli, repo)
    used = cli("resolve", "--offline")
    assert f"buildkit: using {pins}" in used.stderr.splitlines() and "pins.lock" in used.stderr, used.output

    pins.unlink()
    missing = cli("resolve", "--offline")
    assert missing.code == 2 and "pins.yaml: no such file" in missing.stderr and str(above) not in missing.stderr


@as_root
def test_a_repository_someone_else_owns_is_not_trusted(cli, tmp_path):
    repo = tmp_path / "theirs"  # git would say "dubious ownership"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    pins = _pins_in(repo)
    for path in (repo, pins):
        os.chown(path, OTHER, OTHER)
    _below(cli, repo)
    refused = cli("resolve", "--offline")
    assert refused.code == 2 and f"{pins}: found above the working directory" in refused.stderr, refused.output


def test_pins_in_the_working_directory_are_used_silently(cli, tmp_path):
    _pins_in(tmp_path)
    here = cli("resolve", "--offline")
    assert "using" not in here.stderr and "pins.lock" in here.stderr, here.output


@pytest.mark.parametrize("named", [False, True])
def test_records_never_follow_a_symlinked_build_dir(cli, tmp_path, named):
    _pins_in(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "build").symlink_to(elsewhere)
    args = ["--build-dir", "build"] if named else []
    refused = cli("render", *args)
    assert refused.code == 2 and "Traceback" not in refused.output, refused.output
    assert f"build: the build directory is a symlink (to {elsewhere}): refused" in refused.stderr
    assert "--build-dir DIR" in refused.stderr
    assert list(elsewhere.iterdir()) == []
    ok = cli("render", "--build-dir", str(elsewhere))  # the directory itself, named: past the check
    assert "symlink" not in ok.stderr, ok.output
