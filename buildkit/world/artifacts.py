"""OCI 1.1 referrers: evidence (a signed statement, an SBOM) stored in the image's registry as artifacts whose
`subject` is the image manifest they describe, and found again from that manifest's digest.

As the OCI distribution spec v1.1 says (spec.md, "Listing Referrers" and "Referrers Tag Schema"): an artifact is an
image manifest with an `artifactType`, the empty config (`application/vnd.oci.empty.v1+json`, `{}`), its payload as
the one layer, and `subject` the descriptor of the manifest it refers to. A registry with the referrers API answers
the push with an `OCI-Subject` header and lists the referrers at `GET /v2/<name>/referrers/<digest>`; for one
without it (Debian's docker-registry 2.8, the engine's), the client keeps the list itself, as an image index tagged
`sha256-<hex>` of the subject, which a reader fetches when the referrers API answers 404.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from buildkit.errors import UpstreamMalformed, UpstreamUnreachable, excerpt
from buildkit.models.grammar import DIGEST_RE, ImageName
from buildkit.world.http import REGISTRY, Http, Reply, origin
from buildkit.world.registry import ACCEPT, Login, Registry, parse_image_ref

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
EMPTY = "application/vnd.oci.empty.v1+json"
EMPTY_DATA = b"{}"
MAX_REFERRERS = 1_000  # entries of one subject's referrers list read


def descriptor(media_type: str, content: bytes, **extra: Any) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    return {"mediaType": media_type, "digest": digest, "size": len(content), **extra}


class Artifacts(Registry):
    """buildkit's registry client, with the writes an artifact needs and the read of a subject's referrers."""

    def _send(self, image: ImageName, method: str, path: str, login: Login, body: bytes, content_type: str) -> Reply:
        """A write with the image's login, sent only to the registry's own origin; a 401 (a token for pulls where a
        push needs more) is answered once with the challenge's scope."""
        url = path if path.startswith(("http://", "https://")) else f"{image.api_base}/v2/{image.repository}/{path}"
        headers = {"Content-Type": content_type}
        home = origin(url) == origin(image.api_base)
        for attempt in range(2):
            if login.header and home:
                headers["Authorization"] = login.header
            reply = self.http.request(method, url, limit=REGISTRY, headers=headers, data=body)
            if reply.status != 401 or attempt or not home:
                return reply
            login.header = self._login(image, reply.headers.get("WWW-Authenticate", ""), login)
        return reply

    def push_blob(self, image: ImageName, data: bytes, login: Login) -> None:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self._get(image, f"blobs/{digest}", login, None).status == 200:
            return  # already there
        started = self._send(image, "POST", "blobs/uploads/", login, b"", "application/octet-stream")
        location = started.headers.get("Location", "")
        if started.status != 202 or not location:
            raise UpstreamUnreachable(f"registry {image.registry}: a blob upload was refused ({started.status})")
        if location.startswith("/"):
            location = f"{image.api_base}{location}"
        done = self._send(
            image, "PUT", f"{location}{'&' if '?' in location else '?'}digest={digest}", login, data,
            "application/octet-stream",
        )  # fmt: skip
        if done.status != 201:
            raise UpstreamUnreachable(f"registry {image.registry}: blob {digest} was refused ({done.status})")

    def push_manifest(self, image: ImageName, reference: str, body: bytes, media_type: str, login: Login) -> bool:
        """PUT the manifest; whether the registry took its subject itself (the `OCI-Subject` header)."""
        reply = self._send(image, "PUT", f"manifests/{reference}", login, body, media_type)
        if reply.status != 201:
            raise UpstreamUnreachable(f"registry {image.registry}: manifest {reference} was refused ({reply.status})")
        return bool(reply.headers.get("OCI-Subject"))

    def attach(
        self, image: ImageName, subject: dict[str, Any], artifact_type: str, payload: bytes, annotations: dict[str, str]
    ) -> str:
        """The artifact pushed with `subject` (a manifest's descriptor) and listed where readers look; its digest."""
        login = self._login_for(image)
        self.push_blob(image, EMPTY_DATA, login)
        self.push_blob(image, payload, login)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "artifactType": artifact_type,
            "config": descriptor(EMPTY, EMPTY_DATA, data="e30="),
            "layers": [descriptor(artifact_type, payload)],
            "subject": subject,
            "annotations": annotations,
        }
        body = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if not self.push_manifest(image, digest, body, MANIFEST, login):
            self._list_in_tag(image, subject["digest"], descriptor(
                MANIFEST, body, artifactType=artifact_type, annotations=annotations), login)  # fmt: skip
        return digest

    def _list_in_tag(self, image: ImageName, subject: str, entry: dict[str, Any], login: Login) -> None:
        """The referrers tag schema: the subject's index tagged sha256-<hex>, with `entry` added once."""
        tag = subject.replace(":", "-")
        entries = [e for e in self._tagged(image, tag, login) if e.get("digest") != entry["digest"]]
        index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [*entries, entry]}
        self.push_manifest(image, tag, json.dumps(index, sort_keys=True).encode(), INDEX, login)

    def _tagged(self, image: ImageName, tag: str, login: Login) -> list[dict[str, Any]]:
        reply = self._get(image, f"manifests/{tag}", login, INDEX)
        if reply.status == 404:
            return []
        if reply.status != 200:
            raise UpstreamUnreachable(f"registry {image.registry}: the referrers tag {tag} answered {reply.status}")
        return _entries(reply.body, f"{image.name}:{tag}")

    def referrers(self, image: ImageName, subject: str) -> tuple[list[dict[str, Any]], str]:
        """The artifacts that refer to `subject`, and how they were found (the referrers API, else the tag)."""
        if not DIGEST_RE.fullmatch(subject):
            raise UpstreamMalformed(f"not a digest: {excerpt(subject, 80)}")
        login = self._login_for(image)
        reply = self._get(image, f"referrers/{subject}", login, INDEX)
        if reply.status == 200:
            return _entries(reply.body, f"{image.name}: the referrers of {subject}"), "the referrers API"
        return self._tagged(image, subject.replace(":", "-"), login), "the referrers tag schema"

    def fetch(self, image: ImageName, digest: str, blob: bool = False) -> bytes:
        """A manifest (any kind), or with `blob` a blob, by digest, its bytes checked."""
        login = self._login_for(image)
        reply = self._get(image, f"{'blobs' if blob else 'manifests'}/{digest}", login, None if blob else ACCEPT)
        if reply.status != 200:
            raise UpstreamUnreachable(f"{image.name}: {digest} is not in registry {image.registry} ({reply.status})")
        if "sha256:" + hashlib.sha256(reply.body).hexdigest() != digest:
            raise UpstreamMalformed(f"{image.name}: the registry served {digest} with other content")
        return reply.body


def _entries(body: bytes, what: str) -> list[dict[str, Any]]:
    try:
        index = json.loads(body)
    except (ValueError, RecursionError):
        raise UpstreamMalformed(f"{what} is not JSON") from None
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list):
        raise UpstreamMalformed(f"{what} is not an image index")
    return [m for m in manifests[:MAX_REFERRERS] if isinstance(m, dict) and DIGEST_RE.fullmatch(str(m.get("digest")))]


SBOM_TYPE = "application/vnd.cyclonedx+json"
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"  # as cosign v3 stores a bundle as a referrer
PAYLOAD_SHA = "dev.buildkit.payload.sha256"  # annotation: the payload's sha256, so the same one is attached once
TITLE = "org.opencontainers.image.title"


def attach_files(ref: str, subject_digest: str, files: list[tuple[str, str, bytes]], http: Http | None = None) -> str:
    """Each (artifact type, file name, bytes) attached to `subject_digest` in `ref`'s repository, unless an artifact of
    the same payload already refers to it; how the referrers are listed there."""
    image = parse_image_ref(f"{ref.rsplit('@', 1)[0]}@{subject_digest}")
    artifacts = Artifacts(http or Http())
    body = artifacts.fetch(image, subject_digest)
    media_type = _media_type(body) or MANIFEST
    subject = descriptor(media_type, body)
    listed, how = artifacts.referrers(image, subject_digest)
    attached = {str((entry.get("annotations") or {}).get(PAYLOAD_SHA)) for entry in listed}
    for artifact_type, name, payload in files:
        sha = hashlib.sha256(payload).hexdigest()
        if sha not in attached:
            artifacts.attach(image, subject, artifact_type, payload, {TITLE: name, PAYLOAD_SHA: sha})
    return how


def _media_type(body: bytes) -> str | None:
    try:
        found = json.loads(body).get("mediaType")
    except (ValueError, AttributeError, RecursionError):
        return None
    return found if isinstance(found, str) else None
