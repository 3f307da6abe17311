"""What git's submodule commands say, read for prepare: each submodule's status, and a failed `git submodule update`
made into a message that names the submodule, its URL and the ways on."""

from __future__ import annotations

import re
from pathlib import Path

from buildkit.errors import GitFailed
from buildkit.world.git import run_git

SUBMODULE_HINT = (
    "check the network to that host; or point it at a mirror with pins.yaml `git_url_rewrites` (git's "
    "url.<mirror>.insteadOf); or, for a smoke build, skip submodules in every command with BUILDKIT_SUBMODULES=0 "
    '(or --no-submodules); see "No internet" (docs/how-to/no-internet.md)'
)


def submodule_failure(tree: Path, exc: GitFailed) -> GitFailed:
    """git's "Failed to clone 'x' a second time" made into what failed (the submodule and its URL) and the ways on."""
    paths = re.findall(r"'([^'\n]{1,200})'", exc.stderr)
    urls: dict[str, str] = {}
    try:
        listed = run_git(["config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"], cwd=tree)
        names: dict[str, dict[str, str]] = {}
        for line in listed.splitlines():
            key, _, value = line.partition(" ")
            name, _, field = key.removeprefix("submodule.").rpartition(".")
            names.setdefault(name, {})[field] = value
        urls = {entry["path"]: entry["url"] for entry in names.values() if "path" in entry and "url" in entry}
    except GitFailed:
        pass  # the message then names the path git gave, without its URL
    failed = next((path for path in reversed(paths) if path in urls), None)
    if failed is None:
        failed = next((p for p in reversed(paths) if "/" in p or p in urls), None)
    what = f"submodule {failed}" if failed else "a submodule"
    where = f" from {urls[failed]}" if failed in urls else ""
    exc.message = f"cannot fetch {what}{where}: {exc.message.removeprefix('git submodule update failed: ')}"
    exc.hint = SUBMODULE_HINT
    exc.args = (exc.message,)
    return exc


def submodule_status(tree: Path, config: list[str]) -> list[tuple[str, str, str]]:
    """(flag, commit, path) per submodule: ' ' in sync, '-' not checked out, '+' other commit, 'U' conflict."""
    out = run_git(["submodule", "status", "--recursive"], cwd=tree, config=config)
    rows = []
    for line in out.splitlines():
        if not line:
            continue
        flag, rest = line[0], line[1:]
        commit, _, path = rest.partition(" ")
        rows.append((flag, commit, path.split(" (")[0]))
    return rows
