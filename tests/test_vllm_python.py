"""Issue 28, point 5: the image proves the composition. verify holds the vLLM package `python` imports to the
source commit's tree (each Python file's git blob id, as resolve listed them) and its shared objects to the locked
wheel's members, wherever the package is: build-custom-vllm.sh installs it editable from 3rdparty/vllm
(NVIDIA-NeMo/RL tools/build-custom-vllm.sh: `git clone "$GIT_URL" "$BUILD_DIR"` with BUILD_DIR=3rdparty/vllm, then
`uv pip install --no-build-isolation -e .`; the Dockerfile's WORKDIR is /opt/nemo-rl).

The files are vLLM 0.14.0's real ones (its PyPI wheel), and the listing is what they are in git (tests/vllmtree.py);
the ids buildkit computes are held to git's own (`git hash-object`)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile

import pytest

from buildkit.image.vllmpackage import FIND_SPEC, judge_python, package_dir, read_package
from buildkit.models.lock import PythonFiles, read_lock
from buildkit.stages.verify import COMPILED_CHECK, PYTHON_CHECK, Context, check_gpu_files, check_vllm_python
from tests.fake_upstreams import VLLM_SHA
from tests.gitserver import git
from tests.memengine import MemoryEngine, MemoryImage
from tests.realwheels import VLLM_0_14_0, real_wheel
from tests.verifyimages import LOCK, PREPARE, release_image
from tests.vllmtree import COMMIT_PREFIX, FIXTURE, blob_id, listing, python_blobs

PACKAGE = "/opt/nemo-rl/3rdparty/vllm/vllm"  # WORKDIR /opt/nemo-rl, BUILD_DIR 3rdparty/vllm, the package vllm/
SOURCE = "b17039bcc" + "0" * 31  # the listing's commit (its first nine digits are the wheel's commit_id)


def tar_of(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_blob_ids_buildkit_computes_are_gits(tmp_path):
    """read_package's ids (streamed from a tar) equal what git gives the same bytes."""
    files = {"vllm/__init__.py": b"", "vllm/config.py": b"x = 1\n", "vllm/big.py": bytes(range(256)) * 5000}
    for name, data in files.items():
        (tmp_path / name.replace("/", "_")).write_bytes(data)
    found = read_package([tar_of(files)], PACKAGE, "image")
    for name, data in files.items():
        assert found.python[name] == git("hash-object", name.replace("/", "_"), cwd=tmp_path).strip()
        assert found.python[name] == blob_id(data)


def test_the_package_directory_python_names_is_taken_only_when_it_is_a_plain_path():
    assert package_dir(0, f"{PACKAGE}\n") == PACKAGE
    assert package_dir(0, "/usr/lib/python3/dist-packages/vllm\n/other/vllm\n") == "/usr/lib/python3/dist-packages/vllm"
    for code, out in ((1, "ModuleNotFoundError"), (0, ""), (0, "relative/vllm"), (0, "/opt/x/../../etc/vllm"),
                      (0, "/opt/$(reboot)/vllm"), (0, "/opt/vllm-other"), (127, PACKAGE)):  # fmt: skip
        assert package_dir(code, out) is None, out


def test_the_judgement_names_what_differs_and_what_the_tree_lacks():
    listed = {"vllm/a.py": "1" * 40, "vllm/b.py": "2" * 40, "vllm/tests_only/c.py": "3" * 40}
    found = {"vllm/a.py": "1" * 40, "vllm/b.py": "2" * 40, "vllm/_version.py": "9" * 40}
    ok, reason = judge_python(listed, found, SOURCE)
    assert ok is True
    assert reason == ("2 file(s) are b17039bcc000's (git blob ids); 1 from the wheel or written at install "
                      "(vllm/_version.py) not compared; 1 of the tree's are not installed")
    ok, reason = judge_python(listed, {**found, "vllm/b.py": "f" * 40, "vllm/evil.py": "e" * 40}, SOURCE)
    assert ok is False
    assert reason == ("1 differ from b17039bcc000's: vllm/b.py; 1 are not in b17039bcc000's tree: vllm/evil.py")
    assert judge_python(listed, {}, SOURCE) == (False, "the image's vLLM package holds no Python file")


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
    image.files[f"{PACKAGE}/__pycache__/__init__.cpython-312.pyc"] = b"\x00"  # bytecode: passed over
    lock = LOCK.model_copy(update={
        "vllm_python": PythonFiles(commit=SOURCE, source="stand-in", files=listing()),
    })  # fmt: skip
    c = context(image, lock)
    check_vllm_python(c)
    assert [(r.name, r.status) for r in c.results] == [(PYTHON_CHECK, "pass")]
    assert c.results[0].reason == ("1186 file(s) are b17039bcc000's (git blob ids); 48 from the wheel or written "
                                   "at install (vllm/_version.py) not compared")
    assert c.package is not None and set(c.package.shared_objects) == set()

    changed = dict(vllm_files)
    changed["vllm/config/__init__.py"] += b"# edited in the image\n"
    changed["vllm/backdoor.py"] = b"import os\n"
    image.files = {k: v for k, v in image.files.items() if not k.startswith(PACKAGE)}
    image.files.update({f"{PACKAGE}/{n.removeprefix('vllm/')}": data for n, data in changed.items()})
    image.files[f"{PACKAGE}/_C.abi3.so"] = kernel
    c = context(image, lock.model_copy(update={"vllm_files": {"vllm/_C.abi3.so": hashlib.sha256(kernel).hexdigest()}}))
    check_vllm_python(c)
    assert (c.results[0].status, c.results[0].reason) == ("fail", (
        "1 differ from b17039bcc000's: vllm/config/__init__.py; 1 are not in b17039bcc000's tree: vllm/backdoor.py"))
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
        pins.write("git_url_rewrites:\n  - url: git://127.0.0.1:9/vllm.git\n"
                   "    instead_of: https://github.com/vllm-project/vllm.git\n")  # fmt: skip
    result = cli("resolve")
    assert result.code == 0, result.output
    assert "truncated" in result.stderr and "not listed (verify cannot check them)" in result.stderr
    assert read_lock(root / "pins.lock").vllm_python is None


def test_a_tree_answer_with_a_bad_blob_id_is_exit_3_and_no_lock(project, upstreams):
    """A hostile tree listing never reaches the lock: an id that is not 40 hex digits is refused."""
    root, cli = project
    upstreams.github.trees = {VLLM_SHA: {"vllm/__init__.py": "not-a-sha"}}
    result = cli("resolve")
    assert result.code == 3 and "has no blob id" in result.stderr, result.output
    assert not (root / "pins.lock").exists()
