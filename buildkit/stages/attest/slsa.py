"""SLSA provenance v1 for a build, as an in-toto Statement v1: what `buildkit attest` writes and signs.

The statement is a pure function of files: the validated pins and the lock, the build record, the render record of
that build and the bytes of the record and the build log (byproducts). It reads no clock and no tree, and it is
serialized canonically (keys sorted, no insignificant whitespace, UTF-8), so the same inputs give the same bytes;
those bytes are exactly what the DSSE envelope signs.

The build type (BUILD_TYPE) is this project's: docs/how-to/sign-and-verify.md ("The build type") says what each
parameter means, so that a verifier can tell what "built from this lock" means.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit, urlunsplit

from buildkit.errors import InputError, excerpt
from buildkit.files import MAX_RECORD_BYTES, read_local, read_record, sha256_bytes, sha256_file
from buildkit.models.checks import known_checks
from buildkit.models.grammar import DIGEST_RE, one_line_text
from buildkit.models.lock import Lock, composition
from buildkit.models.overlay import INSTALLED_ARG, vllm_layers
from buildkit.models.paths import Paths
from buildkit.models.pins import Pins
from buildkit.models.plan import build_args, repository, source_date_epoch
from buildkit.models.records import Build, belongs
from buildkit.models.records.build import BuildRecord, InstalledImage, argv_values, latest_build, pushed
from buildkit.models.records.index import IndexRecord
from buildkit.models.records.render import RenderRecord
from buildkit.models.slsa import (
    BUILD_TYPE,
    DEFAULT_BUILDER_ID,
    INDEX_BUILD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
)
from buildkit.stages.context import load_inputs

_BUILD_REF_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_TIMESTAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z")


class Sources(NamedTuple):
    """The files a statement is made from, read and checked."""

    pins: Pins
    lock: Lock
    record: BuildRecord
    record_path: Path
    record_bytes: bytes
    record_name: str  # as the project names it (build/record.json)
    rendered: RenderRecord
    dockerfile_name: str  # the rendered Dockerfile, as the project names it (build/Dockerfile)
    log_name: str | None  # the build log, when it is still there
    log_sha256: str | None
    invocation_id: str
    repository: str  # the subject's name: the lock's build.tag repository, or the one --repository names
    repository_named: bool = False  # named on the command line (the statement says so)


def gather(paths: Paths, record_path: Path | None = None, repository: str | None = None) -> Sources:
    """The statement's inputs: a lock that agrees with the pins, the build record given (else the newest), the
    render record of that build's Dockerfile, and the digests of the record and its log. Every record value that
    reaches the statement is held to the lock (checked_record)."""
    inputs = load_inputs(paths)
    record_path, record = _build_record(paths, record_path)
    if record.outcome != "succeeded":
        raise InputError(
            f"the build recorded in {record_path} {record.outcome}: it made no image to attest",
            hint="build again, or name another record with --record",
        )
    if record.image.digest is None:
        raise InputError(f"{record_path}: the record names no image digest, so there is no subject to attest")
    if record.lock_sha256 != inputs.lock_sha256:
        raise InputError(
            f"{record_path} was built from another lock (lock sha256 {record.lock_sha256[:12]}, "
            f"{paths.lock} is {inputs.lock_sha256[:12]})",
            hint="attest with the lock the build used, or build again",
        )
    rendered = read_record(paths.render_record(record.smoke), RenderRecord)
    if rendered is None or not belongs(rendered, Build(record.lock_sha256, record.smoke)):
        raise InputError(
            f"{paths.render_record(record.smoke)}: no render record of this build's Dockerfile (from this lock)",
            hint=f"build again (`buildkit build{' --smoke' if record.smoke else ''}` renders the Dockerfile first)",
        )
    named = repository  # checked with the options (buildkit/options.py: checked_repository)
    checked_record(record, record_path, inputs.lock)
    record_bytes = _read_bounded(record_path)
    log = Path(record.log)
    try:
        one_line_text(_shown(log, paths.project_dir))  # its name goes into the statement's byproducts
    except ValueError:
        raise InputError(f"{record_path}: log {excerpt(record.log, 120)} is not a path of one line") from None
    try:
        log_sha = sha256_file(log) if log.is_file() else None
    except (OSError, InputError):
        log_sha = None  # gone, or no longer a plain file: not a byproduct
    return Sources(
        pins=inputs.pins,
        lock=inputs.lock,
        record=record,
        record_path=record_path,
        record_bytes=record_bytes,
        record_name=_shown(record_path, paths.project_dir),
        rendered=rendered,
        dockerfile_name=_shown(paths.dockerfile(record.smoke), paths.project_dir),
        log_name=_shown(log, paths.project_dir) if log_sha else None,
        log_sha256=log_sha,
        invocation_id=invocation_id(record),
        repository=named or image_name(inputs.lock.build.tag),
        repository_named=named is not None,
    )


def _build_record(paths: Paths, record_path: Path | None) -> tuple[Path, BuildRecord]:
    """The build record given, else the newest one."""
    if record_path is None:
        latest = latest_build(paths)
        if latest is None:
            raise InputError("no build recorded: nothing to attest", hint="build first (`buildkit build --push`)")
        return latest
    record = read_record(record_path, BuildRecord)
    if record is None:
        raise InputError(f"{record_path}: no such build record")
    return record_path, record


def checked_record(record: BuildRecord, path: Path, lock: Lock) -> None:
    """The build record's values that reach a statement, held to the lock that built it: a record is a file anyone
    can edit, and a signed statement must not say what the lock did not build. The image is the lock's (its tag,
    `-smoke` for a smoke build) with a digest; the target, the build args and SOURCE_DATE_EPOCH are the lock's; the
    builder, driver and versions one line of text each."""

    def refuse(field: str, found: object, want: str) -> InputError:
        return InputError(
            f"{path}: {field} {excerpt(found, 120)} is not {want}: the record was edited or is of another build",
            hint="attest the record the build wrote (`buildkit build` again)",
        )

    tag = lock.build.tag + ("-smoke" if record.smoke else "")
    if record.image.tag != tag:
        raise refuse("image.tag", record.image.tag, f"the lock's {tag}")
    if not isinstance(record.image.digest, str) or not DIGEST_RE.fullmatch(record.image.digest):
        raise refuse("image.digest", record.image.digest, "a sha256 digest")
    target = "smoke" if record.smoke else lock.build.target
    if _target(record) != target:
        raise refuse("--target", _target(record), f"the lock's {target}")
    args = dict(_build_args(record))
    image = args.pop(INSTALLED_ARG, None)
    if image != (record.installed.image if record.installed else None):
        raise refuse(f"the build arg {INSTALLED_ARG}", image, "the record's vLLM install image")
    if image is not None and not re.fullmatch(rf"{re.escape(repository(tag))}@sha256:[0-9a-f]{{64}}", image):
        raise refuse("the vLLM install image", image, f"a digest in {repository(tag)}")
    if args != dict(build_args(lock)):
        raise refuse("the build args", args, "the lock's")
    if record.source_date_epoch != source_date_epoch(lock):
        raise refuse("source_date_epoch", record.source_date_epoch, f"the lock's {source_date_epoch(lock)}")
    texts = {
        "builder": record.builder,
        "driver": record.driver,
        "buildkit_version": record.buildkit_version,
        "buildx_version": record.buildx_version,
        "buildkit_daemon_version": record.buildkit_daemon_version,
        "docker_version": record.docker_version,
        "provenance": record.provenance or "-",
    }
    for field, value in texts.items():
        try:
            one_line_text(value)
        except ValueError:
            raise refuse(field, value, "one line of text") from None


def _read_bounded(path: Path) -> bytes:
    """A record or a file a record names (the metadata file): a regular file, bounded, never waited on."""
    try:
        return read_local(path, "the record", MAX_RECORD_BYTES)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None


def _shown(path: Path, project_dir: Path) -> str:
    """A path as the statement names it: relative to the project when inside it (the same on every machine)."""
    try:
        return str(path.resolve().relative_to(project_dir.resolve()))
    except ValueError:
        return path.name


def invocation_id(record: BuildRecord) -> str:
    """buildx's reference of the build (`docker buildx history inspect <ref>` finds its logs) when the metadata
    file beside the record is still that build's; otherwise the name of the build's log, which is unique per build."""
    try:
        metadata = json.loads(_read_bounded(Path(record.metadata_file)))
    except (InputError, ValueError, RecursionError):
        metadata = None
    if isinstance(metadata, dict) and metadata.get("containerimage.digest") == record.image.digest:
        ref = metadata.get("buildx.build.ref")
        if isinstance(ref, str) and _BUILD_REF_RE.fullmatch(ref):
            return ref
    return Path(record.log).stem


def image_name(tag: str) -> str:
    """The image's name without its tag (the subject's name; the digest is what identifies it)."""
    last = tag.rsplit("/", 1)
    if ":" in last[-1]:
        return tag.rsplit(":", 1)[0]
    return tag


def git_uri(repo: str, commit: str) -> str:
    """An SPDX download location for a git commit: git+<repo>@<sha>, scheme and host in lowercase."""
    parts = urlsplit(repo)
    normalized = urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, parts.query, parts.fragment))
    return f"git+{normalized}@{commit}"


def docker_purl(name: str, tag: str | None, digest: str, platform: str) -> str:
    """An image as BuildKit's own provenance names it: pkg:docker/<name>[@tag]?digest=…&platform=…"""
    version = f"@{tag}" if tag else ""
    return f"pkg:docker/{name}{version}?digest={digest}&platform={quote(platform, safe='')}"


def _sha256_of(digest: str) -> dict[str, str]:
    return {"sha256": digest.removeprefix("sha256:")}


def statement(sources: Sources, builder: str = DEFAULT_BUILDER_ID) -> dict[str, Any]:
    """The in-toto Statement v1 with the SLSA provenance v1 predicate, as a plain dictionary."""
    record = sources.record
    dependencies = _resolved_dependencies(sources)
    byproducts = _byproducts(sources)
    for stamp in (record.started, record.ended):
        if not _TIMESTAMP_RE.fullmatch(stamp):
            raise InputError(f"{sources.record_path}: {stamp!r} is not an RFC 3339 UTC time")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": sources.repository, "digest": _sha256_of(record.image.digest or "")}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": _build_definition(sources, dependencies),
            "runDetails": _run_details(sources, builder, byproducts),
        },
    }


def _resolved_dependencies(sources: Sources) -> list[dict[str, Any]]:
    """What the build read: the two commits, the wheel, the base image, the patches, the templates and the
    rendered Dockerfile."""
    lock, rendered = sources.lock, sources.rendered
    n, v, w = lock.nemo_rl, lock.vllm, lock.wheel
    vllm_notes: dict[str, Any] = {
        "ref": v.ref,
        "composition": composition(lock),
        "wheelCommit": lock.vllm_wheel.commit,
        "wheelCommitChosenBy": lock.vllm_wheel.chosen_by,
        "compiledInputsChanged": list(lock.vllm_compare.compiled),
    }
    if lock.vllm_compare.accepted:
        vllm_notes["compiledChangesAccepted"] = lock.vllm_compare.accepted
    if lock.vllm_pr:
        vllm_notes.update(pullRequest=lock.vllm_pr.number, pullRequestUrl=lock.vllm_pr.url)
    layers = vllm_layers(lock)
    if layers.has_overlay:  # the install is of the wheel's commit; the source's differing paths are laid over it
        vllm_notes.update(
            installedFrom=git_uri(layers.install_repo, layers.install_commit),
            overlayPaths=len(layers.overlay),
            overlayRemoved=len(layers.removed),
        )
    wheel: dict[str, Any] = {"name": w.filename, "uri": w.url}
    if w.sha256:
        wheel["digest"] = {"sha256": w.sha256}
    else:
        wheel["annotations"] = {"contentAddressed": False, "reason": w.not_content_addressed}
    dependencies: list[dict[str, Any]] = [
        {
            "name": "nemo-rl",
            "uri": git_uri(n.repo, n.commit),
            "digest": {"gitCommit": n.commit},
            "annotations": {"ref": n.ref},
        },
        {
            "name": "vllm",
            "uri": git_uri(v.repo, v.commit),
            "digest": {"gitCommit": v.commit},
            "annotations": vllm_notes,
        },
        wheel,
        _base_image_dependency(sources),
    ]
    if sources.record.installed is not None:  # the overlay's stage started FROM it (stages/build/installed.py)
        dependencies.append(_installed_dependency(sources.record.installed, lock.build.platform))
    for patch in lock.patches:
        dependencies.append(
            {"name": patch.file, "digest": {"sha256": patch.sha256}, "annotations": {"reason": patch.reason}}
        )
    dependencies += [
        {
            "name": "templates",
            "digest": {"sha256": rendered.template_sha256},
            "annotations": {"digestOf": "sha256 over 'name\\0sha256' of every Dockerfile template, in name order"},
        },
        {"name": sources.dockerfile_name, "digest": {"sha256": rendered.dockerfile_sha256}},
    ]
    return dependencies


def _installed_dependency(installed: InstalledImage, platform: str) -> dict[str, Any]:
    name, digest = installed.image.split("@", 1)
    return {
        "name": "vllm-installed-image",
        "uri": docker_purl(name, None, digest, platform),
        "digest": _sha256_of(digest),
        "annotations": {
            "pushedBy": "an earlier build of the same install" if installed.reused else "this build",
            "probeDigest": installed.probe_digest,
        },
    }


def _base_image_dependency(sources: Sources) -> dict[str, Any]:
    """The base image: the locked one, or for a smoke build the stand-in it was built on (naming the locked one)."""
    lock, b = sources.lock, sources.lock.base_image
    if sources.record.smoke and sources.rendered.smoke_base:
        smoke_name, smoke_digest = sources.rendered.smoke_base.split("@", 1)
        return {
            "name": "base-image",
            "uri": docker_purl(smoke_name, None, smoke_digest, lock.build.platform),
            "digest": _sha256_of(smoke_digest),
            "annotations": {"smokeStandIn": True, "lockedBaseImage": b.pinned},
        }
    base_digest = b.pinned.rsplit("@", 1)[1]
    return {
        "name": "base-image",
        "uri": docker_purl(b.pinned.rsplit("@", 1)[0], b.tag, base_digest, b.platform),
        "digest": _sha256_of(base_digest),
        "annotations": {"ref": b.ref, "platformManifest": b.manifest_digest},
    }


def _byproducts(sources: Sources) -> list[dict[str, Any]]:
    """The build record, and its log while it is still there."""
    byproducts: list[dict[str, Any]] = [
        {
            "name": sources.record_name,
            "digest": {"sha256": sha256_bytes(sources.record_bytes)},
            "mediaType": "application/json",
        },
    ]
    if sources.log_name and sources.log_sha256:
        byproducts.append(
            {"name": sources.log_name, "digest": {"sha256": sources.log_sha256}, "mediaType": "text/plain"}
        )
    return byproducts


def _build_definition(sources: Sources, dependencies: list[dict[str, Any]]) -> dict[str, Any]:
    """What was asked for (the pins, smoke or release, pushed or not) and how the build ran it."""
    pins, lock, record = sources.pins, sources.lock, sources.record
    return {
        "buildType": BUILD_TYPE,
        "externalParameters": {
            "pins": pins.model_dump(mode="json"),
            "pinsSha256": pins.sha256(),
            "smoke": record.smoke,
            "push": pushed(record),
            # Only when --repository named the subject's repository instead of the lock's build.tag.
            **({"subjectRepository": sources.repository} if sources.repository_named else {}),
        },
        "internalParameters": {
            "buildkitVersion": record.buildkit_version,
            "builder": record.builder,
            "driver": record.driver,
            "buildxVersion": record.buildx_version,
            "buildkitdVersion": record.buildkit_daemon_version,
            "dockerVersion": record.docker_version,
            "platform": lock.build.platform,
            "target": _target(record),
            "tag": record.image.tag,
            "buildArgs": dict(_build_args(record)),
            "sourceDateEpoch": record.source_date_epoch,
            "lockSha256": record.lock_sha256,
            "provenanceAttestation": record.provenance,
            **({"gpuCheck": lock.gpu.model_dump(mode="json")} if lock.gpu else {}),  # buildkit.gpu, at resolve
            # Every check buildkit knows, as the report's verdict shows it (models/checks.py), from the lock and
            # the build record: the statement is made before verify reads the image or the registry.
            "checks": known_checks(
                lock,
                None,
                record,
                None,
                unread="checked after this statement is made: buildkit verify (--driver VERSION, --provenance)",
            ),
        },
        "resolvedDependencies": dependencies,
    }


def _run_details(sources: Sources, builder: str, byproducts: list[dict[str, Any]]) -> dict[str, Any]:
    """Who built it with which versions, when, and what the run left beside the image."""
    record = sources.record
    return {
        "builder": {
            "id": builder,
            "version": {
                "buildkit": record.buildkit_version,
                "buildx": record.buildx_version,
                "buildkitd": record.buildkit_daemon_version,
                "docker": record.docker_version,
            },
        },
        "metadata": {
            "invocationId": sources.invocation_id,
            "startedOn": record.started,
            "finishedOn": record.ended,
        },
        "byproducts": byproducts,
    }


def _target(record: BuildRecord) -> str:
    targets = argv_values(record, "--target")
    return targets[-1] if targets else ""


def _build_args(record: BuildRecord) -> list[tuple[str, str]]:
    """The build args the build ran with, from its argv (a later one wins, as in buildx)."""
    out: dict[str, str] = {}
    for value in argv_values(record, "--build-arg"):
        name, _, arg = value.partition("=")
        out[name] = arg
    return sorted(out.items())


# DSSE (https://github.com/secure-systems-lab/dsse/blob/master/protocol.md): what is signed is the pre-authentication
# encoding of the payload type and the payload, never the payload alone.


# -- the image index of a multi-platform build (build.platforms) ----------------------------------------------------


def index_statement(index: IndexRecord, statements: dict[str, bytes], builder: str = DEFAULT_BUILDER_ID) -> dict:
    """The in-toto statement of the image index a multi-platform push assembled: its subject the index, its
    dependencies each platform's image and that image's own statement (by the sha256 of its canonical bytes)."""
    if index.index_digest is None or not DIGEST_RE.fullmatch(index.index_digest):
        raise InputError("the index record names no pushed index digest: only a pushed index (--push) is attested")
    if not _TIMESTAMP_RE.fullmatch(index.created):
        raise InputError(f"the index record's time {index.created!r} is not an RFC 3339 UTC time")
    name = image_name(index.tag)
    dependencies: list[dict[str, Any]] = []
    for image in index.platforms:
        if image.digest is None or not DIGEST_RE.fullmatch(image.digest):
            raise InputError(f"the index record names no digest for {image.platform}")
        dependencies.append(
            {
                "name": f"image {image.platform}",
                "uri": docker_purl(name, None, image.digest, image.platform),
                "digest": _sha256_of(image.digest),
            }
        )
        if image.platform in statements:
            dependencies.append(
                {"name": f"provenance {image.platform}", "digest": {"sha256": sha256_bytes(statements[image.platform])}}
            )
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": _sha256_of(index.index_digest)}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": INDEX_BUILD_TYPE,
                "externalParameters": {"tag": index.tag, "platforms": [i.platform for i in index.platforms]},
                "internalParameters": {"lockSha256": index.lock_sha256, "assembled": index.index, "smoke": index.smoke},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": {"id": builder, "version": {"buildkit": index.buildkit_version}},
                "metadata": {
                    "invocationId": f"index-{index.index_digest}",
                    "startedOn": index.created,
                    "finishedOn": index.created,
                },
            },
        },
    }
