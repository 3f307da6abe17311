"""The test command's parallel run: the tests without the engine in one pytest against N pytest-xdist workers.

Each run is hermetic as scripts/test.sh makes it (fresh HOME, XDG_CACHE_HOME, BUILDKIT_CACHE_DIR and TMPDIR; no
Docker daemon), over the same selection, in the same session; printed: wall time, CPU time of the whole process tree
(pytest, its workers, the CLI's child processes, git, the loopback servers), how many cores that kept busy on
average, the tests that passed, and the speed-up against the single process. Every run must pass the same number of
tests. The default selection (tests/unit and tests/e2e/security) takes a few minutes a run; `--all` runs every test
not marked `engine` (about 14 minutes alone on 2 cores).

    .venv/bin/python bench/test_command.py [--workers 2,4] [--all] [pytest selection ...]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SELECTION = ["tests/unit", "tests/e2e/security"]


def run(workers: int, selection: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the process tree, tests passed) of one hermetic run."""
    with tempfile.TemporaryDirectory(prefix="bench-tests-") as fresh:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # a pytest run of its own
        for name in ("HOME", "XDG_CACHE_HOME", "BUILDKIT_CACHE_DIR", "TMPDIR", "DOCKER_CONFIG"):
            env[name] = str(Path(fresh) / name.lower())
            Path(env[name]).mkdir()
        env["DOCKER_HOST"] = "unix:///nonexistent"  # no engine: the engine's tests are deselected anyway
        env.setdefault("BUILDKIT_TEST_ARTIFACTS", str(Path(os.environ["HOME"]) / ".cache" / "buildkit-test-artifacts"))
        parallel = ["-n", str(workers), "--dist", "worksteal"] if workers > 1 else ["-p", "no:xdist"]
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not engine", *parallel]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        done = subprocess.run([*argv, *selection], cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = re.search(r"(\d+) passed", done.stdout)
    if done.returncode != 0 or not found:
        sys.exit(f"bench: pytest with {workers} worker(s) failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return wall, cpu, int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="2,4", help="worker counts to compare with one process (default 2,4)")
    parser.add_argument("--all", action="store_true", help="every test not marked engine")
    parser.add_argument("selection", nargs="*", help=f"pytest paths (default: {' '.join(DEFAULT_SELECTION)})")
    args = parser.parse_args()
    selection = [] if args.all else (args.selection or DEFAULT_SELECTION)
    counts = [1, *(int(n) for n in args.workers.split(","))]
    print(f"{os.cpu_count()} cores; selection: {' '.join(selection) or 'every test not marked engine'}")
    print(f"{'workers':>8} {'wall s':>8} {'CPU s':>8} {'cores busy':>11} {'passed':>7} {'speed-up':>9}")
    baseline = None
    for workers in counts:
        wall, cpu, passed = run(workers, selection)
        baseline = baseline or (wall, passed)
        if passed != baseline[1]:
            sys.exit(f"bench: {passed} tests passed with {workers} workers, {baseline[1]} with one")
        print(f"{workers:>8} {wall:>8.1f} {cpu:>8.1f} {cpu / wall:>11.2f} {passed:>7} {baseline[0] / wall:>8.2f}x")


if __name__ == "__main__":
    main()
