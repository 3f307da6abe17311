"""The docs cannot drift from the code: the generated reference pages are what scripts/docs.py makes from the code
now; the environment table names every variable buildkit reads; the hand-written pins.yaml table names every key
of the schema; every docs page a message names exists; and the README stays a front door whose test command is the
line .ci/run runs. (The strict docs build, links and anchors included, runs in scripts/test.sh.)"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from buildkit.environment import ENVIRONMENT, names
from buildkit.errors import EXIT_ADVICE, EXIT_CODES
from tests.support.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("buildkit_docs_script", REPO_ROOT / "scripts" / "docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["cli.md", "pins-schema.md", "exit-codes.md", "environment.md"])
def test_the_generated_reference_is_what_the_code_says_now(page):
    pages = {path.name: text for path, text in _generator().generate().items()}
    committed = (DOCS / "reference" / page).read_text()
    assert committed == pages[page], f"docs/reference/{page} is stale: run .venv/bin/python scripts/docs.py"


def test_the_exit_codes_page_is_the_codes_the_code_uses():
    text = (DOCS / "reference" / "exit-codes.md").read_text()
    rows = dict(re.findall(r"^\| (\d+) \| ([^|]+?) \|", text, re.MULTILINE))
    assert {int(code): meaning for code, meaning in rows.items()} == dict(EXIT_CODES)
    assert set(EXIT_ADVICE) == {code for code, _ in EXIT_CODES}


def _environment_reads() -> dict[str, str]:
    """Each variable a module of buildkit/ reads, and where: a `BUILDKIT_*` string anywhere (the names the readers
    keep in constants and tables), the name given to os.environ.get / os.getenv / os.environ[...] / `in
    os.environ`, typer's `envvar=`, and the values of constants named *_ENV / ENV_* (GITHUB_TOKEN, ...)."""
    found: dict[str, str] = {}

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    for path in sorted((REPO_ROOT / "buildkit").rglob("*.py")):
        if path.name == "environment.py" and path.parent.name == "buildkit":
            continue
        where = str(path.relative_to(REPO_ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            named: list[ast.AST] = []
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if re.fullmatch(r"BUILDKIT_[A-Z0-9_]+", node.value):
                    named.append(node)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if (node.func.attr == "get" and is_environ(node.func.value)) or node.func.attr == "getenv":
                    named.append(node.args[0])
            elif isinstance(node, ast.Subscript) and is_environ(node.value):
                named.append(node.slice)
            elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
                named.append(node.left)
            if isinstance(node, ast.keyword) and node.arg == "envvar":
                named.append(node.value)
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and (t.id.endswith("_ENV") or t.id.startswith("ENV_")) for t in node.targets
            ):
                named.extend(ast.walk(node.value))
            for value in named:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    if re.fullmatch(r"[A-Z][A-Z0-9_]+", value.value):
                        found.setdefault(value.value, where)
    return found


def test_every_environment_variable_buildkit_reads_is_in_the_one_table():
    reads = _environment_reads()
    assert {"GITHUB_TOKEN", "COSIGN_PASSWORD", "NO_COLOR", "BUILDKIT_HTTP_MAX_WHEEL", "BUILDKIT_PINS"} <= set(reads)
    missing = {name: where for name, where in reads.items() if name not in names()}
    assert not missing, f"read in buildkit/ but not in buildkit/environment.py's ENVIRONMENT: {missing}"


def test_the_table_names_no_variable_buildkit_does_not_read():
    read_by_libraries = {"HTTPS_PROXY", "NO_PROXY"}  # requests reads them (merge_environment_settings)
    stale = names() - set(_environment_reads()) - read_by_libraries
    assert not stale, f"in ENVIRONMENT but read nowhere in buildkit/: {stale}"
    assert len({row.name for row in ENVIRONMENT}) == len(ENVIRONMENT)


def _schema_leaves() -> set[str]:
    """pins.yaml's keys from its JSON Schema: each value a person writes (a list as `key[]`), not the sections."""
    from buildkit.models.pins import json_schema

    schema = json_schema()
    defs = schema["$defs"]
    leaves: set[str] = set()

    def walk(obj: dict[str, Any], prefix: str) -> None:
        for key, spec in obj.get("properties", {}).items():
            path = prefix + key
            if spec.get("type") == "array":
                leaves.add(f"{path}[]")
                continue
            inner = [c for c in [spec, *spec.get("anyOf", [])] if "$ref" in c]
            if inner:
                walk(defs[inner[0]["$ref"].rsplit("/", 1)[1]], f"{path}.")
            else:
                leaves.add(path)

    walk(schema, "")
    return leaves


def test_the_pins_yaml_reference_names_every_key_of_the_schema():
    text = (DOCS / "reference" / "pins-yaml.md").read_text()
    rows = re.findall(r"^\| (`[^|]+`) \| (?:yes|no|one of ref/pr) \|", text, re.MULTILINE)
    documented = {key for row in rows for key in re.findall(r"`([^`]+)`", row)}
    assert documented == _schema_leaves()


def test_every_docs_page_a_message_names_exists():
    named = set()
    for path in sorted((REPO_ROOT / "buildkit").rglob("*.py")):
        named |= set(re.findall(r"\b(docs/[a-z0-9/-]+\.md|CONTRIBUTING\.md)", path.read_text()))
    assert "docs/how-to/no-internet.md" in named
    assert not [name for name in named if not (REPO_ROOT / name).is_file()]


def test_no_message_sends_a_reader_to_the_readme_for_what_moved_to_the_docs():
    for path in sorted((REPO_ROOT / "buildkit").rglob("*.py")):
        assert "README" not in path.read_text(), f"{path}: the README is a front door now; name the docs page"


def test_the_readme_is_a_front_door_and_keeps_the_test_command_ci_runs():
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    # .ci/run's extraction: the line after the ```bash fence that follows the test-command marker.
    marker = next(i for i, line in enumerate(lines) if "<!-- test-command" in line)
    fence = next(i for i in range(marker + 1, len(lines)) if lines[i].startswith("```bash"))
    assert lines[fence + 1] == "bash scripts/test.sh"


def test_the_test_command_lints_and_builds_the_docs_strictly_before_the_tests():
    script = (REPO_ROOT / "scripts" / "test.sh").read_text()
    tests = script.index('tests without-engine "not engine"')
    assert -1 < script.index(".venv/bin/ruff check") < tests
    assert -1 < script.index("mkdocs build --strict") < tests
    # The engine comes up beside them, and its tests run once it is up.
    assert script.index("bash scripts/engine-up.sh </dev/null >") < script.index(".venv/bin/mypy") < tests
    assert tests < script.index('wait "$engine_pid"') < script.index('tests engine "engine"')
    config = (REPO_ROOT / "mkdocs.yml").read_text()
    assert "anchors: warn" in config and "unrecognized_links: warn" in config  # --strict fails on warnings


def test_every_docs_page_is_markdown_in_a_diataxis_folder():
    pages = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*") if p.is_file())
    assert pages and all(p.suffix == ".md" for p in pages)
    assert {p.parts[0] for p in pages if len(p.parts) > 1} == {"tutorial", "how-to", "explanation", "reference"}
    assert Path("index.md") in pages


def test_every_buildkit_variable_the_docs_name_is_in_the_table_or_the_scripts():
    """A variable a page names is one buildkit reads (the table), or one of the scripts' and tests' own."""
    pages = [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]
    named = {m for page in pages for m in re.findall(r"\bBUILDKIT_[A-Z0-9_]*[A-Z0-9]\b", page.read_text())}
    sources = [*(REPO_ROOT / "scripts").glob("*.sh"), *(REPO_ROOT / "tests").rglob("*.py")]
    others = "".join(path.read_text() for path in sources)
    assert not [name for name in named - names() if name not in others]


def _options_of(command: str) -> set[str]:
    import typer.main
    from typer.core import TyperGroup

    from buildkit.cli import app

    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)  # the app has subcommands
    sub = root.commands[command]
    return {opt for param in sub.params for opt in [*param.opts, *param.secondary_opts]}


def test_the_synopses_in_the_docs_name_only_options_the_commands_have():
    """The hand-written synopsis blocks (`buildkit resolve [--pins PATH] ...`) against the typer app."""
    checked = 0
    for page in sorted(DOCS.rglob("*.md")):
        if page.name == "cli.md":
            continue  # generated from the app itself
        for block in re.findall(r"^```\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
            command = None
            for line in block.splitlines():
                start = re.match(r"buildkit ([a-z]+)\b", line)
                if start:
                    command = start.group(1)
                elif not line.startswith(" "):
                    command = None
                if command is None:
                    continue
                flags = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", line.split("#")[0]))
                assert flags <= _options_of(command), (page.name, command, flags - _options_of(command))
                checked += 1
    assert checked >= 10


def test_the_readmes_figure_for_the_report_is_the_golden_reports_length():
    """The README says how long a smoke report is: the golden smoke report's length, as test_report renders it."""
    golden = (REPO_ROOT / "tests" / "fixtures" / "report" / "expected.md").read_text()
    readme = (REPO_ROOT / "README.md").read_text()
    stated = re.search(r"a smoke build's report is (\d+) lines", readme)
    assert stated is not None and int(stated.group(1)) == len(golden.splitlines())
