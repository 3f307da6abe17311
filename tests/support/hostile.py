"""A hostile HTTP server on loopback: answers that never end, trickle, are huge, lie about their length, carry
non-ASCII headers, redirect to another host, or have the wrong JSON shape.

Like tests/support/fake_upstreams.py it is a real `http.server` on a socket, so buildkit meets these answers exactly as
it would from the network. Behaviours write raw bytes on the wire, so headers can be anything. Routes pick a
behaviour by path prefix (longest first); every request is recorded with its headers.

The fixtures `hostile` (on 127.0.0.1) and `elsewhere` (on 127.0.0.2: another host as far as URLs and credentials
go) start one for a test; tests/conftest.py makes them available to every module.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support import vllmtree

Behaviour = Callable[["_Handler"], None]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _serve(self) -> None:
        hostile = self.server.hostile
        hostile.record(Request(self.command, self.path, dict(self.headers)))
        self.close_connection = True  # one answer per connection: behaviours may leave the stream in any state
        try:
            hostile.behaviour_for(self.path)(self)
        except OSError:
            pass  # the client went away: that is what a limit looks like from here

    do_GET = do_HEAD = do_POST = _serve

    def send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    @property
    def stopping(self) -> bool:
        return self.server.hostile.stopping.is_set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hostile: Hostile


class Hostile:
    """A threaded HTTP server on `host` (127.0.0.1, or 127.0.0.2 to be "another host") with scripted answers."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Behaviour] = {}
        self.log: list[Request] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = _Server((host, 0), _Handler)
        self._server.hostile = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def netloc(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 socket's address: typeshed also allows bytes
        return f"{host}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.netloc}"

    def route(self, prefix: str, behaviour: Behaviour) -> Hostile:
        self.routes[prefix] = behaviour
        return self

    def behaviour_for(self, path: str) -> Behaviour:
        for prefix in sorted(self.routes, key=len, reverse=True):
            if path.startswith(prefix):
                return self.routes[prefix]
        return answer(404, b'{"message": "Not Found"}')

    def record(self, request: Request) -> None:
        with self._lock:
            self.log.append(request)

    def start(self) -> Hostile:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()


def _head(status: int, headers: dict[str, str] | list[tuple[str, str]], reason: str = "OK") -> bytes:
    items = headers.items() if isinstance(headers, dict) else headers
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in items] + ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def answer(status: int = 200, body: bytes = b"", headers: dict[str, str] | None = None) -> Behaviour:
    """A well-formed answer."""

    def behave(h: _Handler) -> None:
        h.send(_head(status, {"Content-Length": str(len(body)), **(headers or {})}))
        if h.command != "HEAD":
            h.send(body)

    return behave


def json_answer(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Behaviour:
    return answer(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})


def raw(data: bytes) -> Behaviour:
    """Exactly these bytes on the wire: status line, headers and body, however malformed."""
    return lambda h: h.send(data)


def endless(chunk: bytes = b"[" * 65536, content_type: str = "application/json") -> Behaviour:
    """200 with no length, then the same chunk for ever (until the client leaves)."""

    def behave(h: _Handler) -> None:
        h.send(_head(200, {"Content-Type": content_type}))
        while not h.stopping:
            h.send(chunk)

    return behave


def huge(size: int, content_type: str = "application/json", sent: list[int] | None = None) -> Behaviour:
    """Says Content-Length: size and sends that many bytes (a 200 MB answer), as fast as the client takes them;
    `sent` gets the count of body bytes the client's socket took (a client that reads none takes only what the
    kernel's buffers hold, a few MB)."""
    counted = sent if sent is not None else [0]

    def behave(h: _Handler) -> None:
        h.send(_head(200, {"Content-Type": content_type, "Content-Length": str(size)}))
        block = b" " * 65536
        while counted[0] < size and not h.stopping:
            h.send(block[: size - counted[0]])
            counted[0] += len(block)

    return behave


def lying_length(declared: int, body: bytes) -> Behaviour:
    """Says Content-Length: declared, sends `body` (shorter or longer), and closes."""
    return lambda h: h.send(_head(200, {"Content-Type": "application/json", "Content-Length": str(declared)}) + body)


def trickle(interval: float, body: bytes = b"[" * 100_000, in_headers: bool = False) -> Behaviour:
    """One byte every `interval` seconds: of the body, or (in_headers) of the header block itself."""

    def behave(h: _Handler) -> None:
        head = _head(200, {"Content-Type": "application/json", "Content-Length": str(len(body))})
        slow = head + body if in_headers else body
        if not in_headers:
            h.send(head)
        for i in range(len(slow)):
            if h.stopping:
                return
            h.send(slow[i : i + 1])
            time.sleep(interval)

    return behave


def redirect(location: str, status: int = 302) -> Behaviour:
    return answer(status, b"", {"Location": location})


def redirect_same_path(target: str, status: int = 302, endless_body: bool = False) -> Behaviour:
    """Redirect to the same path on another server (e.g. http://127.0.0.2:PORT); with `endless_body`, the
    redirect itself has a body that never ends (a client must not read it)."""

    def behave(h: _Handler) -> None:
        if not endless_body:
            answer(status, b"", {"Location": target + h.path})(h)
            return
        h.send(_head(status, {"Location": target + h.path}, reason="Found"))
        while not h.stopping:
            h.send(b"x" * 65536)

    return behave


# Well-formed GitHub answers, to serve as they are or with one field changed.


def github_commit(sha: str, **changes: Any) -> dict[str, Any]:
    data = {
        "sha": sha,
        "html_url": f"https://github.com/x/y/commit/{sha}",
        "commit": {"message": "subject\n\nbody", "committer": {"date": "2026-02-05T18:32:11Z"}},
    }
    data.update(changes)
    return data


def github_compare(merge_base: str, **changes: Any) -> dict[str, Any]:
    """`compare/main...{sha}` for a commit that is main's tip, as GitHub answers it: identical, no files."""
    data = {
        "status": "identical",
        "ahead_by": 0,
        "behind_by": 0,
        "total_commits": 0,
        "merge_base_commit": github_commit(merge_base),
        "files": [],
    }
    data.update(changes)
    return data


def github_tree(sha: str) -> dict[str, Any]:
    """`git/trees/{sha}?recursive=1` as GitHub answers it: the blob entries of vLLM 0.14.0's real Python files
    (tests/support/vllmtree.py), not truncated."""
    tree = [{"path": path, "mode": "100644", "type": "blob", "sha": blob} for path, blob in vllmtree.listing().items()]
    return {"sha": sha, "tree": tree, "truncated": False}


def github_pull(number: int, merge_commit: str, **changes: Any) -> dict[str, Any]:
    data = {
        "merged": True,
        "state": "closed",
        "title": "feat: spec decode with draft models",
        "merged_at": "2026-01-19T21:04:56Z",
        "merge_commit_sha": merge_commit,
        "html_url": f"https://github.com/vllm-project/vllm/pull/{number}",
    }
    data.update(changes)
    return data


@pytest.fixture
def hostile():
    server = Hostile("127.0.0.1").start()
    yield server
    server.stop()


@pytest.fixture
def elsewhere():
    """A second server on 127.0.0.2: loopback too, but another host as far as URLs and credentials go."""
    server = Hostile("127.0.0.2").start()
    yield server
    server.stop()
