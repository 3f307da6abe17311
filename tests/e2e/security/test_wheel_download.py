"""The wheel download is bounded like every other read: a hostile wheel server (trickling, endless, lying about
lengths and ranges, redirecting elsewhere) ends `buildkit resolve` with a short message and a documented exit code,
in bounded time and memory, and leaves nothing later runs would trust."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.support.fake_upstreams import VLLM_SHA, WHEEL_X86, WheelFile, wheel_bytes
from tests.support.hostile import answer, endless, huge, json_answer, raw, redirect_same_path, trickle

META = f"/{VLLM_SHA}/vllm/metadata.json"
WHEEL = f"/{VLLM_SHA}/vllm-"
METADATA = [{"filename": WHEEL_X86, "path": "../" + quote(WHEEL_X86), "variant": None}]
ETAG = {"ETag": '"e1"'}


def head_then(size: int | None, get):
    """HEAD answers with `size` (None: no length); GET with the behaviour `get`."""
    headers = {**ETAG, "Content-Length": str(size)} if size is not None else ETAG

    def behave(h):
        if h.command == "HEAD":
            h.send(
                ("HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())).encode()
                + b"Connection: close\r\n\r\n"
            )
        else:
            get(h)

    return behave


@pytest.fixture
def wheel_server(project, hostile):
    """The reference project whose wheel index is the hostile server."""
    root, cli = project
    cli.env["BUILDKIT_WHEEL_INDEX"] = hostile.url
    hostile.route(META, json_answer(METADATA))
    return root, cli, hostile


def run(cli, *args, env=None):
    from tests.support.measured import measured

    result = measured(cli, "resolve", *args, env=env)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output[-3000:]
    return result


def parts(root):
    return list((root / "cache" / "wheels").glob("*/*.part"))


def test_a_trickling_wheel_stalls_instead_of_waiting_for_ever(wheel_server):
    root, cli, hostile = wheel_server
    hostile.route(WHEEL, head_then(100_000, trickle(0.05, body=b"x" * 100_000)))
    result = run(cli, env={"BUILDKIT_HTTP_STALL": "0.5", "BUILDKIT_HTTP_TIMEOUT": "5"})
    assert result.code == 3, result.output
    assert "stalled: less than 1 MiB in 0.5s" in result.stderr and "BUILDKIT_HTTP_STALL" in result.stderr
    # The failure's scale: without the stall timer the trickle runs its full 5,000 s (100,000 bytes, one every
    # 0.05 s, each well within the 5 s per-read timeout). The message says the stall timer ended it.
    assert result.seconds < 60 and not (root / "pins.lock").exists()


def test_a_wheel_larger_than_the_limit(wheel_server):
    root, cli, hostile = wheel_server
    hostile.route(WHEEL, head_then(None, endless(b"x" * 65536, "application/octet-stream")))
    result = run(cli, env={"BUILDKIT_HTTP_MAX_WHEEL": "1000000"})
    assert result.code == 3, result.output
    assert "larger than 1,000,000 bytes, the limit for wheels" in result.stderr
    assert "BUILDKIT_HTTP_MAX_WHEEL" in result.stderr
    assert result.peak_mib < 250 and parts(root) == [], "an answer over the limit leaves no part to continue"


def test_a_declared_length_over_the_limit_is_refused_before_reading(wheel_server):
    root, cli, hostile = wheel_server
    sent = [0]
    hostile.route(WHEEL, head_then(400 * 10**6, huge(400 * 10**6, "application/octet-stream", sent=sent)))
    result = run(cli, env={"BUILDKIT_HTTP_MAX_WHEEL": "100000000"})
    assert result.code == 3 and "the limit for wheels" in result.stderr, result.output
    # Measured in bytes, not time: a client that read up to the limit before refusing would take 100 MB; one that
    # refuses on the declared length takes only what the kernel's socket buffers hold, a few MB.
    assert sent[0] < 32 << 20, f"the client took {sent[0]:,} bytes"
    # No HEAD: the downloading GET's declared length is enough to refuse, before its body is read.
    assert [r.method for r in hostile.log if r.path.startswith(WHEEL)] == ["GET"]


@pytest.mark.parametrize("value", ["abc", "0", "-1", str(2**41), "1e9"])
def test_an_invalid_wheel_limit_is_bad_input(wheel_server, value):
    root, cli, hostile = wheel_server
    result = run(cli, env={"BUILDKIT_HTTP_MAX_WHEEL": value})
    assert result.code == 2 and "$BUILDKIT_HTTP_MAX_WHEEL" in result.stderr, result.output


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "soon"])
def test_an_invalid_stall_timeout_is_bad_input(wheel_server, value):
    root, cli, hostile = wheel_server
    result = run(cli, env={"BUILDKIT_HTTP_STALL": value})
    assert result.code == 2 and "$BUILDKIT_HTTP_STALL" in result.stderr, result.output


def test_a_big_wheel_is_streamed_not_held(wheel_server):
    root, cli, hostile = wheel_server
    size = 200 * 10**6
    hostile.route(WHEEL, head_then(size, zip_stream(size)))
    result = run(cli, "--json", env={"BUILDKIT_HTTP_TIMEOUT": "20"})
    assert result.code == 0, result.output[-3000:]
    assert json.loads(result.stdout)["wheel"]["size"] == size and json.loads(result.stdout)["wheel"]["cuda"] == "12"
    assert result.peak_mib < 250, f"peak memory {result.peak_mib:.0f} MiB for a {size:,}-byte wheel"
    # Bytes that are no zip at all: refused (exit 3) as a wheel, still streamed, and still not held.
    hostile.route(WHEEL, head_then(size, huge(size, "application/octet-stream")))
    (root / "cache").rename(root / "cache-before")
    refused = run(cli, env={"BUILDKIT_HTTP_TIMEOUT": "20"})
    assert refused.code == 3 and "is not a readable wheel (zip)" in refused.stderr, refused.output[-3000:]
    assert refused.peak_mib < 250


def zip_stream(size: int):
    """200 with Content-Length: size, then a real wheel of that size (tests/fake_upstreams.WheelFile), made as sent."""
    wheel = WheelFile(size, "")

    def behave(h):
        h.send(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n".encode())
        for chunk in wheel.chunks():
            if h.stopping:
                return
            h.send(chunk)

    return behave


def test_a_body_longer_than_head_said_is_cut_and_dropped(wheel_server):
    root, cli, hostile = wheel_server
    # The downloading GET is the only request (no HEAD): its Content-Length is the size, and what is sent past it
    # is never read. The 1,000 bytes it announced are no wheel: refused, nothing kept.
    longer = b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nETag: "e1"\r\nConnection: close\r\n\r\n' + b"x" * 5000
    hostile.route(WHEEL, head_then(1000, raw(longer)))
    result = run(cli)
    assert result.code == 3 and "is not a readable wheel" in result.stderr, result.output
    assert parts(root) == [] and not (root / "pins.lock").exists()


def test_a_body_that_ends_early_keeps_its_part_for_the_next_run(wheel_server):
    root, cli, hostile = wheel_server
    # The GET's own headers are the wheel's (no HEAD): its ETag guards the resume.
    lying = raw(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nETag: "e1"\r\nConnection: close\r\n\r\n' + b"x" * 400)
    hostile.route(WHEEL, head_then(1000, lying))
    result = run(cli)
    assert result.code == 3 and "ended before the length it announced" in result.stderr, result.output
    [part] = parts(root)
    assert part.read_bytes() == b"x" * 400
    # The next run asks for the rest; an answer from another offset is refused, not spliced in.
    elsewhere_range = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-599/1000\r\nContent-Length: 600\r\n"
    hostile.route(WHEEL, head_then(1000, raw(elsewhere_range + b"Connection: close\r\n\r\n" + b"y" * 600)))
    again = run(cli)
    assert again.code == 3, again.output
    assert "asked for the bytes from 400, the answer's Content-Range is 'bytes 0-599/1000'" in again.stderr
    assert hostile.log[-1].headers.get("Range") == "bytes=400-" and hostile.log[-1].headers.get("If-Range") == '"e1"'


def test_a_wheel_redirected_to_another_host(wheel_server, elsewhere):
    root, cli, hostile = wheel_server
    body = wheel_bytes(4096)
    hostile.route(WHEEL, redirect_same_path(elsewhere.url))
    elsewhere.route(WHEEL, answer(200, body, ETAG))
    result = run(cli, "--json")
    assert result.code == 0, result.output
    import hashlib

    assert json.loads(result.stdout)["wheel"]["sha256"] == hashlib.sha256(body).hexdigest()
    assert [r.method for r in elsewhere.log] == ["GET"]
