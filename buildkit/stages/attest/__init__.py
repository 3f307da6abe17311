"""`buildkit attest`: the SLSA statement of a build (stages/attest/slsa.py), written beside the build's other outputs;
with a key, signed in a DSSE envelope and attached to the pushed image (buildkit.world.cosign)."""

from __future__ import annotations

import json
from pathlib import Path

from buildkit.errors import InputError, excerpt
from buildkit.files import read_record, sha256_bytes, utc_now, write_atomic
from buildkit.models.lock import lock_sha256
from buildkit.models.paths import Paths
from buildkit.models.records import header
from buildkit.models.records.attest import AttestRecord
from buildkit.models.records.build import pushed
from buildkit.models.records.index import IndexRecord
from buildkit.models.results import Attested
from buildkit.models.slsa import canonical
from buildkit.options import AttestOptions
from buildkit.stages.attest import slsa
from buildkit.stages.context import Context, load_inputs
from buildkit.world import cosign
from buildkit.world.http import Http
from buildkit.world.registry import Registry
from buildkit.world.served import served_image


def _write_record(paths: Paths, sources, payload: bytes, subject: str, done: Attested) -> None:
    record = sources.record
    kept = AttestRecord(
        header=header(
            "attest",
            record.image.digest or record.image.id,
            record.lock_sha256,
            record.smoke,
            (record.image.config_digest, record.image.id),
        ),
        statement=done.statement_file.name,
        statement_sha256=sha256_bytes(payload),
        subject=subject,
        signed=done.envelope_file is not None,
        attached_to=done.attached_to,
        not_attached=done.not_attached,
        attested_at=utc_now(),
    )
    write_atomic(paths.attest_record(record.smoke), kept.model_dump_json(indent=2) + "\n")


def run(ctx: Context[AttestOptions]) -> None:
    """The statement of the build the options name (AttestOptions), signed and attached with their key; `Attested`
    in ctx.made.attest."""
    opts = ctx.options
    ctx.made.attest = attest(ctx.paths, opts.record, opts.key, opts.builder_id, opts.repository)


def attest(
    paths: Paths, record_path: Path | None, key: str | None, builder: str, repository: str | None = None
) -> Attested:
    """The statement of the build, signed and attached with `key`. `builder` (runDetails.builder.id), `key` and
    `repository` come checked (AttestOptions)."""
    sources = slsa.gather(paths, record_path, repository)
    statement = slsa.statement(sources, builder)
    payload = canonical(statement)
    smoke = sources.record.smoke
    statement_file = paths.statement(smoke)
    subject = f"{sources.repository}@{sources.record.image.digest}"
    if key is None:
        write_atomic(statement_file, payload.decode("utf-8"))
        done = Attested(statement, statement_file, subject, sources.record_name)
        _write_record(paths, sources, payload, subject, done)
        return done

    tool = cosign.binary()
    tool_version = cosign.version(tool)
    image = cosign.pinned(sources.repository, sources.record.image.digest or "")
    if pushed(sources.record):
        built_from_this_lock(image, sources)  # before anything is signed
    signed = cosign.sign(tool, key, payload)
    envelope_file = paths.envelope(smoke)
    write_atomic(statement_file, payload.decode("utf-8"))
    write_atomic(envelope_file, json.dumps(signed, sort_keys=True) + "\n")
    if not pushed(sources.record):
        reason = "the build loaded the image into Docker instead of pushing it (`buildkit build --push`)"
        done = Attested(
            statement, statement_file, subject, sources.record_name, envelope_file, None, reason, tool_version
        )
        _write_record(paths, sources, payload, subject, done)
        return done
    cosign.attach(tool, envelope_file, image)
    done = Attested(statement, statement_file, subject, sources.record_name, envelope_file, image, None, tool_version)
    _write_record(paths, sources, payload, subject, done)
    return done


def built_from_this_lock(image: str, sources: slsa.Sources) -> None:
    """The image the registry serves as name@digest must be this build's: its config digest the one the build
    recorded (buildx's `containerimage.config.digest`), and that config labelled with this lock's sha256. The label
    alone proves nothing: anyone who can push to the repository can copy it onto another image, and a record edited
    to name that image would get it a valid signed statement. The config digest covers the label, the layers' diff
    IDs and everything else the build made."""
    name, digest = image.split("@", 1)
    served = served_image(name, digest, sources.lock.build.platform)
    recorded = sources.record.image.config_digest
    want = lock_sha256(sources.lock)
    if served.lock_sha256 != want:
        why = (
            f"its buildkit.lock.sha256 label is {excerpt(served.lock_sha256, 80)}"
            if served.lock_sha256
            else "it has no buildkit.lock.sha256 label"
        )
    elif recorded is None:
        why = "the record names no image config digest to hold it to"
    elif served.config_digest != recorded:
        why = f"its config is {excerpt(served.config_digest, 80)}, the build recorded {excerpt(recorded, 80)}"
    else:
        return
    raise InputError(
        f"{image} is not a build of this lock ({why}; the lock's sha256 is {want[:12]}…): not signed",
        hint="attest the record of the build that pushed this image, or build and push again",
    )


def attest_index(paths: Paths, smoke: bool, key: str | None, builder: str, statements: dict[str, bytes]) -> Attested:
    """The statement of the image index a multi-platform push assembled (build/index.json), naming each platform's
    image and statement; with `key`, signed and attached to the index. Before anything is signed, the registry's
    index must serve, for each platform, the image config its build recorded, and the record must be of this lock."""
    where = paths.index_record(smoke)
    index = read_record(where, IndexRecord)
    if index is None:
        raise InputError(f"no record of a build of every platform at {where}", hint="run `buildkit build --push`")
    want = load_inputs(paths, whole=True).lock_sha256
    if index.lock_sha256 != want:
        raise InputError(
            f"{where} is of another lock (sha256 {index.lock_sha256[:12]}, the lock is {want[:12]})",
            hint="build every platform again: `buildkit build --push`",
        )
    statement = slsa.index_statement(index, statements, builder)
    payload = canonical(statement)
    name = slsa.image_name(index.tag)
    subject = f"{name}@{index.index_digest}"
    statement_file = paths.index_statement(smoke)
    if key is None:
        write_atomic(statement_file, payload.decode("utf-8"))
        return Attested(statement, statement_file, subject, where.name)
    image = cosign.pinned(name, index.index_digest or "")
    for platform_image in index.platforms:  # the index as the registry serves it, held to the records
        served = Registry(Http()).resolve(image, platform_image.platform)
        if served.config_digest != platform_image.config_digest:
            raise InputError(
                f"{image} serves {platform_image.platform} with config {excerpt(served.config_digest, 80)}, the build "
                f"recorded {excerpt(platform_image.config_digest, 80)}: not signed",
                hint="build and push every platform again: `buildkit build --push`",
            )
    tool = cosign.binary()
    signed = cosign.sign(tool, key, payload)
    envelope_file = paths.index_envelope(smoke)
    write_atomic(statement_file, payload.decode("utf-8"))
    write_atomic(envelope_file, json.dumps(signed, sort_keys=True) + "\n")
    cosign.attach(tool, envelope_file, image)
    return Attested(statement, statement_file, subject, where.name, envelope_file, image, None, cosign.version(tool))
