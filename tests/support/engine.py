"""The build engine from scripts/engine-up.sh, for tests that need a real BuildKit.

Such a test skips on a developer machine without the engine, and fails in CI (CI=true) or whenever
BUILDKIT_ENGINE=required (scripts/test.sh sets it after bringing the engine up): CI never skips them.
"""

from __future__ import annotations

import os
import subprocess
from typing import NoReturn

import pytest

BUILDER = "buildkit-engine"
STAND_IN_BASE = "127.0.0.1:5000/buildkit/stand-in-base:1"


def unavailable(message: str) -> NoReturn:
    """Something a test needs is missing here: a skip on a developer machine, a failure in CI (CI=true) or whenever
    BUILDKIT_ENGINE=required, so CI never skips it."""
    if os.environ.get("CI") or os.environ.get("BUILDKIT_ENGINE") == "required":
        pytest.fail(message)
    pytest.skip(message)


def engine_problem() -> str | None:
    try:
        done = subprocess.run(
            ["docker", "buildx", "inspect", BUILDER, "--bootstrap"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker buildx not usable: {exc}"
    if done.returncode != 0:
        return f"buildx builder {BUILDER!r} not available: {done.stderr.strip()[-200:]}"
    return None


@pytest.fixture(scope="session")
def engine() -> str:
    problem = engine_problem()
    if problem:
        unavailable(f"{problem} (bring it up with: sudo bash scripts/engine-up.sh)")
    return BUILDER


BUILDER_B = "buildkit-engine-b"


@pytest.fixture(scope="session")
def engine_b(engine) -> str:
    """The second builder of scripts/engine-up.sh: another buildkitd with state of its own ("another machine")."""
    done = subprocess.run(["docker", "buildx", "inspect", BUILDER_B, "--bootstrap"], capture_output=True, text=True)
    if done.returncode != 0:
        unavailable(f"buildx builder {BUILDER_B!r} not available (bring it up with: sudo bash scripts/engine-up.sh)")
    return BUILDER_B


def empty_builder(builder: str) -> None:
    """Drop everything the builder has cached, so its next build starts from nothing."""
    subprocess.run(["docker", "buildx", "prune", "-af", "--builder", builder], check=True, capture_output=True)
