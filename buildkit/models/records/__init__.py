"""The records the stages write, one module each: resolve.py, prepare.py, render.py, build.py, verify.py,
squashfs.py (export), attest.py and index.py (a build of several platforms). Here: the header every record carries,
so that a record is never taken for another build's (which kind of record, which image: its manifest digest or the
engine's image ID, which lock: sha256, smoke or release, and which buildkit wrote it), and `belongs`, the one rule
for which records are of a build: `buildkit report` takes a record only when it matches the build it describes."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, model_serializer

from buildkit import __version__

Kind = Literal["render", "build", "verify", "provenance-verify", "squashfs", "attest"]


class RecordHeader(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Kind
    image: str | None  # the image's manifest digest or ID (sha256:...); None before there is an image (render)
    lock_sha256: str
    smoke: bool
    buildkit_version: str
    # The same image's other names: its config digest (Docker's image ID), the digest Docker pulled it by (an
    # index's, for a pushed multi-platform build). One image, whichever name a stage met it by (issue 41).
    aliases: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_aliases(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if not data.get("aliases"):
            data.pop("aliases", None)  # a record with none keeps the bytes it had before aliases came
        return data

    def of_build(self, images: set[str], lock_sha256: str, smoke: bool) -> bool:
        """Whether this record belongs to the build of these image identities, this lock, smoke or release: by any
        name of its image. A record with no image (render) belongs to every build of its lock and target."""
        if self.lock_sha256 != lock_sha256 or self.smoke != smoke:
            return False
        return self.image is None or bool({self.image, *self.aliases} & images)


def header(
    kind: Kind, image: str | None, lock_sha256: str, smoke: bool, aliases: tuple[str | None, ...] = ()
) -> RecordHeader:
    others = tuple(sorted({a for a in aliases if a and a != image}))
    return RecordHeader(
        kind=kind, image=image, lock_sha256=lock_sha256, smoke=smoke, buildkit_version=__version__, aliases=others
    )


def repo_digests(attrs: dict[str, Any]) -> tuple[str, ...]:
    """The digests Docker names an image by in its RepoDigests ("repo@sha256:..."): for an image pulled by a tag of
    an index, the index's; by a platform manifest's tag or digest, the manifest's."""
    found = (str(item).partition("@")[2] for item in attrs.get("RepoDigests") or [])
    return tuple(sorted({d for d in found if d.startswith("sha256:")}))


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
