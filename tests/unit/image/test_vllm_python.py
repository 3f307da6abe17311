"""Issue 28, point 5: the image proves the composition. verify holds the vLLM package `python` imports to the
source commit's tree (each Python file's git blob id, as resolve listed them) and its shared objects to the locked
wheel's members, wherever the package is: build-custom-vllm.sh installs it editable from 3rdparty/vllm
(NVIDIA-NeMo/RL tools/build-custom-vllm.sh: `git clone "$GIT_URL" "$BUILD_DIR"` with BUILD_DIR=3rdparty/vllm, then
`uv pip install --no-build-isolation -e .`; the Dockerfile's WORKDIR is /opt/nemo-rl).

The files are vLLM 0.14.0's real ones (its PyPI wheel), and the listing is what they are in git
(tests/support/vllmtree.py); the ids buildkit computes are held to git's own (`git hash-object`)."""

from __future__ import annotations

import hashlib
import importlib.util
import struct
import tarfile
import zipfile

import pytest

from buildkit.image.vllmpackage import FIND_SPEC, VllmPackage, judge_package, package_dir, read_package
from buildkit.models.compiled import python_origin
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


def package(
    files: dict[str, bytes], links: dict[str, tuple[bytes, str]] | None = None, wheel: dict[str, str] | None = None
) -> VllmPackage:
    """read_package over a tar stream as `docker cp` sends one: regular files, and links (name -> (type, target)),
    directories as tar lists them."""
    dirs = sorted({name.rsplit("/", 1)[0] for name in files if "/" in name} - set(files))
    entries = [F(d, kind=tarfile.DIRTYPE, mode=0o755) for d in dirs]
    entries += [F(name, data) for name, data in files.items()]
    entries += [F(name, kind=kind, linkname=target) for name, (kind, target) in (links or {}).items()]
    return read_package([layer_tar(entries)], PACKAGE, "image", wheel or {})


LISTED = {
    "vllm/__init__.py": blob_id(b""),
    "vllm/a.py": blob_id(b"a = 1\n"),
    "vllm/b.py": blob_id(b"b = 2\n"),
    "vllm/tools/__init__.py": blob_id(b""),
    "vllm/tools/c.py": blob_id(b"c = 3\n"),
    "vllm/configs/x.json": blob_id(b"{}"),
}
FLASH = b"def flash_attn_varlen_func(): ...\n"
SO = b"\x7fELF" + bytes(60)
WHEEL = {  # what precompiled mode takes from the wheel, as the lock lists it
    "vllm/_C.abi3.so": hashlib.sha256(SO).hexdigest(),
    "vllm/vllm_flash_attn/__init__.py": hashlib.sha256(b"").hexdigest(),
    "vllm/vllm_flash_attn/flash_attn_interface.py": hashlib.sha256(FLASH).hexdigest(),
}
VERSION_SCM10 = (  # setuptools-scm 10.3.4's template, as upstream-facts.md read it (vcs-versioning)
    b"from __future__ import annotations\n\n__all__ = ['__version__', '__commit_id__']\n\nTYPE_CHECKING = False\n"
    b"if TYPE_CHECKING:\n    from typing import Tuple\n    from typing import Union\n\n"
    b"    VERSION_TUPLE = Tuple[Union[int, str], ...]\n    COMMIT_ID = Union[str, None]\nelse:\n"
    b"    VERSION_TUPLE = object\n    COMMIT_ID = object\n\nversion: str\n__version__: str\n"
    b"__version__ = version = '0.1.dev1+gb17039bcc.d20261201.precompiled'\n"
    b"__version_tuple__ = version_tuple = (0, 1, 'dev1', 'gb17039bcc.d20261201.precompiled')\n"
    b"__commit_id__ = commit_id = 'gb17039bcc'\n"
)
GOOD = {
    "vllm/__init__.py": b"",
    "vllm/a.py": b"a = 1\n",
    "vllm/b.py": b"b = 2\n",
    "vllm/tools/__init__.py": b"",
    "vllm/tools/c.py": b"c = 3\n",
    "vllm/configs/x.json": b"{}",
    "vllm/_C.abi3.so": SO,
    "vllm/vllm_flash_attn/__init__.py": b"",
    "vllm/vllm_flash_attn/flash_attn_interface.py": FLASH,
    "vllm/_version.py": VERSION_SCM10,
}


def pyc(source: bytes, mtime: int = 0) -> bytes:
    """A timestamp bytecode cache's header as py_compile writes it (PEP 552), then a body nothing reads."""
    return importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, mtime, len(source)) + b"\xe3body"


def judged(files: dict[str, bytes], links: dict[str, tuple[bytes, str]] | None = None) -> tuple[bool | None, str]:
    return judge_package(LISTED, package(files, links, WHEEL), SOURCE, WHEEL)


def test_a_package_of_the_two_lists_passes_and_says_what_it_held():
    caches = {
        "vllm/__pycache__/a.cpython-311.pyc": pyc(b"a = 1\n"),  # bound: mtime 0, size 6, as the tar says
        # stale, as every cache written during a build is after BuildKit's rewrite-timestamp: the source's mtime
        # is SOURCE_DATE_EPOCH, the header's the install's
        "vllm/__pycache__/b.cpython-311.pyc": pyc(b"b = 2\n", mtime=1764633600),
    }
    ok, reason = judged({**GOOD, **caches})
    assert (ok, reason) == (
        True,
        "6 file(s) are b17039bcc000's (git blob ids), and nothing else is there; 3 are the locked wheel's members "
        "(sha256); vllm/_version.py (setuptools-scm's) holds literals only; 1 bytecode cache(s) bound to its "
        "source by its header (run in its place; the code in it not compared); 1 bytecode cache(s) stale (its "
        "header names other source: Python compiles the source again and never runs it)",
    )
    assert judged({}) == (False, "the image's vLLM package holds no file")


def test_version_files_of_setuptools_scm_8_and_10_pass():
    """setuptools-scm 8.x's template (no __future__ import, no commit id) and 10.3.4's (vcs-versioning: the
    __future__ import, annotations, __commit_id__); a __future__ import of anything else is not theirs."""
    scm8 = b"__version__ = version = '0.14.0'\n__version_tuple__ = version_tuple = (0, 14, 0)\n"
    assert judged({**GOOD, "vllm/_version.py": scm8})[0] is True
    assert judged(GOOD)[0] is True
    ok, reason = judged({**GOOD, "vllm/_version.py": b"from __future__ import barry_as_FLUFL\n"})
    assert ok is False and "vllm/_version.py holds more than setuptools-scm writes: ImportFrom at line 1" in reason


@pytest.mark.parametrize(
    "case",
    [
        "changed source",
        "extra file in a from-wheel folder",
        "package directory shadowing a wheel module",
        "symlinked subpackage",
        "subpackage removed whole",
        "wheel member removed",
        "wheel member changed",
        "hard link",
        "device",
        "directory where a file belongs",
        "sourceless bytecode",
        "bytecode of another source",
        "odd name",
        "version file runs code",
    ],
)
def test_every_image_that_is_not_the_source_and_the_wheel_fails_named(case):
    """Issue 40: each way an image could carry other code past the proof fails, and the reason names the entry."""
    files, links = dict(GOOD), {}
    said = {
        "changed source": "1 differ from b17039bcc000's: vllm/b.py",
        "extra file in a from-wheel folder": (
            "1 are neither b17039bcc000's nor the wheel's: vllm/vllm_flash_attn/evil.py"
        ),
        "package directory shadowing a wheel module": (
            "1 are neither b17039bcc000's nor the wheel's: vllm/vllm_flash_attn/flash_attn_interface/__init__.py"
        ),
        "symlinked subpackage": "vllm/tools (a symbolic link to /opt/evil/tools)",
        "subpackage removed whole": "2 of b17039bcc000's are missing: vllm/tools/__init__.py, vllm/tools/c.py",
        "wheel member removed": "1 of the wheel's are missing: vllm/_C.abi3.so",
        "wheel member changed": "1 differ from the locked wheel's: vllm/_C.abi3.so",
        "hard link": "vllm/d.py (a hard link to vllm/a.py)",
        "device": "vllm/e.py (a device or a FIFO)",
        "directory where a file belongs": "1 are directories where a file belongs: vllm/a.py",
        "sourceless bytecode": "1 bytecode whose source is absent (no install leaves one): "
        "vllm/__pycache__/gone.cpython-311.pyc",
        "bytecode of another source": "1 unchecked hash-based bytecode whose hash is not its source's (Python runs "
        "it without checking): vllm/__pycache__/a.cpython-311.pyc",
        "odd name": "1 are neither b17039bcc000's nor the wheel's: vllm/\u00e9vil.py",
        "version file runs code": "vllm/_version.py holds more than setuptools-scm writes: Call at line",
    }[case]
    if case == "changed source":
        files["vllm/b.py"] = b"b = 3\n"
    if case == "extra file in a from-wheel folder":
        files["vllm/vllm_flash_attn/evil.py"] = b"import os\n"
    if case == "package directory shadowing a wheel module":
        files["vllm/vllm_flash_attn/flash_attn_interface/__init__.py"] = b"import os\n"
    if case == "symlinked subpackage":
        del files["vllm/tools/__init__.py"], files["vllm/tools/c.py"]
        links["vllm/tools"] = (tarfile.SYMTYPE, "/opt/evil/tools")
    if case == "subpackage removed whole":
        del files["vllm/tools/__init__.py"], files["vllm/tools/c.py"]
    if case == "wheel member removed":
        del files["vllm/_C.abi3.so"]
    if case == "wheel member changed":
        files["vllm/_C.abi3.so"] = SO + b"\x00"
    if case == "hard link":
        links["vllm/d.py"] = (tarfile.LNKTYPE, "vllm/a.py")
    if case == "device":
        links["vllm/e.py"] = (tarfile.FIFOTYPE, "")
    if case == "directory where a file belongs":
        del files["vllm/a.py"]
        files["vllm/a.py/__init__.py"] = b""
    if case == "sourceless bytecode":
        files["vllm/__pycache__/gone.cpython-311.pyc"] = pyc(b"")
    if case == "bytecode of another source":
        # PEP 552: flags 0b01, hash-based and not checked on import; the hash of other source than vllm/a.py's
        header = importlib.util.MAGIC_NUMBER + struct.pack("<I", 1) + importlib.util.source_hash(b"a = 2\n")
        files["vllm/__pycache__/a.cpython-311.pyc"] = header + b"\xe3body"
    if case == "odd name":
        files["vllm/\u00e9vil.py"] = b"import os\n"
    if case == "version file runs code":
        files["vllm/_version.py"] += b"__import__('os').system('id')\n"
    ok, reason = judged(files, links)
    assert ok is False, reason
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
    """The release image's vLLM as build-custom-vllm.sh leaves it, from the real wheel's files: the checkout's
    Python at 3rdparty/vllm, the wheel's from-wheel Python beside it. Every file is the listed commit's or the
    wheel's; one changed or added file fails, named; the shared object is held to the wheel's by both checks."""
    image = release_image()
    image.answers[tuple(FIND_SPEC)] = (0, f"{PACKAGE}\n")
    image.files.update({f"{PACKAGE}/{n.removeprefix('vllm/')}": data for n, data in vllm_files.items()})
    wheel = {n: hashlib.sha256(d).hexdigest() for n, d in vllm_files.items() if python_origin(n) == "wheel"}
    listed = PythonFiles(commit=SOURCE, source="stand-in", files=listing(), scope="package")
    lock = LOCK.model_copy(update={"vllm_python": listed, "vllm_files": wheel})
    c = context(image, lock)
    check_vllm_python(c)
    assert [(r.name, r.status) for r in c.results] == [(PYTHON_CHECK, "pass")], c.results
    assert c.results[0].reason == (
        "1186 file(s) are b17039bcc000's (git blob ids), and nothing else is there; 47 are the locked wheel's "
        "members (sha256); vllm/_version.py (setuptools-scm's) holds literals only"
    )
    assert c.package is not None and len(c.package.wheel_files) == 47  # vllm_flash_attn's and triton_kernels' .py

    changed = dict(vllm_files)
    changed["vllm/config/__init__.py"] += b"# edited in the image\n"
    changed["vllm/backdoor.py"] = b"import os\n"
    changed["vllm/_C.abi3.so"] = SO
    image.files = {k: v for k, v in image.files.items() if not k.startswith(PACKAGE)}
    image.files.update({f"{PACKAGE}/{n.removeprefix('vllm/')}": data for n, data in changed.items()})
    c = context(image, lock.model_copy(update={"vllm_files": {**wheel, "vllm/_C.abi3.so": WHEEL["vllm/_C.abi3.so"]}}))
    check_vllm_python(c)
    assert (c.results[0].status, c.results[0].reason) == (
        "fail",
        "1 differ from b17039bcc000's: vllm/config/__init__.py; 1 are neither b17039bcc000's nor the wheel's: "
        "vllm/backdoor.py",
    )
    check_gpu_files(c)  # the editable package's shared object is found and held to the wheel's
    compiled = next(r for r in c.results if r.name == COMPILED_CHECK)
    assert (compiled.status, compiled.reason[:38]) == ("pass", "48 file(s) match the wheel's sha256")


def test_a_lock_without_the_listing_says_why_the_check_did_not_run():
    image = release_image()
    c = context(image)
    check_vllm_python(c)
    assert c.results[0].status == "skip" and "run `buildkit resolve`" in c.results[0].reason
    older = PythonFiles(commit=SOURCE, source="stand-in", files=LISTED)  # no scope: a lock listing only Python
    c = context(image, LOCK.model_copy(update={"vllm_python": older, "vllm_files": WHEEL}))
    check_vllm_python(c)
    assert (c.results[0].status, c.results[0].reason) == (
        "skip",
        "the lock lists only the source's Python files (written before buildkit listed every file of the package): "
        "run `buildkit resolve`",
    )
    newer = older.model_copy(update={"scope": "package"})
    c = context(image, LOCK.model_copy(update={"vllm_python": newer}))
    check_vllm_python(c)
    assert c.results[0].status == "skip" and "no list of the wheel's members" in c.results[0].reason
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
    assert lock.vllm_python.scope == "package"  # every file under vllm/ the tree has (the stand-in's: Python only)
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
