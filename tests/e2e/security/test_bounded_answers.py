"""Upstream answers are bounded: endless, huge, trickling or lying answers end `buildkit resolve` with exit 3, a
short message naming the URL, the limit and the variable that raises it, in bounded time and memory. Invalid
limits in the environment are input errors (exit 2)."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest

from tests.support.fake_upstreams import VLLM_SHA, WHEEL_X86, wheel_bytes
from tests.support.hostile import (
    answer,
    endless,
    huge,
    json_answer,
    lying_length,
    raw,
    redirect_same_path,
    trickle,
)
from tests.support.measured import assert_error, measured, resolve_error

META = f"/{VLLM_SHA}/vllm/metadata.json"
WHEEL = f"/{VLLM_SHA}/vllm-"  # the wheel's path, as metadata.json's "../vllm-...whl" resolves
METADATA = [{"filename": WHEEL_X86, "path": "../" + quote(WHEEL_X86), "variant": None}]
WHEEL_HEADERS = {"ETag": '"e1"', "Last-Modified": "Tue, 20 Jan 2026 03:12:44 GMT"}


@pytest.fixture
def index(project, hostile):
    """The reference project with the hostile server as its wheel index (GitHub and registry stay well-behaved)."""
    root, cli = project
    cli.env["BUILDKIT_WHEEL_INDEX"] = hostile.url
    hostile.route(WHEEL, answer(200, wheel_bytes(4096), WHEEL_HEADERS))  # a well-behaved wheel: resolve downloads it
    return cli, hostile


def test_endless_metadata_stops_at_the_default_limit(index):
    cli, hostile = index
    hostile.route(META, endless())
    run = measured(cli, "resolve")
    run.assert_refused(3, f"{hostile.netloc}{META}", "larger than 4 MiB", "BUILDKIT_HTTP_MAX_INDEX")
    assert len([r for r in hostile.log if r.path == META]) == 1, "an answer over the limit is not retried"


def test_huge_declared_length_is_refused_before_reading(index):
    cli, hostile = index
    sent = [0]
    hostile.route(META, huge(200 * 10**6, sent=sent))
    measured(cli, "resolve").assert_refused(3, "larger than 4 MiB", "BUILDKIT_HTTP_MAX_INDEX")
    # Refused on its Content-Length: the client's socket took only what the kernel buffers, not 200 MB.
    assert sent[0] < 32 << 20, f"the client took {sent[0]:,} bytes"


def test_a_raised_limit_lets_a_bigger_answer_through(index):
    cli, hostile = index
    padded = json.dumps(METADATA).encode() + b" " * 100_000
    hostile.route(META, answer(200, padded, {"Content-Type": "application/json"}))
    low = measured(cli, "resolve", env={"BUILDKIT_HTTP_MAX_INDEX": "65536"})
    low.assert_refused(3, "larger than 64 KiB", "BUILDKIT_HTTP_MAX_INDEX")
    ok = measured(cli, "resolve", env={"BUILDKIT_HTTP_MAX_INDEX": "200000"})
    assert ok.code == 0, ok.output


@pytest.mark.parametrize("in_headers", [False, True], ids=["body", "headers"])
def test_trickle_ends_at_the_deadline(index, in_headers):
    cli, hostile = index
    hostile.route(META, trickle(0.1, in_headers=in_headers))  # each byte well within the per-read timeout
    env = {"BUILDKIT_HTTP_DEADLINE": "0.5", "BUILDKIT_HTTP_TIMEOUT": "5"}
    run = measured(cli, "resolve", env=env)
    # The failure's scale: without the deadline the trickle takes 10,000 s (100,000 bytes, one every 0.1 s, each
    # within the per-read timeout); the message says the deadline ended it.
    run.assert_refused(3, META, "no complete answer within 0.5s", "BUILDKIT_HTTP_DEADLINE", within=60)


def test_answer_shorter_than_its_length(index, monkeypatch):
    cli, hostile = index
    hostile.route(META, lying_length(10_000, b'[{"filename": '))
    assert_error(resolve_error(cli, monkeypatch), 3, META, "ended before the length it announced")


def test_redirect_body_is_never_read(index, elsewhere):
    cli, hostile = index
    hostile.route(META, redirect_same_path(elsewhere.url, endless_body=True))
    elsewhere.route(META, json_answer(METADATA))
    run = measured(cli, "resolve", "--json")
    assert run.code == 0, run.output
    # Measured in memory, not time: a client that read the endless body into memory would pass 250 MiB (or die at
    # measured()'s address-space cap); one that read it and threw it away would never end (measured()'s hang guard).
    assert run.peak_mib < 250
    assert json.loads(run.stdout)["wheel"]["filename"] == WHEEL_X86


@pytest.mark.parametrize(
    "length", [b"\xb2", b"-5", b"12abc", b"9" * 30], ids=["non-ascii", "negative", "not-a-number", "too-long"]
)
def test_wheel_with_a_malformed_content_length(index, monkeypatch, length):
    cli, hostile = index
    hostile.route(META, json_answer(METADATA))
    hostile.route(WHEEL, raw(b"HTTP/1.1 200 OK\r\nContent-Length: " + length + b"\r\nConnection: close\r\n\r\n"))
    assert_error(resolve_error(cli, monkeypatch), 3, "malformed Content-Length header")


def test_cli_wheel_with_a_non_ascii_content_length(index):
    cli, hostile = index
    hostile.route(META, json_answer(METADATA))
    hostile.route(WHEEL, raw(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\nConnection: close\r\n\r\n"))
    measured(cli, "resolve").assert_refused(3, "malformed Content-Length header")


def test_wheel_with_a_malformed_content_range(index, monkeypatch):
    cli, hostile = index
    hostile.route(META, json_answer(METADATA))
    hostile.route(
        WHEEL,
        lambda h: answer(405)(h) if h.command == "HEAD" else answer(206, b"P", {"Content-Range": "bytes 0-0/lots"})(h),
    )
    assert_error(resolve_error(cli, monkeypatch), 3, "malformed Content-Range header")


def test_wheel_with_a_non_ascii_etag(index, monkeypatch):
    cli, hostile = index
    hostile.route(META, json_answer(METADATA))
    hostile.route(WHEEL, raw(b'HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: "\xe9t\xe9"\r\nConnection: close\r\n\r\n'))
    assert_error(resolve_error(cli, monkeypatch), 3, "malformed ETag header")


def test_a_huge_reason_phrase_is_not_echoed(index, monkeypatch):
    cli, hostile = index
    hostile.route(META, raw(b"HTTP/1.1 503 " + b"R" * 60_000 + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
    assert_error(resolve_error(cli, monkeypatch), 3, "HTTP 503", "3 attempts")


def test_a_redirect_to_a_broken_url(index, monkeypatch):
    cli, hostile = index
    hostile.route(META, raw(b"HTTP/1.1 302 Found\r\nLocation: http://[zz/\r\nContent-Length: 0\r\n\r\n"))
    assert_error(resolve_error(cli, monkeypatch), 3, META, "redirected to an unusable URL 'http://[zz/'")


def test_a_long_listing_is_named_briefly(index, monkeypatch):
    cli, hostile = index
    others = [{"filename": f"vllm-0.1+g{i:09x}-cp38-abi3-manylinux_2_31_aarch64.whl", "path": "x"} for i in range(5000)]
    hostile.route(META, json_answer(others))
    error = resolve_error(cli, monkeypatch)
    assert_error(error, 4, "no vllm wheel for linux x86_64", "vllm-0.1+g000000000-cp38", "more")
    assert re.search(r"and 499[0-9] more", error.message), error.message


INVALID_LIMITS = [
    ("BUILDKIT_HTTP_TIMEOUT", "nan", "number of seconds"),
    ("BUILDKIT_HTTP_TIMEOUT", "inf", "number of seconds"),
    ("BUILDKIT_HTTP_TIMEOUT", "-1", "number of seconds"),
    ("BUILDKIT_HTTP_TIMEOUT", "abc", "number of seconds"),
    ("BUILDKIT_HTTP_TIMEOUT", "1e400", "number of seconds"),
    ("BUILDKIT_HTTP_DEADLINE", "0", "more than 0"),
    ("BUILDKIT_HTTP_DEADLINE", "1e12", "at most 86400"),
    ("BUILDKIT_HTTP_BACKOFF", "-0.5", "number of seconds"),
    ("BUILDKIT_HTTP_MAX_INDEX", "4MiB", "number of bytes"),
    ("BUILDKIT_HTTP_MAX_GITHUB", "0", "number of bytes"),
    ("BUILDKIT_HTTP_MAX_TOKEN", "-5", "number of bytes"),
    ("BUILDKIT_HTTP_MAX_MANIFEST", "9" * 5000, "number of bytes"),
]


@pytest.mark.parametrize(("name", "value", "needle"), INVALID_LIMITS)
def test_invalid_limits_in_the_environment_are_input_errors(project, monkeypatch, name, value, needle):
    root, cli = project
    cli.env[name] = value
    assert_error(resolve_error(cli, monkeypatch), 2, f"${name}", needle)


@pytest.mark.parametrize("value", ["nan", "-1"])  # and the rest of INVALID_LIMITS above, in-process
def test_cli_invalid_timeout_is_an_input_error(project, value):
    root, cli = project
    run = measured(cli, "resolve", env={"BUILDKIT_HTTP_TIMEOUT": value})
    run.assert_refused(2, "$BUILDKIT_HTTP_TIMEOUT: expected a number of seconds", repr(value))
