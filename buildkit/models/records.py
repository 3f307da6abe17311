"""The header every record carries, so that a record is never taken for another build's: which kind of record,
which image (its manifest digest or the engine's image ID), which lock (sha256), smoke or release, and which buildkit
wrote it. `buildkit report` takes a record only when its header matches the build it describes. The verify record
lives here too: `buildkit verify` writes it from the image checks (stages/verify.py) or from the provenance
(stages/provenance.py)."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from buildkit import __version__
from buildkit.models.gpufacts import GpuCheck

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


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    status: Literal["pass", "fail", "skip"]
    reason: str


class VerifyRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_version: Literal[1] = 1
    buildkit_version: str
    image: str
    image_id: str
    lock_sha256: str
    smoke: bool
    gpus: bool
    checked_at: str
    results: list[CheckResult]
    header: RecordHeader | None = None  # None in a record written before headers
    seconds: float | None = None  # how long the checks took (None: a record from before it was kept)
    gpu: GpuCheck | None = None  # kernels per target GPU, ABI, drivers (buildkit.gpu); None for smoke images
    vllm: str | None = None  # where the image's vLLM Python and kernels come from (none in a smoke image)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def header(kind: Kind, image: str | None, lock_sha256: str, smoke: bool) -> RecordHeader:
    return RecordHeader(kind=kind, image=image, lock_sha256=lock_sha256, smoke=smoke, buildkit_version=__version__)


class Build(NamedTuple):
    """What a record must match to be of a build: its lock, smoke or release, and its image's identities (manifest
    digest, image ID, config digest; none before anything was built)."""

    lock_sha256: str
    smoke: bool
    images: frozenset[str] = frozenset()


def belongs(record: Any, build: Build) -> bool:
    """The one rule for whether a record (render, verify, provenance-verify, squashfs, attest) belongs to `build`:
    by its header when it has one; a record written before headers by the fields it has: the same lock, smoke or
    release where it says (a render record by its smoke base), and one of the image's identities where it names
    one. A record that names no lock (an attest record before headers) belongs to no build."""
    if record is None:
        return False
    found = getattr(record, "header", None)
    if found is not None:
        return found.of_build(set(build.images), build.lock_sha256, build.smoke)
    if getattr(record, "lock_sha256", None) != build.lock_sha256:
        return False
    smoke = getattr(record, "smoke", None)
    if smoke is None and hasattr(record, "smoke_base"):
        smoke = bool(record.smoke_base)
    if smoke is not None and smoke != build.smoke:
        return False
    images = {getattr(record, name, None) for name in ("image_id", "config_digest")} - {None}
    return not images or bool(images & build.images)


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
