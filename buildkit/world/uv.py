"""uv, which writes NeMo-RL's uv.lock when prepare writes the uv-source mode (vllm.install: uv-source): found on
PATH or beside this Python (`pip install 'buildkit[uv-source]'` puts it there) and run as an argv list, with the git
git settings of pins.yaml, since uv fetches git sources with git itself."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from buildkit.errors import EngineNotReady, UpstreamMismatch, excerpt
from buildkit.world import proc

_VERSION_RE = re.compile(r"uv (?P<version>[0-9]+\.[0-9]+\.[0-9]+)(?: \([0-9A-Za-z .+_-]{0,100}\))?")
LOCK_TIMEOUT_S = 3600.0  # a lock of NeMo-RL's whole graph, from a cold uv cache, over a slow link
_INSTALL = "install uv (`pip install 'buildkit[uv-source]'`, or https://docs.astral.sh/uv/): prepare runs `uv lock`"
# Variables that would make `uv lock` check instead of write, or write somewhere else.
_UNSET = ("UV_LOCKED", "UV_FROZEN", "UV_OFFLINE", "UV_PROJECT", "UV_WORKING_DIRECTORY")


class Uv(NamedTuple):
    path: str
    version: str


def find_uv() -> Uv:
    """uv from PATH, else beside sys.executable; EngineNotReady (exit 5) with what to install otherwise."""
    beside = Path(sys.executable).parent / "uv"
    path = shutil.which("uv") or (str(beside) if os.access(beside, os.X_OK) else None)
    if path is None:
        raise EngineNotReady("uv is not installed", hint=_INSTALL)
    try:
        done = proc.run([path, "--version"], timeout=30, stdout_limit=4096)
    except proc.ProcError as exc:
        raise EngineNotReady(f"{path} --version did not run ({exc.message})", hint=_INSTALL) from None
    said = done.stdout.decode("utf-8", "replace").strip()
    match = _VERSION_RE.fullmatch(said)
    if done.returncode != 0 or match is None:
        raise EngineNotReady(f"{path} --version said {excerpt(said, 80)}: not a uv buildkit knows", hint=_INSTALL)
    return Uv(path, match.group("version"))


def git_env(settings: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The environment for uv, its git included: the pins' git settings (models/pins.py `git_settings`, as prepare's
    own fetches have them) as git configuration from the environment (GIT_CONFIG_COUNT)."""
    env = {k: v for k, v in os.environ.items() if k not in _UNSET and not k.startswith("GIT_CONFIG_")}
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    return env


def lock(
    uv: Uv, project: Path, settings: Sequence[tuple[str, str]], on_line: Callable[[str], None] | None = None
) -> None:
    """`uv lock` in `project`: uv.lock written for its pyproject.toml, keeping every version the old lock has that
    still fits. UpstreamMismatch (exit 4) with uv's last words when it fails (a resolution that has no answer, a
    source it cannot fetch); Ctrl-C stops it."""
    argv = [uv.path, "lock", "--project", str(project), "--no-progress", "--color", "never"]
    try:
        done = proc.stream(
            argv,
            on_line or (lambda line: None),
            env=git_env(settings),
            cwd=project,
            timeout=LOCK_TIMEOUT_S,
            new_session=True,
            tail_limit=8192,
        )
    except proc.TimedOut:
        raise UpstreamMismatch(
            f"uv lock ran past {LOCK_TIMEOUT_S:.0f} s and was stopped", hint="run it again when the indexes answer"
        ) from None
    except proc.NotStarted as exc:
        raise EngineNotReady(exc.message, hint=_INSTALL) from None
    if done.returncode == 0:
        return
    said = [line.strip() for line in done.tail.decode("utf-8", "replace").splitlines() if line.strip()]
    raise UpstreamMismatch(
        f"uv {uv.version} lock failed in {project} (exit {done.returncode}): "
        + excerpt(" ".join(said[-4:]) if said else "no output", 400),
        hint="uv's words say why: a source it could not fetch (the network, a git URL rewrite in pins.yaml) or "
        "requirements with no answer",
    )
