"""`buildkit attest`: the SLSA statement of a build (buildkit.slsa), written beside the build's other outputs;
with a key, signed in a DSSE envelope and attached to the pushed image (buildkit.cosign)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from buildkit import slsa
from buildkit.errors import InputError, excerpt
from buildkit.files import write_atomic
from buildkit.pipeline import Paths


@dataclass(frozen=True)
class Attested:
    statement: dict
    statement_file: Path
    subject: str  # name@digest
    record_name: str
    envelope_file: Path | None = None  # when signed
    attached_to: str | None = None  # name@digest in its registry, when attached
    not_attached: str | None = None  # why a signed envelope was not attached
    cosign_version: str | None = None


def attest(
    paths: Paths, record_path: Path | None, key: str | None, builder_id: str | None, repository: str | None = None
) -> Attested:
    from buildkit import cosign

    builder = slsa.builder_id(builder_id)
    if key is not None:
        cosign.check_key(key)  # a missing key is bad input before anything else is read
    sources = slsa.gather(paths, record_path, repository)
    statement = slsa.statement(sources, builder)
    payload = slsa.canonical(statement)
    smoke = sources.record.smoke
    statement_file = slsa.statement_path(paths, smoke)
    subject = f"{sources.repository}@{sources.record.image.digest}"
    if key is None:
        write_atomic(statement_file, payload.decode("utf-8"))
        return Attested(statement, statement_file, subject, sources.record_name)

    tool = cosign.binary()
    tool_version = cosign.version(tool)
    image = cosign.pinned(sources.repository, sources.record.image.digest or "")
    if slsa.pushed(sources.record):
        built_from_this_lock(image, sources)  # before anything is signed
    signed = cosign.sign(tool, key, payload)
    envelope_file = slsa.envelope_path(paths, smoke)
    write_atomic(statement_file, payload.decode("utf-8"))
    write_atomic(envelope_file, json.dumps(signed, sort_keys=True) + "\n")
    if not slsa.pushed(sources.record):
        reason = "the build loaded the image into Docker instead of pushing it (`buildkit build --push`)"
        return Attested(statement, statement_file, subject, sources.record_name, envelope_file, None, reason,
                        tool_version)  # fmt: skip
    cosign.attach(tool, envelope_file, image)
    return Attested(statement, statement_file, subject, sources.record_name, envelope_file, image, None, tool_version)


def built_from_this_lock(image: str, sources: slsa.Sources) -> None:
    """The image the registry serves as name@digest must be this lock's build: its config (the build platform's,
    for an index) carries the label buildkit.lock.sha256 with this lock's hash, which only a build of this lock
    sets. Otherwise a record edited to name another image would get that image a valid signed statement."""
    from buildkit.lock import lock_sha256
    from buildkit.provenance import served_lock_sha256

    name, digest = image.split("@", 1)
    found = served_lock_sha256(name, digest, sources.lock.build.platform)
    want = lock_sha256(sources.lock)
    if found != want:
        said = (
            f"its buildkit.lock.sha256 label is {excerpt(found, 80)}"
            if found
            else "it has no buildkit.lock.sha256 label"
        )
        raise InputError(
            f"{image} is not a build of this lock ({said}, the lock's is {want[:12]}…): not signed",
            hint="attest the record of the build that pushed this image, or build and push again",
        )
