"""Resolve an image tag to digests through the OCI distribution API, logged in the way Docker logs in.

GET the manifest; on 401 answer the registry's challenge, then retry. Docker's credentials for the registry host
(credentials.py: config.json's auths, credsStore, credHelpers) are looked up then, once per image:
  `Bearer realm=...`  a token from the realm: anonymous without credentials (as nvcr.io and Docker Hub give for
                      public images); with a username and password, a GET with Basic auth; with an identity token,
                      the OAuth2 POST (grant_type=refresh_token), as Docker's registry client does.
  `Basic`             the username and password, to the registry itself.
Credentials go only to the registry host they are stored for and to the token realm that registry names (as
Docker sends them: Docker Hub's realm is auth.docker.io), that over https (plain http only to a loopback realm);
buildkit/world/http.py drops them from any redirect to another origin. A login the registry or its realm refuses is
a CredentialsError (exit 5), never a retry.

A tag that names an index yields the index digest and the digest of the manifest for the build platform. The
platform manifest's config blob is read too (each checked against the digest that names it): its os/architecture
must be the build platform, and its Env's CUDA_VERSION (as NVIDIA's CUDA images set it) goes into the lock.
Registries on loopback addresses are spoken to over plain HTTP, as Docker does; everything else over HTTPS.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple
from urllib.parse import urlsplit

from pydantic import Field, StringConstraints

from buildkit.errors import (
    BuildkitError,
    CredentialsError,
    UpstreamMalformed,
    UpstreamMismatch,
    UpstreamUnreachable,
    excerpt,
)
from buildkit.models.grammar import (
    CUDA_VERSION_RE,
    Digest,
    ImageName,
    is_loopback_host,
    parse_image_ref,
)
from buildkit.models.lock import ImageFact
from buildkit.world.credentials import Credential, lookup
from buildkit.world.http import LAYER, REGISTRY, REGISTRY_TOKEN, Http, Reply, origin
from buildkit.world.shapes import Answer, Line, parse

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
# A challenge's auth-params (RFC 9110 11.2): name="quoted value" or name=token. Real ones: nvcr.io sends realm and
# scope only, its realm once with a query inside the quotes; gcr.io has sent service unquoted (test tables in
# tests/unit/stages/test_resolve_grammar.py).
_CHALLENGE_PARAM_RE = re.compile(r'([A-Za-z][A-Za-z0-9_-]*)=(?:"([^"]*)"|([^",\s]+))')


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


class _LayerDescriptor(Answer):
    mediaType: Line
    digest: Digest
    size: Annotated[int, Field(ge=0, le=1 << 40)]


class _Manifest(Answer):
    config: _ConfigDescriptor
    # A real image has tens of layers (cuda-dl-base: about 30; Docker caps an image at 127 layers).
    layers: Annotated[list[_LayerDescriptor], Field(max_length=1000)] = []


class LayerRef(NamedTuple):
    """One layer of a platform manifest, bottom first: what it is and how many bytes the registry must send."""

    digest: str
    size: int
    media_type: str


class _RunConfig(Answer):
    # "K=V" strings; an image has tens of them: thousands is not an image config. Only CUDA_VERSION's value is
    # used (and held to its grammar): other values may be long or hold anything an ENV can.
    Env: Annotated[list[str], Field(max_length=4096)] | None = None


class _Config(Answer):
    os: Line
    architecture: Line
    config: _RunConfig | None = None


# A bearer token goes into a header: printable ASCII without spaces.
_TokenText = Annotated[str, StringConstraints(pattern=r"^[!-~]+$")]


class _Token(Answer):
    token: _TokenText | None = None
    access_token: _TokenText | None = None


def challenge_params(params_text: str) -> dict[str, str]:
    """The auth-params of a `Bearer ...` challenge (the first of a name wins)."""
    params: dict[str, str] = {}
    for name, quoted, token in _CHALLENGE_PARAM_RE.findall(params_text):
        params.setdefault(name.lower(), quoted or token)
    return params


def usable_realm_host(realm: str) -> str | None:
    """The host of a token realm buildkit will ask (and send credentials to): https, or plain http on loopback;
    no userinfo, no other scheme. None for any other realm."""
    parts = urlsplit(realm)
    try:
        host = parts.hostname
        parts.port  # noqa: B018 -- raises for a port that is no number
    except ValueError:
        return None
    if not host or "@" in parts.netloc or any(c in realm for c in " \t\r\n\\"):
        return None
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(host)):
        return parts.netloc
    return None


@dataclass
class Login:
    """One image's login: the Authorization header its requests carry, and the credential behind it (if any)."""

    header: str | None = None
    credential: Credential | None = None


# What buildkit calls itself to a token endpoint's OAuth2 form (a required field; Docker sends "docker").
CLIENT_ID = "buildkit"


class Registry:
    def __init__(self, http: Http):
        self.http = http
        self._credentials: dict[str, Credential | None] = {}
        self._logins: dict[str, Login] = {}  # image name -> its login, for the layer reads after resolve
        # (registry, repository, digest) -> a platform manifest resolve read (its digest checked)
        self._manifests: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _get(self, image: ImageName, path: str, login: Login, accept: str | None) -> Reply:
        """GET with the image's login; the first 401 is answered (the challenge), then the request is retried."""
        url = f"{image.api_base}/v2/{image.repository}/{path}"
        headers = {"Accept": accept} if accept else {}
        for _ in range(2):
            # What this request carried, not what the login holds now: the platforms of one resolve read one image
            # side by side, and another thread's login may land while this request was unanswered.
            sent = login.header
            if sent:
                headers["Authorization"] = sent
            reply = self.http.get(url, limit=REGISTRY, headers=headers)
            if reply.status != 401 or sent or origin(reply.url) != origin(url):
                return reply  # (a challenge from where a redirect led is never answered: credentials stay home)
            login.header = self._login(image, reply.headers.get("WWW-Authenticate", ""), login)
        return reply

    def _credential(self, registry: str) -> Credential | None:
        """Docker's credential for the registry, looked up once (a helper may be slow, or prompt)."""
        with self._lock:
            if registry not in self._credentials:
                self._credentials[registry] = lookup(registry)
            return self._credentials[registry]

    def _login(self, image: ImageName, challenge: str, login: Login) -> str:
        """The Authorization header that answers the registry's challenge."""
        scheme, _, params_text = challenge.partition(" ")
        if scheme.lower() not in ("bearer", "basic"):
            raise UpstreamUnreachable(
                f"registry {image.registry} wants {excerpt(scheme, 40) if scheme else 'unknown'} authentication for "
                f"{image.repository}; buildkit speaks Bearer (token) and Basic",
                hint="use a mirror on a registry that speaks one of them",
            )
        credential = login.credential = self._credential(image.registry)
        if scheme.lower() == "basic":
            if credential is None:
                raise UpstreamUnreachable(
                    f"registry {image.registry} wants a login (Basic) for {image.repository}, and Docker has no "
                    f"credentials for {image.registry}",
                    hint=f"`docker login {image.registry}` (buildkit uses Docker's credentials), then run again",
                )
            header = credential.basic_authorization()
            if header is None:
                raise CredentialsError(
                    f"registry {image.registry} wants a username and password (Basic), and Docker's credential for "
                    f"it is an identity token (from {credential.source})",
                    hint=f"`docker login {image.registry}` with a username and password",
                )
            return header
        return f"Bearer {self._token(image, params_text, credential)}"

    def _token(self, image: ImageName, params_text: str, credential: Credential | None) -> str:
        """A bearer token from the realm the challenge names: anonymous, with Basic auth, or for an identity token
        through the OAuth2 refresh-token grant (as Docker's registry client asks)."""
        params = challenge_params(params_text)
        realm = params.get("realm", "")
        realm_host = usable_realm_host(realm)
        if realm_host is None:
            raise UpstreamMalformed(f"registry {image.registry} sent an unusable token realm {excerpt(realm, 120)}")
        # Only what Docker sends: the service and the scope (the challenge's, else pull access to the repository).
        query = {"scope": params.get("scope") or f"repository:{image.repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        if credential is not None and credential.identity_token:
            form = {
                **query,
                "grant_type": "refresh_token",
                "refresh_token": credential.identity_token,
                "client_id": CLIENT_ID,
            }
            reply = self.http.post_form(realm, form, limit=REGISTRY_TOKEN, allow_redirects=False)
        elif credential is not None:
            authorization = credential.basic_authorization() or ""
            reply = self.http.get(
                realm,
                limit=REGISTRY_TOKEN,
                params={**query, "account": credential.username},
                headers={"Authorization": authorization},
            )
        else:
            reply = self.http.get(realm, limit=REGISTRY_TOKEN, params=query)
        if reply.status != 200:
            if credential is not None and reply.status in (400, 401, 403):
                raise _refused(image, credential, f"its token endpoint {realm_host} answered {reply.status}")
            if credential is None:
                raise UpstreamUnreachable(
                    f"registry {image.registry}: anonymous token refused ({reply.status}) for {image.repository}",
                    hint=f"the image may be private (then `docker login {image.registry}`: buildkit uses Docker's "
                    "credentials) or the name misspelt",
                )
            raise UpstreamUnreachable(f"registry {image.registry}: its token endpoint answered {reply.status}")
        what = f"registry {image.registry}: the token answer"
        answer = parse(_Token, reply.json(what), what)
        bearer = answer.token or answer.access_token
        if not bearer:
            raise UpstreamMalformed(f"registry {image.registry}: token endpoint sent no token")
        return bearer

    def _access_refused(self, image: ImageName, login: Login, status: int, what: str) -> BuildkitError:
        """A 401 or 403 to a request that carried the login."""
        if login.credential is not None:
            return _refused(image, login.credential, f"{what} answered {status} to the login")
        return UpstreamUnreachable(
            f"registry {image.registry} refused access to {image.repository} ({status})",
            hint=f"if the image is private, `docker login {image.registry}` (buildkit uses Docker's credentials)",
        )

    def _manifest(self, image: ImageName, reference: str, login: Login) -> tuple[str, str, dict[str, Any]]:
        reply = self._get(image, f"manifests/{reference}", login, ACCEPT)
        if reply.status == 404:
            raise UpstreamMismatch(f"{image.at(reference)} not found in registry {image.registry}")
        if reply.status == 401 or (reply.status == 403 and login.credential is not None):
            raise self._access_refused(image, login, reply.status, "the manifest")
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
        what = f"registry {image.registry}: the manifest of {image.at(reference)}"
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
        login = self._login_for(image)  # kept: the base image's layers are read with it (resolve/baselibs.py)
        reference = image.digest or image.tag or "latest"
        top_digest, media_type, manifest = self._manifest(image, reference, login)
        index_digest: str | None = None
        what = f"registry {image.registry}: the manifest of {image.at(reference)}"
        if media_type in INDEX_TYPES:
            index_digest = top_digest
            entries = parse(_Index, manifest, what).manifests
            match = [m for m in entries if m.platform and (m.platform.os, m.platform.architecture) == (os_name, arch)]
            if not match:
                offered = sorted({f"{m.platform.os}/{m.platform.architecture}" for m in entries if m.platform})
                shown = ", ".join(excerpt(p, 40)[1:-1] for p in offered[:5]) or "none"
                more = f" and {len(offered) - 5} more" if len(offered) > 5 else ""
                raise UpstreamMismatch(f"{ref} has no {platform} image; the index offers: {shown}{more}")
            if len(match) > 1:
                # Never the first of several by position: which one a build gets would be the index's order.
                digests = ", ".join(m.digest for m in match[:3]) + (" ..." if len(match) > 3 else "")
                raise UpstreamMismatch(
                    f"{ref} has {len(match)} {platform} images ({digests}); buildkit will not pick one by position",
                    hint="pin base_image by the digest of the platform manifest you want (name@sha256:...)",
                )
            manifest_digest = match[0].digest
            _, platform_type, manifest = self._manifest(image, manifest_digest, login)  # its digest is checked
            what = f"registry {image.registry}: the {platform} manifest of {image.at(reference)}"
            if platform_type not in MANIFEST_TYPES:
                raise UpstreamMalformed(f"{what} is a {excerpt(platform_type, 80)}, not an image manifest")
        elif media_type in MANIFEST_TYPES:
            manifest_digest = top_digest
        else:
            raise UpstreamMalformed(
                f"registry {image.registry} sent an unknown manifest type {excerpt(media_type, 80)}"
            )
        # Content-addressed, so kept: the base image's layers are listed from it (layers) without asking again.
        self._manifests[(image.registry, image.repository, manifest_digest)] = manifest
        config_digest = parse(_Manifest, manifest, what).config.digest
        config = self._config(image, config_digest, login, platform, single=index_digest is None)
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
            cuda_version=_cuda_version(config, f"registry {image.registry}: the config of {image.name}"),
            config_digest=config_digest,
        )

    def layers(self, fact: ImageFact) -> list[LayerRef]:
        """The layers of the platform manifest a resolved image names (as resolve read it, or read again by its
        digest, which is checked), bottom first."""
        image = parse_image_ref(fact.pinned)
        manifest = self._manifests.get((image.registry, image.repository, fact.manifest_digest))
        if manifest is None:
            _, _, manifest = self._manifest(image, fact.manifest_digest, self._login_for(image))
        what = f"registry {image.registry}: the manifest of {image.name}@{fact.manifest_digest}"
        return [LayerRef(d.digest, d.size, d.mediaType) for d in parse(_Manifest, manifest, what).layers]

    @contextmanager
    def layer(
        self, fact: ImageFact, layer: LayerRef, cancel: threading.Event | None = None
    ) -> Iterator[Iterable[bytes]]:
        """A layer's bytes as they arrive (the caller checks them against the layer's size and digest), held to
        the registry's declared size and BUILDKIT_HTTP_MAX_LAYER. A registry may redirect a blob to another host (a
        CDN): the login is never sent there. A token that expired during a long read is renewed once. `cancel`
        stops the read wherever it waits (Interrupted)."""
        image = parse_image_ref(fact.pinned)
        login = self._login_for(image)
        url = f"{image.api_base}/v2/{image.repository}/blobs/{layer.digest}"
        for attempt in range(2):
            headers = {"Authorization": login.header} if login.header else {}
            with self.http.stream(url, limit=LAYER, headers=headers, cancel=cancel) as answer:
                if answer.status == 401 and attempt == 0 and origin(answer.url) == origin(url):
                    login.header = self._login(image, answer.headers.get("WWW-Authenticate", ""), login)
                    continue
                if answer.status in (401, 403):
                    raise self._access_refused(image, login, answer.status, f"layer {layer.digest}")
                if answer.status != 200:
                    raise UpstreamUnreachable(
                        f"registry {image.registry} answered {answer.status} for layer {layer.digest} of {image.name}"
                    )
                yield answer.chunks(1 << 20)
                return

    def _login_for(self, image: ImageName) -> Login:
        with self._lock:
            return self._logins.setdefault(image.name, Login())

    def _config(self, image: ImageName, config_digest: str, login: Login, platform: str, *, single: bool) -> _Config:
        """The platform manifest's config blob, checked against its digest and the build platform (a single
        manifest names no platform of its own: this is the only place it is said). Read once, for both."""
        reply = self._get(image, f"blobs/{config_digest}", login, None)
        if reply.status == 401 or (reply.status == 403 and login.credential is not None):
            raise self._access_refused(image, login, reply.status, "the config blob")
        if reply.status != 200:
            raise UpstreamUnreachable(f"registry {image.registry} answered {reply.status} for config blob")
        what = f"registry {image.registry}: the config blob of {image.name}"
        if "sha256:" + hashlib.sha256(reply.body).hexdigest() != config_digest:
            raise UpstreamMalformed(f"{what} does not have the digest its manifest names ({config_digest})")
        config = parse(_Config, reply.json(what), what)
        found = f"{excerpt(config.os, 40)[1:-1]}/{excerpt(config.architecture, 40)[1:-1]}"
        if found != platform:
            what = "a single" if single else f"an index whose {platform} entry is a"
            raise UpstreamMismatch(f"{image.name} is {what} {found} image; the build needs {platform}")
        return config


def _cuda_version(config: _Config, what: str) -> str | None:
    """CUDA_VERSION from the config's Env as it is written ("12.9.1" in nvidia/cuda, "12.9.0.043" in NGC's
    cuda-dl-base); None when it sets none."""
    env = (config.config.Env if config.config else None) or []
    values = [line.partition("=")[2] for line in env if line.startswith("CUDA_VERSION=")]
    if len(values) > 1:
        raise UpstreamMalformed(f"{what} sets CUDA_VERSION {len(values)} times in its Env")
    if values and not CUDA_VERSION_RE.fullmatch(values[0]):
        raise UpstreamMalformed(
            f"{what} is malformed: Env CUDA_VERSION={excerpt(values[0], 40)} is not a CUDA version like 12.9.1 "
            "or 12.9.0.043"
        )
    return values[0] if values else None


def _refused(image: ImageName, credential: Credential, what: str) -> CredentialsError:
    return CredentialsError(
        f"registry {image.registry} refused the login for {image.repository} ({what}); the credentials came from "
        f"{credential.source}",
        hint=f"`docker login {image.registry}` (buildkit uses Docker's credentials), then run again",
    )
