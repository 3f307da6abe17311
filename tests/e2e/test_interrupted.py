"""Issue 41, point 5: an interrupted command (Ctrl-C, SIGTERM) ends with exit 130 and one line on stderr saying
what was interrupted and what is left, for every command (typer alone turned Ctrl-C into a silent exit 130).

The CLI runs as a real child process sent a real signal while `buildkit resolve` waits on a wheel index that holds
its answer (tests/support/hostile.py) until the signal has been sent: no engine, and no timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

LEFT = "nothing is half-written (each file is written whole or left as it was): run it again to finish"


def _interrupt_resolve(root, env: dict[str, str], hostile, sig: signal.Signals, *args: str) -> tuple[int, str, str]:
    """`buildkit resolve ARGS` as a child process, sent `sig` once its request reached the wheel index; the index
    answers nothing until then, and afterwards closes each connection at once (the lookup then fails fast)."""
    arrived, released = threading.Event(), threading.Event()

    def hold(handler) -> None:
        arrived.set()
        released.wait()  # then the connection closes with no answer

    env = {**env, "BUILDKIT_WHEEL_INDEX": hostile.url}
    hostile.route("/", hold)
    process = subprocess.Popen(
        [sys.executable, "-m", "buildkit.cli", "resolve", *args],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not arrived.wait(0.1):
            assert process.poll() is None, process.communicate()
        os.kill(process.pid, sig)
    finally:
        released.set()
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err


@pytest.mark.parametrize(
    ("sig", "reason"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")], ids=["ctrl-c", "sigterm"]
)
def test_an_interrupted_resolve_says_so_in_one_line(project, hostile, sig, reason):
    root, cli = project
    code, out, err = _interrupt_resolve(root, cli.env, hostile, sig)
    assert code == 130, err
    assert out == ""
    said = [line for line in err.splitlines() if "interrupted" in line]
    assert said == [f"buildkit resolve: interrupted ({reason}); {LEFT}"], err
    assert err.splitlines()[-1] == said[0]  # the last word
    assert not (root / "pins.lock").exists()  # nothing half-written: no lock at all


def test_json_stays_clean_when_interrupted(project, hostile):
    root, cli = project
    code, out, err = _interrupt_resolve(root, cli.env, hostile, signal.SIGINT, "--json")
    assert code == 130 and out == ""
    assert f"buildkit resolve: interrupted (Ctrl-C); {LEFT}" in err.splitlines()
