"""Whether `enroot import docker://<image>` takes the pushed image, read from its registry as enroot reads it
(NVIDIA/enroot at 8ea147d, src/docker.sh, `docker::_prepare_layers` lines 146-163 and `docker::_download_extract`
94-124):

1. GET the tag with `Accept: application/vnd.docker.distribution.manifest.list.v2+json,
   application/vnd.oci.image.index.v1+json`; where the answer is an index, the FIRST entry whose
   `platform.architecture` is the node's (jq `.manifests[] | select(.platform.architecture == $arch) | .digest`,
   then `read` of one line) is the image. buildx's attestation manifests say `unknown/unknown`, so they are passed
   over, as long as the image's own entry is there; an index with none for the arch leaves enroot fetching the tag
   itself as a manifest, which an index-only tag cannot answer.
2. GET that digest with `Accept: application/vnd.docker.distribution.manifest.v2+json,
   application/vnd.oci.image.manifest.v1+json`: it must be an image manifest with a config digest and layers.
3. Each layer is gunzipped (`gzip -d -f`, which passes an uncompressed tar through) unless its media type is
   `application/vnd.oci.image.layer.v1.tar+zstd`; any other compression does not extract.

The check reads only manifests (no layer), through buildkit's registry client (bounded, digests checked).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from buildkit.errors import BuildkitError, excerpt
from buildkit.models.grammar import DIGEST_RE
from buildkit.models.records.verify import CheckResult
from buildkit.world.http import Http
from buildkit.world.registry import Login, Registry, parse_image_ref

ACCEPT_LIST = "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json"
ACCEPT_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
# Layer media types enroot extracts: gzip (or plain tar, which `gzip -d -f` passes through) and zstd.
EXTRACTED = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+zstd",
}
DEBIAN_ARCH = {"amd64": "amd64", "arm64": "arm64"}  # enroot's common::debarch of x86_64 / aarch64
NAME = "enroot import"


class _Reader(Registry):
    def get(self, image, reference: str, accept: str, login: Login) -> tuple[int, dict[str, Any] | None, str]:
        """(status, the JSON object answered, its digest) of GET manifests/<reference> with `accept`."""
        reply = self._get(image, f"manifests/{reference}", login, accept)
        try:
            body = json.loads(reply.body) if reply.status == 200 else None
        except (ValueError, RecursionError):
            body = None
        digest = "sha256:" + hashlib.sha256(reply.body).hexdigest()
        return reply.status, body if isinstance(body, dict) else None, digest


def enroot_import(ref: str, platform: str, http: Http | None = None) -> CheckResult:
    """The check's result for the pushed image `ref` (name:tag or name@digest) on a node of `platform`'s arch."""
    arch = DEBIAN_ARCH.get(platform.split("/")[1], platform.split("/")[1])
    image = parse_image_ref(ref)
    reader, login = _Reader(http or Http()), Login()
    reference = image.digest or image.tag or "latest"

    def result(ok: bool, reason: str) -> CheckResult:
        return CheckResult(name=NAME, status="pass" if ok else "fail", reason=reason)

    try:
        status, listed, _ = reader.get(image, reference, ACCEPT_LIST, login)
        chosen, skipped = reference, 0
        if status == 200 and listed is not None and isinstance(listed.get("manifests"), list):
            entries = [m for m in listed["manifests"] if isinstance(m, dict)]
            matching = [m for m in entries if (m.get("platform") or {}).get("architecture") == arch]
            skipped = sum(1 for m in entries if (m.get("platform") or {}).get("architecture") == "unknown")
            if not matching:
                return result(False, f"the index has no {arch} entry: enroot would fetch the tag as a manifest")
            chosen = str(matching[0].get("digest", ""))
            if not DIGEST_RE.fullmatch(chosen):
                return result(False, f"the index's first {arch} entry names no digest: {excerpt(chosen, 80)}")
        status, manifest, digest = reader.get(image, chosen, ACCEPT_MANIFEST, login)
    except BuildkitError as exc:
        return result(False, f"the registry could not be read as enroot reads it: {exc.message}")
    if status != 200 or manifest is None:
        return result(False, f"{chosen} answered {status} to enroot's manifest Accept header")
    if chosen != reference and digest != chosen:
        return result(False, f"the registry served other bytes for {chosen}")
    config = (manifest.get("config") or {}).get("digest") if isinstance(manifest.get("config"), dict) else None
    layers = [m for m in manifest.get("layers") or [] if isinstance(m, dict)]
    if not isinstance(config, str) or not layers:
        return result(False, f"{chosen} is not an image manifest with a config and layers (enroot cannot parse it)")
    unknown = sorted({str(m.get("mediaType")) for m in layers} - EXTRACTED)
    if unknown:
        return result(False, f"enroot does not extract layers of {excerpt(', '.join(unknown), 120)}")
    passed = (
        f", {skipped} attestation entr{'y' if skipped == 1 else 'ies'} (unknown/unknown) passed over" if skipped else ""
    )
    return result(True, f"{arch}: {chosen} ({len(layers)} layers enroot extracts){passed}")
