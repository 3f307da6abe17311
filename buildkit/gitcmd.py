"""The one place buildkit runs git: argv lists (never a shell), no prompts, C locale, git's own words on failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from buildkit.errors import GitFailed, UpstreamUnreachable

GIT_TIMEOUT = 600.0


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_ASKPASS="true")
    return env


def run_git(
    args: list[str],
    cwd: Path | None = None,
    timeout: float = GIT_TIMEOUT,
    config: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run git with an argv list (never a shell); return stdout or raise with git's own words."""
    try:
        done = subprocess.run(
            ["git", *(config or []), *args],
            cwd=cwd,
            env={**_git_env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise UpstreamUnreachable("git is not installed", hint="install git (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise UpstreamUnreachable(f"git {args[0]} took longer than {timeout:g}s") from None
    if done.returncode != 0:
        raise GitFailed(args, done.stderr.strip())
    return done.stdout


def has_commit(repo: Path, sha: str) -> bool:
    """Whether the repository already holds the commit (so no fetch is needed)."""
    try:
        run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo)
        return True
    except GitFailed:
        return False
