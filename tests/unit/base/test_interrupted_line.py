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
