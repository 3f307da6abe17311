"""The shape the code promises: commands stay thin and never import each other, and the exit codes a user reads
in the docs (docs/reference/exit-codes.md) and in `--help` are the ones the code uses."""

from __future__ import annotations

import ast
import re

from buildkit.errors import EXIT_CODES
from tests.support.paths import REPO_ROOT


def test_commands_never_import_each_other():
    for path in sorted((REPO_ROOT / "buildkit" / "commands").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module] + [
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        ]
        assert not [m for m in imported if m.startswith("buildkit.commands")], f"{path.name} imports a command"


def test_docs_exit_codes_are_the_codes_the_code_uses():
    text = (REPO_ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    section = text[text.index("# Exit codes") :]
    rows = dict(re.findall(r"^\| (\d+) \| ([^|]+?) \|", section, re.MULTILINE))
    assert {int(code): meaning for code, meaning in rows.items()} == dict(EXIT_CODES)


def test_help_shows_the_exit_codes_and_the_pipeline(cli):
    result = cli("--help", env={"COLUMNS": "80"})
    assert result.code == 0
    for code, meaning in EXIT_CODES:
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", result.stdout, re.MULTILINE), (code, result.stdout)
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    for stage in ("resolve", "prepare", "render", "build", "verify", "report"):
        assert re.search(rf"^\s+{stage}\s+.* -> ", result.stdout, re.MULTILINE)


def test_version(cli):
    from buildkit import __version__

    result = cli("--version")
    assert result.code == 0 and result.stdout == f"buildkit {__version__}\n"


def test_the_version_moves_with_the_history():
    """setuptools-scm stamps the version from git at install: a record names the commit of the buildkit that wrote
    it (`+g<commit>`), a commit of this repository's history, not a number typed once and never changed."""
    import subprocess

    from buildkit import __version__

    found = re.fullmatch(r"0\.[0-9]+(?:\.[0-9]+)?(?:\.dev[0-9]+)?\+g([0-9a-f]{7,40})(?:\.d[0-9]{8})?", __version__)
    assert found, f"{__version__!r} is not a version stamped from git (pip install -e . restamps it)"
    known = subprocess.run(["git", "-C", str(REPO_ROOT), "cat-file", "-e", f"{found[1]}^{{commit}}"], check=False)
    assert known.returncode == 0, f"{__version__} names no commit of this repository"


def test_readme_pipeline_is_the_registry(cli):
    """The README's pipeline block says what each stage reads and writes as the registry (and `--help`) says it:
    `report` writes to standard output, not a report.md of its own."""
    from buildkit.stages.pipeline import STAGES

    text = (REPO_ROOT / "README.md").read_text()
    start = text.index("```\nresolve ") + 4
    block = text[start : text.index("```\n", start)]
    shown = [" ".join(line.split()) for line in block.splitlines()]
    assert shown == [" ".join(f"{s.name} {s.reads} -> {s.writes}".split()) for s in STAGES.values()]
    help_text = " ".join(cli("--help", env={"COLUMNS": "80"}).stdout.split())
    assert "report pins.lock, the records -> stdout, or -o FILE (markdown or JSON)" in help_text


def test_report_goes_to_stdout_and_to_a_file_with_o(cli, tmp_path):
    from tests.support.projects import golden_project

    project = golden_project(tmp_path)
    printed = cli("report", "--pins", str(project / "pins.yaml"))
    assert printed.code == 0, printed.output
    assert printed.stdout.startswith("# ") and "wrote" not in printed.stderr
    assert not list(project.rglob("report.md"))  # nothing written unless asked
    written = cli("report", "--pins", str(project / "pins.yaml"), "-o", str(tmp_path / "report.md"))
    assert written.code == 0 and written.stdout == ""
    assert (tmp_path / "report.md").read_text() == printed.stdout
    assert f"wrote {tmp_path / 'report.md'}" in written.stderr


def test_every_package_is_shipped_in_the_wheel():
    """pyproject.toml lists buildkit's packages one by one: a package left out would be missing from `pip install .`
    while the checkout still works."""
    import tomllib

    listed = set(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO_ROOT).parts) for p in (REPO_ROOT / "buildkit").rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
