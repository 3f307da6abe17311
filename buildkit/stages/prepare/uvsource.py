"""vllm.install: uv-source written into the prepared NeMo-RL tree, as NeMo-RL's release branches pin a vLLM fork.

pyproject.toml is edited by models/uvsource.written_pyproject from the lock alone (the source commit, the wheel
commit and the checked wheel's core metadata); uv.lock is what `uv lock` writes for it (world/uv.py), uv keeping every
version the old lock has that still fits. The result is read back as resolve reads NeMo-RL's own mode and must pin
what the lock says, or prepare stops. uv's answer depends on the indexes it asks, so this runs on every prepare and
the record keeps both files' hashes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from buildkit.errors import GitFailed, InputError, UpstreamMismatch
from buildkit.files import sha256_bytes, write_atomic
from buildkit.gpu.torchlock import MAX_UV_LOCK_BYTES
from buildkit.models.lock import Lock
from buildkit.models.pins import GitUrlRewrite, git_settings
from buildkit.models.records.prepare import WrittenUvSource
from buildkit.models.uvsource import MAX_PYPROJECT_BYTES, DistMetadata, WriteUvSource, uv_source, written_pyproject
from buildkit.world import proc, uv

MAX_DIFF_BYTES = 1 << 20  # the record's pyproject diff: vLLM 0.14.0's metadata makes about 4 KB


def writes_uv_source(lock: Lock) -> bool:
    return lock.vllm_install is not None and lock.vllm_install.written


def write_uv_source(
    tree: Path, lock: Lock, rewrites: list[GitUrlRewrite], on_step: Callable[[str], None] | None = None
) -> WrittenUvSource:
    """The uv-source mode written into `tree` (NeMo-RL at the locked commit, patched): pyproject.toml, then uv.lock;
    `on_step` hears each line uv says as it locks ("uv lock: Resolved 412 packages in 3.1s")."""
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

    def said(line: str) -> None:
        if on_step is not None and line.strip():
            on_step(f"uv lock: {line.strip()}")

    uv.lock(tool, tree, git_settings(rewrites, install.repo), said)
    lock_after = _read(uv_lock, MAX_UV_LOCK_BYTES, where)
    found = uv_source(text.encode(), lambda: lock_after, f"{where} as written", MAX_UV_LOCK_BYTES)
    if found is None or (found.commit, found.wheel_commit) != (install.commit, want.wheel_commit):
        raise UpstreamMismatch(
            f"uv {tool.version} wrote a uv.lock that does not pin vLLM {install.commit[:12]} with the wheel of "
            f"{want.wheel_commit[:12]}: {found.locked if found else 'no git source for vllm'}",
            hint="report it with both files (the prepared tree keeps them)",
        )
    diff = _diff(before, text.encode())
    assert lock_after is not None  # uv_source read it
    return WrittenUvSource(
        uv=tool.version,
        pyproject_before=sha256_bytes(before),
        pyproject_after=sha256_bytes(text.encode()),
        uv_lock_before=sha256_bytes(lock_before) if lock_before is not None else None,
        uv_lock_after=sha256_bytes(lock_after),
        locked=found.locked,
        diff=diff,
    )


def _diff(before: bytes, after: bytes) -> str:
    """pyproject.toml's change as git writes it (`git diff --no-index`), so that `git apply` in the report's by-hand
    steps takes it whatever its lines end with (no newline at the end, a U+2028 in a comment); whole, or refused."""
    with tempfile.TemporaryDirectory(prefix="buildkit-uv-source-") as tmp:
        for side, data in (("a", before), ("b", after)):
            (Path(tmp) / side).mkdir()
            (Path(tmp) / side / "pyproject.toml").write_bytes(data)
        argv = ["git", "-c", "core.quotepath=false", "diff", "--no-index", "--no-color", "--no-ext-diff"]
        argv += ["--no-prefix", "a/pyproject.toml", "b/pyproject.toml"]
        quiet = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
        try:
            done = proc.run(argv, timeout=60, stdout_limit=MAX_DIFF_BYTES + 1, env=quiet, cwd=tmp)
        except proc.ProcError as exc:
            raise GitFailed(["diff", "--no-index"], exc.message) from None
    if done.returncode != 1 or len(done.stdout) > MAX_DIFF_BYTES:  # 1: the files differ, as they must
        raise UpstreamMismatch(
            f"git diff of the written pyproject.toml said exit {done.returncode} with {len(done.stdout):,} bytes "
            f"(a diff buildkit records is at most {MAX_DIFF_BYTES:,})"
        )
    return done.stdout.decode("utf-8", "replace")


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
