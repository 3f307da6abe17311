"""Resolve an image tag to digests through the OCI distribution API, with the anonymous bearer-token flow.

GET the manifest; on 401 follow the `WWW-Authenticate: Bearer realm=...` challenge for an anonymous token
(as nvcr.io and Docker Hub require), then retry. A tag that names an index yields the index digest and the digest
of the manifest for the build platform. Registries on loopback addresses are spoken to over plain HTTP, as Docker
does; everything else over HTTPS.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import requests

from buildkit.errors import UpstreamMismatch, UpstreamUnreachable
from buildkit.files import utc_now
from buildkit.grammar import IMAGE_REF_RE, is_loopback_host
from buildkit.http import Http
from buildkit.lock import ImageFact

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

    def _get(self, image: ImageName, path: str, token: list[str | None], accept: str | None) -> requests.Response:
        """GET with the registry's bearer token; `token` is a one-slot cache shared by one image's requests."""
        url = f"{image.api_base}/v2/{image.repository}/{path}"
        headers = {"Accept": accept} if accept else {}
        for _ in range(2):
            if token[0]:
                headers["Authorization"] = f"Bearer {token[0]}"
            response = self.http.get(url, headers=headers)
            if response.status_code != 401 or token[0]:
                return response
            token[0] = self._anonymous_token(image, response.headers.get("WWW-Authenticate", ""))
        return response

    def _anonymous_token(self, image: ImageName, challenge: str) -> str:
        scheme, _, params_text = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise UpstreamUnreachable(
                f"registry {image.registry} wants {scheme or 'unknown'} credentials for {image.repository}; "
                "buildkit resolves public images with anonymous bearer tokens",
                hint="use a public base image, or a mirror on a reachable registry",
            )
        params = dict(_CHALLENGE_PARAM_RE.findall(params_text))
        realm = params.pop("realm", "")
        realm_host = re.sub(r"^\w+://", "", realm).split("/")[0]
        if not (
            realm.startswith("https://") or (realm.startswith("http://") and is_loopback_host(_host_only(realm_host)))
        ):
            raise UpstreamUnreachable(f"registry {image.registry} sent an unusable token realm {realm!r}")
        params.setdefault("scope", f"repository:{image.repository}:pull")
        response = self.http.get(realm, params=params)
        if response.status_code != 200:
            raise UpstreamUnreachable(
                f"registry {image.registry}: anonymous token refused ({response.status_code}) for {image.repository}",
                hint="the image may be private or the name misspelt",
            )
        try:
            body = response.json()
            return body.get("token") or body["access_token"]
        except (ValueError, KeyError, AttributeError):
            raise UpstreamUnreachable(f"registry {image.registry}: token endpoint sent no token") from None

    def _manifest(self, image: ImageName, reference: str, token: list[str | None]) -> tuple[str, str, dict[str, Any]]:
        response = self._get(image, f"manifests/{reference}", token, ACCEPT)
        if response.status_code == 404:
            raise UpstreamMismatch(f"{image.name}:{reference} not found in registry {image.registry}")
        if response.status_code == 401:
            raise UpstreamUnreachable(f"registry {image.registry} refused access to {image.repository} (401)")
        if response.status_code != 200:
            raise UpstreamUnreachable(f"registry {image.registry} answered {response.status_code} for {reference}")
        body = response.content
        computed = "sha256:" + hashlib.sha256(body).hexdigest()
        header = response.headers.get("Docker-Content-Digest")
        if header and header != computed:
            raise UpstreamUnreachable(
                f"registry {image.registry}: manifest digest header {header} != content {computed}"
            )
        if reference.startswith("sha256:") and reference != computed:
            raise UpstreamMismatch(f"{image.name}@{reference}: the registry served content with digest {computed}")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        try:
            manifest = json.loads(body)
        except ValueError:
            raise UpstreamUnreachable(f"registry {image.registry} sent a manifest that is not JSON") from None
        return computed, manifest.get("mediaType") or media_type, manifest

    def resolve(self, ref: str, platform: str) -> ImageFact:
        image = parse_image_ref(ref)
        os_name, arch = platform.split("/")[:2]
        token: list[str | None] = [None]
        reference = image.digest or image.tag or "latest"
        top_digest, media_type, manifest = self._manifest(image, reference, token)
        index_digest: str | None = None
        if media_type in INDEX_TYPES:
            index_digest = top_digest
            entries = manifest.get("manifests") or []
            match = [
                m
                for m in entries
                if (m.get("platform") or {}).get("os") == os_name
                and (m.get("platform") or {}).get("architecture") == arch
            ]
            if not match:
                offered = sorted(
                    {
                        f"{(m.get('platform') or {}).get('os')}/{(m.get('platform') or {}).get('architecture')}"
                        for m in entries
                    }
                )
                raise UpstreamMismatch(
                    f"{ref} has no {platform} image; the index offers: {', '.join(offered) or 'none'}"
                )
            manifest_digest = match[0]["digest"]
        elif media_type in MANIFEST_TYPES:
            manifest_digest = top_digest
            self._check_single_platform(image, manifest, token, platform)
        else:
            raise UpstreamUnreachable(f"registry {image.registry} sent an unknown manifest type {media_type!r}")
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
        self, image: ImageName, manifest: dict[str, Any], token: list[str | None], platform: str
    ) -> None:
        """A single manifest names no platform: read its config blob to confirm os/architecture."""
        config_digest = (manifest.get("config") or {}).get("digest", "")
        response = self._get(image, f"blobs/{config_digest}", token, None)
        if response.status_code != 200:
            raise UpstreamUnreachable(f"registry {image.registry} answered {response.status_code} for config blob")
        try:
            config = response.json()
        except ValueError:
            raise UpstreamUnreachable(f"registry {image.registry} sent a config blob that is not JSON") from None
        found = f"{config.get('os')}/{config.get('architecture')}"
        if found != platform:
            raise UpstreamMismatch(f"{image.name} is a single {found} image; the build needs {platform}")
