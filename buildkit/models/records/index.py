"""build/index.json: a build of several platforms (build.platforms) and the image index a push assembled."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit import __version__


class PlatformImage(BaseModel):
    """One platform's image of a multi-platform build, as its own build record has it."""

    model_config = ConfigDict(extra="forbid")
    platform: str
    tag: str  # <tag>-<arch>: each platform's image has a tag of its own
    digest: str | None  # what buildx pushed or loaded (the record's image.digest)
    config_digest: str | None
    record: str  # that platform's build record (build/<os>-<arch>/record.json)


class IndexRecord(BaseModel):
    """build/index.json: a build of several platforms (build.platforms), each built into its own folder, and the
    image index a push assembled from them under the plain tag (none for --load: Docker's image store holds one
    platform per tag)."""

    model_config = ConfigDict(extra="forbid")
    record_version: Literal[1] = 1
    buildkit_version: str = __version__
    lock_sha256: str
    smoke: bool
    tag: str
    index_digest: str | None  # the OCI image index pushed under `tag`; None when not pushed
    index: str  # how the index was made, or why there is none
    platforms: list[PlatformImage]
    created: str

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"
