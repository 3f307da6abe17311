"""Issue 28, point 5: the image proves the composition. verify holds the vLLM package `python` imports to the
source commit's tree (each Python file's git blob id, as resolve listed them) and its shared objects to the locked
wheel's members, wherever the package is: build-custom-vllm.sh installs it editable from 3rdparty/vllm
(NVIDIA-NeMo/RL tools/build-custom-vllm.sh: `git clone "$GIT_URL" "$BUILD_DIR"` with BUILD_DIR=3rdparty/vllm, then
`uv pip install --no-build-isolation -e .`; the Dockerfile's WORKDIR is /opt/nemo-rl).

The files are vLLM 0.14.0's real ones (its PyPI wheel), and the listing is what they are in git
(tests/support/vllmtree.py); the ids buildkit computes are held to git's own (`git hash-object`)."""

from __future__ import annotations

import hashlib
import tarfile
import zipfile

import pytest

from buildkit.image.vllmpackage import FIND_SPEC, VllmPackage, judge_python, package_dir, read_package
from buildkit.models.lock import PythonFiles, read_lock
from buildkit.stages.verify import COMPILED_CHECK, PYTHON_CHECK, Context, check_gpu_files, check_vllm_python
from tests.support.fake_upstreams import VLLM_SHA
from tests.support.gitserver import git
from tests.support.images import F, layer_tar
from tests.support.memengine import MemoryEngine, MemoryImage
from tests.support.realwheels import VLLM_0_14_0, real_wheel
from tests.support.verifyimages import LOCK, PREPARE, release_image
from tests.support.vllmtree import COMMIT_PREFIX, FIXTURE, blob_id, listing, python_blobs

PACKAGE = "/opt/nemo-rl/3rdparty/vllm/vllm"  # WORKDIR /opt/nemo-rl, BUILD_DIR 3rdparty/vllm, the package vllm/
SOURCE = "b17039bcc" + "0" * 31  # the listing's commit (its first nine digits are the wheel's commit_id)


def test_the_blob_ids_buildkit_computes_are_gits(tmp_path):
    """read_package's ids (streamed from a tar) equal what git gives the same bytes."""
    files = {"vllm/__init__.py": b"", "vllm/config.py": b"x = 1\n", "vllm/big.py": bytes(range(256)) * 5000}
    for name, data in files.items():
        (tmp_path / name.replace("/", "_")).write_bytes(data)
    found = package(files)
    for name, data in files.items():
        assert found.python[name] == git("hash-object", name.replace("/", "_"), cwd=tmp_path).strip()
        assert found.python[name] == blob_id(data)


def test_the_package_directory_python_names_is_taken_only_when_it_is_a_plain_path():
    assert package_dir(0, f"{PACKAGE}\n") == PACKAGE
    assert package_dir(0, "/usr/lib/python3/dist-packages/vllm\n/other/vllm\n") == "/usr/lib/python3/dist-packages/vllm"
    for code, out in (
        (1, "ModuleNotFoundError"),
        (0, ""),
        (0, "relative/vllm"),
        (0, "/opt/x/../../etc/vllm"),
        (0, "/opt/$(reboot)/vllm"),
        (0, "/opt/vllm-other"),
        (127, PACKAGE),
    ):
        assert package_dir(code, out) is None, out


def package(files: dict[str, bytes], links: dict[str, tuple[bytes, str]] | None = None) -> VllmPackage:
    """read_package over a tar stream as `docker cp` sends one: regular files, and links (name -> (type, target))."""
    entries = [F(name, data) for name, data in files.items()]
    entries += [F(name, kind=kind, linkname=target) for name, (kind, target) in (links or {}).items()]
    return read_package([layer_tar(entries)], PACKAGE, "image")


LISTED = {
    "vllm/__init__.py": blob_id(b""),
    "vllm/a.py": blob_id(b"a = 1\n"),
    "vllm/b.py": blob_id(b"b = 2\n"),
    "vllm/tools/c.py": blob_id(b"c = 3\n"),
}
GOOD = {
    "vllm/__init__.py": b"",
    "vllm/a.py": b"a = 1\n",
    "vllm/b.py": b"b = 2\n",
    "vllm/__pycache__/a.cpython-312.pyc": b"\x00",
    "vllm/configs/x.json": b"{}",
    "vllm/_version.py": b"__version__ = version = '0.14.0'\n__version_tuple__ = version_tuple = (0, 14, 0)\n",
}


def test_the_judgement_names_what_differs_and_what_the_tree_lacks():
    """vllm/tools/ has no __init__.py in the image: its file is counted, not failed; bytecode is said; package data
    (JSON) is not Python."""
    ok, reason = judge_python(LISTED, package(GOOD), SOURCE)
    assert ok is True
    assert reason == (
        "3 file(s) are b17039bcc000's (git blob ids); vllm/_version.py (setuptools-scm's) holds literals only; 1 of "
        "the tree's are in no package directory the image installs; 1 bytecode file(s) under __pycache__ not "
        "compared (Python runs one in place of its source when its header matches the source's size and time)"
    )
    ok, reason = judge_python(
        LISTED, package({**GOOD, "vllm/b.py": b"b = 3\n", "vllm/evil.py": b"import os\n"}), SOURCE
    )
    assert ok is False
    assert reason == "1 differ from b17039bcc000's: vllm/b.py; 1 are not in b17039bcc000's tree: vllm/evil.py"
    assert judge_python(LISTED, package({}), SOURCE) == (False, "the image's vLLM package holds no Python file")


@pytest.mark.parametrize(
    "case",
    [
        "symlink",
        "hardlink",
        "sourceless pyc",
        "extra shared object",
        "removed module",
        "odd name",
        "version file runs code",
    ],
)
def test_what_python_would_import_but_nothing_compares_fails(case):
    """Each way an image could carry other code past the check (found by review): a module that is a link, a
    sourceless .pyc (importable), a shared object the wheel does not have (it wins the import over the .py of the
    same module), a module of an installed package removed, a module name outside vLLM's, and a vllm/_version.py
    (which vLLM runs on import) that does more than assign literals."""
    files, links = dict(GOOD), {}
    if case == "symlink":
        del files["vllm/b.py"]
        links["vllm/b.py"] = (tarfile.SYMTYPE, "/tmp/evil.py")
    if case == "hardlink":
        links["vllm/c.py"] = (tarfile.LNKTYPE, "vllm/a.py")
    if case == "sourceless pyc":
        files["vllm/d.pyc"] = b"\x00"
    if case == "extra shared object":
        files["vllm/b.cpython-312-x86_64-linux-gnu.so"] = b"\x7fELF"
    if case == "removed module":
        del files["vllm/b.py"]
    if case == "odd name":
        files["vllm/\u00e9vil.py"] = b"import os\n"
    if case == "version file runs code":
        files["vllm/_version.py"] += b"__import__('os').system('id')\n"
    ok, reason = judge_python(LISTED, package(files, links), SOURCE)
    assert ok is False, reason
    said = {
        "symlink": "cannot be vLLM's as installed: vllm/b.py is a link, not a file",
        "hardlink": "cannot be vLLM's as installed: vllm/c.py is a link, not a file",
        "sourceless pyc": "cannot be vLLM's as installed: vllm/d.pyc is bytecode without its source",
        "extra shared object": "1 shared object(s) are not the wheel's: vllm/b.cpython-312-x86_64-linux-gnu.so",
        "removed module": "1 of b17039bcc000's are missing from the package directories installed: vllm/b.py",
        "odd name": "is a module outside vLLM's file names",
        "version file runs code": "vllm/_version.py holds more than setuptools-scm writes: Call at line 3",
    }[case]
    assert said in reason, reason


def context(image: MemoryImage, lock=LOCK) -> Context:
    return Context(MemoryEngine(images={"img": image}), "img", image.attrs, lock, PREPARE, False, [])


@pytest.fixture(scope="module")
def vllm_files() -> dict[str, bytes]:
    """Every vllm/*.py of vLLM 0.14.0's real wheel (1,234 files, the source's, the wheel's and _version.py)."""
    with zipfile.ZipFile(real_wheel(VLLM_0_14_0)) as z:
        return {n: z.read(n) for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")}


@pytest.mark.e2e
def test_the_fixture_is_what_the_real_wheel_holds():
    """The stand-in GitHub's default tree (tests/fixtures/vllm-0.14.0-python.json) is recomputed from the real
    wheel: it cannot drift from vLLM's real files."""
    assert python_blobs(real_wheel(VLLM_0_14_0)) == listing()
    with zipfile.ZipFile(real_wheel(VLLM_0_14_0)) as z:
        assert f"commit_id = 'g{COMMIT_PREFIX}'" in z.read("vllm/_version.py").decode()
    assert len(listing()) == 1186 and FIXTURE.stat().st_size < 200_000


@pytest.mark.e2e
def test_an_editable_vllm_is_held_file_by_file_to_the_source_and_the_wheel(vllm_files):
    """The release image's vLLM as build-custom-vllm.sh leaves it: the checkout's Python at 3rdparty/vllm, the
    wheel's shared objects copied beside it. Every Python file from the source is the listed commit's; the shared
    objects (outside any site-packages) are held to the wheel's sha256; one changed or added file fails, named."""
    kernel = b"\x7fELF" + bytes(60)  # not read as ELF here: the compiled check compares sha256 only
    image = release_image()
    image.answers[tuple(FIND_SPEC)] = (0, f"{PACKAGE}\n")
    image.files.update({f"{PACKAGE}/{n.removeprefix('vllm/')}": data for n, data in vllm_files.items()})
    image.files[f"{PACKAGE}/__pycache__/__init__.cpython-312.pyc"] = b"\x00"  # bytecode: said, not compared
    lock = LOCK.model_copy(
        update={
            "vllm_python": PythonFiles(commit=SOURCE, source="stand-in", files=listing()),
        }
    )
    c = context(image, lock)
    check_vllm_python(c)
    assert [(r.name, r.status) for r in c.results] == [(PYTHON_CHECK, "pass")]
    assert c.results[0].reason.startswith(
        "1186 file(s) are b17039bcc000's (git blob ids); 47 from the wheel (held to its sha256 by the compiled-file "
        "check); vllm/_version.py (setuptools-scm's) holds literals only; 1 bytecode file(s) under __pycache__"
    )
    assert c.package is not None and len(c.package.wheel_files) == 47  # vllm_flash_attn's and triton_kernels' .py

    changed = dict(vllm_files)
    changed["vllm/config/__init__.py"] += b"# edited in the image\n"
    changed["vllm/backdoor.py"] = b"import os\n"
    image.files = {k: v for k, v in image.files.items() if not k.startswith(PACKAGE)}
    image.files.update({f"{PACKAGE}/{n.removeprefix('vllm/')}": data for n, data in changed.items()})
    image.files[f"{PACKAGE}/_C.abi3.so"] = kernel
    c = context(image, lock.model_copy(update={"vllm_files": {"vllm/_C.abi3.so": hashlib.sha256(kernel).hexdigest()}}))
    check_vllm_python(c)
    assert (c.results[0].status, c.results[0].reason) == (
        "fail",
        ("1 differ from b17039bcc000's: vllm/config/__init__.py; 1 are not in b17039bcc000's tree: vllm/backdoor.py"),
    )
    check_gpu_files(c)  # the editable package's shared object is found and held to the wheel's
    compiled = next(r for r in c.results if r.name == COMPILED_CHECK)
    assert (compiled.status, compiled.reason) == ("pass", "1 file(s) match the wheel's sha256")


def test_a_lock_without_the_listing_says_why_the_check_did_not_run():
    image = release_image()
    c = context(image)
    check_vllm_python(c)
    assert c.results[0].status == "skip" and "run `buildkit resolve`" in c.results[0].reason
    image.answers[tuple(FIND_SPEC)] = (1, "Traceback ...\nModuleNotFoundError: No module named 'vllm'")
    c = context(image)
    check_vllm_python(c)
    assert c.results[0].status == "fail" and "finds no vllm package" in c.results[0].reason


def test_resolve_lists_the_source_python_through_githubs_tree_api(project, upstreams):
    """The reference case: the merge commit's tree, from GitHub's tree API, into the lock (stand-in: vLLM 0.14.0's
    real files); a cut listing (`truncated`) is listed with git instead (test_vllm_source), and when git cannot
    reach it either the lock has none and resolve says why (git_url_rewrites: a loopback port nothing listens on)."""
    root, cli = project
    result = cli("resolve")
    assert result.code == 0, result.output
    lock = read_lock(root / "pins.lock")
    assert lock.vllm_python is not None and lock.vllm_python.files == listing()
    assert lock.vllm_python.source.endswith(f"/repos/vllm-project/vllm/git/trees/{lock.vllm.commit}?recursive=1")
    upstreams.github.truncated_trees.add(lock.vllm.commit)
    with (root / "pins.yaml").open("a") as pins:
        pins.write(
            "git_url_rewrites:\n  - url: git://127.0.0.1:9/vllm.git\n"
            "    instead_of: https://github.com/vllm-project/vllm.git\n"
        )
    result = cli("resolve")
    assert result.code == 0, result.output
    assert "truncated" in result.stderr and "not listed (verify cannot check them)" in result.stderr
    assert read_lock(root / "pins.lock").vllm_python is None
    # A whole answer past buildkit's limit for GitHub answers is another way to a cut listing: git, not exit 3.
    upstreams.github.truncated_trees.clear()
    result = cli("resolve", env={"BUILDKIT_HTTP_MAX_GITHUB": str(64 << 10)})  # the tree answer: about 200 KiB
    assert result.code == 0, result.output
    assert "listed with git instead: GET" in result.stderr and "the answer is larger than" in result.stderr
    assert read_lock(root / "pins.lock").vllm_python is None


def test_a_tree_answer_with_a_bad_blob_id_is_exit_3_and_no_lock(project, upstreams):
    """A hostile tree listing never reaches the lock: an id that is not 40 hex digits is refused."""
    root, cli = project
    upstreams.github.trees = {VLLM_SHA: {"vllm/__init__.py": "not-a-sha"}}
    result = cli("resolve")
    assert result.code == 3 and "has no blob id" in result.stderr, result.output
    assert not (root / "pins.lock").exists()
