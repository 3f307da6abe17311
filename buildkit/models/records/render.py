"""build/render.json: what `buildkit render` made of upstream's docker/Dockerfile (the transformations, the diff,
the drift findings): the report's only source about the Dockerfile."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit.files import sha256_file
from buildkit.models.records import RecordHeader


class Transformation(BaseModel):
    """One named change render made to upstream's Dockerfile: what it did, and which upstream lines it replaced
    (none for a pure addition)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    summary: str
    upstream_lines: list[int] = []
    inserted_after: list[int] = []  # upstream lines after which it added lines of its own (0: before the first)


class RenderRecord(BaseModel):
    """What `render` produced and what it found upstream: the report's only source about the Dockerfile."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    record_version: Literal[1] = 1
    buildkit_version: str
    lock_sha256: str
    nemo_rl_commit: str
    dockerfile: str  # the file name in the build directory, e.g. "Dockerfile"
    dockerfile_sha256: str
    template_sha256: str
    syntax: bool
    smoke_base: str | None
    upstream_path: str = "docker/Dockerfile"
    upstream_sha256: str
    diff: str  # the rendered Dockerfile against upstream's, unified
    drift: list[str]  # findings that do not stop render but stop `build` without --allow-drift
    transformations: list[Transformation] = []  # in the order applied (empty in a record from before them)
    upstream_base_image: str | None = None  # upstream's own ARG BASE_IMAGE default at that commit
    unpinned: list[str] = []  # what the rendered target fetches unpinned on build day (buildkit/dockerfile/unpinned.py)
    header: RecordHeader | None = None  # None in a record written before headers
    seconds: float | None = None  # how long render took (None: a record from before it was kept)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def matches(self, dockerfile: Path) -> bool:
        """Whether the file on disk is still the one this record describes."""
        try:
            return sha256_file(dockerfile) == self.dockerfile_sha256
        except OSError:
            return False
