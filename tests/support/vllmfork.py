"""A vLLM upstream and a fork whose head moves, as real git repositories served by `git daemon` on loopback: every
SHA the tests meet is a commit of them (issue 42).

main: `initial` (setup.py, csrc/, vllm/ with three modules) -> `base` (the merge base, whose wheel the stand-in index
holds) -> `tip` (a kernel change the fork does not have). The fork branches at `base`: `head_1` changes
vllm/config.py and adds vllm/draft.py (Python only, as the draft-model PR #24322 does,
https://github.com/vllm-project/vllm/pull/24322); `move` (a later call) commits more Python on top, as a push to the
PR's branch does: the head moves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.gitserver import GitDaemon, commit_all, git

UPSTREAM_URL = "https://github.com/vllm-project/vllm.git"


def wheel_name(sha: str) -> str:
    """A per-commit wheel's name as vLLM's index gives it (the stand-in index serves one for the merge base)."""
    return f"vllm-0.14.0rc2.dev156+g{sha[:9]}-cp38-abi3-manylinux_2_31_x86_64.whl"


BRANCH = "draft-tp"


@dataclass
class VllmFork:
    daemon: GitDaemon
    work: Path
    base: str
    tip: str
    head: str
    names: tuple[str, str] = ("vllm.git", "alice-vllm.git")  # the served upstream and fork

    @property
    def upstream(self) -> str:
        return f"{self.daemon.url}{self.names[0]}"

    @property
    def fork(self) -> str:
        return f"{self.daemon.url}{self.names[1]}"

    def changed(self, commit: str) -> list[str]:
        return git("diff", "--name-only", f"{commit}^", commit, cwd=self.work).splitlines()

    def vllm_tree(self, commit: str) -> dict[str, str]:
        """Every file under vllm/ at `commit` by blob id, as GitHub's tree API lists it."""
        out = git("ls-tree", "-r", "--full-tree", commit, "vllm/", cwd=self.work)
        return {line.split("\t", 1)[1]: line.split()[2] for line in out.splitlines()}

    def move(self, files: dict[str, str | None], message: str = "draft model TP: review") -> str:
        """A commit on the fork's branch (None removes a file), pushed: the head moves. Returns it."""
        git("checkout", "-q", BRANCH, cwd=self.work)
        for path, text in files.items():
            target = self.work / path
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        self.head = commit_all(self.work, message, date="2026-02-06T10:00:00+00:00")
        git("push", "-q", "--force", str(self.daemon.root / self.names[1]), f"{BRANCH}:{BRANCH}", cwd=self.work)
        return self.head

    def stop(self) -> None:
        self.daemon.stop()


def vllm_fork(tmp_path: Path, names: tuple[str, str] = ("vllm.git", "alice-vllm.git")) -> VllmFork:
    """The world; `names`: where the daemon serves the upstream and the fork ("vllm-project/vllm.git" and
    "user/vllm.git" stand in for GitHub's, through pins.yaml git_url_rewrites)."""
    served, work = tmp_path / "vllm-served", tmp_path / "vllm-work"
    served.mkdir()
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    (work / "setup.py").write_text("# vLLM's setup\n")
    (work / "csrc").mkdir()
    (work / "csrc" / "ops.cu").write_text("// kernels\n")
    (work / "vllm").mkdir()
    (work / "vllm" / "__init__.py").write_text("")
    (work / "vllm" / "old.py").write_text("OLD = True\n")
    commit_all(work, "initial")
    (work / "vllm" / "config.py").write_text("x = 1\n")
    base = commit_all(work, "[Core] config")
    git("checkout", "-q", "-b", BRANCH, cwd=work)
    (work / "vllm" / "config.py").write_text("x = 1\nDRAFT_TP = True\n")
    (work / "vllm" / "draft.py").write_text("y = 2\n")
    head = commit_all(work, "draft model TP")
    git("checkout", "-q", "main", cwd=work)
    (work / "csrc" / "ops.cu").write_text("// kernels, faster\n")
    tip = commit_all(work, "[Kernel] faster")
    for name, branch in zip(names, ("main", BRANCH), strict=True):
        (served / name).parent.mkdir(parents=True, exist_ok=True)
        git("clone", "-q", "--bare", "--branch", branch, str(work), str(served / name), cwd=tmp_path)
    return VllmFork(GitDaemon(served), work, base, tip, head, names)


def pin_fork(root: Path, fork: VllmFork, vllm_sha: str) -> None:
    """pins.yaml's vllm: the fork's branch on the git daemon, vLLM's own repository there too (no GitHub)."""
    text = (root / "pins.yaml").read_text().replace(f"  repo: {UPSTREAM_URL}\n", "", 1)
    text = text.replace(
        f'ref: "{vllm_sha}"\n  pr: 24322', f"repo: {fork.fork}\n  ref: {BRANCH}\n  upstream: {fork.upstream}"
    )
    (root / "pins.yaml").write_text(text)
