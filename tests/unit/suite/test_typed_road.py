"""The typed road from the command line to a stage, and the size the code keeps: one options object per command
(its parameters the keywords of its class's `parse`), each stage run from a `Context` of its own options class
through `run_stage`, whose overloads let mypy refuse a misspelled stage or another stage's options; no module over
800 lines (cli.py: 500), and at most four functions over 60 lines."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import subprocess
import sys

import typer.main

from buildkit import cli, options
from buildkit.stages import pipeline
from tests.support.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "buildkit"


def test_no_module_is_over_800_lines_and_the_app_is_under_500():
    sizes = {
        path.relative_to(REPO_ROOT).as_posix(): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")
    }
    assert {name: n for name, n in sizes.items() if n > 800} == {}
    assert sizes["buildkit/cli.py"] <= 500


def test_at_most_four_functions_are_over_60_lines():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(REPO_ROOT)}:{node.name} ({lines})")
    assert len(long) <= 4, long


def test_each_command_passes_its_parsed_command_line_whole():
    """A command's parameters are its options class's keywords (besides where the files are): one option is one
    alias in flags.py and one field, with no mapping between them written by hand."""
    command = typer.main.get_command(cli.app)
    kinds = {
        "resolve": options.ResolveOptions,
        "prepare": options.PrepareOptions,
        "render": options.RenderCommandOptions,
        "bump": options.BumpOptions,
        "build": options.BuildOptions,
        "doctor": options.DoctorOptions,
        "verify": options.VerifyOptions,
        "report": options.ReportOptions,
        "attest": options.AttestOptions,
        "export": options.ExportOptions,
    }
    for name, kind in kinds.items():
        takes = inspect.signature(getattr(kind, "parse", kind)).parameters
        named = {
            p
            for p, param in takes.items()
            if param.kind is param.KEYWORD_ONLY or param.kind is param.POSITIONAL_OR_KEYWORD
        }
        params = {p.name for p in command.commands[name].params} - {"pins", "lock", "build_dir", "cache_dir"}  # type: ignore[attr-defined]
        assert params - {"submodules_from"} <= named or any(
            param.kind is param.VAR_KEYWORD for param in takes.values()
        ), (name, params - named)
        # The body: the command's import, its options class's, and one call given the parsed command line.
        function = ast.parse(inspect.getsource(getattr(cli, name))).body[0]
        assert isinstance(function, ast.FunctionDef)
        *imports, call = function.body[1:]  # after the docstring
        assert len(imports) == 2 and all(isinstance(i, ast.ImportFrom) for i in imports), name
        assert "flags.parsed" in ast.unparse(call) and "=" not in ast.unparse(call).replace("extra=ctx.args", ""), name


def test_the_build_options_lead_only_into_the_stages_build_runs():
    held = {f.name for f in dataclasses.fields(options.BuildOptions) if f.name in pipeline.STAGES}
    assert held == {entry.name for entry in pipeline.before_build()}
    importers = sorted(
        path.relative_to(REPO_ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if re.search(r"\bBuildOptions\b", path.read_text())
    )
    assert importers == [
        "buildkit/cli.py",
        "buildkit/commands/build.py",
        "buildkit/options.py",
        "buildkit/stages/build/__init__.py",
        "buildkit/stages/pipeline.py",
    ]


def test_mypy_refuses_a_misspelled_stage_and_another_stages_options(tmp_path):
    """What the overloads are for, shown with mypy itself on a caller that gets each wrong."""
    caller = tmp_path / "caller.py"
    caller.write_text(
        "from pathlib import Path\n"
        "from buildkit.models.paths import Paths\n"
        "from buildkit.options import PrepareOptions, RenderOptions\n"
        "from buildkit.stages import pipeline\n"
        "from buildkit.stages.context import Context\n"
        "paths = Paths.of(Path('pins.yaml'))\n"
        "pipeline.run_stage('prepare', Context(paths, PrepareOptions()))\n"  # right: no error
        "pipeline.run_stage('prepair', Context(paths, PrepareOptions()))\n"  # line 8
        "pipeline.run_stage('render', Context(paths, PrepareOptions()))\n"  # line 9
        "pipeline.run_stage('render', Context(paths, RenderOptions()))\n"  # right: no error
    )
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", "--ignore-missing-imports",
         "--cache-dir", str(tmp_path / "cache"), str(caller)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600, check=False,
    )  # fmt: skip
    lines = sorted({int(n) for n in re.findall(r"caller\.py:(\d+): error", found.stdout)})
    assert lines == [8, 9], found.stdout + found.stderr
