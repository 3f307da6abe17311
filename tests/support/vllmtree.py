"""vLLM's Python files as a tree listing (path -> git blob id), taken from vLLM 0.14.0's real PyPI wheel.

The wheel's Python files are the checkout's at the commit it was built from (vllm/_version.py names it:
`commit_id = 'gb17039bcc'`, tag v0.14.0), except those precompiled mode takes from the wheel or writes at install
(buildkit.models.compiled.python_origin), so their git blob ids are what GitHub's tree API answers for that commit's
`vllm/**/*.py`. tests/fixtures/vllm-0.14.0-python.json holds them; `python_blobs` recomputes them from the wheel,
and tests/unit/image/test_vllm_python.py holds the fixture to it, so the stand-in cannot drift from the real files."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from buildkit.models.compiled import is_vllm_python, python_origin
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "vllm-0.14.0-python.json"
# vLLM 0.14.0's setup.py, copied from its sdist on PyPI (vllm-0.14.0.tar.gz, sha256
# ed86c6a9d22fbfd059648794493cad88444c71688f3ff6efcb26c5ca353f0e5d, read
# 2026-12-01); the file's own sha256 is eb5b615cc0b1da3f73dab2bab79c44bc8be43a26c49e768abdbc4fec9c531194. Apache-2.0,
# the vLLM project's. The stand-in GitHub answers it for vLLM's commits (tests/support/fake_upstreams.py).
SETUP_PY = FIXTURES / "vllm-0.14.0-setup.py.txt"  # (.txt: upstream's file, not linted here)
COMMIT_PREFIX = "b17039bcc"  # vllm/_version.py's commit_id in the wheel


def blob_id(data: bytes) -> str:
    """git's id of a blob (SHA-1 repositories): sha1 of "blob <size>\\0" and the bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def python_blobs(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {
            name: blob_id(z.read(name))
            for name in sorted(z.namelist())
            if is_vllm_python(name) and python_origin(name) == "source"
        }


def listing() -> dict[str, str]:
    """The fixture's listing (what the stand-in GitHub answers for a vLLM commit's tree by default)."""
    return json.loads(FIXTURE.read_text())["files"]
