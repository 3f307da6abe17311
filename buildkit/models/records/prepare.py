"""build/prepare.json: the NeMo-RL tree `buildkit prepare` made (its commit, submodules and where it is) and every
declared patch applied to it, with its diff and the hashes of the files it changed before and after."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class TargetHashes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    before: str
    after: str


class AppliedPatch(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str
    reason: str
    sha256: str
    diff: str
    targets: list[TargetHashes]


class SubmoduleFact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    commit: str


class WrittenUvSource(BaseModel):
    """vllm.install: uv-source written into NeMo-RL's tree (stages/prepare/uvsource.py): pyproject.toml by buildkit,
    uv.lock by `uv lock`, each file's sha256 before and after."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    uv: str  # uv's version
    pyproject_before: str
    pyproject_after: str
    uv_lock_before: str | None  # None: the commit has no uv.lock
    uv_lock_after: str
    locked: str  # uv.lock's source URL for vllm, as uv wrote it
    diff: str  # pyproject.toml's change, unified


class PrepareRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    record_version: Literal[1, 2] = 2  # 2: the tree was made reproducible; a marker of 1 makes prepare run again
    buildkit_version: str
    lock_sha256: str
    prepared_at: str
    repo: str
    commit: str
    tree: str
    reused: bool
    fetched: list[str]
    fetched_bytes: int
    seconds: float
    submodules: list[SubmoduleFact] | None  # None: skipped with --no-submodules
    patches: list[AppliedPatch]
    uv_source: WrittenUvSource | None = None  # vllm.install: uv-source written into the tree

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"
