"""`verify --provenance`: the evidence `export --to DIR --key KEY` attached in the registry as OCI referrers of the
image's platform manifest (world/artifacts.py), found through the referrers API or the referrers tag schema: the
Sigstore bundle must be signed with the key and name the platform manifest's digest among its subjects (cosign
checks both, against the manifest's own bytes), and the SBOM must be one the statement signed."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any, Literal

from buildkit.errors import BuildkitError, CheckFailed, UpstreamMalformed
from buildkit.models.records.verify import CheckResult
from buildkit.models.slsa import subjects
from buildkit.stages.verify.sqsh import bundle_statement
from buildkit.world import cosign
from buildkit.world.artifacts import BUNDLE_TYPE, SBOM_TYPE, Artifacts
from buildkit.world.http import Http
from buildkit.world.registry import parse_image_ref

NAME = "registry referrers"


def _payload(artifacts: Artifacts, image, entry: dict[str, Any]) -> bytes:
    """An artifact's one layer, its bytes checked."""
    manifest = json.loads(artifacts.fetch(image, str(entry["digest"])))
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        raise CheckFailed(f"the artifact {entry['digest']} does not hold one payload")
    return artifacts.fetch(image, str(layers[0].get("digest")), blob=True)


def check_referrers(ref: str, platform_digest: str | None, key: str, http: Http | None = None) -> list[CheckResult]:
    def result(what: str, ok: bool | None, reason: str) -> CheckResult:
        status: Literal["pass", "fail", "skip"] = "skip" if ok is None else ("pass" if ok else "fail")
        return CheckResult(name=f"{NAME}: {what}", status=status, reason=reason)

    if platform_digest is None:
        return [result("evidence", None, "not read: the image's platform manifest is not known")]
    image = parse_image_ref(f"{parse_image_ref(ref).name}@{platform_digest}")
    artifacts = Artifacts(http or Http())
    try:
        listed, how = artifacts.referrers(image, platform_digest)
        bundles = [e for e in listed if e.get("artifactType") == BUNDLE_TYPE]
        sboms = [e for e in listed if e.get("artifactType") == SBOM_TYPE]
        if not bundles:
            why = f"none refers to {platform_digest} ({how}); `buildkit export --to DIR --key KEY` attaches them"
            return [result("evidence", None, why)]
        subject = artifacts.fetch(image, platform_digest)
        bundle = _payload(artifacts, image, bundles[-1])
        sbom = _payload(artifacts, image, sboms[-1]) if sboms else None
    except (BuildkitError, ValueError, KeyError) as exc:
        return [result("evidence", False, f"the registry's referrers could not be read: {exc}")]
    with tempfile.TemporaryDirectory(prefix="buildkit-referrers-") as tmp:
        (Path(tmp) / "bundle.json").write_bytes(bundle)
        (Path(tmp) / "manifest.json").write_bytes(subject)
        try:
            cosign.verify_blob(cosign.binary(), key, Path(tmp) / "bundle.json", Path(tmp) / "manifest.json")
        except CheckFailed as exc:
            return [result("signed statement", False, exc.message)]
    out = [result("signed statement", True, f"signed with the given key, for {platform_digest} (found through {how})")]
    try:
        signed = subjects(bundle_statement(json.loads(bundle), Path("the registry's bundle")))
    except (ValueError, RecursionError, UpstreamMalformed):
        signed = {}  # cosign accepted it, so this is not reached; an SBOM is then held to nothing
    if sbom is None:
        out.append(result("SBOM", False, f"no CycloneDX SBOM refers to {platform_digest} beside the statement"))
    else:
        sha = hashlib.sha256(sbom).hexdigest()
        ok = sha in signed
        out.append(result("SBOM", ok, f"the SBOM the statement signed ({sha[:12]})" if ok else
                          f"the SBOM ({sha[:12]}) is not among the signed statement's subjects"))  # fmt: skip
    return out
