"""Test projects beyond the `project` fixture: pins pointed at other images of the loopback registry or at the
engine's stand-in base, a smoke build done or interrupted, and the report's golden project (recorded records, no
engine)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.engine import STAND_IN_BASE
from tests.support.fake_upstreams import BASE_REPO, Upstreams
from tests.support.nemo_repo import Remote, use_remote
from tests.support.paths import REPORT_FIXTURES

if TYPE_CHECKING:  # for the hints only: a helper module does not load conftest itself
    from tests.conftest import Cli

GOLDEN = REPORT_FIXTURES  # recorded by tests/fixtures/report/record.py


def smoke_project(project: tuple[Path, Cli], remote: Remote) -> tuple[Path, Cli]:
    """The pins with the stand-in base image from the engine's registry as the base image too."""
    root, cli = project
    text = (root / "pins.yaml").read_text()
    start = text.index("base_image: ") + len("base_image: ")
    end = text.index("\n", start)
    (root / "pins.yaml").write_text(text[:start] + STAND_IN_BASE + text[end:])
    return use_remote(project, remote)


def push_to_engine_registry(root: Path, prefix: str) -> str:
    """The pins' tag moved to a repository of its own on the engine's registry (a push never meets another test's);
    the repository."""
    repository = f"127.0.0.1:5000/{prefix}-{uuid.uuid4().hex[:12]}/nemo-rl"
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("tag: nemo-rl:", f"tag: {repository}:"))
    return repository


def smoke_built(project: tuple[Path, Cli], remote: Remote) -> tuple[Path, Cli]:
    """A smoke build of the smoke project (needs the engine)."""
    root, cli = smoke_project(project, remote)
    built = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    return root, cli


def golden_project(tmp_path: Path) -> Path:
    """A copy of the report's recorded project: its records and lock, without the expected outputs."""
    project = tmp_path / "project"
    shutil.copytree(GOLDEN, project, ignore=shutil.ignore_patterns("expected.*", "README.md", "*.py", "__pycache__"))
    return project


def use_base(root: Path, upstreams: Upstreams, tag: str, **image: Any) -> str:
    """Pins naming another image of the loopback registry (added with `image`: cuda_version=..., env=...)."""
    upstreams.registry.add_image(BASE_REPO, tag, **image)
    base = f"{upstreams.registry.netloc}/{BASE_REPO}:{tag}"
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace(upstreams.base_image, base))
    return base


def use_variant(root: Path, variant: str) -> None:
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("variant: default", f"variant: {variant}"))


def interrupt_a_slow_smoke_build(root: Path, env: dict[str, str], engine: str, sig: signal.Signals) -> tuple[int, str]:
    """Run `buildkit build --smoke` (uncached, with a slow step) as a child process, send it `sig` once buildx
    reports its first step, and return its exit code and the rest of its stderr."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "buildkit.cli",
            "build",
            "--smoke",
            "--builder",
            engine,
            "--progress",
            "plain",
            "--no-syntax",
            "--",
            "--no-cache",
            "--build-arg",
            "SLOW=1",
        ],
        cwd=root,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("=> "):  # buildx is running and reporting steps
            os.kill(process.pid, sig)
            break
    rest = process.stderr.read()
    return process.wait(timeout=120), rest


def smoke_builds_and_verifies(project, remote, commit: str, head: str) -> None:
    """The smoke target of NeMo-RL at `commit` builds with uv's source at `head` in its uv.lock, and verify passes."""
    root, cli = smoke_project(project, remote)
    # The later upstream builds on CUDA 13.2; the engine's stand-in base says 12.9.1: drift, accepted here.
    built = cli("build", "--smoke", "--allow-drift", "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    tag = json.loads((root / "build" / "smoke-record.json").read_text())["image"]["tag"]
    argv = ["docker", "run", "--rm", "--network", "none", tag, "cat", "/opt/nemo_rl_container_fingerprint"]
    printed = subprocess.run(argv, capture_output=True, text=True)
    assert printed.stdout == f"smoke {commit} vllm {head} (uv source)\n", printed
    verified = cli("verify", "--json")
    assert verified.code == 0, verified.output
