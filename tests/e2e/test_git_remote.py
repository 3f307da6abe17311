"""Refs on a plain git remote (not a GitHub API host) resolve through git itself: repositories made in the test,
served over git's own protocol by `git daemon` on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from tests.support.gitserver import GitDaemon, commit_all, free_port, git


@pytest.fixture
def rl_remote(tmp_path):
    """A NeMo-RL-shaped repository with history, a branch and an annotated tag, served by git daemon."""
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    shas = []
    for i in range(5):
        (work / "file.txt").write_text(f"{i}\n")
        shas.append(commit_all(work, f"change {i}", date=f"2026-02-0{i + 1}T10:00:00+00:00"))
    git("tag", "-a", "v0.5.0", "-m", "release", shas[2], cwd=work)
    served = tmp_path / "served"
    served.mkdir()
    daemon = GitDaemon(served)
    daemon.publish(work, "RL.git")
    yield f"{daemon.url}RL.git", shas, served / "RL.git"
    daemon.stop()


def pin_nemo(project, repo: str, ref: str):
    root, cli = project
    text = (root / "pins.yaml").read_text()
    text = text.replace("https://github.com/NVIDIA-NeMo/RL.git", repo).replace('ref: "946862e7"', f'ref: "{ref}"')
    (root / "pins.yaml").write_text(text)
    return cli


def resolve_nemo(cli) -> dict:
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    return json.loads(result.stdout)["nemo_rl"]


def test_branch_name(project, rl_remote):
    url, shas, _ = rl_remote
    fact = resolve_nemo(pin_nemo(project, url, "main"))
    assert fact["commit"] == shas[-1] and fact["subject"] == "change 4"
    assert fact["date"] == "2026-02-05T10:00:00+00:00"
    assert "git ls-remote" in fact["source"] and url in fact["source"]


def test_annotated_tag_is_peeled_to_its_commit(project, rl_remote):
    url, shas, _ = rl_remote
    assert resolve_nemo(pin_nemo(project, url, "v0.5.0"))["commit"] == shas[2]


def test_full_sha_not_at_a_tip_is_fetched_by_id_and_cached(project, rl_remote):
    url, shas, _ = rl_remote
    cli = pin_nemo(project, url, shas[1])
    fact = resolve_nemo(cli)
    assert fact["commit"] == shas[1] and fact["subject"] == "change 1"
    assert "git fetch --depth=1" in fact["source"]
    root, _ = project
    (root / "pins.lock").unlink()
    # The second run reuses the cache, and the lock says the same: how the commit is found, not what was cached.
    assert resolve_nemo(cli)["source"] == fact["source"]


def test_sha_prefix_not_at_a_tip_searches_history(project, rl_remote):
    url, shas, _ = rl_remote
    fact = resolve_nemo(pin_nemo(project, url, shas[0][:8]))
    assert fact["commit"] == shas[0] and "branches and tags" in fact["source"]


def test_file_url(project, rl_remote):
    _, shas, bare = rl_remote
    assert resolve_nemo(pin_nemo(project, f"file://{bare}", shas[3][:10]))["commit"] == shas[3]


def test_missing_ref_on_git_remote(project, rl_remote):
    url, _, _ = rl_remote
    cli = pin_nemo(project, url, "no-such-branch")
    result = cli("resolve")
    assert result.code == 4 and "no branch, tag or commit matches 'no-such-branch'" in result.stderr


def test_missing_full_sha_on_git_remote(project, rl_remote):
    url, _, _ = rl_remote
    result = pin_nemo(project, url, "c" * 40)("resolve")
    assert result.code == 4 and "does not exist there" in result.stderr, result.output
    # git's own reason is shown (issue 32): what the remote said, not a refspec
    assert f"commit {'c' * 40}: the fetch was refused (" in result.stderr and "refs/remotes" not in result.stderr


def test_unreachable_git_remote(project):
    url = f"git://127.0.0.1:{free_port()}/RL.git"
    result = pin_nemo(project, url, "main")("resolve")
    assert result.code == 3 and "cannot reach git remote" in result.stderr, result.output
    assert "Traceback" not in result.output


def test_uv_lock_is_read_with_git_on_another_remote(project, tmp_path):
    """NeMo-RL on a plain git remote: resolve reads uv.lock at the locked commit from its partial clone (one blob
    fetched), for the torch of the ABI check (issue 23)."""
    from tests.support.fake_upstreams import NEMO_RL_UV_LOCK

    work = tmp_path / "uvwork"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "uv.lock").write_text(NEMO_RL_UV_LOCK)
    sha = commit_all(work, "with uv.lock", date="2026-02-01T10:00:00+00:00")
    served = tmp_path / "uvserved"
    served.mkdir()
    daemon = GitDaemon(served)
    daemon.publish(work, "RL.git")
    try:
        result = pin_nemo(project, f"{daemon.url}RL.git", sha)("resolve", "--json")
    finally:
        daemon.stop()
    assert result.code == 0, result.output
    assert json.loads(result.stdout)["gpu"]["abi"]["against"][0].startswith("torch 2.9.0+cu129 ")
