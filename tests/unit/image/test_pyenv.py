"""Issue 40, point 2: the image's Python environments verified the way `rpm -V` verifies packages.

The distributions are real: `packaging` and `setuptools` as pip installed them into this checkout's .venv (their
files and the RECORDs pip wrote), and pip's editable finder for buildkit itself (setuptools' template) with its
names changed to vLLM's, as `pip install -e .` writes one for vLLM (NeMo-RL's build-custom-vllm.sh)."""

from __future__ import annotations

import importlib.util
import posixpath
import py_compile
import re
import struct
import sys
import sysconfig
import tarfile
from base64 import urlsafe_b64encode
from hashlib import sha256
from pathlib import Path

import pytest

from buildkit.budget import LimitExceeded
from buildkit.image import pyenv
from buildkit.image.pyenv import judge_environment, read_environment
from tests.support.images import F, layer_tar

SITE = Path(sysconfig.get_paths()["purelib"])
IMAGE_SITE = "/opt/nemo_rl_venv/lib/python3.12/site-packages"
VLLM = "/opt/nemo-rl/3rdparty/vllm/vllm"


def distribution(name: str) -> dict[str, bytes]:
    """A real distribution's files as pip installed them here, by their path in site-packages."""
    info = next(SITE.glob(f"{name}-*.dist-info"))
    rows = (info / "RECORD").read_text().splitlines()
    paths = [row.rsplit(",", 2)[0] for row in rows]
    return {p: (SITE / p).read_bytes() for p in paths if not p.startswith("..") and (SITE / p).is_file()}


def editable_vllm() -> dict[str, bytes]:
    """pip's editable files for buildkit in this .venv, renamed to what it writes for vLLM: the .pth, the finder
    (setuptools' template: MAPPING, NAMESPACES, the meta path finder) and a dist-info whose RECORD owns them, in
    pip's form (path,sha256=<urlsafe base64 without padding>,size; RECORD itself unhashed)."""
    finder = next(SITE.glob("__editable___buildkit_*_finder.py")).read_text()
    finder = re.sub(r"MAPPING: dict\[str, str\] = \{.*\}", f"MAPPING: dict[str, str] = {{'vllm': '{VLLM}'}}", finder)
    module = "__editable___vllm_0_14_0_finder"
    files = {
        "__editable__.vllm-0.14.0.pth": f"import {module}; {module}.install()".encode(),
        f"{module}.py": finder.encode(),
        "vllm-0.14.0.dist-info/INSTALLER": b"pip\n",
    }
    rows = [
        f"{p},sha256={urlsafe_b64encode(sha256(d).digest()).decode().rstrip('=')},{len(d)}" for p, d in files.items()
    ]
    return {**files, "vllm-0.14.0.dist-info/RECORD": "\n".join([*rows, "vllm-0.14.0.dist-info/RECORD,,"]).encode()}


def judged(files: dict[str, bytes], links: dict[str, tuple[bytes, str]] | None = None, vllm: str | None = VLLM):
    """The environment judged from a tar stream in the order Docker's archive sends it: each directory whole, its
    entries by name (`__init__.py` before `__pycache__/`, `version.py` after it)."""
    entries = [F(f"site-packages/{p}", d) for p, d in files.items()]
    entries += [F(f"site-packages/{p}", kind=k, linkname=t) for p, (k, t) in (links or {}).items()]
    entries.sort(key=lambda f: f.path.split("/"))
    return judge_environment(read_environment([layer_tar(entries)], IMAGE_SITE, "image"), vllm)


@pytest.fixture(scope="module")
def real() -> dict[str, bytes]:
    return {**distribution("packaging"), **editable_vllm()}


def test_real_distributions_hold_to_their_records(real):
    ok, reason = judged({**real, "setuptools-free.txt": b"an unowned note\n"})
    assert ok is True, reason
    count = len(distribution("packaging")) + 4  # and vLLM's editable .pth, finder, INSTALLER and RECORD
    assert reason == (
        f"{IMAGE_SITE}: 2 distribution(s) hold to their RECORDs ({count:,} files); 1 file(s) no RECORD owns: "
        "setuptools-free.txt"
    )


@pytest.mark.parametrize(
    "case",
    [
        "changed",
        "missing",
        "unowned pth",
        "unowned sitecustomize",
        "unowned usercustomize",
        "start-up extension module",
        "sourceless bytecode",
        "finder elsewhere",
        "linked",
    ],
)
def test_what_an_install_did_not_write_fails_named(real, case):
    files, links = dict(real), {}
    module = next(p for p in files if p.startswith("packaging/") and p.endswith("version.py"))
    if case == "changed":
        files[module] += b"\nimport os\n"
    if case == "missing":
        del files[module]
    if case == "unowned pth":
        files["zzz-evil.pth"] = b"import os; os.system('id')\n"
    if case == "unowned sitecustomize":
        files["sitecustomize.py"] = b"import os\n"
    if case == "unowned usercustomize":
        files["usercustomize.py"] = b"import os\n"
    if case == "start-up extension module":  # `import sitecustomize` finds an extension module before a .py
        files["sitecustomize.cpython-312-x86_64-linux-gnu.so"] = b"\x7fELF"
    if case == "sourceless bytecode":
        files["__pycache__/gone.cpython-312.pyc"] = importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, 0, 0)
    if case == "finder elsewhere":
        finder = "__editable___vllm_0_14_0_finder.py"
        files[finder] = files[finder].replace(VLLM.encode(), b"/opt/evil/vllm")
    if case == "linked":
        links[module] = (tarfile.SYMTYPE, "/opt/evil/version.py")
        del files[module]
    ok, reason = judged(files, links)
    assert ok is False, reason
    said = {
        "changed": "differs from its RECORD",
        "missing": f"{module} is missing",
        "unowned pth": "run at start-up and no distribution owns them: zzz-evil.pth",
        "unowned sitecustomize": "run at start-up and no distribution owns them: sitecustomize.py",
        "unowned usercustomize": "run at start-up and no distribution owns them: usercustomize.py",
        "start-up extension module": (
            "run at start-up and no distribution owns them: sitecustomize.cpython-312-x86_64-linux-gnu.so"
        ),
        "sourceless bytecode": (
            "bytecode whose source is absent (no install leaves one): __pycache__/gone.cpython-312.pyc"
        ),
        "finder elsewhere": "__editable__.vllm-0.14.0.pth's finder maps vllm -> /opt/evil/vllm",
        "linked": f"{module} is a link",
    }[case]
    assert said in reason, reason


def test_the_editable_finder_must_send_vllm_to_the_package_verified(real):
    assert judged(real, vllm=None)[0] is False  # the composition proof found no package: nothing to map to
    assert "not the editable finder pip writes" in judged({**real, "__editable__.vllm-0.14.0.pth": b"import os\n"})[1]


def hash_pyc(tmp_path: Path, code: bytes, mode: py_compile.PycInvalidationMode) -> bytes:
    """A real hash-based cache (PEP 552) of `code`, as py_compile writes one in `mode`."""
    source, cache = tmp_path / "code.py", tmp_path / "code.pyc"
    source.write_bytes(code)
    py_compile.compile(str(source), str(cache), doraise=True, invalidation_mode=mode)
    return cache.read_bytes()


UNCHECKED, CHECKED = py_compile.PycInvalidationMode.UNCHECKED_HASH, py_compile.PycInvalidationMode.CHECKED_HASH
OTHER_TAG = "cpython-313" if sys.implementation.cache_tag == "cpython-312" else "cpython-312"  # no RECORD's cache


@pytest.mark.parametrize("module", ["packaging/__init__.py", "packaging/version.py"])
@pytest.mark.parametrize("owned", [True, False], ids=["the RECORD's cache replaced", "a cache no RECORD owns"])
def test_unchecked_hash_based_bytecode_of_other_source_fails_named(real, tmp_path, module, owned):
    """Python runs an unchecked hash-based cache without reading its source: one of other code is that code. pip
    records caches without a hash and uv records none, so only the source's hash can tell. `__init__.py` comes
    before its cache in the stream, `version.py` after it."""
    stem = posixpath.basename(module).removesuffix(".py")
    tag = sys.implementation.cache_tag  # pip's caches here are this Python's; the image's Python is another
    cache = f"packaging/__pycache__/{stem}.{tag if owned else OTHER_TAG}.pyc"
    assert (cache in real) is owned
    evil = hash_pyc(tmp_path, b"import os\nos.system('id')\n", UNCHECKED)
    ok, reason = judged({**real, cache: evil})
    assert ok is False, reason
    assert (
        "1 unchecked hash-based bytecode whose hash is not its source's (Python runs it without checking): "
        f"{cache}" in reason
    ), reason


@pytest.mark.parametrize("module", ["packaging/__init__.py", "packaging/version.py"])
@pytest.mark.parametrize("case", ["unchecked, of its source", "checked, of other source"])
def test_hash_based_bytecode_python_never_runs_blind_passes(real, tmp_path, module, case):
    """As vLLM's package is judged: a hash-based cache of its own source runs in its place (bound), and a checked
    one of other source is compiled again on import (stale): neither fails, and neither is said."""
    stem = posixpath.basename(module).removesuffix(".py")
    code = real[module] if case.startswith("unchecked") else b"import os\n"
    cache = hash_pyc(tmp_path, code, UNCHECKED if case.startswith("unchecked") else CHECKED)
    ok, reason = judged({**real, f"packaging/__pycache__/{stem}.{OTHER_TAG}.pyc": cache})
    assert ok is True, reason
    assert "bytecode" not in reason, reason


def test_hash_based_bytecode_not_checked_is_said(real):
    """A hash-based cache buildkit cannot hash the source for (Python 3.10's, keyed for SipHash-2-4) passes, and
    is said: only the image's Python 3.10 would run it."""
    cache = "packaging/__pycache__/version.cpython-310.pyc"
    header = (3439).to_bytes(2, "little") + b"\r\n" + struct.pack("<I", 1) + bytes(8)
    ok, reason = judged({**real, cache: header + b"\xe3body"})
    assert ok is True, reason
    assert (
        "1 hash-based bytecode whose source hash buildkit cannot compute (a Python before 3.11, or its source not "
        f"kept): {cache}" in reason
    ), reason


def test_a_source_waiting_for_its_bytecode_is_kept_within_a_limit(real, monkeypatch):
    """Sources that come before any cache of their directory are held until the stream leaves it (a cache may
    follow): past MAX_PENDING at once the read is refused, never passed as not checked."""
    monkeypatch.setattr(pyenv, "MAX_PENDING", 100_000)
    files = {f"big/m{i}.py": b"#" * 40_000 for i in range(3)}
    with pytest.raises(LimitExceeded, match="more than 100,000 bytes of Python source waiting for its bytecode"):
        judged({**real, **files})
    files = {f"big{i}/m.py": b"#" * 40_000 for i in range(3)}  # one directory at a time: each let go as it is left
    assert judged({**real, **files})[0] is True
