"""The tests' CLI runner (tests/support/clizygote.py): a run forked from the zygote answers as a fresh
`python -m buildkit.cli` does, and a run whose environment an import read differently gets a zygote of its own."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from tests.support.clizygote import Zygotes
from tests.support.projects import golden_project


@pytest.fixture
def zygotes():
    made = Zygotes()
    yield made
    made.close()


def _fresh(args: list[str], cwd, env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "buildkit.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["resolve", "--help"],
        ["resolve"],  # no pins.yaml here: exit 2, the error and its hint
        ["resolve", "--no-such-option"],  # click's usage error
        ["report", "--pins", "missing.yaml"],
        ["report", "--pins", "caf\udce9.yaml"],  # a byte that is not UTF-8 (surrogateescape): said back the same
    ],
    ids=" ".join,
)
def test_a_forked_run_answers_as_a_fresh_interpreter_does(cli, args, zygotes):
    forked = zygotes.run(args, str(cli.cwd), cli.env, timeout=60)
    assert forked is not None, "the runner started a fresh interpreter for the tests' usual environment"
    assert forked == _fresh(args, cli.cwd, cli.env)


def test_a_variable_an_import_read_gets_a_zygote_of_its_own(cli, zygotes):
    """rich's consoles read COLUMNS when buildkit.text.ui is imported: a run with another width is not forked from
    the zygote that imported it with 200."""
    wide = zygotes.run(["--help"], str(cli.cwd), cli.env, timeout=60)
    assert {"COLUMNS", "NO_COLOR"} <= zygotes._zygotes[0].read
    narrow_env = {**cli.env, "COLUMNS": "60"}
    narrow = zygotes.run(["doctor", "--help"], str(cli.cwd), narrow_env, timeout=60)
    assert len(zygotes._zygotes) == 2
    assert narrow == _fresh(["doctor", "--help"], cli.cwd, narrow_env) and narrow != wide


def test_the_callers_umask_and_directory_are_the_runs(cli, tmp_path, zygotes):
    project = golden_project(tmp_path)
    old = os.umask(0o077)
    try:
        forked = zygotes.run(["report", "--pins", "pins.yaml", "-o", "report.md"], str(project), cli.env, 60)
    finally:
        os.umask(old)
    assert forked is not None and forked[0] == 0, forked
    assert stat.S_IMODE((project / "report.md").stat().st_mode) == 0o600


def test_a_run_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(project, zygotes):
    """GitHub's API on a socket that never answers: the run waits on it until the runner kills it."""
    root, cli = project
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    env = {**cli.env, "BUILDKIT_GITHUB_API": f"http://127.0.0.1:{port}", "BUILDKIT_HTTP_TIMEOUT": "600"}
    started = time.monotonic()
    try:
        with pytest.raises(subprocess.TimeoutExpired) as raised:
            zygotes.run(["resolve"], str(root), env, timeout=2)
    finally:
        silent.close()
    # The failure's scale: a run the runner did not kill waits on the silent socket for BUILDKIT_HTTP_TIMEOUT's 600 s.
    assert 2 <= time.monotonic() - started < 60
    assert raised.value.timeout == 2 and raised.value.cmd == [sys.executable, "-m", "buildkit.cli", "resolve"]


def test_a_buildkit_folder_in_the_working_directory_gets_a_fresh_interpreter(cli, zygotes):
    """`python -m buildkit.cli` would import ./buildkit from there: a fork would not."""
    (cli.cwd / "buildkit").mkdir()
    assert zygotes.run(["--version"], str(cli.cwd), cli.env, timeout=60) is None


def test_a_run_that_cannot_start_raises_and_is_never_taken_for_the_clis_exit(cli, zygotes):
    """A variable name putenv refuses: the forked child cannot become the run; the caller raises, as subprocess.run
    would, instead of returning an exit code a test could take for buildkit's."""
    with pytest.raises((RuntimeError, ValueError)):
        zygotes.run(["--version"], str(cli.cwd), {**cli.env, "A=B": "1"}, timeout=60)
