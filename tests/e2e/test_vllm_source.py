"""Any vLLM source, built with the wheel of its merge base and proven to carry its compiled code (issue 28).

The stand-in GitHub answers pulls and compare as GitHub does (tests/support/fake_upstreams.py says where each field is
published): an open PR's `head` names its fork (`null` once the fork was deleted), a fork's commit is visible in the
parent's network, compare gives `merge_base_commit`, `status` (`diverged` for a fork's branch) and at most 300
`files`. Paths are real vLLM paths: `vllm/v1/worker/gpu_model_runner.py` (changed by the reference PR #24322,
https://github.com/vllm-project/vllm/pull/24322, Python only), `csrc/` and `requirements/cuda.txt` (vLLM's compiled
inputs, buildkit/models/compiled.py). The git path runs on real repositories served by `git daemon` on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.models.lock import read_lock
from buildkit.models.plan import build_args
from tests.support.failures import assert_failed
from tests.support.fake_upstreams import VLLM_SHA
from tests.support.gitserver import GitDaemon, commit_all, git
from tests.support.nemo_repo import use_remote
from tests.support.vllmtree import blob_id

# PR #31886 as its thread shows it (https://github.com/vllm-project/vllm/pull/31886, read through the search tool
# 2026-11-26): open, opened 2026-01-07 by stormchasingg, "[Feature][Bugfix] Support draft model tp any of speculative
# decode"; the fix is in Python (the speculative decoding proposer and its tensor-parallel groups; the review asks
# for an all_gather communicator, a parameterized reshape and type annotations). Its exact list of changed files is
# not reachable here: the stand-in's (PYTHON_PATH) is the model runner that vLLM issue #31345, which the PR fixes,
# debugged in. The fork's commits are the stand-in's own.
UPSTREAM, FORK = "vllm-project/vllm", "stormchasingg/vllm"
UPSTREAM_URL = f"https://github.com/{UPSTREAM}.git"
OPEN_PR = 31886  # draft-model TP: an open PR users apply to their own vLLM images
MAIN_1, MAIN_2 = "1" * 40, "2" * 40  # main after the reference merge commit
HEAD_1, HEAD_2 = "a" * 40, "b" * 40  # the fork's branch, forked at VLLM_SHA
PYTHON_PATH = "vllm/v1/worker/gpu_model_runner.py"
DATE = "2026-02-01T00:00:00Z"
# requirements/cuda.txt at 53f9946d3c51ada60fc829669133b965fc2daa1f, as vLLM's repository holds it (the same text
# tests/unit/models/test_compiled_inputs.py reads)
CUDA_TXT = b"""\
# Common dependencies
-r common.txt

numba == 0.61.2 # Required for N-gram speculative decoding

# Dependencies for NVIDIA GPUs
ray[cgraph]>=2.48.0 # Ray Compiled Graph, required for pipeline parallelism in V1.
torch==2.9.1
torchaudio==2.9.1
# These must be updated alongside torch
torchvision==0.24.1 # Required for phi3v processor. See https://github.com/pytorch/vision?tab=readme-ov-file#installation for corresponding version
# FlashInfer should be updated together with the Dockerfile
flashinfer-python==0.6.1
# Required for Nemotron-Flash model (delta rule ops)
fla-core
"""  # noqa: E501


def wheel_name(sha: str) -> str:
    return f"vllm-0.14.0rc2.dev156+g{sha[:9]}-cp38-abi3-manylinux_2_31_x86_64.whl"


def fork_history(upstreams, head_files: list[str], head_repo: str | None = FORK) -> None:
    """main: VLLM_SHA (with its wheel) -> MAIN_1 -> MAIN_2; the fork: VLLM_SHA -> HEAD_1 -> HEAD_2; PR #31886 open."""
    gh = upstreams.github
    gh.fork_of[FORK] = UPSTREAM
    gh.add_commit(UPSTREAM, MAIN_1, "[Core] main moves on", DATE, files=["vllm/engine/arg_utils.py"])
    gh.add_commit(UPSTREAM, MAIN_2, "[Kernel] main moves on", DATE, branch="main", files=["csrc/cache_kernels.cu"])
    gh.add_commit(FORK, HEAD_1, "draft model TP", DATE, parents=[VLLM_SHA], files=[PYTHON_PATH])
    gh.add_commit(FORK, HEAD_2, "draft model TP: more", DATE, branch="draft-tp", files=head_files)
    gh.add_pull(
        UPSTREAM,
        OPEN_PR,
        "[Feature][Bugfix] Support draft model tp any of speculative decode",
        None,
        None,
        head=(HEAD_2, "draft-tp", head_repo),
    )


def pin_open_pr(root: Path, extra: str = "") -> None:
    text = (root / "pins.yaml").read_text()
    text = text.replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', f"pr: {OPEN_PR}")
    (root / "pins.yaml").write_text(text + extra)


def test_an_open_pr_of_a_fork_builds_its_head_with_the_wheel_of_the_merge_base(project, upstreams):
    root, cli = project
    fork_history(upstreams, head_files=[PYTHON_PATH])
    pin_open_pr(root)
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    lock = json.loads(result.stdout)
    assert lock["vllm"]["repo"] == f"https://github.com/{FORK}.git" and lock["vllm"]["commit"] == HEAD_2
    pr = lock["vllm_pr"]
    assert (pr["state"], pr["merged_at"], pr["merge_commit"]) == ("open", None, None)
    assert (pr["head_commit"], pr["head_ref"], pr["head_repo"]) == (
        HEAD_2,
        "draft-tp",
        f"https://github.com/{FORK}.git",
    )
    assert lock["vllm_wheel"] == {
        "commit": VLLM_SHA,
        "upstream": "https://github.com/vllm-project/vllm.git",
        "branch": "main",
        "merge_base": VLLM_SHA,
        "chosen_by": "the merge base",
        "detail": "the source's merge base with main",
    }
    assert lock["wheel"]["filename"] == wheel_name(VLLM_SHA)  # the merge base's wheel, content-addressed
    compare = lock["vllm_compare"]
    assert (compare["method"], compare["paths"], compare["compiled"]) == ("GitHub compare", 1, [])
    assert compare["source"].endswith(f"/repos/{UPSTREAM}/compare/main...{HEAD_2}")
    assert compare["changed"] == {PYTHON_PATH: "modified"}
    # The head differs from the merge base in Python only: upstream's custom-vLLM build installs the merge base from
    # vLLM itself with its wheel, and the head's differing path is laid over it (render's vllm_overlay).
    args = dict(build_args(read_lock(root / "pins.lock")))
    assert (args["BUILD_CUSTOM_VLLM_URL"], args["BUILD_CUSTOM_VLLM_REF"]) == (UPSTREAM_URL, VLLM_SHA)
    assert args["BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION"].endswith(wheel_name(VLLM_SHA))


def test_a_change_to_compiled_code_stops_resolve_with_exit_8_and_no_lock(project, upstreams):
    root, cli = project
    fork_history(upstreams, head_files=["csrc/spec_decode/draft_kernels.cu", "CMakeLists.txt"])
    pin_open_pr(root)
    result = cli("resolve")
    assert_failed(
        result,
        8,
        f"the vLLM source {HEAD_2[:12]} changes 2 file(s) that vLLM's compiled code is built "
        f"from, relative to {VLLM_SHA[:12]}",
        "CMakeLists.txt (",
        "csrc/spec_decode/draft_kernels.cu (",
        "wheel.accept_compiled_changes",
        "build vLLM from source",
    )
    assert not (root / "pins.lock").exists()


def test_a_reviewer_may_accept_compiled_changes_and_the_lock_says_so(project, upstreams):
    root, cli = project
    fork_history(upstreams, head_files=["csrc/spec_decode/draft_kernels.cu"])
    reason = "the new kernel is dead code on H100; reviewed in #31886"
    pin_open_pr(root)
    text = (root / "pins.yaml").read_text().replace("wheel:\n", f'wheel:\n  accept_compiled_changes: "{reason}"\n', 1)
    (root / "pins.yaml").write_text(text)
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    compare = json.loads(result.stdout)["vllm_compare"]
    assert compare["compiled"] == [
        "csrc/spec_decode/draft_kernels.cu (C++/CUDA sources and generator scripts of _C, _moe_C, cumem_allocator)"
    ] or compare["compiled"][0].startswith("csrc/spec_decode/draft_kernels.cu (")
    assert compare["accepted"] == reason


def test_a_changed_torch_pin_stops_resolve_and_another_line_does_not(project, upstreams):
    root, cli = project
    fork_history(upstreams, head_files=["requirements/cuda.txt"])
    gh = upstreams.github
    gh.files[(UPSTREAM, VLLM_SHA, "requirements/cuda.txt")] = CUDA_TXT
    gh.files[(FORK, HEAD_2, "requirements/cuda.txt")] = CUDA_TXT.replace(b"ray[cgraph]>=2.48.0", b"ray[cgraph]>=2.49")
    pin_open_pr(root)
    result = cli("resolve", "--json")
    assert result.code == 0, result.output  # only ray moved: the torch the extensions link against is the same
    assert json.loads(result.stdout)["vllm_compare"]["compiled"] == []
    gh.files[(FORK, HEAD_2, "requirements/cuda.txt")] = CUDA_TXT.replace(b"torch==2.9.1", b"torch==2.10.0")
    result = cli("resolve")
    assert_failed(
        result, 8, "requirements/cuda.txt (the torch the extensions are built against: torch==2.9.1 -> torch==2.10.0)"
    )


def test_a_merge_base_without_a_wheel_walks_back_along_main_and_says_each_try(project, upstreams):
    root, cli = project
    gh = upstreams.github
    gh.fork_of[FORK] = UPSTREAM
    gh.add_commit(UPSTREAM, MAIN_1, "[Core] no wheel was published", DATE, files=["vllm/engine/arg_utils.py"])
    gh.add_commit(UPSTREAM, MAIN_2, "[Core] main moves on", DATE, branch="main", files=["vllm/config.py"])
    gh.add_commit(FORK, HEAD_1, "draft model TP", DATE, parents=[MAIN_1], branch="draft-tp", files=[PYTHON_PATH])
    gh.add_pull(UPSTREAM, OPEN_PR, "[Spec Decode] draft model TP", None, None, head=(HEAD_1, "draft-tp", FORK))
    pin_open_pr(root)
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    lock = json.loads(result.stdout)
    wheel = lock["vllm_wheel"]
    assert (wheel["commit"], wheel["merge_base"], wheel["chosen_by"]) == (
        VLLM_SHA,
        MAIN_1,
        "an ancestor of the merge base",
    )
    assert wheel["detail"].startswith(f"1 newer commit(s) from the merge base on had no wheel ({MAIN_1[:12]}: ")
    assert f"vllm {MAIN_1[:12]} has no usable wheel" in result.stderr  # each try said
    # the comparison now spans MAIN_1's change too: both are Python
    assert lock["vllm_compare"]["paths"] == 2 and lock["vllm_compare"]["compiled"] == []


@pytest.mark.parametrize("case", ["deleted fork", "not an ancestor", "no wheel", "closed"])
def test_bad_sources_are_one_clear_line_each_and_nothing_written(project, upstreams, case):
    root, cli = project
    fork_history(upstreams, head_files=[PYTHON_PATH], head_repo=None if case == "deleted fork" else FORK)
    if case == "not an ancestor":
        text = (root / "pins.yaml").read_text().replace("wheel:\n", f'wheel:\n  commit: "{MAIN_2}"\n', 1)
        (root / "pins.yaml").write_text(text)
    if case == "no wheel":
        upstreams.wheels.listings.pop(VLLM_SHA)
    if case == "closed":
        upstreams.github.pulls[(UPSTREAM, OPEN_PR)]["state"] = "closed"
    pin_open_pr(root)
    result = cli("resolve")
    expected = {
        "deleted fork": (4, f"PR #{OPEN_PR} is open, but its head repository was deleted"),
        "not an ancestor": (4, f"wheel.commit {MAIN_2[:12]} is not an ancestor of the vLLM source {HEAD_2[:12]}"),
        "no wheel": (4, f"none of the 1 commit(s) from the merge base {VLLM_SHA[:12]} back along main"),
        "closed": (4, f"PR #{OPEN_PR} was closed without being merged"),
    }[case]
    assert_failed(result, *expected)
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1
    assert not (root / "pins.lock").exists()


@pytest.mark.parametrize("case", ["closed", "deleted fork"])
@pytest.mark.parametrize("ref", [None, HEAD_2])
def test_a_pr_that_cannot_be_built_is_told_what_to_pin_as_the_pins_stand(project, upstreams, case, ref):
    """The hint is true of the pins: with vllm.ref pinned beside the PR it says so and does not ask for it again;
    followed, the next resolve passes."""
    root, cli = project
    fork_history(upstreams, head_files=[PYTHON_PATH], head_repo=None if case == "deleted fork" else FORK)
    if case == "closed":
        upstreams.github.pulls[(UPSTREAM, OPEN_PR)]["state"] = "closed"
    pin_open_pr(root)
    if ref is not None:
        text = (root / "pins.yaml").read_text()
        (root / "pins.yaml").write_text(text.replace(f"pr: {OPEN_PR}", f'ref: "{ref}"\n  pr: {OPEN_PR}'))
    result = cli("resolve")
    assert result.code == 4, result.output
    hint = result.stderr.split("hint:", 1)[1]
    assert "drop vllm.pr" in hint
    if ref is not None:
        assert f"vllm.ref {ref} is pinned already" in hint and "pin the branch or commit" not in hint
    else:
        assert "is pinned already" not in hint and "vllm.ref" in hint
    if case == "closed":
        assert f"vllm.repo https://github.com/{FORK}.git (the PR's head repository)" in hint
    # Followed: the PR dropped, its head pinned as a plain ref on the fork that holds it.
    text = (root / "pins.yaml").read_text().replace(f'  ref: "{ref}"\n', "")
    text = text.replace(f"pr: {OPEN_PR}", f'ref: "{HEAD_2}"').replace(UPSTREAM_URL, f"https://github.com/{FORK}.git", 1)
    (root / "pins.yaml").write_text(text)
    followed = cli("resolve")
    assert followed.code == 0, followed.output


def test_resolve_check_says_when_the_open_pr_moved_or_was_merged(project, upstreams):
    root, cli = project
    fork_history(upstreams, head_files=[PYTHON_PATH])
    pin_open_pr(root)
    assert cli("resolve").code == 0
    assert cli("resolve", "--check").code == 0
    moved = "c" * 40
    upstreams.github.add_commit(FORK, moved, "force-pushed", DATE, parents=[HEAD_1], files=[PYTHON_PATH])
    upstreams.github.pulls[(UPSTREAM, OPEN_PR)]["head"]["sha"] = moved
    result = cli("resolve", "--check")  # (--check shows the lock it checked on stdout)
    assert result.code == 1 and f"PR #{OPEN_PR}'s head moved from {HEAD_2} to {moved}" in result.stderr
    assert "buildkit bump --vllm" in result.stderr
    merged = "d" * 40
    upstreams.github.add_commit(
        UPSTREAM,
        merged,
        "[Spec Decode] draft model TP (#31886)",
        DATE,
        branch="main",
        parents=[MAIN_2],
        files=[PYTHON_PATH],
    )
    upstreams.wheels.add(merged, wheel_name(merged))
    upstreams.github.add_pull(
        UPSTREAM, OPEN_PR, "[Spec Decode] draft model TP", merged, DATE, head=(moved, "draft-tp", FORK)
    )
    result = cli("resolve", "--check")
    assert result.code == 1 and f"PR #{OPEN_PR} was merged as {merged}" in result.stderr, result.output


# --- the git path: a fork on a plain git remote, real repositories ------------------------------------------------


def make_repos(tmp_path: Path) -> tuple[GitDaemon, str, str, str]:
    """An upstream with main (setup.py, csrc/, vllm/) and a fork that branched from its second commit and changed
    Python only; both bare under a git daemon. Returns the daemon, the merge base, main's tip and the fork's head."""
    served = tmp_path / "served"
    served.mkdir()
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
    git("checkout", "-q", "-b", "draft-tp", cwd=work)
    (work / "vllm" / "draft.py").write_text("y = 2\n")
    head = commit_all(work, "draft model TP")
    git("checkout", "-q", "main", cwd=work)
    (work / "csrc" / "ops.cu").write_text("// kernels, faster\n")
    tip = commit_all(work, "[Kernel] faster")
    git("clone", "-q", "--bare", "--branch", "main", str(work), str(served / "vllm.git"), cwd=tmp_path)
    git("clone", "-q", "--bare", "--branch", "draft-tp", str(work), str(served / "alice-vllm.git"), cwd=tmp_path)
    return GitDaemon(served), base, tip, head


def pin_git_fork(root: Path, daemon: GitDaemon, repo: str, ref: str = "draft-tp") -> None:
    """vllm: `repo` at `ref` on the git daemon, vLLM's own repository there too (no GitHub at all)."""
    text = (root / "pins.yaml").read_text().replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
    text = text.replace(
        f'ref: "{VLLM_SHA}"\n  pr: 24322', f"repo: {daemon.url}{repo}\n  ref: {ref}\n  upstream: {daemon.url}vllm.git"
    )
    (root / "pins.yaml").write_text(text)


def test_a_fork_on_a_plain_git_remote_is_compared_with_git(project, upstreams, tmp_path):
    root, cli = project
    daemon, base, tip, head = make_repos(tmp_path)
    try:
        upstreams.wheels.add(base, wheel_name(base))
        pin_git_fork(root, daemon, "alice-vllm.git")
        result = cli("resolve", "--json")
        assert result.code == 0, result.output
        lock = json.loads(result.stdout)
        assert lock["vllm"]["commit"] == head and lock["vllm_wheel"]["merge_base"] == base
        assert lock["vllm_wheel"]["commit"] == base and lock["vllm_wheel"]["chosen_by"] == "the merge base"
        compare = lock["vllm_compare"]
        assert (compare["method"], compare["paths"], compare["compiled"]) == ("git diff", 1, [])
        assert tip not in json.dumps(lock)  # main's later kernel change is not between the merge base and the head
        # The head's Python files, by the blob ids git itself gives them (git ls-tree on the blobless fetch).
        listed = lock["vllm_python"]
        assert (listed["commit"], listed["source"]) == (head, f"git ls-tree -r {head}")
        assert listed["files"] == {
            p: blob_id(t)
            for p, t in (("vllm/__init__.py", b""), ("vllm/config.py", b"x = 1\n"), ("vllm/draft.py", b"y = 2\n"))
        }
    finally:
        daemon.stop()


def test_a_repository_that_shares_no_history_with_vllm_is_refused(project, upstreams, tmp_path):
    root, cli = project
    daemon, _base, _tip, _head = make_repos(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    git("init", "-q", "-b", "main", cwd=other)
    (other / "README").write_text("not vllm\n")
    commit_all(other, "unrelated")
    git("clone", "-q", "--bare", str(other), str(tmp_path / "served" / "other.git"), cwd=tmp_path)
    try:
        pin_git_fork(root, daemon, "other.git", ref="main")
        result = cli("resolve")
        assert_failed(result, 4, "shares no history with main", "not a fork of vLLM")
        assert not (root / "pins.lock").exists()
    finally:
        daemon.stop()


@pytest.mark.parametrize("where", ["git", "GitHub"])
def test_a_ref_missing_from_the_fork_is_one_line_and_nothing_written(project, upstreams, tmp_path, where):
    """A branch the fork does not have: on a plain git remote (its real daemon) and on GitHub (422, as the commits
    API answers an unknown ref)."""
    root, cli = project
    daemon, _base, _tip, _head = make_repos(tmp_path)
    try:
        if where == "git":
            pin_git_fork(root, daemon, "alice-vllm.git", ref="no-such-branch")
        else:
            fork_history(upstreams, head_files=[PYTHON_PATH])
            text = (root / "pins.yaml").read_text().replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
            (root / "pins.yaml").write_text(
                text.replace(
                    f'ref: "{VLLM_SHA}"\n  pr: 24322', f"repo: https://github.com/{FORK}.git\n  ref: no-such-branch"
                )
            )
        result = cli("resolve")
        assert result.code == 4, result.output
        assert "no-such-branch" in result.stderr
        assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1
        assert not (root / "pins.lock").exists()
    finally:
        daemon.stop()


def test_bump_vllm_follows_an_open_pr_and_says_what_changed(project, remote, upstreams):
    root, cli = use_remote(project, remote)
    fork_history(upstreams, head_files=[PYTHON_PATH])
    pin_open_pr(root)
    assert cli("resolve").code == 0, "the open PR resolves"
    moved = "c" * 40
    upstreams.github.add_commit(FORK, moved, "force-pushed", DATE, parents=[HEAD_1], files=[PYTHON_PATH])
    upstreams.github.pulls[(UPSTREAM, OPEN_PR)]["head"]["sha"] = moved
    before = (root / "pins.yaml").read_text()
    result = cli("bump", "--vllm", "--json")
    assert result.code == 0, result.output
    report = json.loads(result.stdout)
    assert report["outcome"] == "bumped"  # the pins name the PR, not a commit: the lock alone moves
    assert report["moves"][1]["old"]["commit"] == HEAD_2 and report["moves"][1]["new"]["commit"] == moved
    assert report["pr_followed"] == f"PR #{OPEN_PR} is open; its head is {moved} (was {HEAD_2[:12]}: a force-push)"
    assert report["vllm_source"].startswith(
        f"vLLM's Python at {moved[:12]} from {FORK}, its kernels from the wheel "
        f"of {VLLM_SHA[:12]}, the merge base with main; no compiled source differs"
    )
    assert (root / "pins.yaml").read_text() == before
    assert json.loads((root / "pins.lock").read_text())["vllm"]["commit"] == moved
    summary = (root / "build" / "bump.md").read_text()
    assert f"Followed: PR \\#{OPEN_PR} is open" in summary or f"Followed: PR #{OPEN_PR} is open" in summary
    assert cli("resolve", "--check").code == 0


def test_a_compare_cut_at_300_files_is_listed_with_git_instead(project, upstreams, tmp_path):
    """GitHub's compare answer lists at most 300 files: past that, the paths come from git (the same commits, real
    repositories behind git_url_rewrites), never from the cut list."""
    root, cli = project
    daemon, base, tip, head = make_repos(tmp_path)
    try:
        gh = upstreams.github
        gh.fork_of[FORK] = UPSTREAM
        gh.add_commit(UPSTREAM, base, "[Core] config", DATE, parents=[VLLM_SHA], files=["vllm/config.py"])
        gh.add_commit(UPSTREAM, tip, "[Kernel] faster", DATE, branch="main", files=["csrc/ops.cu"])
        many = [f"vllm/generated/file_{i:03}.py" for i in range(301)]  # as GitHub answers: 300 of them
        gh.add_commit(FORK, head, "draft model TP", DATE, parents=[base], branch="draft-tp", files=many)
        upstreams.wheels.add(base, wheel_name(base))
        rewrites = (
            f"git_url_rewrites:\n  - url: {daemon.url}vllm.git\n    instead_of: {UPSTREAM_URL}\n"
            f"  - url: {daemon.url}alice-vllm.git\n"
            f"    instead_of: https://github.com/{FORK}.git\n"
        )
        text = (
            (root / "pins.yaml")
            .read_text()
            .replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
            .replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', f'repo: https://github.com/{FORK}.git\n  ref: "{head}"')
        )
        (root / "pins.yaml").write_text(text + rewrites)
        gh.truncated_trees.add(head)  # and its tree listing is cut too: git lists the Python files
        result = cli("resolve", "--json")
        assert result.code == 0, result.output
        compare = json.loads(result.stdout)["vllm_compare"]
        assert (compare["method"], compare["paths"], compare["compiled"]) == ("git diff", 1, [])  # git's true list
        assert (
            f"GitHub's compare answer lists at most 300 files: main...{head[:12]} listed with git instead"
            in result.stderr
        )
        assert "vLLM's Python files listed with git instead" in result.stderr
        listed = json.loads(result.stdout)["vllm_python"]
        assert listed["source"] == f"git ls-tree -r {head}" and set(listed["files"]) == {
            "vllm/__init__.py",
            "vllm/config.py",
            "vllm/draft.py",
        }
    finally:
        daemon.stop()


@pytest.mark.parametrize("case", ["no files", "behind but another merge base", "head repository elsewhere"])
def test_hostile_github_answers_are_exit_3_never_a_passing_proof(project, upstreams, case):
    """An answer GitHub cannot give is refused (review of issue 28): compare without its `files` list would read as
    "nothing changed"; `behind` names the source itself as the merge base; an open PR's head repository is the
    `full_name` it says, on GitHub."""
    root, cli = project
    fork_history(upstreams, head_files=["csrc/spec_decode/draft_kernels.cu"])
    gh = upstreams.github
    if case == "no files":
        gh.compare_edits.append(lambda answer: answer.pop("files"))
    if case == "behind but another merge base":
        gh.compare_edits.append(lambda answer: answer.update(status="behind"))
    if case == "head repository elsewhere":
        gh.pulls[(UPSTREAM, OPEN_PR)]["head"]["repo"]["clone_url"] = "https://gitlab.example/stormchasingg/vllm.git"
    pin_open_pr(root)
    result = cli("resolve")
    needle = {
        "no files": "is malformed: files: Field required",
        "behind but another merge base": "behind, but its merge base",
        "head repository elsewhere": "the head repository's clone URL",
    }[case]
    assert_failed(result, 3, needle)
    assert not (root / "pins.lock").exists()


def test_a_path_with_a_line_break_stays_one_line_and_the_history_is_not_kept(project, upstreams, tmp_path):
    root, cli = project
    daemon, base, _tip, _head = make_repos(tmp_path)
    work = tmp_path / "work"
    git("checkout", "-q", "draft-tp", cwd=work)
    (work / "csrc" / "a\nINJECTED all good.cu").write_text("// kernel\n")
    commit_all(work, "a kernel with a line break in its name")
    git("push", "-q", str(tmp_path / "served" / "alice-vllm.git"), "draft-tp", cwd=work)
    try:
        upstreams.wheels.add(base, wheel_name(base))
        pin_git_fork(root, daemon, "alice-vllm.git")
        result = cli("resolve")
        assert_failed(result, 8, "csrc/a\\x0aINJECTED all good.cu (")
        assert len(result.stderr.splitlines()) == 2  # the error, its hint
        assert not list((root / "cache" / "git").glob("*history*"))  # made for this resolve, then removed
    finally:
        daemon.stop()
