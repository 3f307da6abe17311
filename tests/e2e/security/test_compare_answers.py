"""GitHub's compare answer, held to what it can be (issue 40, "What failed" 5). The composition proof reads the paths
that differ between the wheel's commit and the source from `GET /repos/{o}/{r}/compare/{base}...{head}`
(docs.github.com/en/rest/commits/commits#compare-two-commits): `status`, `ahead_by`, `behind_by`,
`merge_base_commit`, `files[]` (`filename`, `previous_filename` for a rename; at most 300).

- A path is a git path (no `.`, `..` or empty component, no leading `/`, no control character, at most 4096 bytes),
  or the answer is refused, exit 3, naming it: `vllm/../csrc/x.cu` is csrc/x.cu, which the `csrc/` rule of
  buildkit/models/compiled.py did not see.
- `files: []` while the head has commits the base lacks (`ahead_by` > 0) is no proof that nothing changed: GitHub
  answers an empty list where it lists no files (an answer past the first page lists none, "The list of changed
  files is only shown on the first page of results", the page above; users have been answered non-zero ahead_by and
  an empty `files`, octokit/octokit.net#1749). The paths then come from git, as for a list cut at 300: a kernel
  change the empty list hid stops resolve (exit 8); an empty commit (ahead by one, no change) still passes.
- `ahead_by` is a count (a non-negative integer), and an empty list beside a status `ahead` or `diverged` is no proof
  either, whatever `ahead_by` says.
- The same grammar holds where git lists the paths: a fork whose trees name an entry `..` (git does not check a
  remote's trees on fetch) is refused, exit 3.

The stand-in GitHub (tests/support/fake_upstreams.py) answers from its commit graph; where git is asked, the same
commits are real repositories behind `git_url_rewrites`, served by `git daemon` on loopback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.failures import assert_failed
from tests.support.fake_upstreams import VLLM_SHA
from tests.support.gitserver import GitDaemon, commit_all, git

UPSTREAM, FORK = "vllm-project/vllm", "stormchasingg/vllm"
UPSTREAM_URL = f"https://github.com/{UPSTREAM}.git"
OPEN_PR = 31886  # an open PR of a fork (tests/e2e/test_vllm_source.py says which)
HEAD_1, HEAD_2 = "a" * 40, "b" * 40  # the fork's branch, forked at VLLM_SHA
PYTHON_PATH = "vllm/v1/worker/gpu_model_runner.py"
DATE = "2026-02-01T00:00:00Z"


def _wheel_name(sha: str) -> str:
    return f"vllm-0.14.0rc2.dev156+g{sha[:9]}-cp38-abi3-manylinux_2_31_x86_64.whl"


def _open_pr(root: Path, upstreams, head_files: list[str], renamed: dict[str, str] | None = None) -> None:
    """main: VLLM_SHA (with its wheel); the fork: VLLM_SHA -> HEAD_1 -> HEAD_2 (changing `head_files`); the pins
    build PR #31886, open, from the fork's head."""
    gh = upstreams.github
    gh.fork_of[FORK] = UPSTREAM
    gh.add_commit(FORK, HEAD_1, "draft model TP", DATE, parents=[VLLM_SHA], files=[PYTHON_PATH])
    gh.add_commit(FORK, HEAD_2, "draft model TP: more", DATE, branch="draft-tp", files=head_files)
    if renamed:
        gh.renamed[HEAD_2] = renamed
    gh.add_pull(UPSTREAM, OPEN_PR, "draft model TP", None, None, head=(HEAD_2, "draft-tp", FORK))
    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text.replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', f"pr: {OPEN_PR}"))


BAD_PATHS = {
    "a .. component": "vllm/../csrc/spec_decode.cu",
    "a . component": "./csrc/spec_decode.cu",
    "an empty component": "csrc//spec_decode.cu",
    "a trailing slash": "csrc/spec_decode.cu/",
    "a leading slash": "/csrc/spec_decode.cu",
    "a control character": "csrc/spec\x1b[2Kdecode.cu",
    "too long": "vllm/" + "a" * 4100 + ".py",
}


@pytest.mark.parametrize("case", [*BAD_PATHS, "a renamed file's old path"])
def test_a_compare_path_that_is_no_git_path_is_exit_3_naming_it(project, upstreams, case):
    root, cli = project
    if case == "a renamed file's old path":
        _open_pr(root, upstreams, [PYTHON_PATH], renamed={PYTHON_PATH: "vllm/../csrc/spec_decode.cu"})
        bad = "vllm/../csrc/spec_decode.cu"
    else:
        bad = BAD_PATHS[case]
        _open_pr(root, upstreams, [PYTHON_PATH, bad])
    result = cli("resolve")
    assert_failed(result, 3, f"GitHub API answer for {UPSTREAM} compare main...{HEAD_2[:12]} is malformed: files.")
    assert repr(bad)[:60] in result.stderr or case == "too long", result.stderr
    assert "\x1b" not in result.stderr and len(result.stderr.splitlines()) <= 3 and len(result.stderr) < 800
    assert not (root / "pins.lock").exists()


@pytest.mark.parametrize("edit", [{"ahead_by": -1}, {"ahead_by": "2"}, {"ahead_by": None}])
def test_an_ahead_by_that_is_no_count_is_exit_3(project, upstreams, edit):
    root, cli = project
    _open_pr(root, upstreams, [PYTHON_PATH])
    upstreams.github.compare_edits.append(lambda answer: answer.update(edit))
    result = cli("resolve")
    assert_failed(result, 3, f"GitHub API answer for {UPSTREAM} compare main...{HEAD_2[:12]} is malformed: ahead_by")
    assert not (root / "pins.lock").exists()


def _mktree(work: Path, listing: str) -> str:
    """A tree object from `git ls-tree`'s format; git mktree takes names git would never check out, `..` too."""
    return subprocess.run(
        ["git", "mktree"], cwd=work, input=listing, capture_output=True, text=True, check=True
    ).stdout.strip()


def _dotdot_commit(work: Path, base: str) -> str:
    """A commit on `base` whose tree holds vllm/../csrc/ops.cu, a kernel changed under a name that is csrc/ops.cu
    spelled past the `csrc/` rule: written with git's own plumbing, as a hostile remote can serve it."""
    (work / "kernel.cu").write_text("// kernels, the fork's own\n")
    blob = git("hash-object", "-w", "kernel.cu", cwd=work)
    (work / "kernel.cu").unlink()
    csrc = _mktree(work, f"100644 blob {blob}\tops.cu\n")
    dotdot = _mktree(work, f"040000 tree {csrc}\tcsrc\n")
    vllm = _mktree(work, git("ls-tree", f"{base}:vllm", cwd=work) + f"\n040000 tree {dotdot}\t..\n")
    root_entries = [line for line in git("ls-tree", base, cwd=work).splitlines() if not line.endswith("\tvllm")]
    root = _mktree(work, "\n".join([*root_entries, f"040000 tree {vllm}\tvllm"]) + "\n")
    head = git("commit-tree", root, "-p", base, "-m", "draft model TP: a kernel", cwd=work)
    git("branch", "draft-tp", head, cwd=work)
    return head


def _repos(tmp_path: Path, head_change: str) -> tuple[GitDaemon, str, str, str]:
    """vLLM's stand-in (main: setup.py, csrc/ops.cu, vllm/) and a fork branched from main's second commit, whose
    head changes csrc/ops.cu (`kernel`; `dotdot`: as vllm/../csrc/ops.cu) or nothing (`empty`: a commit with no
    change); bare under a git daemon.
    Returns the daemon, the merge base, main's tip and the fork's head."""
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "setup.py").write_text("# vLLM's setup\n")
    (work / "csrc").mkdir()
    (work / "csrc" / "ops.cu").write_text("// kernels\n")
    (work / "vllm").mkdir()
    (work / "vllm" / "__init__.py").write_text("")
    commit_all(work, "initial")
    (work / "vllm" / "config.py").write_text("x = 1\n")
    base = commit_all(work, "[Core] config")
    if head_change == "dotdot":
        head = _dotdot_commit(work, base)  # made without checking it out: git refuses to
    else:
        git("checkout", "-q", "-b", "draft-tp", cwd=work)
        if head_change == "kernel":
            (work / "csrc" / "ops.cu").write_text("// kernels, the fork's own\n")
            head = commit_all(work, "draft model TP: a kernel")
        else:
            git("commit", "-q", "--allow-empty", "-m", "draft model TP: nothing yet", cwd=work)
            head = git("rev-parse", "HEAD", cwd=work)
        git("checkout", "-q", "main", cwd=work)
    (work / "vllm" / "engine.py").write_text("z = 3\n")
    tip = commit_all(work, "[Core] engine")
    served = tmp_path / "served"
    served.mkdir()
    git("clone", "-q", "--bare", "--branch", "main", str(work), str(served / "vllm.git"), cwd=tmp_path)
    git("clone", "-q", "--bare", "--branch", "draft-tp", str(work), str(served / "fork-vllm.git"), cwd=tmp_path)
    return GitDaemon(served), base, tip, head


# What the stand-in's answer is edited to: GitHub's empty list; and the same with ahead_by 0 beside a `diverged`
# status, which must not make the empty list a proof either.
EMPTY: dict[str, object] = {"files": []}
EMPTY_NOT_AHEAD: dict[str, object] = {"files": [], "ahead_by": 0}


@pytest.mark.parametrize(
    "head_change, edit",
    [("kernel", EMPTY), ("kernel", EMPTY_NOT_AHEAD), ("empty", EMPTY)],
    ids=["kernel", "kernel, ahead_by 0", "empty commit"],
)
def test_an_empty_file_list_ahead_of_the_base_is_listed_with_git(project, upstreams, tmp_path, head_change, edit):
    root, cli = project
    daemon, base, tip, head = _repos(tmp_path, head_change)
    try:
        gh = upstreams.github
        gh.fork_of[FORK] = UPSTREAM
        gh.add_commit(UPSTREAM, base, "[Core] config", DATE, parents=[VLLM_SHA], files=["vllm/config.py"])
        gh.add_commit(UPSTREAM, tip, "[Core] engine", DATE, branch="main", files=["vllm/engine.py"])
        changed = ["csrc/ops.cu"] if head_change == "kernel" else []
        gh.add_commit(FORK, head, "draft model TP", DATE, parents=[base], branch="draft-tp", files=changed)
        gh.compare_edits.append(lambda answer: answer.update(edit))  # GitHub lists none: see the docstring
        upstreams.wheels.add(base, _wheel_name(base))
        rewrites = (
            f"git_url_rewrites:\n  - url: {daemon.url}vllm.git\n    instead_of: {UPSTREAM_URL}\n"
            f"  - url: {daemon.url}fork-vllm.git\n    instead_of: https://github.com/{FORK}.git\n"
        )
        text = (
            (root / "pins.yaml")
            .read_text()
            .replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
            .replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', f'repo: https://github.com/{FORK}.git\n  ref: "{head}"')
        )
        (root / "pins.yaml").write_text(text + rewrites)
        result = cli("resolve", "--json")
        if head_change == "kernel":  # the change the empty list hid
            assert_failed(result, 8, "changes 1 file(s) that vLLM's compiled code is built from", "csrc/ops.cu (")
            assert not (root / "pins.lock").exists()
            return
        assert result.code == 0, result.output
        compare = json.loads(result.stdout)["vllm_compare"]
        assert (compare["method"], compare["paths"], compare["compiled"]) == ("git diff", 0, [])
        assert f"main...{head[:12]} listed with git instead" in result.stderr
    finally:
        daemon.stop()


def test_a_tree_entry_named_dotdot_in_git_history_is_exit_3(project, upstreams, tmp_path):
    """No GitHub at all: vLLM and the fork on a plain git remote, compared with git (GitHistory.changed)."""
    root, cli = project
    daemon, base, _tip, head = _repos(tmp_path, "dotdot")
    try:
        upstreams.wheels.add(base, _wheel_name(base))
        text = (root / "pins.yaml").read_text().replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
        fork = f"repo: {daemon.url}fork-vllm.git\n  ref: draft-tp\n  upstream: {daemon.url}vllm.git"
        (root / "pins.yaml").write_text(text.replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', fork))
        result = cli("resolve")
        assert_failed(result, 3, f"git diff {base[:12]} {head[:12]}: vllm/../csrc/ops.cu is no path git checks out")
        assert len(result.stderr.splitlines()) <= 2 and not (root / "pins.lock").exists()
    finally:
        daemon.stop()
