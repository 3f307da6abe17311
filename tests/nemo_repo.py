"""A NeMo-RL-shaped repository made for tests and benchmarks: docker/Dockerfile with upstream's shape,
tools/build-custom-vllm.sh holding what the declared patch expects, and a submodule whose .gitmodules URL is on
github.com (the pins' URL rewrite sends it to the local `git daemon`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from unidiff import PatchSet

from tests.gitserver import GitDaemon, commit_all, git

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCH = REPO_ROOT / "patches" / "build-custom-vllm-wheel-location.patch"
SHAPE = REPO_ROOT / "tests" / "fixtures" / "nemo-rl-shape.Dockerfile"


def script_before_patch() -> str:
    """A tools/build-custom-vllm.sh holding, at the right lines, exactly what the patch expects upstream to have."""
    hunk = PatchSet.from_string(PATCH.read_text())[0][0]
    filler = [f"# upstream line {n}\n" for n in range(1, hunk.source_start)]
    expected = [line.value for line in hunk if line.is_context or line.is_removed]
    return "".join(["#!/bin/bash\n", *filler[1:], *expected, 'echo "build done"\n'])


@dataclass
class Remote:
    daemon: GitDaemon
    work: Path
    commit: str
    submodule_commit: str

    @property
    def url(self) -> str:
        return f"{self.daemon.url}RL.git"

    def new_commit(self, path: str, text: str, message: str) -> str:
        target = self.work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        sha = commit_all(self.work, message, date="2026-02-10T10:00:00+00:00")
        self.daemon.publish(self.work, "RL.git")
        return sha


def make_remote(tmp_path: Path) -> Remote:
    served = tmp_path / "served"
    (served / "test").mkdir(parents=True)
    daemon = GitDaemon(served)
    sub = tmp_path / "megatron"
    sub.mkdir()
    git("init", "-q", "-b", "main", cwd=sub)
    (sub / "megatron.py").write_text("VERSION = 1\n")
    sub_commit = commit_all(sub, "megatron 1")
    daemon.publish(sub, "test/Megatron-LM.git")

    work = tmp_path / "rl"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    files = {
        "docker/Dockerfile": SHAPE.read_text(),
        "tools/build-custom-vllm.sh": script_before_patch(),
        "pyproject.toml": '[project]\nname = "nemo-rl"\n',
        "uv.lock": "version = 1\n",
        "nemo_rl/__init__.py": "",
        "nemo_rl/package_info.py": '__version__ = "0.5.0"\n',
        "research/README.md": "research\n",
        "tools/generate_fingerprint.py": "print('fingerprint')\n",
    }
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    # .gitmodules records the github.com URL, as upstream's does; the rewrite sends it to the daemon.
    git(
        "-c", f"url.{daemon.url}test/.insteadOf=https://github.com/test/",
        "submodule", "add", "-q",
        "https://github.com/test/Megatron-LM.git", "3rdparty/Megatron-LM-workspace/Megatron-LM",
        cwd=work,
    )  # fmt: skip
    commit = commit_all(work, "docs: add release runs to front page readme for 0.5 (#1879)")
    daemon.publish(work, "RL.git")
    return Remote(daemon, work, commit, sub_commit)
