"""The one place buildkit runs git: argv lists (never a shell), no prompts, C locale, git's own words on failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from buildkit.errors import UpstreamUnreachable

GIT_TIMEOUT = 600.0
# Messages git prints when the remote itself cannot be reached (as opposed to a ref that is missing there).
_UNREACHABLE_MARKERS = (
    "Could not resolve host",
    "Connection refused",
    "unable to connect",
    "Failed to connect",
    "Network is unreachable",
    "timed out",
    "does not appear to be a git repository",
    "Could not read from remote repository",
    "repository not found",
    "not found",
)


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


class GitFailed(UpstreamUnreachable):
    def __init__(self, args: list[str], stderr: str):
        last = stderr.splitlines()[-1] if stderr else "no output"
        super().__init__(f"git {' '.join(args[:2])} failed: {last}")
        self.stderr = stderr

    def remote_unreachable(self) -> bool:
        return any(m.lower() in self.stderr.lower() for m in _UNREACHABLE_MARKERS)


def has_commit(repo: Path, sha: str) -> bool:
    """Whether the repository already holds the commit (so no fetch is needed)."""
    try:
        run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo)
        return True
    except GitFailed:
        return False
