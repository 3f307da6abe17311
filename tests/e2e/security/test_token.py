"""GITHUB_TOKEN goes only to the GitHub API it was issued for: api.github.com or a base the user names in the
environment. Never to a base from pins.yaml (a pull request can edit it), never in cleartext off loopback, never
across a redirect to another host, and never into output, messages or the lock."""

from __future__ import annotations

import pytest

from buildkit.errors import InputError
from buildkit.stages.resolve.github import token_for
from tests.support.fake_upstreams import NEMO_RL_SHA, VLLM_PR, VLLM_SHA, authorizations
from tests.support.hostile import (
    github_commit,
    github_compare,
    github_pull,
    github_tree,
    json_answer,
    raw,
    redirect_same_path,
)
from tests.support.measured import measured, resolve_error

TOKEN = "ghp_S3cretTokenValue0123456789abcdefABCD"
NEMO_COMMITS = "/repos/NVIDIA-NeMo/RL/commits/"
VLLM_COMMITS = "/repos/vllm-project/vllm/commits/"
VLLM_PULL = f"/repos/vllm-project/vllm/pulls/{VLLM_PR}"


def assert_token_nowhere(run, root) -> None:
    assert TOKEN not in run.output
    lock = root / "pins.lock"
    assert not lock.exists() or TOKEN not in lock.read_text()


def with_endpoint_in_pins(root, url: str) -> None:
    pins = root / "pins.yaml"
    pins.write_text(pins.read_text() + f"\nendpoints:\n  github_api: {url}\n")


def test_api_base_from_pins_gets_no_token(project, upstreams):
    """A pull request that points endpoints.github_api at its own server must not receive the CI token."""
    root, cli = project
    with_endpoint_in_pins(root, upstreams.github.url)
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN, "BUILDKIT_GITHUB_API": ""})
    assert run.code == 0, run.output
    assert authorizations(upstreams.github.log) == {None}
    assert run.stderr.count("not sent") == 1, run.stderr  # said once, for the whole run
    assert "endpoints.github_api" in run.stderr and "BUILDKIT_GITHUB_API" in run.stderr
    assert_token_nowhere(run, root)


def test_api_base_from_the_environment_gets_the_token(project, upstreams):
    """The user's own setting wins over pins, and the token goes there."""
    root, cli = project
    with_endpoint_in_pins(root, "http://127.0.0.2:9/elsewhere")
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN})  # BUILDKIT_GITHUB_API: the fake GitHub
    assert run.code == 0, run.output
    assert authorizations(upstreams.github.log) == {f"Bearer {TOKEN}"}
    assert "not sent" not in run.stderr
    assert_token_nowhere(run, root)


def test_redirect_to_another_host_drops_the_token(project, hostile, elsewhere):
    """A same-origin redirect (GitHub's renamed repositories) keeps it; one to another host, even on loopback, not."""
    root, cli = project
    cli.env["BUILDKIT_GITHUB_API"] = hostile.url
    hostile.route("/repos/", redirect_same_path(f"{hostile.url}/moved", status=301))
    hostile.route("/moved/", redirect_same_path(elsewhere.url, status=307))
    elsewhere.route(f"/moved{NEMO_COMMITS}", json_answer(github_commit(NEMO_RL_SHA)))
    elsewhere.route(f"/moved{VLLM_COMMITS}", json_answer(github_commit(VLLM_SHA)))
    elsewhere.route(f"/moved{VLLM_PULL}", json_answer(github_pull(VLLM_PR, VLLM_SHA)))
    elsewhere.route(f"/moved/repos/vllm-project/vllm/compare/main...{VLLM_SHA}", json_answer(github_compare(VLLM_SHA)))
    elsewhere.route(f"/moved/repos/vllm-project/vllm/git/trees/{VLLM_SHA}", json_answer(github_tree(VLLM_SHA)))
    # uv.lock's 404 sends resolve to git (issue 41): github.com here is a loopback port nothing listens on.
    dead = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "url.http://127.0.0.1:9/.insteadOf"}
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN, **dead, "GIT_CONFIG_VALUE_0": "https://github.com/"})
    assert run.code == 0, run.output
    assert authorizations(hostile.log) == {f"Bearer {TOKEN}"}
    assert {r.path.split("/")[1] for r in hostile.log} == {"repos", "moved"}
    assert authorizations(elsewhere.log) == {None}
    # The two commits, the PR, vLLM's compare with main and its tree, vLLM's setup.py at the wheel commit (404: what
    # precompiled mode takes then follows buildkit's rules, said), NeMo-RL's uv.lock and its pyproject.toml (404s).
    assert len(elsewhere.log) == 8
    for name in ("uv.lock", "pyproject.toml"):
        assert f"/moved/repos/NVIDIA-NeMo/RL/contents/{name}?ref={NEMO_RL_SHA}" in {r.path for r in elsewhere.log}
    assert_token_nowhere(run, root)


def test_cleartext_api_base_off_loopback_is_refused(project):
    root, cli = project
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN, "BUILDKIT_GITHUB_API": "http://api.example.com"})
    run.assert_refused(2, "$BUILDKIT_GITHUB_API", "plain http:// is allowed only for loopback hosts")
    assert_token_nowhere(run, root)


@pytest.mark.parametrize(
    ("status", "headers", "code"),
    [
        (401, {}, 3),
        (403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1"}, 3),
        (404, {}, 4),
        (200, {}, 3),  # a malformed answer: its message must not carry the token either
    ],
    ids=["401", "rate-limited", "404", "malformed"],
)
def test_token_is_in_no_message(project, hostile, monkeypatch, status, headers, code):
    root, cli = project
    cli.env["BUILDKIT_GITHUB_API"] = hostile.url
    hostile.route("/repos/", json_answer({"message": f"Bearer {TOKEN}"} if status != 200 else [TOKEN], status, headers))
    cli.env["GITHUB_TOKEN"] = TOKEN
    error = resolve_error(cli, monkeypatch)
    assert error.exit_code == code, error.message
    assert authorizations(hostile.log) == {f"Bearer {TOKEN}"}  # the token did go (an env base), and stayed out
    assert TOKEN not in f"{error.message} {error.hint}"


def test_a_reason_phrase_that_repeats_the_token_is_not_shown(project, hostile):
    root, cli = project
    cli.env["BUILDKIT_GITHUB_API"] = hostile.url
    hostile.route("/repos/", raw(f"HTTP/1.1 503 {TOKEN}\r\nContent-Length: 0\r\n\r\n".encode()))
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN})
    run.assert_refused(3, "HTTP 503 $GITHUB_TOKEN")
    assert_token_nowhere(run, root)


def test_a_token_that_cannot_be_a_header_is_an_input_error(project):
    root, cli = project
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN + "\nX-Evil: 1"})
    run.assert_refused(2, "$GITHUB_TOKEN")
    assert_token_nowhere(run, root)


@pytest.mark.parametrize(
    ("base", "from_pins", "sent"),
    [
        ("https://api.github.com", False, True),
        ("https://api.github.com", True, True),  # pins naming the real API change nothing
        ("https://ghe.example.com/api/v3", False, True),  # named in the environment
        ("https://ghe.example.com/api/v3", True, False),
        ("http://127.0.0.1:8080", False, True),
        ("http://ghe.example.com/api/v3", False, False),  # cleartext off loopback: never
    ],
)
def test_token_for(monkeypatch, base, from_pins, sent):
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    token, note = token_for(base, from_pins)
    assert (token == TOKEN) is sent
    assert (note is None) is sent
    assert note is None or TOKEN not in note


def test_token_for_without_a_token(monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    assert token_for("https://ghe.example.com", True) == (None, None)


def test_token_for_refuses_a_token_with_a_line_break(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "abc\r\n")
    with pytest.raises(InputError) as info:
        token_for("https://api.github.com", False)
    assert "abc" not in info.value.message


def test_a_netrc_neither_replaces_the_token_nor_adds_credentials(project, upstreams):
    """requests reads ~/.netrc for any request without auth= and lets it replace the Authorization header: buildkit
    sends only the credentials it chose (the token here; none to the wheel index and the registry)."""
    root, cli = project
    home = root / "home"
    home.mkdir()
    netrc = home / ".netrc"
    netrc.write_text(
        "".join(f"machine {u.netloc.split(':')[0]} login someone password n3trcS3cret\n" for u in upstreams.all())
    )
    netrc.chmod(0o600)
    run = measured(cli, "resolve", env={"GITHUB_TOKEN": TOKEN, "HOME": str(home), "NETRC": str(netrc)})
    assert run.code == 0, run.output
    assert authorizations(upstreams.github.log) == {f"Bearer {TOKEN}"}
    assert authorizations(upstreams.wheels.log) == {None}
    assert all("n3trc" not in (auth or "") for auth in authorizations(upstreams.registry.log))
