"""vllm.install: uv-source written into the prepared NeMo-RL tree, as NeMo-RL's release branches pin a vLLM fork.

pyproject.toml is edited by models/uvsource.written_pyproject from the lock alone (the source commit, the wheel
commit and the checked wheel's core metadata); uv.lock is what `uv lock` writes for it (world/uv.py), uv keeping every
version the old lock has that still fits. The result is read back as resolve reads NeMo-RL's own mode and must pin
what the lock says, or prepare stops. uv's answer depends on the indexes it asks, so this runs on every prepare and
the record keeps both files' hashes.
"""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

from buildkit.errors import InputError, UpstreamMismatch
from buildkit.files import write_atomic
from buildkit.gpu.torchlock import MAX_UV_LOCK_BYTES
from buildkit.models.lock import Lock
from buildkit.models.pins import GitUrlRewrite
from buildkit.models.records.prepare import WrittenUvSource
from buildkit.models.uvsource import MAX_PYPROJECT_BYTES, DistMetadata, WriteUvSource, uv_source, written_pyproject
from buildkit.world import uv

MAX_DIFF_CHARS = 64_000  # the record's pyproject diff: vLLM 0.14.0's metadata makes about 4 KB


def writes_uv_source(lock: Lock) -> bool:
    return lock.vllm_install is not None and lock.vllm_install.written


def write_uv_source(tree: Path, lock: Lock, rewrites: list[GitUrlRewrite], on_line=None) -> WrittenUvSource:
    """The uv-source mode written into `tree` (NeMo-RL at the locked commit, patched): pyproject.toml, then uv.lock."""
    install, where = lock.vllm_install, lock.nemo_rl.commit[:12]
    assert install is not None and install.written
    if install.version is None or install.requires_dist is None:
        raise InputError(
            "the lock has no wheel METADATA for vllm.install: uv-source (resolve read no wheel bytes)",
            hint="run `buildkit resolve` with the wheel's download, then prepare again",
        )
    tool = uv.find_uv()
    pyproject, uv_lock = tree / "pyproject.toml", tree / "uv.lock"
    before = _read(pyproject, MAX_PYPROJECT_BYTES, where)
    if before is None:
        raise UpstreamMismatch(
            f"NeMo-RL at {where} has no pyproject.toml: buildkit cannot write the uv-source mode there",
            hint="remove vllm.install from pins.yaml, or pin another NeMo-RL commit",
        )
    lock_before = _read(uv_lock, MAX_UV_LOCK_BYTES, where)
    meta = DistMetadata(install.version, tuple(install.requires_dist), tuple(install.provides_extra or ()))
    want = WriteUvSource(install.repo, install.commit, install.wheel_commit or lock.vllm_wheel.commit, meta)
    text = written_pyproject(before.decode("utf-8"), where, want)
    write_atomic(pyproject, text)
    uv.lock(tool, tree, rewrites, on_line)
    lock_after = _read(uv_lock, MAX_UV_LOCK_BYTES, where)
    found = uv_source(text.encode(), lambda: lock_after, f"{where} as written", MAX_UV_LOCK_BYTES)
    if found is None or (found.commit, found.wheel_commit) != (install.commit, want.wheel_commit):
        raise UpstreamMismatch(
            f"uv {tool.version} wrote a uv.lock that does not pin vLLM {install.commit[:12]} with the wheel of "
            f"{want.wheel_commit[:12]}: {found.locked if found else 'no git source for vllm'}",
            hint="report it with both files (the prepared tree keeps them)",
        )
    diff = "".join(
        difflib.unified_diff(
            before.decode("utf-8").splitlines(True), text.splitlines(True), "a/pyproject.toml", "b/pyproject.toml"
        )
    )
    assert lock_after is not None  # uv_source read it
    return WrittenUvSource(
        uv=tool.version,
        pyproject_before=_sha(before),
        pyproject_after=_sha(text.encode()),
        uv_lock_before=_sha(lock_before) if lock_before is not None else None,
        uv_lock_after=_sha(lock_after),
        locked=found.locked,
        diff=diff[:MAX_DIFF_CHARS],
    )


def _read(path: Path, limit: int, where: str) -> bytes | None:
    if not path.is_file() or path.is_symlink():
        return None
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UpstreamMismatch(
            f"NeMo-RL at {where}: {path.name} is more than {limit:,} bytes: not a file buildkit reads"
        )
    return data


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
