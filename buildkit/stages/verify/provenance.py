"""`buildkit verify --provenance`: what is attached to a pushed image, checked against the lock.

Two statements are read. BuildKit's own SLSA provenance (mode=max) sits in the image index as an attestation
manifest (`vnd.docker.reference.type: attestation-manifest`) whose in-toto layer names the platform manifest; it is
fetched through buildkit's registry client (bounded answers, digests checked) and says what BuildKit saw: the build
args, the target, the base image and the wheel it fetched (by digest), and the Dockerfile's bytes. buildkit's own
statement (stages/attest/slsa.py) is read only as cosign verify-attestation hands it back, i.e. signed by the
given key. Each is held to the lock field by field; a disagreement names the field, what the lock expects and what
was found.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any, Literal, NamedTuple

from buildkit import __version__
from buildkit.dockerfile.stagediff import compare
from buildkit.errors import BuildkitError, CheckFailed, InputError, UpstreamMalformed, excerpt
from buildkit.files import utc_now
from buildkit.models.grammar import DIGEST_RE
from buildkit.models.lock import Lock, lock_sha256
from buildkit.models.overlay import INSTALLED_ARG, installed_stage, vllm_layers
from buildkit.models.plan import build_args, source_date_epoch
from buildkit.models.records import Build, belongs, header
from buildkit.models.records.render import RenderRecord
from buildkit.models.records.verify import CheckResult, VerifyRecord
from buildkit.models.slsa import BUILD_TYPE, PREDICATE_TYPE
from buildkit.stages.verify.enroot import enroot_import
from buildkit.stages.verify.referrers import check_referrers
from buildkit.text.sanitize import CONTROL_RE
from buildkit.world import cosign
from buildkit.world.http import Http
from buildkit.world.registry import INDEX_TYPES, MANIFEST_TYPES, ImageName, Login, parse_image_ref
from buildkit.world.served import Index, IndexEntry, Reader, json_object
from buildkit.world.shapes import Answer, parse

ATTESTATION_REFERENCE = "attestation-manifest"
INTOTO_LAYER = "application/vnd.in-toto+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
BUILDKIT_SOURCE = "BuildKit provenance"
SIGNED_SOURCE = "buildkit statement"
MAX_ATTESTATIONS = 4  # attestation manifests read for one platform


class Expected(NamedTuple):
    """What the lock (and, for the Dockerfile and a smoke build's stand-in base, the render record) says."""

    target: str
    base_digest: str  # sha256:...
    nemo_rl_commit: str
    vllm_commit: str
    vllm_installed: str  # the commit the install RUN installs (BUILD_CUSTOM_VLLM_REF): the wheel's, with an overlay
    uv_source: bool  # uv builds vLLM from NeMo-RL's git source: no build arg names it
    wheel_url: str
    wheel_sha256: str | None
    build_args: dict[str, str]
    dockerfile_sha256: str | None
    lock_sha256: str
    source_date_epoch: str  # the one build arg BuildKit records beyond the lock's (buildx passes it from the env)


def expected(lock: Lock, smoke: bool, rendered: RenderRecord | None) -> Expected:
    if smoke and rendered and rendered.smoke_base:
        base = rendered.smoke_base.rsplit("@", 1)[1]
    else:
        base = lock.base_image.pinned.rsplit("@", 1)[1]
    usable = rendered if belongs(rendered, Build(lock_sha256(lock), smoke)) else None
    return Expected(
        target="smoke" if smoke else lock.build.target,
        base_digest=base,
        nemo_rl_commit=lock.nemo_rl.commit,
        vllm_commit=lock.vllm.commit,
        vllm_installed=vllm_layers(lock).install_commit,
        uv_source=lock.vllm_install is not None,
        wheel_url=lock.wheel.url,
        wheel_sha256=lock.wheel.sha256,
        build_args=dict(build_args(lock)),
        dockerfile_sha256=usable.dockerfile_sha256 if usable else None,
        lock_sha256=lock_sha256(lock),
        source_date_epoch=str(source_date_epoch(lock)),
    )


class _Checks:
    def __init__(self, source: str):
        self.source = source
        self.results: list[CheckResult] = []

    def field(self, name: str, want: object, found: object) -> None:
        ok = want == found
        reason = f"{_shown(want)}" if ok else f"expected {_shown(want)}, found {_shown(found)}"
        self.results.append(CheckResult(name=f"{self.source}: {name}", status="pass" if ok else "fail", reason=reason))

    def add(self, name: str, ok: bool | None, reason: str) -> None:
        status: Literal["pass", "fail", "skip"] = "skip" if ok is None else ("pass" if ok else "fail")
        self.results.append(CheckResult(name=f"{self.source}: {name}", status=status, reason=reason))


def _shown(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):  # build args: those found come from the registry
        text = ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "no build args"
        return text if len(text) <= 2000 and not CONTROL_RE.search(text) else excerpt(text, 2000)
    return excerpt(value, 160) if not isinstance(value, str) else value if len(value) <= 200 else excerpt(value)


# --- BuildKit's attestation in the registry ---------------------------------------------------------------------


_INSTALLED_RE = re.compile(r"[^\s@]{1,400}@sha256:[0-9a-f]{64}")


def _name(ref: str) -> str | None:
    try:
        return parse_image_ref(ref).name
    except ValueError:
        return None


class ImageProvenance(NamedTuple):
    top_digest: str  # the digest the reference resolves to (an index when attestations are attached)
    platform_digest: str | None  # the platform manifest the provenance describes
    statement: dict[str, Any] | None
    missing: str | None  # why there is no statement


def read_buildkit_provenance(ref: str, platform: str, http: Http | None = None) -> ImageProvenance:
    image = parse_image_ref(ref)
    reader = Reader(http or Http())
    login = Login()  # one login (token) for every read of this image
    top, media_type, manifest = reader.manifest(image, image.digest or image.tag or "latest", login)
    if media_type in MANIFEST_TYPES:
        return ImageProvenance(
            top,
            top,
            None,
            "the image is a single manifest with no attestation manifest beside "
            "it (pushed without provenance, or re-pushed by a tool that drops attestations)",
        )
    if media_type not in INDEX_TYPES:
        raise UpstreamMalformed(f"{image.name}: {excerpt(media_type, 80)} is not an image index or manifest")
    entries = parse(Index, manifest, f"{image.name}: the image index").manifests
    platform_digest = _platform_entry(entries, platform)
    if platform_digest is None or not DIGEST_RE.fullmatch(platform_digest):
        return ImageProvenance(top, None, None, f"the image index has no {platform} manifest")
    attestations = _attestation_digests(entries, platform_digest)
    if not attestations:
        return ImageProvenance(
            top, platform_digest, None, f"the image index has no attestation manifest for {platform}"
        )
    statement = _provenance_statement(reader, image, attestations, login)
    if statement is not None:
        return ImageProvenance(top, platform_digest, statement, None)
    return ImageProvenance(top, platform_digest, None, f"the attestation manifest holds no {PREDICATE_TYPE} statement")


def _platform_entry(entries: list[IndexEntry], platform: str) -> str | None:
    """The digest of the index's image manifest for `platform` (not an attestation manifest)."""
    os_name, arch = platform.split("/")[:2]
    return next(
        (
            m.digest
            for m in entries
            if m.platform is not None
            and m.platform.os == os_name
            and m.platform.architecture == arch
            and m.annotations.get("vnd.docker.reference.type") is None
        ),
        None,
    )


def _attestation_digests(entries: list[IndexEntry], platform_digest: str) -> list[str]:
    """The attestation manifests that refer to the platform's manifest: each distinct digest once, and only the
    first MAX_ATTESTATIONS (BuildKit attaches one per platform, and a forged index of thousands of entries must not
    make thousands of requests)."""
    return list(
        dict.fromkeys(
            m.digest
            for m in entries
            if m.annotations.get("vnd.docker.reference.type") == ATTESTATION_REFERENCE
            and m.annotations.get("vnd.docker.reference.digest") == platform_digest
        )
    )[:MAX_ATTESTATIONS]


def _provenance_statement(reader: Reader, image: ImageName, attestations: list[str], login: Login) -> dict | None:
    """The first SLSA provenance statement in the attestation manifests (checked in shape), or None."""
    for digest in attestations:
        if not DIGEST_RE.fullmatch(digest):
            continue
        _, _, answer = reader.manifest(image, digest, login)
        attestation = parse(_AttestationManifest, answer, f"{image.name}: the attestation manifest {digest}")
        for layer in attestation.layers:
            if layer.mediaType != INTOTO_LAYER or layer.annotations.get(PREDICATE_ANNOTATION) != PREDICATE_TYPE:
                continue
            if not DIGEST_RE.fullmatch(layer.digest):
                raise UpstreamMalformed(f"{image.name}: an attestation layer has no valid digest")
            what = f"{image.name}: the provenance {layer.digest}"
            statement = json_object(reader.blob(image, layer.digest, login), what)
            parse(_Statement, statement, what)
            return statement
    return None


# The fields read from BuildKit's attestation, typed (buildkit.world.shapes): a wrong shape is UpstreamMalformed.
class _Layer(Answer):
    mediaType: str = ""
    digest: str = ""
    annotations: dict[str, str] = {}


class _AttestationManifest(Answer):
    layers: list[_Layer] = []


class _Subject(Answer):
    digest: dict[str, str] = {}


class _Request(Answer):
    args: dict[str, str] = {}


class _ExternalParameters(Answer):
    request: _Request = _Request()


class _Dependency(Answer):
    uri: str = ""
    digest: dict[str, str] = {}


class _BuildDefinition(Answer):
    externalParameters: _ExternalParameters = _ExternalParameters()
    resolvedDependencies: list[_Dependency] = []


class _Predicate(Answer):
    buildDefinition: _BuildDefinition = _BuildDefinition()


class _Statement(Answer):
    """What check_buildkit_provenance reads of BuildKit's statement (the Dockerfile's bytes are read apart)."""

    subject: list[_Subject] = []
    predicate: _Predicate = _Predicate()


def _get(data: Any, *path: str) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _vllm_commit(checks: _Checks, want: Expected, deps: list[_Dependency], installed: str | None) -> None:
    """vLLM's commit in BuildKit's provenance: the install's build arg, or with an overlay the source BuildKit
    fetched; with a uv git source BuildKit sees none."""
    if want.uv_source:
        checks.add(
            "vLLM commit",
            None,
            "not checked: uv fetches vLLM inside the sync RUN, so BuildKit records no vLLM source; NeMo-RL's uv.lock "
            f"pins {want.vllm_commit} (the NeMo-RL commit and the Dockerfile's sha256 are checked)",
        )
    elif want.vllm_installed != want.vllm_commit:
        # A vLLM overlay: the install is of the wheel's commit, and BuildKit fetched the source itself (a git
        # material, by its commit); an image without that material names only what it installed.
        fetched = [c for d in deps for key in ("sha1", "gitCommit") if (c := d.digest.get(key))]
        found_vllm = want.vllm_commit if want.vllm_commit in fetched else (fetched[0] if fetched else installed)
        checks.field("vLLM commit", want.vllm_commit, found_vllm)
        checks.field("vLLM commit installed", want.vllm_installed, installed)
    else:
        checks.field("vLLM commit", want.vllm_commit, installed)


def installed_image_arg(found: ImageProvenance) -> str | None:
    """The install image a pushed build with a vLLM overlay started its overlay's stage FROM (build arg
    VLLM_INSTALLED_IMAGE, stages/build/installed.py), as BuildKit recorded it; None without one."""
    if found.statement is None:
        return None
    args = parse(_Statement, found.statement, "BuildKit's provenance statement").predicate
    return args.buildDefinition.externalParameters.request.args.get(f"build-arg:{INSTALLED_ARG}")


def _beyond_the_overlay(installed: dict[str, Any], final: dict[str, Any], target: str) -> str | None:
    """What the install image's Dockerfile changes of this build's outside the stages a moved head changes (the
    source's fetch, the overlay's paths, the target's overlay and labels), as both provenances carry the bytes; None
    when nothing does. Comments aside: a head's Dockerfile names it in its header."""
    texts = [_dockerfile_bytes(statement) for statement in (installed, final)]
    if texts[0] is None or texts[1] is None:
        return "a Dockerfile is not in the provenance (mode=max carries it)"
    try:
        changes = compare(texts[0].decode(), texts[1].decode(), "the install image's", "this build's")
    except (UnicodeDecodeError, BuildkitError) as exc:
        return f"it cannot be read ({excerpt(str(exc), 120)})"
    # An overlay's stage is one whose install stage (<name>-vllm-installed) is the same in both.
    overlays = {c.stage for c in changes.stages if installed_stage(c.stage) in changes.unchanged}
    allowed = {"vllm-source", "vllm-overlay", target} | overlays
    named = [c.stage for c in changes.stages if c.stage not in allowed] + [f"ARG {a.name}" for a in changes.args]
    return ", ".join(named[:5]) or None


def _installed_deps(
    checks: _Checks,
    want: Expected,
    image: str,
    installed: ImageProvenance | None,
    deps: list[_Dependency],
    found_statement: dict[str, Any],
) -> list[_Dependency] | None:
    """The install image's own provenance, checked as the one the overlay's stage started FROM: built for the
    install's stage from this build's Dockerfile but for the overlay's stages (an earlier head's), and the image
    BuildKit resolved for it. Its dependencies hold the base image and the wheel (the final build saw neither); None
    when it cannot stand for them."""
    name = "vLLM install image"
    if installed is None or installed.statement is None:
        checks.add(name, False, f"{image}: {installed.missing if installed else 'not read'}")
        return None
    typed = parse(_Statement, installed.statement, f"{image}: BuildKit's provenance statement")
    digest = image.rsplit("@", 1)[1]
    target = typed.predicate.buildDefinition.externalParameters.request.args.get("target", "")
    problems = []
    if not any(f"sha256:{d.digest.get('sha256')}" == digest for d in deps if d.uri.startswith("pkg:docker/")):
        problems.append(f"the final build's provenance names no base image {digest}")
    if target != installed_stage(want.target):
        problems.append(f"its target is {excerpt(target, 80)}, not {installed_stage(want.target)}")
    beyond = _beyond_the_overlay(installed.statement, found_statement, want.target)
    if beyond:
        problems.append(f"its Dockerfile differs from this build's beyond the overlay's stages: {beyond}")
    subjects = {f"sha256:{s.digest.get('sha256')}" for s in typed.subject}
    if installed.platform_digest not in subjects:
        problems.append(f"its statement is not for its {installed.platform_digest}")
    if problems:
        checks.add(name, False, f"{image}: " + "; ".join(problems))
        return None
    checks.add(
        name,
        True,
        f"the overlay's stage started FROM {image}, built for {target} from the same Dockerfile; the base image and "
        "the wheel below are from its provenance",
    )
    return typed.predicate.buildDefinition.resolvedDependencies


def check_buildkit_provenance(
    found: ImageProvenance, want: Expected, installed: ImageProvenance | None = None
) -> list[CheckResult]:
    """BuildKit's statement held to the lock; `installed`: the install image's, read where the build names one."""
    checks = _Checks(BUILDKIT_SOURCE)
    statement = found.statement
    if statement is None:
        checks.add("present", False, f"no provenance: {found.missing}")
        return checks.results
    typed = parse(_Statement, statement, "BuildKit's provenance statement")
    digests = {f"sha256:{s.digest.get('sha256')}" for s in typed.subject}
    checks.add(
        "present",
        found.platform_digest in digests,
        f"SLSA v1 statement for {found.platform_digest}"
        if found.platform_digest in digests
        else f"its subject is {', '.join(sorted(digests)) or 'nothing'}, not {found.platform_digest}",
    )
    definition = typed.predicate.buildDefinition
    args = definition.externalParameters.request.args
    found_args = {k.removeprefix("build-arg:"): v for k, v in args.items() if k.startswith("build-arg:")}
    deps = definition.resolvedDependencies
    checks.field("target", want.target, args.get("target", ""))
    image = found_args.pop(INSTALLED_ARG, None)
    if image is not None:
        below = _installed_deps(checks, want, image, installed, deps, statement)
        deps = below + [d for d in deps if not d.uri.startswith("pkg:docker/")] if below is not None else deps
    images = [d for d in deps if d.uri.startswith("pkg:docker/")]
    checks.field(
        "base image digest",
        want.base_digest,
        ", ".join(f"sha256:{d.digest.get('sha256')}" for d in images) or None,
    )
    checks.field("NeMo-RL commit", want.nemo_rl_commit, found_args.get("NEMO_RL_COMMIT"))
    _vllm_commit(checks, want, deps, found_args.get("BUILD_CUSTOM_VLLM_REF"))
    wheel = next((d for d in deps if d.uri == want.wheel_url), None)
    others = [d.uri for d in deps if d.uri.startswith(("http://", "https://"))]
    checks.field("wheel URL", want.wheel_url, wheel.uri if wheel else ", ".join(others) or None)
    if want.wheel_sha256:
        checks.field("wheel sha256", want.wheel_sha256, wheel.digest.get("sha256") if wheel else None)
    else:
        checks.add("wheel sha256", None, "the lock's wheel is not content-addressed")
    # Exactly the lock's build args: one more (NRL_GIT_REF=main) changes what is built as surely as a wrong one.
    # SOURCE_DATE_EPOCH alone may be beside them, and then it is the lock's.
    wanted_args = want.build_args | (
        {"SOURCE_DATE_EPOCH": want.source_date_epoch} if "SOURCE_DATE_EPOCH" in found_args else {}
    )
    checks.field(
        "build args", wanted_args, found_args | {k: "<missing>" for k in want.build_args if k not in found_args}
    )
    if want.dockerfile_sha256:
        checks.field("Dockerfile sha256", want.dockerfile_sha256, _dockerfile_sha256(statement))
    else:
        checks.add("Dockerfile sha256", None, "no render record of this lock's Dockerfile to compare with")
    return checks.results


def _dockerfile_bytes(statement: dict[str, Any]) -> bytes | None:
    """The Dockerfile's bytes as mode=max provenance carries them (buildkit_metadata.source.infos)."""
    infos = _get(statement, "predicate", "runDetails", "metadata", "buildkit_metadata", "source", "infos") or []
    for info in infos if isinstance(infos, list) else []:
        if isinstance(info, dict) and info.get("language") == "Dockerfile" and isinstance(info.get("data"), str):
            try:
                return base64.b64decode(info["data"], validate=True)
            except binascii.Error:
                return None
    return None


def _dockerfile_sha256(statement: dict[str, Any]) -> str | None:
    data = _dockerfile_bytes(statement)
    return hashlib.sha256(data).hexdigest() if data is not None else None


# --- buildkit's signed statement --------------------------------------------------------------------------------


def check_signed_statement(
    statements: list[dict[str, Any]], refused: str | None, top_digest: str, want: Expected
) -> list[CheckResult]:
    checks = _Checks(SIGNED_SOURCE)
    if refused is not None:
        checks.add("signature", False, refused)
        return checks.results
    ours = [
        s
        for s in statements
        if _get(s, "predicate", "buildDefinition", "buildType") == BUILD_TYPE
        and any(
            f"sha256:{_get(x, 'digest', 'sha256')}" == top_digest for x in s.get("subject") or [] if isinstance(x, dict)
        )
    ]
    if not ours:
        checks.add(
            "signature",
            False,
            f"cosign accepted {len(statements)} statement(s), none of build type {BUILD_TYPE} for {top_digest}",
        )
        return checks.results
    statement = ours[-1]
    checks.add("signature", True, f"signed statement for {top_digest}, accepted by cosign with the given key")
    definition = _get(statement, "predicate", "buildDefinition") or {}
    internal = given if isinstance(given := definition.get("internalParameters"), dict) else {}
    deps = {d.get("name"): d for d in definition.get("resolvedDependencies") or [] if isinstance(d, dict)}
    checks.field("target", want.target, internal.get("target"))
    checks.field(
        "base image digest",
        want.base_digest,
        f"sha256:{_get(deps.get('base-image'), 'digest', 'sha256')}" if deps.get("base-image") else None,
    )
    checks.field("NeMo-RL commit", want.nemo_rl_commit, _get(deps.get("nemo-rl"), "digest", "gitCommit"))
    checks.field("vLLM commit", want.vllm_commit, _get(deps.get("vllm"), "digest", "gitCommit"))
    wheel = next((d for d in deps.values() if str(d.get("name", "")).endswith(".whl")), None)
    checks.field("wheel URL", want.wheel_url, _get(wheel, "uri"))
    checks.field("wheel sha256", want.wheel_sha256, _get(wheel, "digest", "sha256"))
    checks.field("build args", want.build_args, internal.get("buildArgs"))
    dockerfile = next((d for n, d in deps.items() if str(n).endswith("Dockerfile")), None)
    if want.dockerfile_sha256:
        checks.field("Dockerfile sha256", want.dockerfile_sha256, _get(dockerfile, "digest", "sha256"))
    else:
        checks.add("Dockerfile sha256", None, "no render record of this lock's Dockerfile to compare with")
    checks.field("lock sha256", want.lock_sha256, internal.get("lockSha256"))
    return checks.results


def verify_provenance(
    image: str, lock: Lock, smoke: bool, rendered: RenderRecord | None, public_key: str, http: Http | None = None
) -> VerifyRecord:
    """Both statements of a pushed image, each checked against the lock; the results as a verify record."""

    try:
        parse_image_ref(image)
    except ValueError:
        raise InputError(f"not an image reference: {excerpt(image, 120)}") from None
    want = expected(lock, smoke, rendered)
    found = read_buildkit_provenance(image, lock.build.platform, http)
    installed_image, installed = installed_image_arg(found), None
    if installed_image is not None:
        name = parse_image_ref(image).name
        if not _INSTALLED_RE.fullmatch(installed_image) or _name(installed_image) != name:
            raise UpstreamMalformed(
                f"BuildKit's provenance names the install image {excerpt(installed_image, 160)}: not a digest in "
                f"{name}, where buildkit pushes it"
            )
        installed = read_buildkit_provenance(installed_image, lock.build.platform, http)
    results = check_buildkit_provenance(found, want, installed)
    tool = cosign.binary()
    refused = None
    statements: list[dict[str, Any]] = []
    pinned = f"{parse_image_ref(image).name}@{found.top_digest}"
    try:
        statements = cosign.verify(tool, public_key, pinned)
    except CheckFailed as exc:
        refused = exc.message
    results.append(enroot_import(image, lock.build.platform, http))
    results += check_referrers(image, found.platform_digest, public_key, http)
    signed_args = want.build_args | ({INSTALLED_ARG: installed_image} if installed_image else {})
    results += check_signed_statement(statements, refused, found.top_digest, want._replace(build_args=signed_args))
    return VerifyRecord(
        buildkit_version=__version__,
        image=image,
        image_id=found.top_digest,
        lock_sha256=want.lock_sha256,
        smoke=smoke,
        gpus=False,
        checked_at=utc_now(),
        results=results,
        header=header("provenance-verify", found.top_digest, want.lock_sha256, smoke),
    )
