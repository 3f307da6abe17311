"""Rules the test suite keeps about itself: a test module never imports another (what tests share lives in
conftest.py or a helper module, tests/<name>.py)."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import REPO_ROOT

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
