"""The smoke project the engine benchmarks build: the NeMo-RL-shaped test repository (git daemon), the loopback
GitHub and wheel index, and the engine's registry as the base image's registry; resolved."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.engine import STAND_IN_BASE, engine_problem  # noqa: E402
from tests.support.fake_upstreams import Upstreams, pins_text, reference_upstreams  # noqa: E402
from tests.support.nemo_repo import make_remote  # noqa: E402

BUILDKIT = [sys.executable, "-m", "buildkit.cli"]


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Seconds one command takes, its output discarded."""
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


@contextmanager
def smoke_project(
    upstreams: Callable[[Upstreams], None] | None = None,
) -> Iterator[tuple[Path, dict[str, str], Path]]:
    """(project dir, environment for buildkit, a scratch directory); everything is removed afterwards. `upstreams`
    may change the stand-in upstreams before the first resolve."""
    problem = engine_problem()
    if problem:
        sys.exit(f"bench: {problem}; run scripts/engine-up.sh first")
    up = reference_upstreams()
    if upstreams is not None:
        upstreams(up)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        remote = make_remote(tmp_path)
        try:
            project = tmp_path / "project"
            project.mkdir()
            (project / "patches").mkdir()
            patch = ROOT / "patches" / "build-custom-vllm-wheel-location.patch"
            (project / "patches" / patch.name).write_text(patch.read_text())
            text = pins_text(STAND_IN_BASE).replace("https://github.com/NVIDIA-NeMo/RL.git", remote.url)
            text = text.replace('"946862e7"', f'"{remote.commit}"')
            text += (
                f"\ngit_url_rewrites:\n  - url: {remote.daemon.url}test/\n    instead_of: https://github.com/test/\n"
            )
            (project / "pins.yaml").write_text(text)
            env = {**os.environ, **up.env(), "BUILDKIT_CACHE_DIR": str(tmp_path / "cache")}
            subprocess.run([*BUILDKIT, "resolve"], cwd=project, env=env, check=True, capture_output=True)
            yield project, env, tmp_path
        finally:
            remote.daemon.stop()
            up.stop()
