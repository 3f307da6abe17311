"""The shape of the code, measured from its own source: import circles, imports that run upward between layers,
imports inside functions, functions over 60 lines, mypy's error count, and `buildkit --help` start-up against
importing typer alone (bench/cold_start.py's measurement).

    python bench/architecture.py [--no-mypy] [--repeat 9]

The layers are tests/unit/suite/test_layers.py's (the rule the suite holds); circles are strongly connected groups of
modules in the import graph, counting imports inside functions as the test does. Goals (issue 22): circles 0, upward 0,
functions over 60 lines <= 5, type errors 0, start-up <= 1.3x typer.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.unit.suite.test_layers import GRAPH, RANK, layer_of, modules  # noqa: E402  (the suite's own layer table)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [
        (a, b)
        for a in sorted(graph)
        for b in sorted(graph[a])
        if layer_of(a) != layer_of(b) and RANK[layer_of(b)] >= RANK[layer_of(a)]
    ]


def code_facts() -> tuple[int, int, list[tuple[int, str]]]:
    """Imports inside functions (all, and buildkit's own), and functions over 60 lines."""
    inner_all = inner_ours = 0
    long = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert fn.end_lineno is not None  # ast.parse sets it
            if fn.end_lineno - fn.lineno + 1 > 60:
                long.append((fn.end_lineno - fn.lineno + 1, f"{name}.{fn.name}"))
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    inner_all += 1
                    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                    inner_ours += bool(module and module.startswith("buildkit"))
    return inner_all, inner_ours, sorted(long, reverse=True)


def mypy_errors() -> str:
    result = subprocess.run([sys.executable, "-m", "mypy", "buildkit"], cwd=ROOT, capture_output=True, text=True)
    last = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    found = re.search(r"Found (\d+) errors?", last)
    return found.group(1) if found else ("0" if "Success" in last else last)


def startup(repeat: int) -> tuple[float, float]:
    script = Path(sys.executable).with_name("buildkit")
    cli = [str(script), "--help"] if script.exists() else [sys.executable, "-m", "buildkit.cli", "--help"]
    base = [sys.executable, "-c", "import typer"]
    env = {**os.environ, "COLUMNS": "100"}

    def run(argv: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        return time.perf_counter() - started

    run(cli), run(base)  # warm the file cache
    ours, theirs = [], []
    for _ in range(repeat):
        ours.append(run(cli))
        theirs.append(run(base))
    return statistics.median(ours), statistics.median(theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-mypy", action="store_true")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    found_circles, found_upward = circles(GRAPH), upward(GRAPH)
    inner_all, inner_ours, long = code_facts()
    print(f"modules                              {len(GRAPH)}")
    print(f"import circles                       {len(found_circles)}  {found_circles or ''}")
    print(f"upward imports                       {len(found_upward)}  {found_upward or ''}")
    print(f"imports inside functions             {inner_all} (of buildkit's own modules: {inner_ours})")
    print(f"functions over 60 lines              {len(long)}  {', '.join(f'{n} ({lines})' for lines, n in long)}")
    if not args.no_mypy:
        print(f"mypy errors                          {mypy_errors()}")
    ours, base = startup(args.repeat)
    print(
        f"buildkit --help start-up             {ours * 1000:.0f} ms vs import typer {base * 1000:.0f} ms: "
        f"{ours / base:.2f}x (goal <= 1.3)"
    )


if __name__ == "__main__":
    main()
