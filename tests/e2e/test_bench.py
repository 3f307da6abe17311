"""The benchmarks in their smallest mode, so they keep running as the code under them changes (bench/README.md).
Their figures are timings on a shared machine: only what does not depend on the timing is held here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import base_env
from tests.support.paths import REPO_ROOT


def _bench(tmp_path, timeout: float, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """bench/<script> run as its README says, in the tests' environment; it must succeed."""
    done = subprocess.run(
        [sys.executable, f"bench/{script}", *args],
        cwd=REPO_ROOT,
        env={**base_env(tmp_path), "DOCKER_CONFIG": str(tmp_path / "docker-config")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.e2e
def test_platforms_bench_resolves_one_and_two_platforms_and_prints_the_ratios(tmp_path):
    """bench/platforms.py, one run each at a small latency: both resolves succeed against the stand-ins (the
    two-platform one with the aarch64 stand-in wheel), and each platform's wheel and base are read once more for
    the second (bytes of the wheel index and the registry: 2x)."""
    done = _bench(
        tmp_path, 120, "platforms.py", "--repeat", "1", "--latency", "0.02", "--wheel-kib", "64", "--layer-kib", "16"
    )
    lines = done.stdout.splitlines()
    labels = [line[:24].strip() for line in lines]
    for row in ("t(0), seconds", "t(L), seconds", "round trips (depth)", "requests", "bytes received"):
        assert row in labels, done.stdout
    at = labels.index("bytes received")
    by_upstream = {labels[i]: float(lines[i].split()[-1]) for i in range(at + 1, at + 4)}  # ratio 2/1
    assert by_upstream["GitHub"] < 1.1, done.stdout  # vLLM's tree and NeMo-RL's uv.lock: not per platform
    assert 1.9 <= by_upstream["wheel index"] <= 2.1 and 1.9 <= by_upstream["registry"] <= 2.1, done.stdout
    assert "depth ratio 2/1: " in done.stdout, done.stdout


@pytest.mark.e2e
def test_test_command_bench_runs_a_selection_alone_and_on_workers(tmp_path):
    """bench/test_command.py on a small selection: the same tests pass in one process and on 2 workers, and the
    table has a row for each with its speed-up against the first."""
    done = _bench(tmp_path, 300, "test_command.py", "--workers", "2", "tests/unit/base")
    rows = [line.split() for line in done.stdout.splitlines()[2:]]
    assert [row[0] for row in rows] == ["1", "2"] and rows[0][4] == rows[1][4] and rows[0][5] == "1.00x", done.stdout
