"""Where GitHub's API has no answer, git has it (issue 41, point 4): NeMo-RL pinned by its GitHub URL and fetched from a
mirror through git's insteadOf (pins.yaml's git_url_rewrites), as a mirror user meets it.

The mirror is a real repository served by `git daemon` on loopback (tests/support/nemo_repo.py); the stand-in GitHub
knows the same commits (each SHA a real commit of the mirror, with its message and committer date, as GitHub's
commits API answers them) and answers 404 where GitHub does: for a compare it will not make, and for a file its
contents API does not show: 404 with GitHub's `{"message": "Not Found", "status": "404"}` (the "Resource not found"
answer of docs.github.com/en/rest/commits/commits#compare-two-commits and
docs.github.com/en/rest/repos/contents#get-repository-content; GitHub adds a `documentation_url`, which buildkit does
not read).
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.models.checks import known_checks
from buildkit.models.lock import read_lock
from tests.support.fake_upstreams import NEMO_RL_UV_LOCK
from tests.support.gitserver import commit_all, git

if TYPE_CHECKING:  # conftest imports the support modules
    from tests.conftest import Cli

NEMO = "NVIDIA-NeMo/RL"
MOVED_BY = 642  # how far apart the two commits of issue 41 are (946862e7755f...7ea279abfbeb)


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def on_github(upstreams, remote, sha: str, branch: str | None = None) -> None:
    """The stand-in GitHub's commits API answers for `sha` as GitHub does: its full message and committer date."""
    message = git("log", "-1", "--format=%B", sha, cwd=remote.work)
    epoch = int(git("log", "-1", "--format=%ct", sha, cwd=remote.work))
    upstreams.github.add_commit(NEMO, sha, message, iso(epoch), branch=branch)


def no_compare_for(upstreams, repo: str, pair: tuple[str, str] | None = None) -> None:
    """GitHub's compare answers 404 for `repo` (for one base...head pair only, when given): the stand-in answers
    404 with GitHub's body where a compare has no merge base."""

    def edit(answer: dict) -> None:
        asked = answer["url"].split("/compare/", 1)
        if asked[0].endswith(f"/repos/{repo}") and (pair is None or asked[1] == f"{pair[0]}...{pair[1]}"):
            answer["merge_base_commit"] = None

    upstreams.github.compare_edits.append(edit)


def mirrored(project: tuple[Path, Cli], remote, ref: str) -> tuple[Path, Cli]:
    """The reference pins with NeMo-RL at `ref` by its GitHub URL, fetched from the served repository through a URL
    rewrite (its submodule too)."""
    root, cli = project
    text = (root / "pins.yaml").read_text().replace('"946862e7"', f'"{ref}"')
    text += (
        f"\ngit_url_rewrites:\n  - url: {remote.daemon.url}\n    instead_of: https://github.com/NVIDIA-NeMo/\n"
        f"  - url: {remote.daemon.url}test/\n    instead_of: https://github.com/test/\n"
    )
    (root / "pins.yaml").write_text(text)
    return root, cli


def many_commits(remote, count: int, files: dict[str, str]) -> str:
    """`count` commits on main after its head (the first also writes `files`), written at once by git fast-import
    and published; the new head."""
    head = git("rev-parse", "HEAD", cwd=remote.work)
    stream = []
    for n in range(count):
        message = f"docs: change {n + 1} of {count}\n"
        changes = {**(files if n == 0 else {}), "docs/changes.md": f"change {n + 1}\n"}
        stream.append(f"commit refs/heads/main\ncommitter t <t@e> {1771000000 + 60 * n} +0000\n")
        stream.append(f"data {len(message.encode())}\n{message}")
        stream.append(f"from {head}\n" if n == 0 else "")
        for path, text in changes.items():
            stream.append(f"M 100644 inline {path}\ndata {len(text.encode())}\n{text}")
        stream.append("\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=remote.work, input="".join(stream), text=True, check=True)
    git("read-tree", "-u", "--reset", "HEAD", cwd=remote.work)  # the work tree follows (fast-import leaves it)
    remote.daemon.publish(remote.work, "RL.git")
    return git("rev-parse", "HEAD", cwd=remote.work)


def test_bump_against_a_mirror_counts_with_git_where_compare_has_no_answer(project, remote, upstreams):
    """Issue 41: `bump --dry-run` exited 4 on GitHub's 404 for the compare although the mirror has both commits.
    Now git answers: the pin moves forward, by the count git gives, each fallback said in one note."""
    on_github(upstreams, remote, remote.commit, branch="main")
    root, cli = mirrored(project, remote, remote.commit)
    assert cli("resolve").code == 0
    new = many_commits(remote, MOVED_BY, {"uv.lock": NEMO_RL_UV_LOCK})
    on_github(upstreams, remote, new, branch="main")
    no_compare_for(upstreams, NEMO)

    result = cli("bump", "--dry-run")
    assert result.code == 0, result.output
    url = f"{upstreams.github.url}/repos/{NEMO}/compare/{remote.commit}...{new}?per_page=1"
    said = f"note: {NEMO} compare {remote.commit[:12]}...{new[:12]}: not found on GitHub (404 from {url})"
    assert result.stderr.count(said) == 1, result.stderr  # one question, one note: forward and count both
    assert f"{said}: compared with git instead" in result.stderr
    summary = result.stdout
    assert "**dry run**: nothing was written." in summary and f'+  ref: "{new}"' in summary
    assert (
        f"- nemo_rl: {MOVED_BY} commits (counted with git: GitHub's compare API had no answer) from "
        f"`{remote.commit[:12]}` to `{new[:12]}`" in summary
    )
    assert "compare on GitHub" not in summary and "moved back" not in summary
    # uv.lock at the new commit: GitHub's contents API has no answer either, git reads it from the mirror.
    assert f"{NEMO} uv.lock at {new[:12]}: not found on GitHub (404 from " in result.stderr
    assert result.stderr.count(": NeMo-RL's uv.lock read with git instead") == 1
    # The torch and ABI rows are checked against it, not "not checked".
    assert "| torch | pass | wheel vllm-0.14.0rc2" in summary
    assert "requires torch==2.9.1; NeMo-RL's uv.lock installs torch 2.9.0+cu129" in summary
    # The stand-in wheel's libraries need no torch symbol: 0 looked up is no pass, but torch was read (no "could not").
    assert "| ABI | not checked | 0 undefined symbols in the wheel at resolve" in summary
    assert "were looked up in torch 2.9.0+cu129 (" in summary
    count = git("rev-list", "--count", f"{remote.commit}..{new}", cwd=remote.work)
    assert count == str(MOVED_BY)


def test_resolve_reads_uv_lock_with_git_where_the_contents_api_has_none(project, remote, upstreams):
    """Resolve read NeMo-RL's uv.lock only through the contents API: on its 404 the torch and ABI rows were "not
    checked" although the mirror (and prepare's tree) holds the file. Now it is read with git at the locked commit."""
    sha = remote.new_commit("uv.lock", NEMO_RL_UV_LOCK, "deps: lock torch 2.9.0 (#1880)")
    on_github(upstreams, remote, sha, branch="main")
    root, cli = mirrored(project, remote, sha)

    result = cli("resolve")
    assert result.code == 0, result.output
    url = f"{upstreams.github.url}/repos/{NEMO}/contents/uv.lock?ref={sha}"
    said = (
        f"{NEMO} uv.lock at {sha[:12]}: not found on GitHub (404 from {url}): NeMo-RL's uv.lock read with git instead"
    )
    assert result.stderr.count(said) == 1, result.stderr
    lock = read_lock(root / "pins.lock")
    assert lock.nemo_rl.commit == sha
    assert lock.gpu is not None and lock.gpu.abi is not None
    assert lock.gpu.abi.against[0].startswith("torch 2.9.0+cu129 (")
    rows = {r["check"]: r for r in known_checks(lock)}
    assert rows["torch"]["status"] == "pass", rows["torch"]
    assert "NeMo-RL's uv.lock installs torch 2.9.0+cu129" in rows["torch"]["detail"]
    # 0 symbols to look up (the stand-in wheel's libraries need none of torch's) is no pass; what matters here is
    # that torch was read from uv.lock: the row names it, and no "could not read".
    assert rows["ABI"]["status"] == "not checked" and "looked up in torch 2.9.0+cu129 (" in rows["ABI"]["detail"]
    assert said in json.loads((root / "build" / "resolve.json").read_text())["notes"]

    # The cache git left is one buildkit accepts: a second resolve reads it again, with no reset said.
    (root / "pins.lock").unlink()
    again = cli("resolve")
    assert again.code == 0 and "reset" not in again.stderr, again.output


def test_a_commit_the_mirror_lacks_is_exit_4_with_what_to_do(project, remote, upstreams):
    """GitHub knows the new head, its compare has no answer, and the mirror lacks the commit: upstream disagrees
    (exit 4), in one line naming the repository, with the hint to check the mirror."""
    on_github(upstreams, remote, remote.commit, branch="main")
    root, cli = mirrored(project, remote, remote.commit)
    assert cli("resolve").code == 0
    (remote.work / "README.md").write_text("not on the mirror yet\n")
    unpublished = commit_all(remote.work, "docs: not mirrored yet", date="2026-03-01T10:00:00+00:00")
    on_github(upstreams, remote, unpublished, branch="main")
    no_compare_for(upstreams, NEMO)

    result = cli("bump", "--dry-run")
    assert result.code == 4, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert f"https://github.com/{NEMO}.git: {unpublished} does not exist there" in errors[0]
    assert "git_url_rewrites" in result.stderr.split(errors[0], 1)[1]  # the hint: which mirror to check


def test_an_unreachable_mirror_is_exit_3_with_what_to_do(project, remote, upstreams):
    """The compare has no answer and the mirror does not answer at all: upstream could not answer (exit 3)."""
    on_github(upstreams, remote, remote.commit)
    root, cli = mirrored(project, remote, remote.commit)
    assert cli("resolve").code == 0
    new = remote.new_commit("README.md", "more docs\n", "docs: more (#1881)")
    on_github(upstreams, remote, new, branch="main")
    no_compare_for(upstreams, NEMO)
    remote.daemon.stop()

    result = cli("bump", "--dry-run")
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    assert f"cannot fetch from https://github.com/{NEMO}.git" in result.stderr
    assert "git_url_rewrites" in result.stderr  # the hint names the mirrors


def test_vllm_against_a_mirror_is_compared_with_git_in_resolve_and_bump(project, remote, upstreams):
    """vLLM the same way: pinned by its GitHub URL, fetched from a mirror, and GitHub's compare has no answer for it.
    resolve proves the composition with git (the source against the branch), and bump says, from git, that the pin
    moves forward to the newest commit with a wheel and by how much."""
    vllm = "vllm-project/vllm"
    work = remote.work.parent / "vllm-work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    shas: list[str] = []
    for n, subject in enumerate(("[Core] pinned (#30001)", "[Docs] between (#30002)", "[Core] newest (#30003)")):
        (work / "vllm").mkdir(exist_ok=True)
        (work / "vllm" / "__init__.py").write_text(f"# {n}\n")
        shas.append(commit_all(work, subject, date=f"2026-03-0{n + 1}T10:00:00+00:00"))
        epoch = int(git("log", "-1", "--format=%ct", cwd=work))
        upstreams.github.add_commit(vllm, shas[-1], subject, iso(epoch), branch="main", parents=shas[-2:-1])
    remote.daemon.publish(work, "vllm.git")
    pinned, newest = shas[0], shas[-1]
    for sha in (pinned, newest):
        upstreams.wheels.add(sha, f"vllm-0.15.0rc1.dev12+g{sha[:9]}-cp38-abi3-manylinux_2_31_x86_64.whl")
    on_github(upstreams, remote, remote.commit, branch="main")
    root, cli = mirrored(project, remote, remote.commit)
    text = (root / "pins.yaml").read_text()
    text = text.replace('ref: "4a5299c93ff97c26def537b92562df5ada530fea"\n  pr: 24322', f'ref: "{pinned}"')
    text += f"  - url: {remote.daemon.url}\n    instead_of: https://github.com/vllm-project/\n"
    (root / "pins.yaml").write_text(text)
    no_compare_for(upstreams, vllm)

    # resolve: whether the source is on main, and what differs from the wheel's commit, from git.
    resolved = cli("resolve")
    assert resolved.code == 0, resolved.output
    said = f"note: {vllm} compare main...{pinned[:12]}: not found on GitHub (404 from "
    assert resolved.stderr.count(said) == 1 and "compared with git instead" in resolved.stderr, resolved.stderr
    compare = read_lock(root / "pins.lock").vllm_compare
    assert (compare.method, compare.paths, compare.compiled) == ("git diff", 0, [])
    assert compare.source == f"git fetch --filter=blob:none https://github.com/{vllm}.git main"

    result = cli("bump", "--vllm", "--dry-run")
    assert result.code == 0, result.output
    said = f"note: {vllm} compare {pinned[:12]}...{newest[:12]}: not found on GitHub (404 from "
    assert result.stderr.count(said) == 1 and "compared with git instead" in result.stderr, result.stderr
    assert (
        f"- vllm: 2 commits (counted with git: GitHub's compare API had no answer) from `{pinned[:12]}` to "
        f"`{newest[:12]}`" in result.stdout
    )
    assert f'+  ref: "{newest}"' in result.stdout and "moved back" not in result.stdout


def test_vllm_history_and_setup_py_are_read_with_git_where_github_has_none(project, remote, upstreams):
    """A vLLM mirror whose commits GitHub cannot list (404) and whose setup.py its contents API does not have: the
    wheel commit's walk back along main and setup.py's extraction at the wheel commit both come from git, each
    fallback said once. setup.py is vLLM 0.14.0's real one (tests/support/vllmtree.py)."""
    from tests.support.fake_upstreams import Fault
    from tests.support.vllmtree import SETUP_PY

    vllm = "vllm-project/vllm"
    work = remote.work.parent / "vllm-work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    shas: list[str] = []
    for n, subject in enumerate(("[Core] has a wheel (#30001)", "[Docs] no wheel (#30002)", "[Core] source (#30003)")):
        (work / "vllm").mkdir(exist_ok=True)
        (work / "vllm" / "__init__.py").write_text(f"# {n}\n")
        (work / "setup.py").write_bytes(SETUP_PY.read_bytes())
        shas.append(commit_all(work, subject, date=f"2026-03-0{n + 1}T10:00:00+00:00"))
        epoch = int(git("log", "-1", "--format=%ct", cwd=work))
        upstreams.github.add_commit(vllm, shas[-1], subject, iso(epoch), branch="main", parents=shas[-2:-1])
    remote.daemon.publish(work, "vllm.git")
    upstreams.wheels.add(shas[0], f"vllm-0.15.0rc1.dev12+g{shas[0][:9]}-cp38-abi3-manylinux_2_31_x86_64.whl")
    on_github(upstreams, remote, remote.commit, branch="main")
    root, cli = mirrored(project, remote, remote.commit)
    text = (root / "pins.yaml").read_text()
    text = text.replace('ref: "4a5299c93ff97c26def537b92562df5ada530fea"\n  pr: 24322', f'ref: "{shas[-1]}"')
    text += f"  - url: {remote.daemon.url}\n    instead_of: https://github.com/vllm-project/\n"
    (root / "pins.yaml").write_text(text)
    upstreams.github.setup_py = None  # GitHub's contents API: 404 for setup.py
    upstreams.github.faults.append(Fault(f"/repos/{vllm}/commits?", 404, count=99))  # the commits list: 404

    resolved = cli("resolve")
    assert resolved.code == 0, resolved.output
    assert resolved.stderr.count(f"the history of {shas[-1][:12]} listed with git instead") == 1, resolved.stderr
    assert "not read for what precompiled mode takes" not in resolved.stderr, resolved.stderr
    lock = read_lock(root / "pins.lock")
    assert lock.vllm_wheel.commit == shas[0] and lock.vllm_wheel.chosen_by == "an ancestor of the merge base"
    # setup.py's names that the stand-in wheel carries, taken by the extraction git read
    assert lock.vllm_files is not None and sorted(lock.vllm_files) == ["vllm/_C.abi3.so", "vllm/_moe_C.abi3.so"]


def test_a_nemo_rl_commit_only_the_mirror_holds_is_read_with_git(project, remote, upstreams):
    """A NeMo-RL commit GitHub does not know (422 from its commits API: it was pushed to the mirror only) is read
    from the mirror with git, said once; without a mirror, GitHub's answer stands (exit 4), as before."""
    sha = remote.new_commit("uv.lock", NEMO_RL_UV_LOCK, "deps: lock torch 2.9.0 (#1880)")  # not on the stand-in
    root, cli = mirrored(project, remote, sha)
    result = cli("resolve")
    assert result.code == 0, result.output
    assert result.stderr.count(": read with git instead") == 1, result.stderr
    assert read_lock(root / "pins.lock").nemo_rl.commit == sha

    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text[: text.index("\ngit_url_rewrites:")] + "\n")
    (root / "pins.lock").unlink()
    unmirrored = cli("resolve")  # GitHub answers an unknown SHA with 422 ("No commit found for SHA")
    said = f"error: {NEMO} ref '{sha}': not found on GitHub (422 from "
    assert unmirrored.code == 4 and unmirrored.stderr.startswith(said), unmirrored.output
