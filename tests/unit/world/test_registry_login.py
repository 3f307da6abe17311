"""The registry client's login (buildkit/world/registry.py) against the fake registry on loopback: the anonymous
bearer-token flow Docker Hub and nvcr.io speak, with the platforms of one resolve reading one image side by side."""

from __future__ import annotations

import pytest

from buildkit.world.http import Http
from buildkit.world.registry import Registry, parse_image_ref
from tests.support.fake_upstreams import BASE_REPO, FakeRegistry


class _LoginLandsMeanwhile:
    """The Http the registry client uses, with another platform's thread logging in between this request and its
    answer: the first 401 arrives after the shared login already holds a good token (the race a two-platform
    resolve ran into, 1 in about 1,400 runs of the suite)."""

    def __init__(self, http: Http):
        self.http = http
        self.client: Registry | None = None
        self.ref = ""
        self.landed = False

    def get(self, url: str, **kwargs):
        reply = self.http.get(url, **kwargs)
        if reply.status == 401 and not self.landed and self.client is not None:
            self.landed = True
            image = parse_image_ref(self.ref)
            login = self.client._login_for(image)
            login.header = self.client._login(image, reply.headers.get("WWW-Authenticate", ""), login)
        return reply

    def __getattr__(self, name: str):
        return getattr(self.http, name)


@pytest.mark.unit
def test_a_login_another_thread_stored_meanwhile_does_not_turn_an_unanswered_challenge_into_a_refusal():
    registry = FakeRegistry().start()
    try:
        registry.add_image(BASE_REPO, "1", platforms=("linux/amd64", "linux/arm64"))
        http = _LoginLandsMeanwhile(Http())
        client = Registry(http)  # type: ignore[arg-type]
        http.client, http.ref = client, f"{registry.netloc}/{BASE_REPO}:1"
        fact = client.resolve(http.ref, "linux/arm64")
        assert http.landed  # the interleaving happened
        assert fact.manifest_digest == registry.platform_digest(BASE_REPO, "1", "linux/arm64")
    finally:
        registry.stop()
