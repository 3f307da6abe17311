"""What a registry serves for an image, read through buildkit's registry client (bounded answers, every digest
checked): manifests and blobs by digest (`Reader`), and the config of name@digest with its lock label
(`served_image`: `buildkit attest` signs only the image whose config the build recorded). `buildkit verify
--provenance` reads BuildKit's attestation through the same reader."""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

from buildkit.errors import UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.models.grammar import DIGEST_RE
from buildkit.world.http import Http
from buildkit.world.registry import INDEX_TYPES, MANIFEST_TYPES, ImageName, Login, Registry, parse_image_ref
from buildkit.world.shapes import Answer, parse


class Reader(Registry):
    """buildkit's registry client, with the two reads a provenance check needs beyond a digest lookup."""

    def manifest(self, image: ImageName, reference: str, login: Login) -> tuple[str, str, dict[str, Any]]:
        return self._manifest(image, reference, login)

    def blob(self, image: ImageName, digest: str, login: Login) -> bytes:
        reply = self._get(image, f"blobs/{digest}", login, None)
        if reply.status != 200:
            raise UpstreamMismatch(
                f"{image.name}: blob {digest} not found in registry {image.registry} ({reply.status})"
            )
        if "sha256:" + hashlib.sha256(reply.body).hexdigest() != digest:
            raise UpstreamMalformed(f"{image.name}: the registry served blob {digest} with other content")
        return reply.body


class ServedImage(NamedTuple):
    config_digest: str  # of the config the registry serves for name@digest (its `platform` manifest's, for an index)
    lock_sha256: str | None  # that config's `buildkit.lock.sha256` label; None: no such label


def served_image(name: str, digest: str, platform: str, http: Http | None = None) -> ServedImage:
    """The config digest and `buildkit.lock.sha256` label of the image the registry serves as name@digest (for an
    index, its `platform` manifest's config), read through buildkit's registry client (bounded, every digest
    checked). `attest` signs only the image whose config is the one the build recorded."""
    image = parse_image_ref(f"{name}@{digest}")
    reader = Reader(http or Http())
    login = Login()
    _, media_type, manifest = reader.manifest(image, digest, login)
    if media_type in INDEX_TYPES:
        os_name, arch = platform.split("/")[:2]
        entries = parse(Index, manifest, f"{name}@{digest}: the image index").manifests
        platform_digest = next(
            (
                m.digest
                for m in entries
                if m.platform is not None
                and (m.platform.os, m.platform.architecture) == (os_name, arch)
                and m.annotations.get("vnd.docker.reference.type") is None
                and DIGEST_RE.fullmatch(m.digest)
            ),
            None,
        )
        if platform_digest is None:
            raise UpstreamMismatch(f"{name}@{digest}: the image index has no {platform} manifest")
        _, media_type, manifest = reader.manifest(image, platform_digest, login)
    if media_type not in MANIFEST_TYPES:
        raise UpstreamMalformed(f"{name}@{digest}: {excerpt(media_type, 80)} is not an image manifest")
    config_digest = parse(_ImageManifest, manifest, f"{name}@{digest}: the manifest").config.digest
    if not DIGEST_RE.fullmatch(config_digest):
        raise UpstreamMalformed(f"{name}@{digest}: the manifest names no valid config digest")
    what = f"{name}@{digest}: the image config"
    config = parse(_ImageConfig, json_object(reader.blob(image, config_digest, login), what), what)
    labels = (config.config.Labels if config.config else None) or {}
    return ServedImage(config_digest, labels.get("buildkit.lock.sha256"))


# The fields read from the registry's answers, typed (buildkit.world.shapes): a wrong shape is UpstreamMalformed.
class _Platform(Answer):
    os: str = ""
    architecture: str = ""


class IndexEntry(Answer):
    digest: str = ""
    platform: _Platform | None = None
    annotations: dict[str, str] = {}


class Index(Answer):
    manifests: list[IndexEntry] = []


class _ConfigRef(Answer):
    digest: str = ""


class _ImageManifest(Answer):
    config: _ConfigRef = _ConfigRef()


class _Labels(Answer):
    Labels: dict[str, str] | None = None


class _ImageConfig(Answer):
    config: _Labels | None = None


def json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        raise UpstreamMalformed(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise UpstreamMalformed(f"{what} is not a JSON object")
    return value
