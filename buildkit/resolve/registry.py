"""Resolve an image tag to digests through the OCI distribution API, with the anonymous bearer-token flow.

GET the manifest; on 401 follow the `WWW-Authenticate: Bearer realm=...` challenge for an anonymous token
(as nvcr.io and Docker Hub require), then retry. A tag that names an index yields the index digest and the digest
of the manifest for the build platform. Registries on loopback addresses are spoken to over plain HTTP, as Docker
does; everything else over HTTPS.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import StringConstraints

from buildkit.errors import UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable, excerpt
from buildkit.files import utc_now
from buildkit.grammar import IMAGE_REF_RE, Digest, is_loopback_host
from buildkit.http import REGISTRY, REGISTRY_TOKEN, Http, Reply
from buildkit.lock import ImageFact
from buildkit.resolve.shapes import Answer, Line, parse

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
_CHALLENGE_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')


# The fields buildkit reads from the registry's answers, typed (see shapes.py).
class _Platform(Answer):
    os: Line = ""
    architecture: Line = ""


class _Descriptor(Answer):
    digest: Digest
    platform: _Platform | None = None


class _Index(Answer):
    manifests: list[_Descriptor]


class _ConfigDescriptor(Answer):
    digest: Digest


class _Manifest(Answer):
    config: _ConfigDescriptor


class _Config(Answer):
    os: Line
    architecture: Line


# A bearer token goes into a header: printable ASCII without spaces.
_TokenText = Annotated[str, StringConstraints(pattern=r"^[!-~]+$")]


class _Token(Answer):
    token: _TokenText | None = None
    access_token: _TokenText | None = None


@dataclass(frozen=True)
class ImageName:
    registry: str  # as written in the reference, e.g. nvcr.io, 127.0.0.1:5000, docker.io
    repository: str
    tag: str | None
    digest: str | None

    @property
    def api_base(self) -> str:
        host = "registry-1.docker.io" if self.registry == "docker.io" else self.registry
        scheme = "http" if is_loopback_host(_host_only(host)) else "https"
        return f"{scheme}://{host}"

    @property
    def name(self) -> str:
        return self.repository if self.registry == "docker.io" else f"{self.registry}/{self.repository}"


def parse_image_ref(ref: str) -> ImageName:
    m = IMAGE_REF_RE.fullmatch(ref)
    if not m:
        raise ValueError(f"not an image reference: {ref!r}")
    domain, path = m.group("domain"), m.group("path")
    # Docker's normalisation: a first component without '.' or ':' (and not localhost) is a Docker Hub path.
    if domain and ("." in domain or ":" in domain or domain == "localhost"):
        registry = domain
    else:
        registry = "docker.io"
        path = f"{domain}/{path}" if domain else path
        if "/" not in path:
            path = f"library/{path}"
    return ImageName(registry=registry, repository=path, tag=m.group("tag"), digest=m.group("digest"))


def _host_only(registry: str) -> str:
    if registry.startswith("["):
        return registry.split("]")[0] + "]"
    return registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry


class Registry:
    def __init__(self, http: Http):
        self.http = http

    def _get(self, image: ImageName, path: str, token: list[str | None], accept: str | None) -> Reply:
        """GET with the registry's bearer token; `token` is a one-slot cache shared by one image's requests."""
        url = f"{image.api_base}/v2/{image.repository}/{path}"
        headers = {"Accept": accept} if accept else {}
        for _ in range(2):
            if token[0]:
                headers["Authorization"] = f"Bearer {token[0]}"
            reply = self.http.get(url, limit=REGISTRY, headers=headers)
            if reply.status != 401 or token[0]:
                return reply
            token[0] = self._anonymous_token(image, reply.headers.get("WWW-Authenticate", ""))
        return reply

    def _anonymous_token(self, image: ImageName, challenge: str) -> str:
        scheme, _, params_text = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise UpstreamUnreachable(
                f"registry {image.registry} wants {excerpt(scheme, 40) if scheme else 'unknown'} credentials for "
                f"{image.repository}; buildkit resolves public images with anonymous bearer tokens",
                hint="use a public base image, or a mirror on a reachable registry",
            )
        params = dict(_CHALLENGE_PARAM_RE.findall(params_text))
        realm = params.pop("realm", "")
        realm_host = re.sub(r"^\w+://", "", realm).split("/")[0]
        if not (
            realm.startswith("https://") or (realm.startswith("http://") and is_loopback_host(_host_only(realm_host)))
        ):
            raise UpstreamMalformed(f"registry {image.registry} sent an unusable token realm {excerpt(realm, 120)}")
        params.setdefault("scope", f"repository:{image.repository}:pull")
        reply = self.http.get(realm, limit=REGISTRY_TOKEN, params=params)
        if reply.status != 200:
            raise UpstreamUnreachable(
                f"registry {image.registry}: anonymous token refused ({reply.status}) for {image.repository}",
                hint="the image may be private or the name misspelt",
            )
        what = f"registry {image.registry}: the token answer"
        answer = parse(_Token, reply.json(what), what)
        bearer = answer.token or answer.access_token
        if not bearer:
            raise UpstreamMalformed(f"registry {image.registry}: token endpoint sent no token")
        return bearer

    def _manifest(self, image: ImageName, reference: str, token: list[str | None]) -> tuple[str, str, dict[str, Any]]:
        reply = self._get(image, f"manifests/{reference}", token, ACCEPT)
        if reply.status == 404:
            raise UpstreamMismatch(f"{image.name}:{reference} not found in registry {image.registry}")
        if reply.status == 401:
            raise UpstreamUnreachable(f"registry {image.registry} refused access to {image.repository} (401)")
        if reply.status != 200:
            raise UpstreamUnreachable(f"registry {image.registry} answered {reply.status} for {reference}")
        computed = "sha256:" + hashlib.sha256(reply.body).hexdigest()
        header = reply.headers.get("Docker-Content-Digest")
        if header and header != computed:
            raise UpstreamMalformed(
                f"registry {image.registry}: manifest digest header {excerpt(header, 80)} != content {computed}"
            )
        if reference.startswith("sha256:") and reference != computed:
            raise UpstreamMismatch(f"{image.name}@{reference}: the registry served content with digest {computed}")
        what = f"registry {image.registry}: the manifest of {image.name}:{reference}"
        manifest = reply.json(what)
        if not isinstance(manifest, dict):
            raise UpstreamMalformed(f"{what} is malformed: expected a JSON object, found {type(manifest).__name__}")
        # The body's mediaType names what it is; it must agree with what the registry says it served.
        content_type = reply.headers.get("Content-Type", "").split(";")[0].strip()
        declared = manifest.get("mediaType")
        if declared is not None and not isinstance(declared, str):
            raise UpstreamMalformed(f"{what} is malformed: mediaType {excerpt(declared, 80)} is not a string")
        if declared and content_type in INDEX_TYPES + MANIFEST_TYPES and declared != content_type:
            raise UpstreamMalformed(
                f"{what} is malformed: served as {content_type} but says it is {excerpt(declared, 80)}"
            )
        return computed, declared or content_type, manifest

    def resolve(self, ref: str, platform: str) -> ImageFact:
        image = parse_image_ref(ref)
        os_name, arch = platform.split("/")[:2]
        token: list[str | None] = [None]
        reference = image.digest or image.tag or "latest"
        top_digest, media_type, manifest = self._manifest(image, reference, token)
        index_digest: str | None = None
        what = f"registry {image.registry}: the manifest of {image.name}:{reference}"
        if media_type in INDEX_TYPES:
            index_digest = top_digest
            entries = parse(_Index, manifest, what).manifests
            match = [m for m in entries if m.platform and (m.platform.os, m.platform.architecture) == (os_name, arch)]
            if not match:
                offered = sorted({f"{m.platform.os}/{m.platform.architecture}" for m in entries if m.platform})
                shown = ", ".join(excerpt(p, 40)[1:-1] for p in offered[:5]) or "none"
                more = f" and {len(offered) - 5} more" if len(offered) > 5 else ""
                raise UpstreamMismatch(f"{ref} has no {platform} image; the index offers: {shown}{more}")
            manifest_digest = match[0].digest
        elif media_type in MANIFEST_TYPES:
            manifest_digest = top_digest
            config_digest = parse(_Manifest, manifest, what).config.digest
            self._check_single_platform(image, config_digest, token, platform)
        else:
            raise UpstreamMalformed(
                f"registry {image.registry} sent an unknown manifest type {excerpt(media_type, 80)}"
            )
        pinned_digest = index_digest or manifest_digest
        return ImageFact(
            ref=ref,
            registry=image.registry,
            repository=image.repository,
            tag=image.tag,
            index_digest=index_digest,
            manifest_digest=manifest_digest,
            platform=platform,
            pinned=f"{image.name}@{pinned_digest}",
            source=f"OCI distribution API {image.api_base}/v2/{image.repository}/manifests/{reference}",
            resolved_at=utc_now(),
        )

    def _check_single_platform(
        self, image: ImageName, config_digest: str, token: list[str | None], platform: str
    ) -> None:
        """A single manifest names no platform: read its config blob to confirm os/architecture."""
        reply = self._get(image, f"blobs/{config_digest}", token, None)
        if reply.status != 200:
            raise UpstreamUnreachable(f"registry {image.registry} answered {reply.status} for config blob")
        what = f"registry {image.registry}: the config blob of {image.name}"
        if "sha256:" + hashlib.sha256(reply.body).hexdigest() != config_digest:
            raise UpstreamMalformed(f"{what} does not have the digest its manifest names ({config_digest})")
        config = parse(_Config, reply.json(what), what)
        found = f"{excerpt(config.os, 40)[1:-1]}/{excerpt(config.architecture, 40)[1:-1]}"
        if found != platform:
            raise UpstreamMismatch(f"{image.name} is a single {found} image; the build needs {platform}")
