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

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"
