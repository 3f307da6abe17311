"""A NeMo-RL-shaped repository made for tests and benchmarks: docker/Dockerfile with upstream's shape,
tools/build-custom-vllm.sh holding what the declared patch expects, and a submodule whose .gitmodules URL is on
github.com (the pins' URL rewrite sends it to the local `git daemon`)."""

from __future__ import annotations

import os
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from unidiff import PatchSet

from tests.support.gitserver import GitDaemon, commit_all, git
from tests.support.paths import REPO_ROOT

if TYPE_CHECKING:  # conftest imports this module
    from tests.conftest import Cli

PATCH = REPO_ROOT / "patches" / "build-custom-vllm-wheel-location.patch"
SHAPE = REPO_ROOT / "tests" / "fixtures" / "nemo-rl-shape.Dockerfile"  # upstream's shape at 946862e7
LATER_SHAPE = REPO_ROOT / "tests" / "fixtures" / "nemo-rl-later-shape.Dockerfile"  # and at 7ea279ab


def later_script() -> str:
    """A tools/build-custom-vllm.sh shaped like upstream's at 7ea279ab: the wheel location is its third argument
    (what the declared patch did, upstream now does), so the patch no longer fits."""
    return (
        "#!/bin/bash\n"
        + "".join(f"# upstream line {n}\n" for n in range(2, 22))
        + "GIT_URL=${1:-https://github.com/vllm-project/vllm.git}\n"
        "GIT_REF=${2:-cc99baf14dacc2497d0c5ed84e076ef2c37f6a4d}\n"
        "# An explicit wheel URL avoids relying on vllm's nightly wheel discovery.\n"
        'if [[ -n "${3:-}" ]]; then\n'
        '  VLLM_PRECOMPILED_WHEEL_LOCATION="$3"\n'
        "else\n"
        '  VLLM_PRECOMPILED_WHEEL_LOCATION="https://github.com/vllm-project/vllm/releases/download/v0.16.0/x.whl"\n'
        "fi\n"
        "export VLLM_PRECOMPILED_WHEEL_LOCATION\n"
        'echo "build done"\n'
    )


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

    def new_commit(self, path: str, text: str, message: str, date: str = "2026-02-10T10:00:00+00:00") -> str:
        return self.new_files({path: text}, message, date)

    def new_files(self, files: dict[str, str], message: str, date: str = "2026-02-10T10:00:00+00:00") -> str:
        for path, text in files.items():
            target = self.work / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        sha = commit_all(self.work, message, date=date)
        self.daemon.publish(self.work, "RL.git")
        return sha

    def move_to_uv_source(self, fork: str, branch: str, commit: str, wheel_commit: str) -> str:
        """A commit in NeMo-RL's uv-source way: the later-shaped Dockerfile, vLLM a uv git source (the fork's branch,
        locked at `commit`) built in precompiled mode with the wheel of `wheel_commit`."""
        return self.new_files(
            {
                "docker/Dockerfile": LATER_SHAPE.read_text(),
                "tools/build-custom-vllm.sh": later_script(),
                "docker/install_apptainer.sh": "echo apptainer\n",
                "pyproject.toml": uv_source_pyproject(fork, branch, wheel_commit),
                "uv.lock": uv_source_lock(fork, branch, commit),
            },
            "chore: use custom vllm (#3575)",
            date="2026-08-22T09:00:00+00:00",
        )

    def move_to_later_shape(self, more: dict[str, str] | None = None) -> str:
        """A commit with upstream's later layout: the 7ea279ab-shaped Dockerfile and build-custom-vllm.sh (and
        `more` files)."""
        return self.new_files(
            {
                "docker/Dockerfile": LATER_SHAPE.read_text(),
                "tools/build-custom-vllm.sh": later_script(),
                "docker/install_apptainer.sh": "echo apptainer\n",
                **(more or {}),
            },
            "build: CUDA 13.2 base, uv 0.11, --frozen syncs, TensorRT-LLM (#2100)",
            date="2026-08-22T09:00:00+00:00",
        )


def uv_source_pyproject(fork: str, branch: str, wheel_commit: str) -> str:
    """pyproject.toml in NeMo-RL's second way to pin a vLLM fork, shaped as its super-v3.5-posttraining branch writes
    it (5d63149a: the vllm extra line 148, [tool.uv.sources] line 273, [tool.uv.extra-build-variables] lines
    539-540), with the fork, branch and wheel commit of the test's world."""
    return (
        '[project]\nname = "nemo-rl"\n\n[project.optional-dependencies]\nvllm = [\n'
        "  # Source is overridden in [tool.uv.sources] to the Super VL RL branch. The\n"
        "  # version stays pinned so uv.lock records a reproducible v0.25.1 Python layer.\n"
        '  "vllm==0.25.1",\n]\n\n[tool.uv.sources]\n'
        f'vllm = {{ git = "{fork}", branch = "{branch}", extra = "vllm" }}\n\n'
        "[tool.uv.extra-build-variables]\n"
        f'vllm = {{ VLLM_USE_PRECOMPILED = "1", VLLM_PRECOMPILED_WHEEL_COMMIT = "{wheel_commit}", '
        'SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VLLM = "0.25.1", SETUPTOOLS_SCM_PRETEND_VERSION = "0.25.1" }\n'
    )


def uv_source_lock(fork: str, branch: str, commit: str) -> str:
    """uv.lock with vllm from that git source, as uv 0.11 writes it (revision 3; NeMo-RL 5f0d71a7, lines 8295-8298:
    `source = { git = "<url>?branch=<branch>#<commit>" }`, no sdist or wheels), its dependencies left out."""
    return (
        'version = 1\nrevision = 3\nrequires-python = ">=3.13.14, <3.14"\n\n'
        '[[package]]\nname = "vllm"\nversion = "0.25.1"\n'
        f'source = {{ git = "{fork}?branch={branch}#{commit}" }}\n'
    )


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
        "-c",
        f"url.{daemon.url}test/.insteadOf=https://github.com/test/",
        "submodule",
        "add",
        "-q",
        "https://github.com/test/Megatron-LM.git",
        "3rdparty/Megatron-LM-workspace/Megatron-LM",
        cwd=work,
    )
    commit = commit_all(work, "docs: add release runs to front page readme for 0.5 (#1879)")
    daemon.publish(work, "RL.git")
    return Remote(daemon, work, commit, sub_commit)


def point_pins_at(root: Path, remote: Remote, ref: str | None = None) -> None:
    """The project's pins, with NeMo-RL from the served repository (and its submodule through a URL rewrite)."""
    text = (root / "pins.yaml").read_text()
    text = text.replace("https://github.com/NVIDIA-NeMo/RL.git", remote.url).replace(
        '"946862e7"', f'"{ref or remote.commit}"'
    )
    text += f"\ngit_url_rewrites:\n  - url: {remote.daemon.url}test/\n    instead_of: https://github.com/test/\n"
    (root / "pins.yaml").write_text(text)


def use_remote(project: tuple[Path, Cli], remote: Remote, ref: str | None = None) -> tuple[Path, Cli]:
    root, cli = project
    point_pins_at(root, remote, ref)
    result = cli("resolve")
    assert result.code == 0, result.output
    return root, cli


def script_mode_files(scratch: Path) -> dict[str, str]:
    """pyproject.toml and uv.lock of a NeMo-RL commit that installs vLLM with build-custom-vllm.sh, the lock written
    by real uv. The vllm extra is shaped as main writes it (7ea279ab, pyproject.toml lines 146-148: the release wheel
    by URL for linux x86_64, with its comment); the URL names a stand-in of that wheel in `scratch` (uv reads its
    METADATA to lock it), since GitHub's release assets are not reachable here."""
    from buildkit.world.uv import find_uv

    release = scratch / "release" / "vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl"
    release.parent.mkdir(parents=True)
    with zipfile.ZipFile(release, "w") as wheel:
        wheel.writestr("vllm/__init__.py", "")
        wheel.writestr("vllm-0.25.1.dist-info/METADATA", "Metadata-Version: 2.4\nName: vllm\nVersion: 0.25.1\n")
        wheel.writestr(
            "vllm-0.25.1.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-manylinux_2_28_x86_64\n",
        )
        wheel.writestr("vllm-0.25.1.dist-info/RECORD", "")
    pyproject = (
        '[project]\nname = "nemo-rl"\nversion = "0.5.0"\nrequires-python = ">=3.11"\ndependencies = []\n\n'
        "[project.optional-dependencies]\nvllm = [\n"
        "  # Default wheels on GitHub are cu130. See v0.25.1 release assets:\n"
        "  # https://github.com/vllm-project/vllm/releases/tag/v0.25.1\n"
        f"  \"vllm @ {release.as_uri()} ; sys_platform == 'linux' and platform_machine == 'x86_64'\",\n]\n\n"
        "[tool.uv]\nmanaged = true\npreview = true # Enable preview features like extra-build-dependencies\n"
    )
    project = scratch / "nemo-rl"
    project.mkdir()
    (project / "pyproject.toml").write_text(pyproject)
    argv = [find_uv().path, "lock", "--offline", "--no-progress", "--project", str(project)]
    env = {**os.environ, "UV_CACHE_DIR": str(scratch / "uv-cache")}  # not this machine's
    done = subprocess.run(argv, capture_output=True, text=True, cwd=project, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return {"pyproject.toml": pyproject, "uv.lock": (project / "uv.lock").read_text()}
