"""Shared fixtures: loopback upstreams holding the reference facts, a runner for the real CLI, the NeMo-RL-shaped
repository, the hostile servers and cosign; and the unit/e2e/engine marks. Helpers shared by test modules live in
tests/support/<name>.py (never in a test_*.py module: tests/unit/suite/test_suite_rules.py holds that)."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.errors import EngineNotReady
from buildkit.world.cosign import binary
from tests.support.clizygote import Zygotes
from tests.support.engine import engine, engine_b, unavailable  # noqa: F401 -- engine, engine_b: fixtures for every module
from tests.support.fake_upstreams import Upstreams, pins_text, reference_upstreams
from tests.support.hostile import elsewhere, hostile  # noqa: F401 -- fixtures for every module
from tests.support.nemo_repo import make_remote
from tests.support.paths import REPO_ROOT
from tests.support.realwheels import run_dir
from tests.support.vllmfork import vllm_fork, wheel_name

# A test that uses one of these (directly or through another fixture) is end to end: the build engine, or the CLI
# run as a child process. Tests that read real PyPI wheels, or take seconds, are marked e2e where they are written.
E2E_FIXTURES = frozenset({"engine", "engine_b", "cli", "project"})
# A test that uses one of these needs scripts/engine-up.sh's engine (cosign is built there too): marked `engine`,
# so `pytest -m "not engine"` runs everything else on a machine without it.
ENGINE_FIXTURES = frozenset({"engine", "engine_b", "cosign"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test `e2e` or `unit` (registered in pyproject.toml), so `pytest -m unit` is the fast loop, and
    the tests that need the build engine `engine`."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("e2e") is None and E2E_FIXTURES & fixtures:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("e2e") is None:
            item.add_marker(pytest.mark.unit)
        if ENGINE_FIXTURES & fixtures:
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory) -> Path:
    """A directory every process of this test run shares (tests/support/realwheels.py: run_dir)."""
    return run_dir(tmp_path_factory)


@pytest.fixture
def upstreams():
    up = reference_upstreams()
    yield up
    up.stop()


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


# The CLI's child processes are forked from a process that imported buildkit already (tests/support/clizygote.py:
# what stays apart and why); BUILDKIT_TEST_FORK=0 starts each one from a fresh interpreter instead.
FORK = os.environ.get("BUILDKIT_TEST_FORK", "1") != "0"
ZYGOTES = Zygotes()
atexit.register(ZYGOTES.close)


class Cli:
    """Runs `buildkit` as a user would: a child process, its own stdout, stderr and exit code."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.cwd = cwd
        self.env = env

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Result:
        full_env = {**self.env, **(env or {})}
        if FORK:
            forked = ZYGOTES.run(list(args), str(self.cwd), full_env, timeout)
            if forked is not None:
                return Result(*forked)
        done = subprocess.run(
            [sys.executable, "-m", "buildkit.cli", *args],
            cwd=self.cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Result(done.returncode, done.stdout, done.stderr)


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDKIT_", "GITHUB_TOKEN"))}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        BUILDKIT_CACHE_DIR=str(tmp_path / "cache"),
        UV_CACHE_DIR=str(tmp_path / "uv-cache"),  # prepare's `uv lock` (vllm.install: uv-source): not this machine's
        BUILDKIT_HTTP_BACKOFF="0.01",
        BUILDKIT_HTTP_TIMEOUT="5",
        COLUMNS="200",
        NO_COLOR="1",
        # Hermetic git: github.com is a loopback port nothing listens on, so a fallback to git (issue 41) never
        # leaves the machine; a test that serves a repository names its own rewrite (these variables, or pins.yaml's
        # git_url_rewrites, the more specific one winning).
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="url.http://127.0.0.1:9/.insteadOf",
        GIT_CONFIG_VALUE_0="https://github.com/",
    )
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(proxy, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


@pytest.fixture
def project(tmp_path: Path, upstreams: Upstreams) -> tuple[Path, Cli]:
    """A directory with the reference pins (base image on the loopback registry) and a CLI aimed at the fakes."""
    (tmp_path / "pins.yaml").write_text(pins_text(upstreams.base_image))
    shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    return tmp_path, Cli(tmp_path, {**base_env(tmp_path), **upstreams.env()})


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A CLI with no upstreams configured (for offline and bad-input tests)."""
    return Cli(tmp_path, base_env(tmp_path))


@pytest.fixture
def fork(tmp_path, upstreams):
    """vLLM's main and a fork whose head moves, real git on `git daemon` (tests/support/vllmfork.py), with the merge
    base's wheel in the stand-in index."""
    made = vllm_fork(tmp_path)
    upstreams.wheels.add(made.base, wheel_name(made.base))
    yield made
    made.stop()


@pytest.fixture
def remote(tmp_path):
    """The NeMo-RL-shaped repository (tests/support/nemo_repo.py), served by `git daemon` for the test."""
    made = make_remote(tmp_path)
    yield made
    made.daemon.stop()


@pytest.fixture(scope="session")
def cosign() -> str:
    """The cosign binary (scripts/cosign-build.sh); skips without it, fails in CI."""
    try:
        return binary()
    except EngineNotReady as exc:
        unavailable(f"{exc.message} ({exc.hint})")
