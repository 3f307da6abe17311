"""Answers of the wrong shape from GitHub and the registry (a number for a SHA, a list for an object, a manifest
list where a manifest belongs, a reset time past the year 9999) end `buildkit resolve` with exit 3 and a short
message, never an internal error (exit 70).

Each kind runs once through the CLI; the long lists of shapes run the same resolve in this process."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.support.fake_upstreams import BASE_REPO, BASE_TAG, NEMO_RL_SHA, VLLM_PR, VLLM_SHA
from tests.support.hostile import answer, endless, github_commit, github_compare, github_pull, json_answer, raw
from tests.support.measured import assert_error, measured, resolve_error

NEMO_COMMITS = "/repos/NVIDIA-NeMo/RL/commits/"
VLLM_COMMITS = "/repos/vllm-project/vllm/commits/"
VLLM_PULL = f"/repos/vllm-project/vllm/pulls/{VLLM_PR}"
VLLM_COMPARE = f"/repos/vllm-project/vllm/compare/main...{VLLM_SHA}"  # is the source on main? (it is its tip)


commit = github_commit
PULL = github_pull(VLLM_PR, VLLM_SHA)


@pytest.fixture
def github(project, hostile):
    """The reference project with the hostile server as its GitHub API; vLLM's commit and PR answer well."""
    root, cli = project
    cli.env["BUILDKIT_GITHUB_API"] = hostile.url
    hostile.route(VLLM_COMMITS, json_answer(commit(VLLM_SHA)))
    hostile.route(VLLM_PULL, json_answer(PULL))
    hostile.route(VLLM_COMPARE, json_answer(github_compare(VLLM_SHA)))
    return cli, hostile


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ([commit(NEMO_RL_SHA)], "valid dictionary"),
        (commit(0x946862E7), "sha: Input should be a valid string"),  # type: ignore[arg-type]  # an int sha on purpose
        (commit(NEMO_RL_SHA[:39]), "sha: expected a full commit SHA"),
        (commit(NEMO_RL_SHA.upper()), "sha: expected a full commit SHA"),
        ({"sha": NEMO_RL_SHA}, "commit: Field required"),
        (commit(NEMO_RL_SHA, commit={"message": "x", "committer": {"date": 1738780331}}), "commit.committer.date"),
        (commit(NEMO_RL_SHA, commit={"message": "x", "committer": {"date": "yesterday"}}), "commit.committer.date"),
        (commit(NEMO_RL_SHA, commit={"message": 7, "committer": {"date": "2026-02-05T18:32:11Z"}}), "message"),
        (
            commit(NEMO_RL_SHA, commit={"message": "\x1b[2Jowned", "committer": {"date": "2026-02-05T18:32:11Z"}}),
            "without control characters",
        ),
        (commit(NEMO_RL_SHA, html_url="javascript:alert(1)"), "html_url"),
    ],
    ids=[
        "list",
        "sha-number",
        "sha-short",
        "sha-upper",
        "no-commit",
        "date-number",
        "date-word",
        "message-number",
        "subject-escapes",
        "html-url",
    ],
)
def test_malformed_commit_answers(github, monkeypatch, data, needle):
    cli, hostile = github
    hostile.route(NEMO_COMMITS, json_answer(data))
    error = resolve_error(cli, monkeypatch)
    assert_error(error, 3, "GitHub API answer for NVIDIA-NeMo/RL ref '946862e7' is malformed", needle)


def test_cli_malformed_commit_answer(github):
    cli, hostile = github
    hostile.route(NEMO_COMMITS, json_answer(commit(0x946862E7)))  # type: ignore[arg-type]  # an int sha on purpose
    run = measured(cli, "resolve")
    run.assert_refused(3, "GitHub API answer for NVIDIA-NeMo/RL ref '946862e7' is malformed", "sha")


def test_json_nested_too_deep_is_not_json(github, monkeypatch):
    cli, hostile = github
    hostile.route(NEMO_COMMITS, answer(200, b"[" * 200_000 + b"]" * 200_000, {"Content-Type": "application/json"}))
    assert_error(resolve_error(cli, monkeypatch), 3, "sent something that is not JSON")


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"merged": "yes"}, "merged: Input should be a valid boolean"),
        ({"merge_commit_sha": 123}, "merge_commit_sha"),
        ({"merge_commit_sha": None}, "without merged_at/merge_commit_sha"),
        ({"title": ["a"]}, "title"),
    ],
    ids=["merged-string", "sha-number", "sha-missing", "title-list"],
)
def test_malformed_pull_answers(github, monkeypatch, changes, needle):
    cli, hostile = github
    hostile.route(NEMO_COMMITS, json_answer(commit(NEMO_RL_SHA)))
    hostile.route(VLLM_PULL, json_answer({**PULL, **changes}))
    assert_error(resolve_error(cli, monkeypatch), 3, f"vllm-project/vllm PR #{VLLM_PR}", needle)


def rate_limited(reset: str):
    return json_answer({"message": "rate limited"}, 403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset})


@pytest.mark.parametrize("reset", ["9" * 30, "soon", "-1"], ids=["year-huge", "word", "neg"])
def test_rate_limit_with_a_malformed_reset_time(github, monkeypatch, reset):
    cli, hostile = github
    hostile.route("/repos/", rate_limited(reset))
    assert_error(resolve_error(cli, monkeypatch), 3, "rate limit reached; it resets later")


def test_cli_rate_limit_with_a_reset_time_int_cannot_read(github):
    cli, hostile = github
    hostile.route("/repos/", rate_limited("9" * 5000))  # int() refuses more than 4300 digits
    measured(cli, "resolve").assert_refused(3, "rate limit reached; it resets later")


# The registry: the hostile server is the registry the base image names (plain HTTP, as for any loopback registry).

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = {"architecture": "amd64", "os": "linux"}
CONFIG_DIGEST = "sha256:" + hashlib.sha256(json.dumps(CONFIG).encode()).hexdigest()
MANIFEST_BODY = {"schemaVersion": 2, "mediaType": MANIFEST, "config": {"digest": CONFIG_DIGEST}, "layers": []}
INDEX_BODY = {
    "schemaVersion": 2,
    "mediaType": INDEX,
    "manifests": [{"digest": "sha256:" + "b" * 64, "platform": {"os": "linux", "architecture": "amd64"}}],
}
MANIFESTS = f"/v2/{BASE_REPO}/manifests/"


@pytest.fixture
def registry(project, hostile):
    root, cli = project
    pins = root / "pins.yaml"
    text = pins.read_text()
    start = text.index("base_image: ") + len("base_image: ")
    old = text[start : text.index("\n", start)]
    pins.write_text(text.replace(old, f"{hostile.netloc}/{BASE_REPO}:{BASE_TAG}"))
    hostile.route(f"/v2/{BASE_REPO}/blobs/{CONFIG_DIGEST}", json_answer(CONFIG))
    return cli, hostile


def served(data, content_type: str):
    return answer(200, json.dumps(data).encode(), {"Content-Type": content_type})


def test_well_formed_single_manifest_resolves(registry):
    cli, hostile = registry
    hostile.route(MANIFESTS, served(MANIFEST_BODY, MANIFEST))
    run = measured(cli, "resolve", "--json")
    assert run.code == 0, run.output


@pytest.mark.parametrize(
    ("body", "content_type", "needle"),
    [
        ({**INDEX_BODY, "mediaType": MANIFEST}, MANIFEST, "config: Field required"),
        ({**MANIFEST_BODY, "mediaType": INDEX}, INDEX, "manifests: Field required"),
        (MANIFEST_BODY, INDEX, f"served as {INDEX} but says it is '{MANIFEST}'"),
        ([MANIFEST_BODY], MANIFEST, "expected a JSON object, found list"),
        ({**MANIFEST_BODY, "mediaType": 2}, MANIFEST, "mediaType 2 is not a string"),
        ({**INDEX_BODY, "manifests": [{"digest": "sha256:xyz"}]}, INDEX, "manifests.0.digest"),
        ({**INDEX_BODY, "manifests": {"digest": "x"}}, INDEX, "manifests: Input should be a valid list"),
        ({**MANIFEST_BODY, "config": {"digest": None}}, MANIFEST, "config.digest"),
        ({**MANIFEST_BODY, "mediaType": "x" * 10_000}, "text/plain", "unknown manifest type"),
    ],
    ids=[
        "index-as-manifest",
        "manifest-as-index",
        "type-disagrees",
        "list",
        "media-type-number",
        "bad-digest",
        "manifests-object",
        "config-digest-null",
        "unknown-type",
    ],
)
def test_malformed_manifests(registry, monkeypatch, body, content_type, needle):
    cli, hostile = registry
    hostile.route(MANIFESTS, served(body, content_type))
    assert_error(resolve_error(cli, monkeypatch), 3, f"registry {hostile.netloc}", needle)


def test_cli_manifest_list_where_a_manifest_belongs(registry):
    cli, hostile = registry
    hostile.route(MANIFESTS, served({**INDEX_BODY, "mediaType": MANIFEST}, MANIFEST))
    measured(cli, "resolve").assert_refused(3, f"registry {hostile.netloc}", "config: Field required")


@pytest.mark.parametrize(
    ("blob", "needle"),
    [
        (json_answer(["linux", "amd64"]), "does not have the digest"),
        (answer(200, b'["linux"]'), "does not have the digest"),
    ],
    ids=["list", "other-bytes"],
)
def test_config_blob_that_is_not_the_named_one(registry, monkeypatch, blob, needle):
    cli, hostile = registry
    hostile.route(MANIFESTS, served(MANIFEST_BODY, MANIFEST))
    hostile.route(f"/v2/{BASE_REPO}/blobs/{CONFIG_DIGEST}", blob)
    assert_error(resolve_error(cli, monkeypatch), 3, needle)


def test_endless_manifest_stops_at_its_limit(registry):
    cli, hostile = registry
    hostile.route(MANIFESTS, endless())
    run = measured(cli, "resolve", env={"BUILDKIT_HTTP_MAX_MANIFEST": "100000"})
    run.assert_refused(3, "larger than 100,000 bytes", "BUILDKIT_HTTP_MAX_MANIFEST")


def challenge(realm: str):
    return json_answer({"errors": []}, 401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="hostile"'})


@pytest.mark.parametrize(
    ("token_answer", "needles"),
    [
        (endless(), ("larger than 64 KiB", "BUILDKIT_HTTP_MAX_TOKEN")),
        (json_answer({"token": 42}), ("the token answer is malformed", "token")),
        (json_answer({"token": "a b\r\nX-Injected: 1"}), ("the token answer is malformed",)),
        (json_answer({"expires_in": 300}), ("token endpoint sent no token",)),
        (raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"), ("the token answer is malformed",)),
    ],
    ids=["endless", "number", "header-injection", "no-token", "list"],
)
def test_malformed_token_answers(registry, monkeypatch, token_answer, needles):
    cli, hostile = registry
    hostile.route(MANIFESTS, challenge(f"{hostile.url}/token"))
    hostile.route("/token", token_answer)
    assert_error(resolve_error(cli, monkeypatch), 3, *needles)


def test_cli_endless_token_answer(registry):
    cli, hostile = registry
    hostile.route(MANIFESTS, challenge(f"{hostile.url}/token"))
    hostile.route("/token", endless())
    measured(cli, "resolve").assert_refused(3, "larger than 64 KiB", "BUILDKIT_HTTP_MAX_TOKEN")


# NeMo-RL's uv.lock, read raw through the contents API at the locked commit (issue 23): bounded, and a file that is
# not a uv.lock is one line, exit 3.
UV_LOCK = f"/repos/NVIDIA-NeMo/RL/contents/uv.lock?ref={NEMO_RL_SHA}"


def test_endless_uv_lock_stops_at_its_limit(github):
    cli, hostile = github
    hostile.route(NEMO_COMMITS, json_answer(commit(NEMO_RL_SHA)))
    hostile.route(UV_LOCK, endless(b"#" * 65536, "application/vnd.github.raw+json"))
    run = measured(cli, "resolve", env={"BUILDKIT_HTTP_MAX_GITHUB_FILE": "1048576"})
    run.assert_refused(3, "contents/uv.lock", "larger than 1 MiB", "BUILDKIT_HTTP_MAX_GITHUB_FILE")


def test_a_uv_lock_that_is_not_toml_is_refused(github):
    cli, hostile = github
    hostile.route(NEMO_COMMITS, json_answer(commit(NEMO_RL_SHA)))
    hostile.route(UV_LOCK, answer(200, b"[[package]\nname = ", {"Content-Type": "application/vnd.github.raw+json"}))
    run = measured(cli, "resolve")
    run.assert_refused(3, "NeMo-RL's uv.lock at 946862e7755f: not a readable uv.lock")
