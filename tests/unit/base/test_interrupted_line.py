"""Issue 41, point 5: whatever command is interrupted (the group wraps them all), and whether the work raised
KeyboardInterrupt (Ctrl-C; SIGTERM and SIGHUP as main turns them into it) or said where it stopped (buildkit's
Interrupted), it ends with exit 130 and one line on stderr: which command, what stopped, and what is left. The real
signal to a real child process: tests/e2e/test_interrupted.py."""

from __future__ import annotations

import pytest
import typer

from buildkit import cli as cli_module
from buildkit.commands import schema
from buildkit.errors import Interrupted

LEFT = "nothing is half-written (each file is written whole or left as it was): run it again to finish"


@pytest.mark.parametrize(
    ("stop", "said"),
    [
        (KeyboardInterrupt(), "buildkit schema: interrupted (Ctrl-C)"),
        (KeyboardInterrupt("SIGHUP"), "buildkit schema: interrupted (SIGHUP)"),
        (
            Interrupted("interrupted (SIGTERM): buildx cancelled the build; the record says so"),
            "buildkit schema: interrupted (SIGTERM): buildx cancelled the build; the record says so",
        ),
        (Interrupted("GET http://127.0.0.1:1/x: interrupted"), "buildkit schema: interrupted: GET http://127.0.0.1"),
    ],
    ids=["ctrl-c", "sighup", "said-by-the-work", "not-worded-as-interrupted"],
)
def test_every_command_says_what_was_interrupted(monkeypatch, capsys, stop, said):
    def interrupted() -> None:
        raise stop

    monkeypatch.setattr(schema, "schema_command", interrupted)
    with pytest.raises((SystemExit, typer.Exit)) as ended:
        cli_module.app(["schema"], prog_name="buildkit")
    assert getattr(ended.value, "code", getattr(ended.value, "exit_code", None)) == 130
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(said) and err.rstrip("\n").endswith(LEFT) and err.count("\n") == 1


# A command that loses the KeyboardInterrupt a signal raised (a broad handler; Python ignores one raised inside a
# `__del__` or a garbage-collector callback), and a worker thread reading under a Budget meanwhile.
SWALLOWED = """
import os, signal, sys, threading
from buildkit import cli
from buildkit.budget import CACHE, Budget
from buildkit.commands import schema
from buildkit.errors import Interrupted

def swallowing():
    said = []
    def read():
        try:
            Budget("a layer", CACHE).tick()
        except Interrupted as stop:
            said.append(stop.message)
    try:
        os.kill(os.getpid(), signal.{sig})
        signal.pause()  # the handler runs; never reached past it
    except KeyboardInterrupt:
        pass  # lost
    worker = threading.Thread(target=read)
    worker.start()
    worker.join()
    print(said)

schema.schema_command = swallowing
sys.argv = ["buildkit", "schema"]
cli.main()
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_whose_interrupt_a_command_lost_still_ends_the_run_with_130(sig):
    """The real signal, to a real process: every read under a Budget stops, and the run does not end with 0."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SWALLOWED.replace("{sig}", sig)], capture_output=True, text=True)
    assert done.returncode == 130, done
    assert done.stdout == "['a layer: interrupted']\n", done
    assert done.stderr.startswith("buildkit: interrupted (a signal arrived where it could not stop the command"), done
