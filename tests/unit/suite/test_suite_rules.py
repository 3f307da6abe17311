"""Rules the test suite keeps about itself: a test module never imports another (what tests share lives in
conftest.py or a helper module, tests/support/<name>.py); helpers live under tests/support/ and test modules under
tests/unit/<layer>/ or tests/e2e/, a module under tests/unit/ being mostly unit tests; and the goldens hold no ports,
hosts or versions of a machine."""

from __future__ import annotations

import ast
import json
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import buildkit
from tests.support.goldens import GOLDENS, recorded_machine
from tests.support.paths import FIXTURES, REPO_ROOT, TESTS


def imported(source: str, package: str) -> list[str]:
    """Every module `source` (a module of `package`) imports, at the top or inside a function, as a dotted name;
    relative imports made absolute, and `from tests import x` counted as importing tests.x too."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - (node.level - 1)], *([base] if base else [])])
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return names


def imports_a_test_module(source: str, package: str) -> list[str]:
    return [
        name
        for name in imported(source, package)
        if name.split(".")[0] == "tests" and any(part.startswith("test_") for part in name.split("."))
    ]


def test_no_test_module_imports_another():
    offenders = [
        f"{path.relative_to(REPO_ROOT)} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in imports_a_test_module(path.read_text(), ".".join(path.relative_to(REPO_ROOT).parent.parts))
    ]
    advice = "move what they share into conftest.py or a tests/support/<name>.py helper:\n"
    assert not offenders, advice + "\n".join(offenders)


@pytest.mark.parametrize(
    "source, offends",
    [
        ("from tests.e2e.test_render import x", True),
        ("from tests import test_render", True),
        ("import tests.e2e.security.test_token", True),
        ("from .test_token import y", True),  # relative, in tests/e2e/security/
        ("from . import test_files", True),
        ("from .. import test_build", True),
        ("def f():\n    from tests.e2e.test_build import z", True),  # inside a function
        ("from tests.support.nemo_repo import use_remote", False),
        ("from .hostile import Hostile", False),
        ("from tests.conftest import REPO_ROOT", False),
        ("import pytest", False),
    ],
)
def test_the_rule_sees_every_form_of_import(source, offends):
    assert bool(imports_a_test_module(source, "tests.e2e.security")) == offends


def _python_files() -> list[Path]:
    """Every module of the suite, the recording scripts among the data (tests/fixtures/) left out."""
    return sorted(path for path in TESTS.rglob("*.py") if FIXTURES not in path.parents)


def test_helpers_live_in_support_and_test_modules_in_unit_or_e2e():
    """The tests mirror the code: a test module lives under tests/unit/<layer>/ or tests/e2e/, a helper (any other
    module but a conftest.py or an __init__.py) under tests/support/; and no two test modules share a name."""
    misplaced = []
    names: dict[str, list[str]] = {}
    for path in _python_files():
        where = path.relative_to(TESTS)
        if path.name in ("conftest.py", "__init__.py"):
            continue
        if path.name.startswith("test_"):
            names.setdefault(path.name, []).append(str(where))
            if where.parts[0] not in ("unit", "e2e") or (where.parts[0] == "unit" and len(where.parts) != 3):
                misplaced.append(f"{where}: a test module goes under tests/unit/<layer>/ or tests/e2e/")
        elif where.parts[0] != "support":
            misplaced.append(f"{where}: a helper goes under tests/support/")
    assert not misplaced, "\n".join(misplaced)
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
    assert len(names) > 50  # not vacuous


def test_every_folder_of_the_suite_is_a_package():
    """The tests are imported as the `tests` package: every folder holding a module has an __init__.py."""
    folders = {path.parent for path in _python_files()}
    lacking = [str(path.relative_to(REPO_ROOT)) for path in sorted(folders) if not (path / "__init__.py").exists()]
    assert folders and lacking == []


# Counts each collected test of the tests it is given as unit or not, by the marks tests/conftest.py gives it, and
# writes {module: {"unit": n, "other": m}} to the file named last.
_COUNT_MARKS = """
import collections, json, sys
import pytest

class Count:
    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)

    def pytest_collection_finish(self, session):
        for item in session.items:
            kind = "unit" if item.get_closest_marker("unit") else "other"
            self.counts[item.nodeid.split("::")[0]][kind] += 1

count = Count()
code = pytest.main(["--collect-only", "-qq", "-p", "no:cacheprovider", *sys.argv[1:-1]], plugins=[count])
with open(sys.argv[-1], "w") as out:
    json.dump(count.counts, out)
sys.exit(code)
"""


def test_a_module_under_unit_is_mostly_unit_tests(tmp_path):
    """The marks decide what `pytest -m unit` runs; the folder says what a module mostly is. A module under
    tests/unit/ may keep a few e2e tests beside the unit tests of the same code, never a majority of them."""
    counts = tmp_path / "counts.json"
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_MARKS, str(TESTS / "unit"), str(counts)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = json.loads(counts.read_text())
    assert len(found) > 30 and all(module.startswith("tests/unit/") for module in found)
    mostly_e2e = {module: kinds for module, kinds in found.items() if kinds.get("other", 0) > kinds.get("unit", 0)}
    assert mostly_e2e == {}, "move these to tests/e2e/ (or split them)"


def _as_a_word(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.+-]){re.escape(value)}(?![\w.+-])")


def test_goldens_hold_no_ports_hosts_or_versions_of_a_machine():
    """The report's goldens (compared through tests/support/goldens.py's machine_neutral) hold placeholders for the
    loopback ports, host name and tool versions of the machine that recorded the fixtures, and nothing of this one."""
    assert [g.name for g in GOLDENS] == ["expected.json", "expected.md"]
    machine = {
        **{f"recorded {k}": v for k, v in recorded_machine().items()},
        "this host": socket.gethostname(),
        "this Python": platform.python_version(),
        "this buildkit": buildkit.__version__,
    }
    for golden in GOLDENS:
        text = golden.read_text()
        ports = re.findall(r"(?:127\.0\.0\.1|localhost)[: ]\d+", text)
        assert not ports, f"{golden.name} holds loopback ports: {sorted(set(ports))}"
        found = {what: value for what, value in machine.items() if _as_a_word(value).search(text)}
        assert not found, f"{golden.name} holds {found}"


def test_the_golden_scan_finds_what_it_looks_for():
    """The scan above is not vacuous: the recorded values are the ones the fixtures hold, and it finds them."""
    record = (REPO_ROOT / "tests" / "fixtures" / "report" / "build" / "smoke-record.json").read_text()
    for value in recorded_machine().values():
        assert _as_a_word(value).search(record), value
    assert re.findall(r"(?:127\.0\.0\.1|localhost)[: ]\d+", "FROM 127.0.0.1 5000/x; http://localhost:8080/")


def test_a_test_that_points_docker_elsewhere_keeps_its_own_docker_config():
    """buildx records the selected builder per engine address in DOCKER_CONFIG: a CLI run with another DOCKER_HOST
    and the real config unselects the engine's builder, and every later build lands on Docker's own (which lacks
    named contexts and multiple outputs). Each env that sets DOCKER_HOST sets DOCKER_CONFIG beside it."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""["']DOCKER_HOST["']\s*:""", line):
                nearby = "\n".join(path.read_text().splitlines()[number - 1 : number + 2])
                if "DOCKER_CONFIG" not in nearby:
                    offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}")
    assert offenders == []
