"""The house rule: buildkit's packages are layers and imports run only downward (a module may import its own package
and any lower layer, never a higher one or a sibling layer), and no two modules import each other, even through
imports inside functions. The layers, top to bottom, are written in buildkit/__init__.py and in each package's
docstring; this test reads the imports of every module and holds the code to them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import buildkit
from tests.support.paths import REPO_ROOT

# Each package's layer, and each layer's rank: a module may import from its own layer or a lower rank.
LAYER = {
    "buildkit.cli": "cli", "buildkit.flags": "cli", "buildkit.commands": "cli",
    "buildkit.runs": "runs",
    "buildkit.stages": "stages",
    "buildkit.options": "options",
    "buildkit.image": "image", "buildkit.dockerfile": "dockerfile", "buildkit.gpu": "gpu",
    "buildkit.world": "world",
    "buildkit.models": "models",
    "buildkit.text": "text",
    "buildkit": "base", "buildkit.errors": "base", "buildkit.files": "base", "buildkit.budget": "base",
    "buildkit.stopping": "base",
    "buildkit.environment": "base", "buildkit._version": "base",
}  # fmt: skip
RANK = {
    "cli": 8,
    "runs": 7,
    "stages": 6,
    "options": 5,
    "image": 4,
    "dockerfile": 4,
    "gpu": 4,
    "world": 3,
    "models": 2,
    "text": 1,
    "base": 0,
}


def layer_of(module: str) -> str:
    package = ".".join(module.split(".")[:2])
    return LAYER.get(package, "base")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((REPO_ROOT / "buildkit").rglob("*.py")):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Every buildkit module the file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` uses the module; `from module import name` uses the module
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in known else node.module)
    return {name for name in found if name in known}


def with_packages(module: str, imported: set[str]) -> set[str]:
    """Importing buildkit.a.b.c runs buildkit.a.b's __init__ first: an edge to each package on the way, except the
    importer's own packages (Python has already started those)."""
    own = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    out = set(imported)
    for name in imported:
        parts = name.split(".")
        out |= {".".join(parts[:n]) for n in range(2, len(parts))} - own
    return out - {module, "buildkit"}


GRAPH = {name: with_packages(name, imports(path, modules())) for name, path in modules().items()}


def test_every_module_is_in_a_layer():
    assert not [name for name in GRAPH if ".".join(name.split(".")[:2]) not in LAYER], "a module outside the layers"
    modules = {"buildkit", "buildkit.cli", "buildkit.flags", "buildkit.options"}
    modules |= {f"buildkit.{m}" for m in ("errors", "files", "budget", "stopping", "environment", "_version")}
    for package in LAYER:
        if package not in modules:
            doc = ast.get_docstring(ast.parse((REPO_ROOT / package.replace(".", "/") / "__init__.py").read_text()))
            assert doc and "import" in doc, f"{package}/__init__.py says what lives there and what it may import"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_run_downward(module):
    mine = layer_of(module)
    upward = [other for other in GRAPH[module] if layer_of(other) != mine and RANK[layer_of(other)] >= RANK[mine]]
    assert not upward, f"{module} ({mine}) imports {upward}: move the shared code down a layer"


def stage_of(module: str) -> str | None:
    """The stage a module is part of (buildkit.stages.<stage>, a package), None outside one (context, pipeline)."""
    parts = module.split(".")
    if parts[:2] != ["buildkit", "stages"] or len(parts) < 3 or parts[2] in ("context", "pipeline"):
        return None
    return parts[2]


@pytest.mark.parametrize("module", sorted(name for name in GRAPH if stage_of(name)))
def test_no_stage_imports_another(module):
    """A stage imports its own package, the context and the layers below; what two stages share lives below them."""
    theirs = [other for other in GRAPH[module] if layer_of(other) == "stages" and stage_of(other) != stage_of(module)]
    assert set(theirs) <= {"buildkit.stages.context"}, f"{module} imports {theirs}: move the shared code to models/"


def test_only_the_commands_import_what_runs_the_stages():
    importers = {name for name, imported in GRAPH.items() if any(layer_of(m) == "runs" for m in imported)}
    assert {name for name in importers if layer_of(name) not in ("cli", "runs")} == set()
    assert "buildkit.cli" not in importers, "cli.py parses options; a command runs them"


def test_no_import_circles():
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for other in sorted(GRAPH[node]):
            if seen.get(other) == 1:
                raise AssertionError("import circle: " + " -> ".join([*path[path.index(other) :], other]))
            if other not in seen:
                visit(other, [*path, other])
        seen[node] = 2

    for name in sorted(GRAPH):
        if name not in seen:
            visit(name, [name])


def test_the_layers_are_written_where_a_reader_starts():
    doc = buildkit.__doc__ or ""
    for package in ("commands", "runs", "stages", "options", "models", "world", "image", "dockerfile", "gpu", "text"):
        assert f"buildkit/{package}" in doc, package
