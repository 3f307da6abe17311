"""The header every record carries, so that a record is never taken for another build's: which kind of record,
which image (its manifest digest or the engine's image ID), which lock (sha256), smoke or release, and which buildkit
wrote it. `buildkit report` takes a record only when its header matches the build it describes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit import __version__

Kind = Literal["render", "build", "verify", "provenance-verify", "squashfs", "attest"]


class RecordHeader(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Kind
    image: str | None  # the image's manifest digest or ID (sha256:...); None before there is an image (render)
    lock_sha256: str
    smoke: bool
    buildkit_version: str

    def of_build(self, images: set[str], lock_sha256: str, smoke: bool) -> bool:
        """Whether this record belongs to the build of these image identities, this lock, smoke or release. A
        record with no image (render) belongs to every build of its lock and target."""
        if self.lock_sha256 != lock_sha256 or self.smoke != smoke:
            return False
        return self.image is None or self.image in images


def header(kind: Kind, image: str | None, lock_sha256: str, smoke: bool) -> RecordHeader:
    return RecordHeader(kind=kind, image=image, lock_sha256=lock_sha256, smoke=smoke, buildkit_version=__version__)
