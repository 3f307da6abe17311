"""Rules the test suite keeps about itself: a test module never imports another (what tests share lives in
conftest.py or a helper module, tests/<name>.py), and the goldens hold no ports, hosts or versions of a machine."""

from __future__ import annotations

import ast
import platform
import re
import socket

import pytest

import buildkit
from tests.conftest import REPO_ROOT
from tests.goldens import GOLDENS, recorded_machine

TESTS = REPO_ROOT / "tests"


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
    assert not offenders, "move what they share into conftest.py or a tests/<name>.py helper:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source, offends",
    [
        ("from tests.test_render import x", True),
        ("from tests import test_render", True),
        ("import tests.security.test_token", True),
        ("from .test_token import y", True),  # relative, in tests/security/
        ("from . import test_files", True),
        ("from .. import test_build", True),
        ("def f():\n    from tests.test_build import z", True),  # inside a function
        ("from tests.nemo_repo import use_remote", False),
        ("from .hostile import Hostile", False),
        ("from tests.conftest import REPO_ROOT", False),
        ("import pytest", False),
    ],
)
def test_the_rule_sees_every_form_of_import(source, offends):
    assert bool(imports_a_test_module(source, "tests.security")) == offends


def _as_a_word(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.+-]){re.escape(value)}(?![\w.+-])")


def test_goldens_hold_no_ports_hosts_or_versions_of_a_machine():
    """The report's goldens (compared through tests/goldens.py's machine_neutral) hold placeholders for the loopback
    ports, host name and tool versions of the machine that recorded the fixtures, and nothing of this one."""
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
