"""Issue 40, point 2: the image's Python environments verified the way `rpm -V` verifies packages.

The distributions are real: `packaging` and `setuptools` as pip installed them into this checkout's .venv (their
files and the RECORDs pip wrote), and pip's editable finder for buildkit itself (setuptools' template) with its
names changed to vLLM's, as `pip install -e .` writes one for vLLM (NeMo-RL's build-custom-vllm.sh)."""

from __future__ import annotations

import importlib.util
import re
import struct
import sysconfig
import tarfile
from base64 import urlsafe_b64encode
from hashlib import sha256
from pathlib import Path

import pytest

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
    entries = [F(f"site-packages/{p}", d) for p, d in files.items()]
    entries += [F(f"site-packages/{p}", kind=k, linkname=t) for p, (k, t) in (links or {}).items()]
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
    ["changed", "missing", "unowned pth", "unowned sitecustomize", "sourceless bytecode", "finder elsewhere", "linked"],
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
