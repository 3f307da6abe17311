"""Docker's registry credentials go only where they belong: to the registry host they are stored for and to the
token realm that registry names (as Docker sends them: Docker Hub's realm is another host), never across a
redirect to another origin, never in cleartext off loopback, and never into a message, even when an upstream
repeats them."""

from __future__ import annotations

from buildkit.text.ui import without_secrets
from buildkit.world.credentials import Credential
from tests.support.dockerconfig import IDENTITY_TOKEN, PASSWORD, USERNAME, basic, env_for, secret_forms, write_config
from tests.support.fake_upstreams import FakeRegistry, Login, authorizations
from tests.support.hostile import answer, raw, redirect_same_path
from tests.support.measured import measured


def logged_in_project(project, upstreams, config: dict | None = None):
    """The project, its base image on the fake registry (which demands a token login), Docker's credentials."""
    root, cli = project
    registry = upstreams.registry
    registry.login = Login("token", USERNAME, PASSWORD, identity_token=IDENTITY_TOKEN)
    config = config or {"auths": {registry.netloc: {"auth": basic()}}}
    cli.env.update(env_for(write_config(root / "docker-config", config)))
    return root, cli


def assert_secret_nowhere(run, root) -> None:
    lock = root / "pins.lock"
    for form in secret_forms(PASSWORD, IDENTITY_TOKEN):
        assert form not in run.output
        assert not lock.exists() or form not in lock.read_text()


def test_the_realm_on_another_host_gets_them_as_docker_sends_them(project, upstreams):
    """Docker Hub's registry (registry-1.docker.io) names auth.docker.io as its realm: the credentials go there,
    and the registry itself sees only the token."""
    auth_server = FakeRegistry(host="127.0.0.2").start()
    try:
        auth_server.login = Login("token", USERNAME, PASSWORD)
        upstreams.registry.tokens = auth_server.tokens  # the registry honours the tokens its realm issues
        root, cli = logged_in_project(project, upstreams)
        upstreams.registry.realm = f"{auth_server.url}/token"
        run = measured(cli, "resolve", "--json")
        assert run.code == 0, run.output
        assert authorizations([e for e in auth_server.log if e[1].startswith("/token")]) == {f"Basic {basic()}"}
        assert all(a is None or a.startswith("Bearer ") for a in authorizations(upstreams.registry.log))
        assert_secret_nowhere(run, root)
    finally:
        auth_server.stop()


def test_a_realm_that_redirects_to_another_host_loses_them(project, upstreams, elsewhere):
    """The realm (127.0.0.2) redirects to the registry's own token endpoint (127.0.0.1): another origin, so the
    credentials stay behind and the login fails, plainly."""
    root, cli = logged_in_project(project, upstreams)
    upstreams.registry.realm = f"{elsewhere.url}/token"
    elsewhere.route("/token", redirect_same_path(upstreams.registry.url, status=307))
    run = measured(cli, "resolve")
    run.assert_refused(5, "refused the login", "answered 401")
    assert authorizations(elsewhere.log) == {f"Basic {basic()}"}
    assert authorizations([e for e in upstreams.registry.log if e[1].startswith("/token")]) == {None}
    assert_secret_nowhere(run, root)


def test_an_identity_token_is_never_posted_across_a_redirect(project, upstreams, hostile, elsewhere):
    root, cli = logged_in_project(project, upstreams, {"auths": {"REG": {"identitytoken": IDENTITY_TOKEN}}})
    config = root / "docker-config" / "config.json"
    config.write_text(config.read_text().replace("REG", upstreams.registry.netloc))
    upstreams.registry.realm = f"{hostile.url}/token"
    hostile.route("/token", redirect_same_path(elsewhere.url, status=307))
    run = measured(cli, "resolve")
    run.assert_refused(3, "its token endpoint answered 307")
    assert [r.method for r in hostile.log] == ["POST"]
    assert elsewhere.log == []
    assert_secret_nowhere(run, root)


def test_a_basic_registry_that_redirects_to_another_host_loses_them(project, hostile, elsewhere):
    """A registry that wants Basic auth gets it; the blob store it redirects to (another origin) does not."""
    root, cli = project

    def basic_then_redirect(h) -> None:
        if h.headers.get("Authorization"):
            redirect_same_path(elsewhere.url, status=307)(h)
        else:
            answer(401, b"{}", {"WWW-Authenticate": 'Basic realm="hostile"'})(h)

    hostile.route("/v2/", basic_then_redirect)
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace(_base(root), f"{hostile.netloc}/a/b:1"))
    cli.env.update(env_for(write_config(root / "docker-config", {"auths": {hostile.netloc: {"auth": basic()}}})))
    run = measured(cli, "resolve")
    assert run.code == 4 and "not found" in run.stderr, run.output  # elsewhere has no such manifest
    assert authorizations(hostile.log) == {None, f"Basic {basic()}"}
    assert authorizations(elsewhere.log) == {None} and len(elsewhere.log) == 1
    assert_secret_nowhere(run, root)


def test_a_cleartext_or_userinfo_realm_gets_nothing(project, upstreams, elsewhere):
    root, cli = logged_in_project(project, upstreams)
    for realm in ("http://registry.example.com/token", f"http://user@{elsewhere.netloc}/token"):
        upstreams.registry.realm = realm
        run = measured(cli, "resolve")
        run.assert_refused(3, "unusable token realm")
        assert_secret_nowhere(run, root)
    assert elsewhere.log == []
    assert authorizations(upstreams.registry.log) == {None}


def test_an_upstream_that_repeats_the_password_is_not_shown(project, upstreams, hostile):
    """A token endpoint whose reason phrase echoes the password: the message quotes the reason, the last guard
    blanks the password."""
    root, cli = logged_in_project(project, upstreams)
    upstreams.registry.realm = f"{hostile.url}/token"
    hostile.route("/token", raw(f"HTTP/1.1 503 {PASSWORD}\r\nContent-Length: 0\r\n\r\n".encode()))
    run = measured(cli, "resolve")
    run.assert_refused(3, "HTTP 503 ***")
    assert_secret_nowhere(run, root)


def test_the_last_guard_knows_every_secret_read():
    Credential("r.example", "test", username=USERNAME, password="pw-1234567890-guard")
    Credential("r.example", "test", identity_token="tok-1234567890-guard")
    text = without_secrets(f"a pw-1234567890-guard b tok-1234567890-guard c {basic(USERNAME, 'pw-1234567890-guard')}")
    assert text == "a *** b *** c ***"


def _base(root) -> str:
    text = (root / "pins.yaml").read_text()
    return text.split("base_image:", 1)[1].split("\n", 1)[0].strip().strip('"')
