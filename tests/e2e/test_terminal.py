"""Terminal conventions a newcomer expects (issue 21): help pages that fit 80 columns, NO_COLOR, plain progress,
BUILDKIT_PROGRESS, pins.yaml found from a subdirectory, files readable by the group under the usual umask."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess

import pytest
import typer
from rich.console import Console

from buildkit.cli import app
from buildkit.files import write_atomic
from buildkit.text import ui
from tests.support.nemo_repo import use_remote
from tests.support.paths import RAWJSON, REPO_ROOT
from tests.support.projects import golden_project

STREAMS = RAWJSON


SGR = re.compile(r"\x1b\[[0-9;]*m")


def _commands() -> list[str]:
    return ["", *sorted(typer.main.get_command(app).commands)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", _commands())
def test_every_help_page_fits_80_columns(cli, command):
    result = cli(*([command] if command else []), "--help", env={"COLUMNS": "80"})
    assert result.code == 0, result.output
    wide = [line for line in result.stdout.splitlines() if len(line) > 80]
    assert not wide, f"`buildkit {command} --help` is wider than 80 columns: {wide}"
    leak = TYPE_LEAK.search(result.stdout)
    assert leak is None, f"`buildkit {command} --help` shows a type: {leak and leak.group()}"
    usage = result.stdout.splitlines()[0]
    assert "[[" not in usage and "<" not in usage, usage
    for name, help_text in _entries(result.stdout):
        # The name column teaches what to give: a metavar (TAG, PATH), never a type (<str>, TEXT).
        assert "<" not in name and not CLICK_TYPES.search(name), f"{command}: {name!r} shows a type"
        assert help_text.count("default:") <= 1, f"{command} {name}: a default shown twice: {help_text}"
        assert help_text.count("env var:") <= 1, f"{command} {name}: an env var shown twice: {help_text}"


# What typer and click show for a parameter without a metavar: its Python type (`<str>`, `<list[str]>`, `<int
# range>`, `<Path>`) or click's type name (TEXT, INTEGER).
TYPE_LEAK = re.compile(
    r"<(?:list|tuple|dict|set)\[[^\]>]*\]>|<(?:str|int|float|bool|bytes|path|Path|file|dir|datetime|uuid|UUID|"
    r"choice|NoneType)(?: range)?(?:[,|][A-Za-z_]+)*>"
)
CLICK_TYPES = re.compile(r"\b(?:TEXT|INTEGER|FLOAT|BOOLEAN|FILENAME|DIRECTORY|UUID)\b")


def _entries(page: str) -> list[tuple[str, str]]:
    """(name column, help text) of each argument and option of a help page, its wrapped lines joined."""
    out: list[tuple[str, str]] = []
    section = False
    for line in page.splitlines():
        if line in ("Arguments:", "Options:"):
            section = True
        elif line and not line.startswith(" "):
            section = False
        elif section and re.match(r"^  \S", line):
            name, _, help_text = line[2:].partition("  ")
            out.append((name.strip(), help_text.strip()))
        elif section and line.strip() and out:
            out[-1] = (out[-1][0], f"{out[-1][1]} {line.strip()}".strip())
    assert out or "Options:" not in page, page
    return out


def test_the_help_test_catches_type_leaks_and_doubled_defaults():
    """The check above, on the pages typer printed before every parameter had a metavar (issue 21)."""
    leaked = "Arguments:\n  [IMAGE] <str>  Image to check [default: the last successful build's].\n"
    assert TYPE_LEAK.search(leaked) and TYPE_LEAK.search("  --cache-from <list[str]>  buildx spec")
    assert [n for n, _ in _entries(leaked)] == ["[IMAGE] <str>"]
    doubled = "Options:\n  --min-free-gb GB  Free space [default: 100; 1 with\n      --smoke].  [default: 100.0]\n"
    [(name, help_text)] = _entries(doubled)
    assert name == "--min-free-gb GB" and help_text.count("default:") == 2
    # Placeholders in prose are no type: build/<image>.sqsh, +g<9 hex>, nemo-rl=<prepared tree>.
    assert not TYPE_LEAK.search("build/<image>.sqsh +g<9 hex> nemo-rl=<prepared tree>")


def test_no_color_removes_every_style(cli):
    # FORCE_COLOR makes rich style its output as on a terminal; the error line is bold red, its hint dim.
    env = {"FORCE_COLOR": "1", "NO_COLOR": ""}
    styled = cli("render", "--pins", "missing.yaml", env=env)
    assert styled.code == 2 and SGR.search(styled.stderr), "the test must see styles when NO_COLOR is not set"
    plain = cli("render", "--pins", "missing.yaml", env={**env, "NO_COLOR": "1"})
    assert plain.code == 2 and "error:" in plain.stderr
    assert "\x1b[" not in plain.stderr


def _plain_lines(name: str) -> list[str]:
    from buildkit.commands.build import PlainView
    from buildkit.text.progress import Progress

    buffer = io.StringIO()
    saved, ui.err = ui.err, Console(file=buffer, width=300, color_system=None)
    try:
        view, progress = PlainView(), Progress()
        for line in (STREAMS / f"{name}.jsonl").read_text().splitlines(keepends=True):
            progress.feed(line)
            view.update(line, progress)
    finally:
        ui.err = saved
    return buffer.getvalue().splitlines()


@pytest.mark.parametrize("stream", ["cold", "cached", "failed"])
def test_plain_progress_says_each_steps_start_and_end_once(stream):
    # Recorded from the real engine: BuildKit sends "load build definition" again after it completed.
    lines = _plain_lines(stream)
    ends = [line for line in lines if re.match(r"\s+(DONE|CACHED|ERROR)", line)]
    starts = [line for line in lines if line.startswith("=> ")]
    assert ends and len(ends) == len(set(ends)), ends
    assert len(starts) == len(set(starts)), starts


def test_buildkit_progress_is_read_as_buildx_reads_it(cli):
    bad = cli("build", "--dry-run", env={"BUILDKIT_PROGRESS": "fancy"})
    assert bad.code == 2 and "BUILDKIT_PROGRESS" in bad.stderr and "'fancy'" in bad.stderr
    for mode in ("plain", "tty", "quiet", "rawjson", "auto", ""):
        result = cli("build", "--dry-run", "--pins", "missing.yaml", env={"BUILDKIT_PROGRESS": mode})
        assert "Invalid value" not in result.stderr, (mode, result.stderr)


def test_pins_are_found_from_a_subdirectory(cli, tmp_path):
    project = tmp_path / "project"
    (project / "docs" / "deep").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "pins.yaml").write_text((REPO_ROOT / "pins.yaml").read_text())
    import shutil

    shutil.copytree(REPO_ROOT / "patches", project / "patches")
    cli.cwd = project / "docs" / "deep"
    found = cli("resolve", "--offline")
    # The pins were found (no lock yet is the next thing said), not "pins.yaml: no such file".
    assert "no such file" not in found.stderr and "pins.lock" in found.stderr, found.stderr
    # Above the repository's top nothing is looked for.
    (tmp_path / "pins.yaml").write_text("not: pins\n")
    cli.cwd = tmp_path / "elsewhere"
    cli.cwd.mkdir()
    subprocess.run(["git", "init", "-q", str(cli.cwd)], check=True)
    missing = cli("resolve", "--offline")
    assert missing.code == 2 and "pins.yaml: no such file" in missing.stderr and "directories above" in missing.stderr


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_take_the_users_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        target = tmp_path / "pins.lock"
        write_atomic(target, "{}\n")
        assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
        write_atomic(target, "{}\n")  # replacing keeps to the rule too
        assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    finally:
        os.umask(old)


def test_report_and_render_outputs_are_readable_by_others(cli, tmp_path):

    project = golden_project(tmp_path)
    out = tmp_path / "report.md"
    result = cli("report", "--pins", str(project / "pins.yaml"), "-o", str(out))
    assert result.code == 0, result.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # the test runner's umask is 022


def test_a_submodule_that_cannot_be_fetched_is_named_with_its_url_and_the_ways_on(project, remote):
    root, cli = use_remote(project, remote)
    # The mirror the pins name for the submodule is down (nothing listens on port 1).
    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text.replace(f"url: {remote.daemon.url}test/", "url: git://127.0.0.1:1/test/"))
    assert cli("resolve").code == 0
    result = cli("render")
    assert result.code == 3, result.output
    assert "cannot fetch submodule 3rdparty/Megatron-LM-workspace/Megatron-LM from https://github.com/test/" in (
        result.stderr
    )
    assert "insteadOf" in result.stderr and "BUILDKIT_SUBMODULES=0" in result.stderr and "No internet" in result.stderr
    # Said once, honoured by every command: render, then the smoke build's plan, without submodules.
    skip = {"BUILDKIT_SUBMODULES": "0"}
    rendered = cli("render", env=skip)
    assert rendered.code == 0, rendered.output
    assert "submodules skipped" in rendered.stderr
    assert json.loads((root / "build" / "prepare.json").read_text())["submodules"] is None
    plan = cli("build", "--smoke", "--dry-run", env=skip)
    assert plan.code == 0 and "prepare: " in plan.stderr and "nothing to do" in plan.stderr.split("prepare: ")[1]


def test_offline_hint_points_to_the_no_internet_section_and_its_variables(project):
    from tests.support.gitserver import free_port

    root, cli = project
    dead = f"http://127.0.0.1:{free_port()}"
    result = cli("resolve", env={"BUILDKIT_GITHUB_API": dead, "BUILDKIT_WHEEL_INDEX": dead})
    assert result.code == 3, result.output
    hint = result.stderr.split("hint:", 1)[1]
    assert '"No internet" (docs/how-to/no-internet.md)' in hint
    assert "BUILDKIT_GITHUB_API" in hint and "BUILDKIT_WHEEL_INDEX" in hint
    page = (REPO_ROOT / "docs" / "how-to" / "no-internet.md").read_text()
    section = page[page.index("# No internet") :]
    assert "BUILDKIT_GITHUB_API" in section and "BUILDKIT_WHEEL_INDEX" in section and "BUILDKIT_SUBMODULES" in section


def test_doctor_json_prints_every_check(cli, tmp_path):
    # No engine at this address: the checks that need one fail, each with what to do, and stdout is JSON only.
    # (its own DOCKER_CONFIG: buildx records the selected builder per engine address there, and another address in
    # the real one would unselect the engine's builder for every later test)
    result = cli(
        "doctor",
        "--json",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "DOCKER_CONFIG": str(tmp_path / "docker-config")},
    )
    assert result.code == 1, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["checks"]
    failed = [c for c in data["checks"] if c["result"] == "fail"]
    assert failed and all(c["fix"] for c in failed)
    assert {"mksquashfs", "cosign"} <= {c["name"] for c in data["checks"]}
