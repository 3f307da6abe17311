"""`buildkit verify --sqsh FILE --key KEY`: a published squashfs checked on a login node, offline, against the evidence
`buildkit export --to DIR --key KEY` left beside it (stages/export/evidence.py). No project, registry or network:
the file, its two sidecars and the public key are all it reads.

- the bundle (`<name>.sigstore.json`) parses as a Sigstore bundle with a DSSE envelope (exit 3 otherwise: it is not
  evidence at all);
- cosign accepts its signature with the key and finds the file's sha256 among the statement's subjects (a flipped
  byte, a bundle of another file, another key: each fails, named);
- the statement names the image the file's name carries (`@sha256-<hex>`): a statement for another digest fails;
- the SBOM (`<name>.cdx.json`) is the one the statement signed (its sha256 among the subjects): a swapped SBOM fails;
- what the SBOM claims agrees with the signed statement: the image digest, NeMo-RL's and vLLM's commits, the wheel's
  sha256 and URL, the base image's digest.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from buildkit.errors import CheckFailed, InputError, UpstreamMalformed, excerpt
from buildkit.files import read_local
from buildkit.models.records.squashfs import MAX_SIDECAR, sidecars
from buildkit.models.records.verify import CheckResult
from buildkit.models.slsa import subjects
from buildkit.world import cosign

_NAME_RE = re.compile(r".+@sha256-(?P<hex>[0-9a-f]{64})\.sqsh")


def _json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(read_local(path, what, MAX_SIDECAR))
    except FileNotFoundError:
        raise InputError(f"{path}: no {what} beside the file", hint="export it with --to DIR --key KEY") from None
    except (ValueError, RecursionError):
        raise UpstreamMalformed(f"{path}: the {what} is not JSON") from None
    if not isinstance(data, dict):
        raise UpstreamMalformed(f"{path}: the {what} is not a JSON object")
    return data


def bundle_statement(bundle: dict[str, Any], path: Path) -> dict[str, Any]:
    """The in-toto statement a Sigstore bundle's DSSE envelope carries (not yet trusted: cosign checks it)."""
    envelope = bundle.get("dsseEnvelope")
    payload = envelope.get("payload") if isinstance(envelope, dict) else None
    if not str(bundle.get("mediaType", "")).startswith("application/vnd.dev.sigstore.bundle") or not isinstance(
        payload, str
    ):
        raise UpstreamMalformed(f"{path}: not a Sigstore bundle with a DSSE envelope")
    try:
        statement = json.loads(base64.b64decode(payload, validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise UpstreamMalformed(f"{path}: the envelope's payload is not a base64 JSON statement") from None
    if not isinstance(statement, dict) or not isinstance(statement.get("subject"), list):
        raise UpstreamMalformed(f"{path}: the envelope's payload is not an in-toto statement")
    return statement


def _dependency(statement: dict[str, Any], name: str) -> dict[str, Any]:
    definition = (statement.get("predicate") or {}).get("buildDefinition") or {}
    deps = definition.get("resolvedDependencies") or []
    return next((d for d in deps if isinstance(d, dict) and d.get("name") == name), {})


def _digest(dependency: dict[str, Any], key: str) -> object:
    digest = dependency.get("digest")
    return digest.get(key) if isinstance(digest, dict) else None


def _component(sbom: dict[str, Any], ref: str) -> dict[str, Any]:
    found = (c for c in sbom.get("components") or [] if isinstance(c, dict) and c.get("bom-ref") == ref)
    return next(found, {})


def claims(sbom: dict[str, Any], statement: dict[str, Any]) -> list[tuple[str, object, object]]:
    """(what, the SBOM says, the signed statement says) for each claim both make."""
    wheel = _component(sbom, "vllm-wheel")
    definition = (statement.get("predicate") or {}).get("buildDefinition") or {}
    deps = [d for d in definition.get("resolvedDependencies") or [] if isinstance(d, dict)]
    wheel_dep = next((d for d in deps if str(d.get("name", "")).endswith(".whl")), {})
    sha = next((h.get("content") for h in wheel.get("hashes") or [] if h.get("alg") == "SHA-256"), None)
    url = next((r.get("url") for r in wheel.get("externalReferences") or [] if r.get("type") == "distribution"), None)
    base = _digest(_dependency(statement, "base-image"), "sha256")
    nemo, vllm = _dependency(statement, "nemo-rl"), _dependency(statement, "vllm")
    return [
        ("NeMo-RL commit", _component(sbom, "nemo-rl").get("version"), _digest(nemo, "gitCommit")),
        ("vLLM commit", _component(sbom, "vllm-source").get("version"), _digest(vllm, "gitCommit")),
        ("wheel sha256", sha, _digest(wheel_dep, "sha256")),
        ("wheel URL", url, wheel_dep.get("uri")),
        ("base image digest", _component(sbom, "base-image").get("version"), f"sha256:{base}" if base else None),
    ]


def verify_sqsh(file: Path, key: str) -> list[CheckResult]:
    """Every check of a published squashfs against its sidecars; malformed evidence raises UpstreamMalformed."""
    results: list[CheckResult] = []

    def check(name: str, ok: bool, reason: str) -> None:
        results.append(CheckResult(name=f"squashfs: {name}", status="pass" if ok else "fail", reason=reason))

    named = _NAME_RE.fullmatch(file.name)
    if named is None:
        raise InputError(f"{file.name}: not a published name (<name>@sha256-<hex>.sqsh, as export --to writes it)")
    if not file.is_file():
        raise InputError(f"{file}: no such file")
    sbom_path, bundle_path = sidecars(file)
    bundle = _json(bundle_path, "Sigstore bundle")
    statement = bundle_statement(bundle, bundle_path)
    sbom = _json(sbom_path, "CycloneDX SBOM")
    try:
        cosign.verify_blob(cosign.binary(), key, bundle_path, file)
        check("signature", True, f"{bundle_path.name}: signed with the given key, and names this file's sha256")
    except CheckFailed as exc:
        check("signature", False, exc.message)
        return results  # nothing in an unaccepted statement is evidence
    signed = subjects(statement)
    image = named.group("hex")
    check(
        "image digest",
        image in signed,
        f"the statement is for sha256:{image} ({excerpt(signed.get(image, ''), 120)})"
        if image in signed
        else f"the statement names no sha256:{image}: it is another image's",
    )
    sbom_sha = hashlib.sha256(read_local(sbom_path, "CycloneDX SBOM", MAX_SIDECAR)).hexdigest()
    check(
        "SBOM",
        sbom_sha in signed,
        f"{sbom_path.name} is the SBOM the statement signed" if sbom_sha in signed else
        f"{sbom_path.name} (sha256 {sbom_sha[:12]}) is not among the statement's subjects: another build's, or edited",
    )  # fmt: skip
    if sbom_sha not in signed:
        return results
    metadata = sbom.get("metadata") if isinstance(sbom.get("metadata"), dict) else {}
    claimed = (metadata.get("component") or {}).get("version") if isinstance(metadata, dict) else None
    check("SBOM image", claimed == f"sha256:{image}", f"the SBOM describes {excerpt(claimed, 80)}")
    for what, said, says in claims(sbom, statement):
        ok = said is not None and said == says
        check(
            f"SBOM {what}",
            ok,
            f"{excerpt(said, 120)}"
            if ok
            else f"the SBOM says {excerpt(said, 120)}, the statement {excerpt(says, 120)}",
        )
    return results
