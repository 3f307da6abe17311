"""The composition proof's git history (buildkit/stages/resolve/git.py GitHistory) leaves nothing behind (issue 40,
"What failed" 5): a first fetch that failed, from a remote that does not answer or one that has no such branch,
left cache/git/history-*/ behind, with whatever the fetch had written, on every run. Real repositories, served by
`git daemon` on loopback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildkit.errors import UpstreamMismatch, UpstreamUnreachable
from buildkit.stages.resolve.git import GitHistory
from tests.support.failures import assert_failed
from tests.support.fake_upstreams import VLLM_SHA
from tests.support.gitserver import GitDaemon, commit_all, free_port, git

UPSTREAM_URL = "https://github.com/vllm-project/vllm.git"


def _served(tmp_path: Path) -> GitDaemon:
    """vLLM's stand-in (main: setup.py, csrc/, vllm/) and a fork's branch on it, bare under a git daemon."""
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "setup.py").write_text("# vLLM's setup\n")
    (work / "csrc").mkdir()
    (work / "csrc" / "ops.cu").write_text("// kernels\n")
    commit_all(work, "initial")
    git("checkout", "-q", "-b", "draft-tp", cwd=work)
    (work / "draft.py").write_text("y = 2\n")
    commit_all(work, "draft model TP")
    served = tmp_path / "served"
    served.mkdir()
    daemon = GitDaemon(served)
    daemon.publish(work, "vllm.git")
    return daemon


def _left(cache: Path) -> list[str]:
    """What the history left in cache/git/: anything but the resolver's own <hash>.git caches."""
    git_dir = cache / "git"
    return sorted(p.name for p in git_dir.iterdir() if not p.name.endswith(".git")) if git_dir.exists() else []


@pytest.mark.e2e
def test_a_failed_first_fetch_leaves_no_history_directory(tmp_path):
    cache = tmp_path / "cache"
    closed = f"git://127.0.0.1:{free_port()}/vllm.git"  # nothing listens there
    with pytest.raises(UpstreamUnreachable):
        GitHistory(cache, closed, "main", [])
    assert _left(cache) == []
    daemon = _served(tmp_path)
    try:
        with pytest.raises(UpstreamMismatch, match="no-such-branch"):
            GitHistory(cache, f"{daemon.url}vllm.git", "no-such-branch", [])
        assert _left(cache) == []
        history = GitHistory(cache, f"{daemon.url}vllm.git", "main", [])
        assert len(_left(cache)) == 1 and history.merge_base(history.tip) == history.tip
        history.close()
        assert _left(cache) == []
    finally:
        daemon.stop()


@pytest.mark.e2e
def test_a_killed_runs_history_is_removed_by_the_next(tmp_path):
    """A resolve killed mid-fetch (SIGKILL: no `finally` runs) leaves its directory, named with its process id;
    the next history made beside it removes it once that process is gone."""
    daemon = _served(tmp_path)
    cache = tmp_path / "cache"
    try:
        killed = GitHistory(cache, f"{daemon.url}vllm.git", "main", [])
        (orphan,) = _left(cache)
        dead = 2**22 + 1  # above the kernel's largest pid (PID_MAX_LIMIT): no process has it
        renamed = cache / "git" / orphan.replace(f".{os.getpid()}.", f".{dead}.")
        os.rename(cache / "git" / orphan, renamed)
        del killed
        history = GitHistory(cache, f"{daemon.url}vllm.git", "main", [])
        assert not renamed.exists() and len(_left(cache)) == 1
        history.close()
        assert _left(cache) == []
    finally:
        daemon.stop()


@pytest.mark.parametrize("failing", ["an upstream that does not answer", "a branch the upstream lacks"])
def test_resolve_that_fails_in_the_history_leaves_nothing(project, tmp_path, failing):
    root, cli = project
    daemon = _served(tmp_path)
    try:
        upstream = f"git://127.0.0.1:{free_port()}/vllm.git" if failing.startswith("an upstream") else None
        text = (root / "pins.yaml").read_text().replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
        fork = f"repo: {daemon.url}vllm.git\n  ref: draft-tp\n  upstream: {upstream or daemon.url + 'vllm.git'}"
        if not upstream:
            fork += "\n  upstream_branch: no-such-branch"
        (root / "pins.yaml").write_text(text.replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', fork))
        result = cli("resolve")
        assert_failed(result, 3 if upstream else 4, "cannot fetch from" if upstream else "no-such-branch")
        assert not (root / "pins.lock").exists()
        assert _left(root / "cache") == [], "no history directory, no temp directory"
    finally:
        daemon.stop()
