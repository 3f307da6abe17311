"""A real vLLM precompiled install, laid out as NeMo-RL's tools/build-custom-vllm.sh leaves it, built from real bytes
on the build engine, and tampered copies of it (issue 40, point 3).

For tests: `genuine()` and `tampered(case)` (a case of CASES) return image tags in Docker; `shown(case, image)` and
`shown_many(cases, image)` say whether the image's python would run the tampered code; the lock's facts are
`source_listing()` (every file under vllm/ at SOURCE_COMMIT: path -> (git blob id, git mode)), `wheel_members()`
(every member of WHEEL: name -> sha256), SOURCE_COMMIT and WHEEL (the realwheels entry: file name, sha256); the paths
in the image are CHECKOUT, PACKAGE_DIR, VENV, SITE_PACKAGES and PYTHON.

What runs where (the genuine image):
- Host: vLLM 0.14.0's sdist is fetched from PyPI into the artifacts cache (tests/support/realwheels.py `cache_dir`)
  and checked by sha256 on every use; its tree is committed into a bare git repository there (the fork), with fixed
  names and dates, so the commit is SOURCE_COMMIT on every machine. Left out of the commit: what building the sdist
  added to the tree (PKG-INFO, setup.cfg's [egg_info] tags, vllm.egg-info/, vllm/_version.py); every other file is
  committed, those the repository's .gitignore names included (vllm/vllm_flash_attn/.gitkeep, benchmarks' data
  files). Its 1,184 vllm/**/*.py blobs are the ones GitHub's tree of v0.14.0 holds (tests/fixtures/
  vllm-0.14.0-python.json: all of them but the two gRPC stubs a build generates, which the sdist lacks too).
- Host: a root file system of Ubuntu 24.04 (noble: the distribution of NeMo-RL's base image, with Python 3.12 as
  NeMo-RL's), made by Debian's mmdebstrap from Ubuntu's archive: minbase with python3, python3-venv, git and
  libstdc++6 (torch links it), from the release pocket, which never changes; noble's signature is checked with
  Ubuntu's archive key from the ubuntu-keyring package, pinned by sha256 (tests/support/realdebs.py). mmdebstrap is
  installed from Debian when missing (root; the engine needs root anyway). With SOURCE_DATE_EPOCH set the tar
  is the same bytes when made again (checked: two runs, one sha256).
- Host: the wheels of tests/fixtures/real-install/requirements.txt (torch 2.9.1 with its nvidia-* CUDA libraries and
  triton, numpy, setuptools, setuptools-scm 10.3.4, pip: 3.8 GB) are downloaded once with --require-hashes into the
  cache, which checks a file already there too; the torch and vLLM wheels are realwheels' (`real_wheel`), linked.
- BuildKit (tests/fixtures/real-install/Dockerfile: one RUN with no network; the wheels, the repository and the
  recipe bind-mounted from named build contexts, never copied into a layer), in /opt/nemo-rl: `python3 -m venv
  /opt/nemo_rl_venv` (NeMo-RL: `uv venv --seed` there), `git clone` of the repository into 3rdparty/vllm (its origin
  stays file:///src/vllm.git) and `git checkout SOURCE_COMMIT`, the script's requirement edits and `python
  use_existing_torch.py` (checkout-steps.sh: its lines verbatim), `pip install --require-hashes` of the wheels (the
  script: `uv pip install --upgrade pip`, `uv pip install numpy setuptools setuptools_scm`, torch), then
  `VLLM_PRECOMPILED_WHEEL_LOCATION=<the 0.14.0 wheel> pip install --no-build-isolation --no-deps -e .`: setup.py
  imports torch (and leaves vllm/__pycache__/envs.cpython-312.pyc: it loads vllm/envs.py), extracts the wheel's
  seven .so files, vllm_flash_attn's and triton_kernels' Python files (54 members) into the checkout, and
  setuptools-scm 10.3.4 writes vllm/_version.py (SOURCE_DATE_EPOCH fixed, so the dirty tree's `.d20260120` is the
  same on every machine); pip writes the editable finder, its .pth and vllm's dist-info (version
  0.1.dev1+g474ded95a.d20260120.precompiled) into the venv. setuptools is today's 84.2.1, though vLLM's
  build-system asks for <81: --no-build-isolation holds nothing to it, as in the script, and the install works.
- Left out, in the same RUN (so no layer ever holds them): torch, triton and the nvidia-* libraries, uninstalled by
  pip through their RECORDs (it leaves nvidia/'s empty folders): 7 GB that verify would read file by file on every
  run, which nothing the image is asked afterwards imports. The rest of the venv (pip, setuptools, setuptools-scm,
  vcs-versioning, packaging, numpy, sympy, jinja2 ...) stays. Not reproduced: the script's own `uv venv` in the
  checkout (3rdparty/vllm/.venv, where its install goes, torch included; NeMo-RL's `uv sync` then installs the same
  editable vLLM into /opt/nemo_rl_venv, the python on PATH, which is the one here), uv where pip runs here (the
  editable wheel is setuptools' either way; uv records INSTALLER `uv`), torch 2.9.0+cu129 from the PyTorch index
  (unreachable here; 2.9.1 from PyPI is what vLLM 0.14.0 requires) and NeMo-RL's steps after the script (pyproject
  edits, `uv lock`, `uv sync`). Ubuntu's stdlib sitecustomize is removed (the Dockerfile says why).
- Docker: the image is loaded (uncompressed) as `buildkit-test/real-vllm-install:<hash of its inputs>` and not built
  again while Docker has it; Docker's image store (/var/lib/docker) is kept across engine-down and engine-up, and the
  rootfs, the repository and the wheels stay in the artifacts cache. BuildKit's cache (/var/cache/buildkit-engine,
  garbage-collected above 10 GB, emptied by test_reproducible's prune) is not relied on.

The tampered images are built by Docker's own builder (DOCKER_BUILDKIT=0, no network) FROM the genuine one, one COPY
or RUN layer each, so each costs a second or two and the genuine image never leaves Docker. setuptools-scm 8's
_version.py (case "version-scm8") is written on the host by setuptools-scm 8.3.1 from PyPI (scm8-requirements.txt,
--require-hashes) in a clone of the repository with the same edits and SOURCE_DATE_EPOCH, as vLLM's setup.py calls it.

Measured on 2 cores (2026-12-02), tests/e2e/test_real_install.py: cold, with nothing cached but realwheels' torch
and vLLM wheels, 9 min 52 s (the genuine image about 8 min 30 s: the base and the wheels made side by side in 2 min, the
4.6 GB of wheels sent to BuildKit in 63 s, the install's RUN 258 s, the export and Docker's load 81 s; each tampered
image 1-3 s); warm 18 s, of which the fixtures (every image found in Docker, the listing, the wheel's members) take
2.6 s and the rest is the probes' containers.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tests.support.engine import BUILDER, unavailable
from tests.support.paths import FIXTURES
from tests.support.realdebs import Deb, data_tar, deb
from tests.support.realwheels import TORCH_2_9_1, VLLM_0_14_0, cache_dir, real_wheel

RECIPE = FIXTURES / "real-install"
DOCKERFILE = RECIPE / "Dockerfile"
REQUIREMENTS = RECIPE / "requirements.txt"
SCM8_REQUIREMENTS = RECIPE / "scm8-requirements.txt"
CHECKOUT_STEPS = RECIPE / "checkout-steps.sh"
UV_DOCKERFILE = RECIPE / "Dockerfile.uv"
UV_REQUIREMENTS = RECIPE / "uv-requirements.txt"

# Where the install is in the image: NeMo-RL's docker/Dockerfile at 946862e7 (WORKDIR /opt/nemo-rl, its venv
# /opt/nemo_rl_venv first on PATH) and build-custom-vllm.sh (BUILD_DIR = 3rdparty/vllm of the NeMo-RL tree).
NEMO_RL = "/opt/nemo-rl"
CHECKOUT = f"{NEMO_RL}/3rdparty/vllm"
PACKAGE_DIR = f"{CHECKOUT}/vllm"
VENV = "/opt/nemo_rl_venv"
SITE_PACKAGES = f"{VENV}/lib/python3.12/site-packages"
PYTHON = f"{VENV}/bin/python"

WHEEL = VLLM_0_14_0  # the precompiled wheel: VLLM_PRECOMPILED_WHEEL_LOCATION


@dataclass(frozen=True)
class Sdist:
    filename: str
    size: int
    sha256: str
    url: str


# From https://pypi.org/simple/vllm/ (JSON form: `filename`, `size`, `hashes.sha256`, `url`), read 2026-12-01.
SDIST = Sdist(
    "vllm-0.14.0.tar.gz",
    19690728,
    "ed86c6a9d22fbfd059648794493cad88444c71688f3ff6efcb26c5ca353f0e5d",
    "https://files.pythonhosted.org/packages/01/fd/abb7391e8cb5cb729ae770946b4f61b9e9b56bac8805e7baeaed651378d5/"
    "vllm-0.14.0.tar.gz",
)
# The commit's date, and SOURCE_DATE_EPOCH of the install: the sdist's `upload-time` on PyPI, 2026-01-20T10:55:03Z.
SOURCE_DATE = "2026-01-20T10:55:03+00:00"
SOURCE_DATE_EPOCH = 1768906503
# What the sdist holds that no repository does: building it wrote them (setuptools' egg_info, setuptools-scm).
SDIST_ONLY = ("PKG-INFO", "setup.cfg", "vllm.egg-info", "vllm/_version.py")
# The commit those make of the sdist's tree: computed 2026-12-01, the same on every machine (source_repository() fails
# when it is not).
SOURCE_COMMIT = "474ded95a56da714a08e89502143dd815426fd7e"

# Ubuntu's archive keys, for mmdebstrap to check noble's Release signature: noble's main pocket lists the package
# (http://archive.ubuntu.com/ubuntu/dists/noble/main/binary-amd64/Packages.gz: Filename, Size, SHA256; 2026-12-01).
UBUNTU_KEYRING = Deb(
    "pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb",
    11124,
    "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8",
)
ARCHIVE_KEY = "./usr/share/keyrings/ubuntu-archive-keyring.gpg"
ROOTFS_SUITE = "noble"
ROOTFS_PACKAGES = ("python3", "python3-venv", "git", "libstdc++6")  # torch links libstdc++
ROOTFS_SOURCE = "deb http://archive.ubuntu.com/ubuntu noble main universe"  # python3-venv is in universe

IMAGE = "buildkit-test/real-vllm-install"
UV_IMAGE = "buildkit-test/real-vllm-uv-built"
TAMPERED_IMAGE = "buildkit-test/real-vllm-tampered"
MARKER = "BUILDKIT-TAMPERED"  # in every piece of tampered code, for the probes to find
# pip download's view of the image: CPython 3.12 on x86_64 with glibc 2.39 (noble).
_PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 4, -1)] + [
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
]


def _fail(message: str) -> NoReturn:
    """A step of the build failed: the fixture cannot stand in for the real install, which CI must see."""
    pytest.fail(message)


def root() -> Path:
    """The cache folder of this module (inside realwheels' artifacts cache): kept across runs on this machine."""
    path = cache_dir() / "real-install"
    path.mkdir(parents=True, exist_ok=True)
    return path


_held = 0  # how deep this process is inside _locked(): flock would deadlock on a second open of the file


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One process at a time builds anything here (pytest-xdist workers, two test runs); re-entrant."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    with (root() / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _held = 1
        try:
            yield
        finally:
            _held = 0


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _run(
    argv: list[str], what: str, timeout: float = 600, network: bool = False, **kwargs
) -> subprocess.CompletedProcess[str]:
    """Run a step; its failure fails the test, or for a step that fetches (`network`) is `unavailable`: a skip on a
    machine without the archives, a failure in CI."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        message = f"{what} failed (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-3000:]}"
        unavailable(message) if network else _fail(message)
    return done


# the source


def sdist() -> Path:
    """vLLM 0.14.0's sdist in the cache, fetched from PyPI when missing or not its bytes; checked on every call."""
    path = cache_dir() / SDIST.filename
    with _locked():
        if path.is_file() and path.stat().st_size == SDIST.size and _sha256(path) == SDIST.sha256:
            return path
        try:
            with urllib.request.urlopen(SDIST.url, timeout=300) as answer:
                data = answer.read(SDIST.size + 1)
        except OSError as exc:
            unavailable(f"could not fetch {SDIST.url}: {exc}")
        if hashlib.sha256(data).hexdigest() != SDIST.sha256:
            unavailable(f"{SDIST.url}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
        part = path.with_suffix(".part")
        part.write_bytes(data)
        os.replace(part, path)
        return path


def _git_env(home: Path) -> dict[str, str]:
    """git with no configuration of this machine's, and the commit's fixed names and dates."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "vLLM 0.14.0 sdist",
        "GIT_AUTHOR_EMAIL": "vllm-sdist@buildkit.invalid",
        "GIT_AUTHOR_DATE": SOURCE_DATE,
        "GIT_COMMITTER_NAME": "vLLM 0.14.0 sdist",
        "GIT_COMMITTER_EMAIL": "vllm-sdist@buildkit.invalid",
        "GIT_COMMITTER_DATE": SOURCE_DATE,
        "LC_ALL": "C",
    }


_GIT_SETTINGS = ["-c", "core.autocrlf=false", "-c", "core.fileMode=true", "-c", "core.symlinks=true"]


def _head(repo: Path) -> str | None:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), "rev-parse", "--verify", "-q", "refs/heads/main"],
        capture_output=True,
        text=True,
        env=_git_env(repo.parent),
    )
    return done.stdout.strip() if done.returncode == 0 else None


def source_repository() -> Path:
    """A bare git repository whose main branch is one commit, SOURCE_COMMIT: vLLM 0.14.0's sdist (the fork)."""
    repo = root() / "vllm-0.14.0-source.git"
    if _head(repo) == SOURCE_COMMIT:
        return repo
    tarball = sdist()
    with _locked():
        if _head(repo) == SOURCE_COMMIT:
            return repo
        with tempfile.TemporaryDirectory(dir=root()) as work:
            made = _commit_sdist(tarball, Path(work))
            shutil.rmtree(repo, ignore_errors=True)
            made.rename(repo)
    if _head(repo) != SOURCE_COMMIT:
        _fail(f"the sdist's commit is {_head(repo)}, not {SOURCE_COMMIT}: the commit is no longer deterministic")
    return repo


def _commit_sdist(tarball: Path, work: Path) -> Path:
    import tarfile

    tree = work / "tree"
    with tarfile.open(tarball) as tar:
        tar.extractall(tree, filter="data")  # no owners, no special bits: the same files on every machine
    (top,) = tree.iterdir()
    for name in SDIST_ONLY:
        path = top / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    repo = work / "vllm.git"
    env = _git_env(work)
    git = ["git", *_GIT_SETTINGS, "--git-dir", str(repo), "--work-tree", str(top)]
    _run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], "git init", env=env)
    _run([*git, "add", "-A", "-f"], "git add", env=env)
    message = f"vLLM 0.14.0 from its sdist on PyPI ({SDIST.filename}, sha256 {SDIST.sha256})"
    _run([*git, "commit", "-q", "--no-verify", "-m", message], "git commit", env=env)
    return repo


@functools.cache
def source_listing() -> dict[str, tuple[str, str]]:
    """Every file under vllm/ at SOURCE_COMMIT, as `git ls-tree -r` lists it: path -> (git blob id, git mode)."""
    repo = source_repository()
    done = _run(
        ["git", "--git-dir", str(repo), "ls-tree", "-r", "-z", SOURCE_COMMIT, "--", "vllm"],
        "git ls-tree",
        env=_git_env(repo.parent),
    )
    listing = {}
    for entry in done.stdout.split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            mode, kind, blob = meta.split()
            assert kind == "blob", entry
            listing[path] = (blob, mode)
    return listing


# the wheel


@functools.cache
def wheel_members() -> dict[str, str]:
    """Every member of vLLM 0.14.0's x86_64 wheel (WHEEL): name -> sha256 of its bytes. Read from the wheel once per
    machine (3 s of a core), kept beside it as JSON named by the wheel's sha256."""
    kept = root() / f"{WHEEL.filename}.{WHEEL.sha256[:16]}.members.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    wheel = real_wheel(WHEEL)
    members = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            digest = hashlib.sha256()
            with z.open(info) as member:
                while chunk := member.read(1 << 22):
                    digest.update(chunk)
            members[info.filename] = digest.hexdigest()
    part = kept.with_suffix(".part")
    part.write_text(json.dumps(members, indent=0, sort_keys=True))
    os.replace(part, kept)
    return members


# the base and the wheels of the install


def _rootfs_recipe() -> str:
    return json.dumps(
        [ROOTFS_SUITE, "minbase", ROOTFS_PACKAGES, ROOTFS_SOURCE, UBUNTU_KEYRING.sha256, SOURCE_DATE_EPOCH]
    )


def _rootfs() -> Path:
    """A folder holding rootfs.tar: Ubuntu noble, minbase, with ROOTFS_PACKAGES (mmdebstrap; made once)."""
    folder = root() / f"rootfs-{hashlib.sha256(_rootfs_recipe().encode()).hexdigest()[:12]}"
    if (folder / "rootfs.tar").is_file():
        return folder
    if os.geteuid() != 0:
        unavailable("making the Ubuntu root file system needs root (mmdebstrap --mode=root)")
    if shutil.which("mmdebstrap") is None:
        apt = ["flock", "/run/lock/buildkit-apt.lock", "apt-get"]  # the lock scripts/engine-up.sh takes
        subprocess.run([*apt, "update", "-qq"], capture_output=True, timeout=600)
        _run(
            [*apt, "install", "-y", "-qq", "--no-install-recommends", "mmdebstrap"],
            "apt-get install mmdebstrap",
            network=True,
        )
    folder.mkdir(exist_ok=True)
    keyring = folder / "ubuntu-archive-keyring.gpg"
    with data_tar(deb(UBUNTU_KEYRING)) as tar:
        member = tar.extractfile(ARCHIVE_KEY)
        assert member is not None, ARCHIVE_KEY
        keyring.write_bytes(member.read())
    part = folder / "rootfs.tar.part"
    _run(
        [
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            f"--include={','.join(ROOTFS_PACKAGES)}",
            f"--keyring={keyring}",
            "--skip=output/dev",
            # apt runs as root throughout: its user _apt could not read the keyring or the temporary folder
            # inside root's cache and the tests' private TMPDIR
            '--aptopt=APT::Sandbox::User "root"',
            "--format=tar",
            ROOTFS_SUITE,
            str(part),
            ROOTFS_SOURCE,
        ],
        "mmdebstrap",
        timeout=1800,
        network=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)},
    )
    keyring.unlink()
    os.replace(part, folder / "rootfs.tar")
    return folder


def requirements() -> dict[str, tuple[str, str]]:
    """requirements.txt: file name -> (requirement, sha256)."""
    found = {}
    for line in REQUIREMENTS.read_text().splitlines():
        if line and not line.startswith("#"):
            requirement, rest = line.split(" --hash=sha256:")
            sha, filename = rest.split("  # ")
            found[filename] = (requirement, sha)
    return found


def _wheels() -> Path:
    """A folder holding exactly the wheels of the install: requirements.txt's (pip download --require-hashes, which
    checks a file already there against its hash too) and the vLLM wheel; the realwheels ones linked, not copied."""
    folder = root() / "wheels"
    folder.mkdir(exist_ok=True)
    for wheel in (WHEEL, TORCH_2_9_1):
        source, target = real_wheel(wheel), folder / wheel.filename
        if not target.exists() or not os.path.samefile(source, target):
            target.unlink(missing_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
    platforms = [arg for platform in _PLATFORMS for arg in ("--platform", platform)]
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "--python-version",
            "3.12",
            *platforms,
            "--implementation",
            "cp",
            *("--abi", "cp312", "--abi", "abi3", "--abi", "none"),
            "--no-cache-dir",
            "-d",
            str(folder),
            "-r",
            str(REQUIREMENTS),
        ],
        "pip download of requirements.txt",
        timeout=3600,
        network=True,
    )
    wanted = {*requirements(), WHEEL.filename}
    for path in folder.iterdir():
        if path.name not in wanted:
            path.unlink()
    missing = wanted - {path.name for path in folder.iterdir()}
    if missing:
        _fail(f"pip download left out {sorted(missing)}")
    return folder


# Docker


def _have(tag: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], capture_output=True, text=True)
    return done.returncode == 0


def _digest(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(b"%d:" % len(data) + data)
    return digest.hexdigest()


def genuine_tag() -> str:
    """The genuine image's tag: a hash of everything it is built from (no file is read but the recipe's)."""
    inputs = [path.read_bytes() for path in (DOCKERFILE, REQUIREMENTS, CHECKOUT_STEPS)]
    digest = _digest(*inputs, SDIST.sha256, SOURCE_COMMIT, WHEEL.sha256, _rootfs_recipe())
    return f"{IMAGE}:{digest[:16]}"


def genuine() -> str:
    """The tag of the genuine image in Docker, built (once per machine, under a lock) when Docker lacks it."""
    tag = genuine_tag()
    if _have(tag):
        return tag
    with _locked():
        if not _have(tag):
            _build_image(tag)
    return tag


def uv_built_tag() -> str:
    """The uv-built image's tag: a hash of everything it is built from."""
    inputs = [path.read_bytes() for path in (UV_DOCKERFILE, REQUIREMENTS, UV_REQUIREMENTS)]
    digest = _digest(*inputs, SDIST.sha256, SOURCE_COMMIT, WHEEL.sha256, _rootfs_recipe())
    return f"{UV_IMAGE}:{digest[:16]}"


def uv_built() -> str:
    """The tag of the uv-built image (NeMo-RL's uv-source mode: vLLM's wheel built by uv from the git source in
    precompiled mode, installed into the venv), built once per machine when Docker lacks it."""
    tag = uv_built_tag()
    if _have(tag):
        return tag
    with _locked():
        if not _have(tag):
            _build_image(tag, UV_DOCKERFILE, "uv-built", {"uv": _uv_wheel()})
    return tag


def _uv_wheel() -> Path:
    """A folder holding the wheels of uv-requirements.txt (pip download --require-hashes)."""
    folder = root() / "uv-wheel"
    folder.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--require-hashes"]
    argv += ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none"]
    argv += ["--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]
    _run([*argv, "--no-cache-dir", "-d", str(folder), "-r", str(UV_REQUIREMENTS)], "pip download of uv", network=True)
    return folder


def _build_image(
    tag: str, dockerfile: Path = DOCKERFILE, target: str = "genuine", more: dict[str, Path] | None = None
) -> None:
    # mmdebstrap and pip download mostly wait on the network: the base is made while the wheels come
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        making = pool.submit(_rootfs)
        repo, wheels = source_repository(), _wheels()
        rootfs = making.result()
    log = root() / f"build-{target}.log" if target != "genuine" else root() / "build.log"
    contexts = [
        f"{name}={path}" for name, path in {"wheels": wheels, "source": repo, "recipe": RECIPE, **(more or {})}.items()
    ]
    argv = [
        "docker",
        "buildx",
        "build",
        "--builder",
        BUILDER,
        "--file",
        str(dockerfile),
        "--target",
        target,
        *[arg for context in contexts for arg in ("--build-context", context)],
        "--build-arg",
        f"SOURCE_COMMIT={SOURCE_COMMIT}",
        "--build-arg",
        f"VLLM_WHEEL={WHEEL.filename}",
        "--build-arg",
        f"SOURCE_DATE_EPOCH={SOURCE_DATE_EPOCH}",
        "--provenance=false",
        "--output",
        f"type=docker,name={tag},compression=uncompressed",
        "--progress=plain",
        str(rootfs),
    ]
    with log.open("w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
    if done.returncode != 0 or not _have(tag):
        _fail(f"building {tag} failed (exit {done.returncode}); the end of {log}:\n{log.read_text()[-4000:]}")


# setuptools-scm 8's _version.py


def scm8_version_file() -> bytes:
    """vllm/_version.py as setuptools-scm 8 writes it for SOURCE_COMMIT: setuptools-scm 8.3.1 from PyPI
    (scm8-requirements.txt, --require-hashes) run on the host, as vLLM's setup.py runs it (`get_version(write_to=
    "vllm/_version.py")` in the checkout), in a clone with the same edits (checkout-steps.sh) and SOURCE_DATE_EPOCH as
    the image's, so the version it computes is the image's. Made once per machine."""
    kept = root() / f"scm8-_version-{SOURCE_COMMIT[:12]}.py"
    if kept.is_file():
        return kept.read_bytes()
    repo = source_repository()
    with _locked(), tempfile.TemporaryDirectory(dir=root()) as work:
        tools = root() / "setuptools-scm-8.3.1"
        if not (tools / "setuptools_scm").is_dir():
            part = Path(work) / "tools"
            _run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:", "--require-hashes"]
                + ["--no-cache-dir", "--target", str(part), "-r", str(SCM8_REQUIREMENTS)],
                "pip install of setuptools-scm 8",
                network=True,
            )
            shutil.rmtree(tools, ignore_errors=True)
            part.rename(tools)
        clone = Path(work) / "vllm"
        env = _git_env(Path(work))
        _run(["git", *_GIT_SETTINGS, "clone", "-q", "--no-checkout", str(repo), str(clone)], "git clone", env=env)
        _run(["git", *_GIT_SETTINGS, "-C", str(clone), "checkout", "-q", SOURCE_COMMIT], "git checkout", env=env)
        _run(["bash", str(CHECKOUT_STEPS)], "checkout-steps.sh", cwd=clone, env={**env, "PYTHON": sys.executable})
        # -S: only the standard library and setuptools-scm 8's folder (PYTHONPATH), never the host's site-packages.
        scm = {**env, "PYTHONPATH": str(tools), "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
        write = "from setuptools_scm import get_version; print(get_version(write_to='vllm/_version.py'))"
        _run([sys.executable, "-S", "-c", write], "setuptools-scm 8", cwd=clone, env=scm)
        data = (clone / "vllm" / "_version.py").read_bytes()
        part_file = kept.with_suffix(".part")
        part_file.write_bytes(data)
        os.replace(part_file, kept)
    return data


# the tampered images


@dataclass(frozen=True)
class Case:
    what: str  # the tampering, in words
    instruction: str  # the one Dockerfile instruction after FROM the genuine image
    files: tuple[tuple[str, str], ...] = ()  # (name in the build context, text) for a COPY


_FA = f"{PACKAGE_DIR}/vllm_flash_attn"


def _python_step(*lines: str) -> str:
    """A RUN of the image's python, in exec form (JSON): no shell between the code and python."""
    return "RUN " + json.dumps([PYTHON, "-c", "\n".join(lines)])


_MARK = f'BUILDKIT_TAMPERED = "{MARKER}"\n'

CASES: dict[str, Case] = {
    "flash-attn-extra": Case(
        "an added vllm/vllm_flash_attn/evil.py (the folder precompiled mode fills from the wheel)",
        f"COPY evil.py {_FA}/evil.py",
        (("evil.py", _MARK),),
    ),
    "flash-attn-package": Case(
        "a package vllm/vllm_flash_attn/flash_attn_interface/ beside the wheel's flash_attn_interface.py",
        f"COPY flash_attn_interface/ {_FA}/flash_attn_interface/",
        (("flash_attn_interface/__init__.py", _MARK),),
    ),
    "config-symlink": Case(
        "vllm/config a link to /opt/evil/config, a copy of the package with __init__.py changed",
        f"RUN mkdir -p /opt/evil && cp -a {PACKAGE_DIR}/config /opt/evil/config"
        f" && printf '\\n{_MARK.strip()}\\n' >> /opt/evil/config/__init__.py"
        f" && rm -r {PACKAGE_DIR}/config && ln -s /opt/evil/config {PACKAGE_DIR}/config",
    ),
    "lora-removed": Case("the source subpackage vllm/lora/ removed whole", f"RUN rm -r {PACKAGE_DIR}/lora"),
    "pth": Case(
        "a .pth file no distribution owns in site-packages, with an import line",
        f"COPY buildkit-tampered.pth {SITE_PACKAGES}/buildkit-tampered.pth",
        (("buildkit-tampered.pth", f"import os; os.environ['BUILDKIT_TAMPERED_PTH'] = '{MARKER}'\n"),),
    ),
    "sitecustomize": Case(
        "a sitecustomize.py no distribution owns in site-packages",
        f"COPY sitecustomize.py {SITE_PACKAGES}/sitecustomize.py",
        (("sitecustomize.py", f"import os\nos.environ['BUILDKIT_TAMPERED_SITECUSTOMIZE'] = '{MARKER}'\n"),),
    ),
    "pyc-sourceless": Case(
        "vllm/__pycache__/evil.cpython-312.pyc, whose source vllm/evil.py is absent",
        # compiled by the image's python (its magic number), the source written and removed within the step
        _python_step(
            "import pathlib, py_compile",
            "s = pathlib.Path('/tmp/evil.py')",
            f"s.write_text({f'print({MARKER!r})' + chr(10)!r})",
            f"py_compile.compile(str(s), cfile='{PACKAGE_DIR}/__pycache__/evil.cpython-312.pyc', doraise=True)",
            "s.unlink()",
        ),
    ),
    "pyc-differs": Case(
        "vllm/__pycache__/envs.cpython-312.pyc (setup.py's, at install) replaced by bytecode of other code, as an "
        "unchecked hash-based .pyc: python never holds it to the source",
        _python_step(
            "import importlib.util, pathlib, py_compile",
            f"src, t = pathlib.Path('{PACKAGE_DIR}/envs.py'), pathlib.Path('/tmp/envs.py')",
            f"t.write_text(src.read_text() + {chr(10) + _MARK!r})",
            "py_compile.compile(str(t), cfile=importlib.util.cache_from_source(str(src)), doraise=True, "
            "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)",
            "t.unlink()",
        ),
    ),
    "site-pyc-differs": Case(
        "packaging/__pycache__/version.cpython-312.pyc in site-packages replaced by bytecode of other code, as an "
        "unchecked hash-based .pyc: python runs it without looking at the source (pip's RECORD lists the cache; "
        "where none does, as uv writes them, its source's hash tells)",
        _python_step(
            "import importlib.util, pathlib, py_compile",
            f"src, t = pathlib.Path('{SITE_PACKAGES}/packaging/version.py'), pathlib.Path('/tmp/version.py')",
            f"t.write_text(src.read_text() + {chr(10) + _MARK!r})",
            "py_compile.compile(str(t), cfile=importlib.util.cache_from_source(str(src)), doraise=True, "
            "invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)",
            "t.unlink()",
        ),
    ),
    "record-mismatch": Case(
        "packaging/version.py in site-packages changed: no longer the sha256 its dist-info RECORD holds",
        f"RUN printf '\\n{_MARK.strip()}\\n' >> {SITE_PACKAGES}/packaging/version.py",
    ),
    "finder-redirect": Case(
        "vLLM's editable finder (owned by its dist-info RECORD) changed to map `vllm` to /opt/evil/vllm",
        f"RUN mkdir -p /opt/evil/vllm && printf '{_MARK.strip()}\\n' > /opt/evil/vllm/__init__.py"
        f" && sed -i 's#{PACKAGE_DIR}#/opt/evil/vllm#' {SITE_PACKAGES}/__editable___vllm_*_finder.py",
    ),
    "version-scm8": Case(
        "vllm/_version.py as setuptools-scm 8.3.1 writes it (a passing case: a build with setuptools-scm 8)",
        f"COPY _version.py {PACKAGE_DIR}/_version.py",
    ),
}
# Cases of the uv-built image (`uv_built`), whose package is in site-packages.
UV_PACKAGE_DIR = f"{SITE_PACKAGES}/vllm"
UV_CASES: dict[str, Case] = {
    "stub-runs-code": Case(
        "vllm/grpc/vllm_engine_pb2_grpc.py (a gRPC stub the build generated) with a line that runs other code",
        f'RUN printf \'\\nimport os; os.environ["BUILDKIT_TAMPERED"] = "{MARKER}"\\n\' '
        f">> {UV_PACKAGE_DIR}/grpc/vllm_engine_pb2_grpc.py",
    ),
    "uv-lora-removed": Case("the source subpackage vllm/lora/ removed whole", f"RUN rm -r {UV_PACKAGE_DIR}/lora"),
}


def _case_files(case: str) -> dict[str, bytes]:
    files = {name: text.encode() for name, text in CASES[case].files}
    if case == "version-scm8":
        files["_version.py"] = scm8_version_file()
    return files


def tampered(case: str) -> str:
    """The tag of the genuine image with `case` (CASES; UV_CASES: the uv-built image) applied: one layer FROM it,
    built by Docker's own builder (no network), once per machine and image."""
    base = uv_built() if case in UV_CASES else genuine()
    files = _case_files(case) if case in CASES else {}
    dockerfile = f"FROM {base}\n{(CASES.get(case) or UV_CASES[case]).instruction}\n"
    digest = _digest(base, case, dockerfile, *(part for name in sorted(files) for part in (name, files[name])))
    tag = f"{TAMPERED_IMAGE}:{case}-{digest[:12]}"
    if _have(tag):
        return tag
    with _locked(), tempfile.TemporaryDirectory(dir=root()) as context:
        if not _have(tag):
            for name, data in files.items():
                (Path(context) / name).parent.mkdir(parents=True, exist_ok=True)
                (Path(context) / name).write_bytes(data)
            (Path(context) / "Dockerfile").write_text(dockerfile)
            _run(
                ["docker", "build", "-q", "--network", "none", "-t", tag, context],
                f"docker build of the {case} image",
                env={**os.environ, "DOCKER_BUILDKIT": "0"},
            )
    return tag


# what the image's python would run


def run_in(image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` in a throwaway container of `image`, no network: exit code, stdout, stderr."""
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", argv[0], image, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=300,
    )


# Where import would load a module from, without running any module's code (vllm/__init__.py imports torch, which the
# image lacks): each name from the top down is asked of every finder on sys.meta_path in turn, with the parent's
# __path__ (its spec's submodule_search_locations), as importlib's _find_spec does during an import. The editable
# finder is on sys.meta_path because site ran its .pth at start-up. It would differ from a real import only where a
# parent package's __init__ changed its own __path__ or sys.meta_path as it ran; vLLM's do neither.
FIND = """
import sys

def find(name):
    spec, path = None, None
    parts = name.split('.')
    for depth in range(len(parts)):
        full = '.'.join(parts[: depth + 1])
        for finder in sys.meta_path:
            spec = finder.find_spec(full, path, None) if hasattr(finder, 'find_spec') else None
            if spec is not None:
                break
        if spec is None or (depth < len(parts) - 1 and spec.submodule_search_locations is None):
            return None
        path = spec.submodule_search_locations
    return spec

def text(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        return f.read()
"""

# For each case, code run by the image's python that prints one JSON line: "runs" (the tampered code is what python
# would run) and "said" (the evidence). Each says in a comment what it proves.
PROBES: dict[str, str] = {
    # vllm.vllm_flash_attn.evil resolves to the added file: `import vllm.vllm_flash_attn.evil` would run it.
    "flash-attn-extra": f"""
spec = find('vllm.vllm_flash_attn.evil')
origin = spec.origin if spec else None
runs = origin == '{_FA}/evil.py' and '{MARKER}' in text(origin)
""",
    # FileFinder takes the package directory before the module file of the same name: the import of
    # vllm.vllm_flash_attn.flash_attn_interface (vLLM's flash-attention entry point) runs the added __init__.py.
    "flash-attn-package": f"""
spec = find('vllm.vllm_flash_attn.flash_attn_interface')
origin = spec.origin if spec else None
runs = origin == '{_FA}/flash_attn_interface/__init__.py' and '{MARKER}' in text(origin)
""",
    # vllm.config resolves to a file inside the checkout's package by name, whose bytes are /opt/evil/config's.
    "config-symlink": f"""
import os
spec = find('vllm.config')
origin = spec.origin if spec else None
real = os.path.realpath(origin) if origin else None
runs = origin == '{PACKAGE_DIR}/config/__init__.py' and real == '/opt/evil/config/__init__.py' \\
    and '{MARKER}' in text(origin)
origin = [origin, real]
""",
    # vllm.lora resolves to nothing: `import vllm.lora` (vLLM's LoRA support) would fail where the source has it.
    "lora-removed": """
spec = find('vllm.lora')
origin = spec.origin if spec else None
runs = spec is None
""",
    # site ran the .pth's import line as this python started (before -c): every python in the venv runs it.
    "pth": f"""
import os
origin = '{SITE_PACKAGES}/buildkit-tampered.pth'
runs = os.environ.get('BUILDKIT_TAMPERED_PTH') == '{MARKER}'
origin = [origin, 'BUILDKIT_TAMPERED_PTH=' + str(os.environ.get('BUILDKIT_TAMPERED_PTH'))]
""",
    # site imported sitecustomize from site-packages as this python started: every python in the venv runs it.
    "sitecustomize": f"""
import os
module = sys.modules.get('sitecustomize')
origin = getattr(module, '__file__', None)
runs = origin == '{SITE_PACKAGES}/sitecustomize.py' \\
    and os.environ.get('BUILDKIT_TAMPERED_SITECUSTOMIZE') == '{MARKER}'
origin = [origin, 'BUILDKIT_TAMPERED_SITECUSTOMIZE=' + str(os.environ.get('BUILDKIT_TAMPERED_SITECUSTOMIZE'))]
""",
    # Honest about a limit: import never loads bytecode from __pycache__ without its source (PEP 3147), so vllm.evil
    # resolves to nothing; the file is still code in the checkout that python runs when named (`python <file>`).
    "pyc-sourceless": f"""
import subprocess
origin = '{PACKAGE_DIR}/__pycache__/evil.cpython-312.pyc'
imported = find('vllm.evil') is not None
ran = subprocess.run([sys.executable, origin], capture_output=True, text=True).stdout.strip()
runs = not imported and ran == '{MARKER}'
origin = [origin, 'import finds it' if imported else 'import does not find it', 'python <file> prints ' + ran]
""",
    # The code object the import of vllm.envs would execute (its loader's get_code) is the tampered bytecode: an
    # unchecked hash-based .pyc is never compared with its source, which holds no marker.
    "pyc-differs": f"""
spec = find('vllm.envs')
origin = spec.cached if spec else None
code = spec.loader.get_code('vllm.envs') if spec else None
runs = code is not None and '{MARKER}' in code.co_consts and '{MARKER}' not in text(spec.origin)
with open(origin, 'rb') as f:
    flags = int.from_bytes(f.read(8)[4:], 'little')  # PEP 552: 1 hash-based, 2 checked against the source
origin = [origin, 'pyc flags %d' % flags, 'code holds the marker' if runs else 'code holds no marker']
""",
    # A real import: packaging.version runs the unchecked hash-based cache, not its unchanged source.
    "site-pyc-differs": f"""
import packaging.version as module
origin = module.__cached__
runs = getattr(module, 'BUILDKIT_TAMPERED', None) == '{MARKER}' and '{MARKER}' not in text(module.__file__)
origin = [origin, 'the import ran the marker' if runs else 'the import ran no marker']
""",
    # A real import: packaging.version has nothing of torch, so python imports the changed file, whose sha256 is no
    # longer the one RECORD holds for it.
    "record-mismatch": f"""
import base64, glob, hashlib
import packaging.version as module
origin = module.__file__
with open(origin, 'rb') as f:
    digest = 'sha256=' + base64.urlsafe_b64encode(hashlib.sha256(f.read()).digest()).rstrip(b'=').decode()
record = text(glob.glob('{SITE_PACKAGES}/packaging-*.dist-info/RECORD')[0])
recorded = [line.split(',')[1] for line in record.splitlines() if line.startswith('packaging/version.py,')][0]
runs = getattr(module, 'BUILDKIT_TAMPERED', None) == '{MARKER}' and digest != recorded
origin = [origin, 'file ' + digest, 'RECORD ' + recorded]
""",
    # `import vllm` would run /opt/evil/vllm/__init__.py: the editable finder maps the name there.
    "finder-redirect": f"""
spec = find('vllm')
origin = spec.origin if spec else None
runs = origin == '/opt/evil/vllm/__init__.py' and '{MARKER}' in text(origin)
""",
    # vllm._version resolves to the checkout's _version.py, which the import would run: executed here (it is
    # generated code that imports nothing of vLLM) for the version it states, with its first lines.
    "version-scm8": f"""
import importlib.util
spec = find('vllm._version')
origin = spec.origin if spec else None
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
runs = origin == '{PACKAGE_DIR}/_version.py' and 'from __future__ import annotations' not in text(origin)
origin = [origin, module.__version__, getattr(module, '__commit_id__', None)]
""",
}


@dataclass(frozen=True)
class Shown:
    """What the image's python showed. `runs`: the tampering takes effect in what python would run (PROBES says how
    each case is shown; for "lora-removed" that `import vllm.lora` would fail, for "pyc-sourceless" that python runs
    the file by name while import passes it by); `said`: the evidence python printed (paths, values), as JSON."""

    runs: bool
    said: str


def shown(case: str, image: str) -> Shown:
    """Ask `image`'s own python, with PROBES[case], whether the tampered code of `case` is what it would run."""
    return shown_many([case], image)[case]


def shown_many(cases: list[str], image: str) -> dict[str, Shown]:
    """shown() for several cases in one container: each probe runs in a namespace of its own, in one python that
    started as any would (site, .pth files, sitecustomize), so each answers as it would alone."""
    probes = json.dumps({case: PROBES[case] for case in cases})
    code = (
        FIND
        + f"""
import json
answers = {{}}
for case, probe in json.loads({probes!r}).items():
    space = {{'find': find, 'text': text, 'sys': sys}}
    exec(probe, space)
    answers[case] = {{'runs': space['runs'], 'origin': space['origin']}}
print(json.dumps(answers))
"""
    )
    done = run_in(image, PYTHON, "-c", code)
    if done.returncode != 0:
        raise AssertionError(f"the probes of {cases} failed in {image}: {done.stdout}{done.stderr}")
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return {case: Shown(bool(answer["runs"]), json.dumps(answer["origin"])) for case, answer in answers.items()}
