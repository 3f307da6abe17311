"""The one place buildkit talks HTTP: timeouts, a deadline and a size limit on every answer, bounded retries with
backoff, a user agent, clear errors.

Callers get a `Reply` (status, headers and the body, already read within its limit) for any answer the server
gave -- they interpret 404s and 401s themselves -- or an error. `stream()` is the one exception to reading whole
answers: a wheel (hundreds of MiB) is read in chunks by its caller, held to a stall timeout instead of the deadline.
Errors:
  UpstreamUnreachable  no usable answer: connection refused, DNS failure, timeout, or a 5xx after the retries;
  UpstreamMalformed    an answer buildkit will not use: larger than the limit for its kind, slower than the
                       deadline (however it trickles), or broken HTTP. Not retried: it would only happen again.
Every number here can be raised through the environment; a value that is not a sensible number is an
InputError, never silently replaced. Sessions are per thread because resolve runs lookups concurrently.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from buildkit import __version__
from buildkit.errors import InputError, Interrupted, UpstreamMalformed, UpstreamUnreachable, excerpt

RETRY_STATUSES = frozenset({500, 502, 503, 504})
OFFLINE_HINT = (
    'check the network; without internet, "No internet" (docs/how-to/no-internet.md): BUILDKIT_GITHUB_API, '
    "BUILDKIT_WHEEL_INDEX and "
    "BUILDKIT_TORCH_INDEX name mirrors, base_image a registry you can reach, git_url_rewrites git mirrors; "
    "`buildkit resolve --offline` "
    "validates the pins and lock with no network"
)
MAX_REDIRECTS = 10
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
ENV_TIMEOUT = "BUILDKIT_HTTP_TIMEOUT"
ENV_DEADLINE = "BUILDKIT_HTTP_DEADLINE"
ENV_BACKOFF = "BUILDKIT_HTTP_BACKOFF"
ENV_STALL = "BUILDKIT_HTTP_STALL"
# A streamed body is stalled when less than this arrives within the stall timeout (60 s: about 17 KiB/s).
STALL_BYTES = MiB


class AnswerTooLarge(UpstreamMalformed):
    """An answer past the limit for its kind (exit 3, as any answer buildkit will not use): a caller with another
    way to the same facts (git, for a GitHub listing) may take it."""


@dataclass(frozen=True)
class Limit:
    """How much of one kind of answer buildkit reads into memory; `env` raises it."""

    what: str
    env: str
    default: int
    maximum: int = GiB  # what the variable may raise it to: answers held in memory stay below 1 GiB


# GitHub's commit answers carry the commit's file list and patches, so they get more room than they usually need.
GITHUB_API = Limit("GitHub API answers", "BUILDKIT_HTTP_MAX_GITHUB", 4 * MiB)
WHEEL_INDEX = Limit("wheel index pages", "BUILDKIT_HTTP_MAX_INDEX", 4 * MiB)
# The OCI distribution spec has registries accept manifests of at least 4 MiB; image configs share the limit.
REGISTRY = Limit("registry manifests and image configs", "BUILDKIT_HTTP_MAX_MANIFEST", 4 * MiB)
REGISTRY_TOKEN = Limit("registry token answers", "BUILDKIT_HTTP_MAX_TOKEN", 64 * KiB)
# Streamed to disk, never held: vLLM's CUDA wheels are about 0.5 GiB today, so 4 GiB leaves room to grow.
WHEEL = Limit("wheels", "BUILDKIT_HTTP_MAX_WHEEL", 4 * GiB, maximum=1 << 40)
# A file read raw through GitHub's contents API (NeMo-RL's uv.lock: 1.7 MB at 946862e7).
GITHUB_FILE = Limit("files read through the GitHub API", "BUILDKIT_HTTP_MAX_GITHUB_FILE", 64 * MiB)
# One layer of the base image, streamed to find its libc (never held): CUDA images have layers of several GiB.
LAYER = Limit("base image layers", "BUILDKIT_HTTP_MAX_LAYER", 16 * GiB, maximum=1 << 40)
LIMITS = (GITHUB_API, WHEEL_INDEX, REGISTRY, REGISTRY_TOKEN, WHEEL, GITHUB_FILE, LAYER)

_LENGTH_RE = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True)
class Reply:
    """One answer, its body read whole (within its limit)."""

    url: str  # where it came from, after redirects
    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self, what: str) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
            raise UpstreamMalformed(f"{what}: {redact(self.url)} sent something that is not JSON") from None


class Stream:
    """An answer whose body its reader takes in chunks (Http.stream): status and headers first, then `chunks`."""

    def __init__(self, http: Http, response: requests.Response, deadline: _Deadline, limit: Limit, asked: str):
        self.url = response.url  # after redirects
        self.status = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._http, self._response, self._deadline, self._limit, self._asked = http, response, deadline, limit, asked

    def chunks(self, size: int, held: int = 0) -> Iterator[bytes]:
        """The body, `size` bytes at a time (the last chunk shorter). Held to the stall timeout: it fails when less
        than STALL_BYTES arrive within BUILDKIT_HTTP_STALL seconds (a trickle, a hung server), and to the limit for
        its kind, counting the `held` bytes the caller already has (the start of a resumed download). The per-read
        timeout still applies. The stall timer waits while the caller holds a chunk: the time it takes to use one
        (a layer decompressed, a bomb refused by its Budget) is never mistaken for a stalled network."""
        client, deadline, url = self._http, self._deadline, self._asked
        cap = client.max_bytes[self._limit]
        try:
            declared = content_length(self.headers.get("Content-Length"))
        except ValueError:
            declared = None  # urllib3 reads until the server closes: the cap still holds
        if declared is not None and held + declared > cap:
            raise client.too_large("GET", url, self._limit)
        deadline.postpone(client.stall)
        received = unstalled = 0
        read = self._response.raw.read
        try:
            while chunk := read(size):
                received += len(chunk)
                if held + received > cap:
                    raise client.too_large("GET", url, self._limit)
                if received - unstalled >= STALL_BYTES:
                    unstalled = received
                    deadline.postpone(client.stall)
                deadline.pause()
                yield chunk
                deadline.resume()
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            if deadline.cancelled:
                raise Interrupted(f"GET {redact(url)}: interrupted after {received:,} bytes") from None
            if deadline.expired:
                raise self._stalled(received) from None
            problem = f"no data within {client.timeout:g}s" if "timed out" in str(exc) else _connection_problem(exc)
            raise UpstreamUnreachable(f"GET {redact(url)}: {problem} after {received:,} bytes") from None
        if deadline.cancelled:
            raise Interrupted(f"GET {redact(url)}: interrupted after {received:,} bytes")
        if deadline.expired:  # the stall shut the socket: the end of the body is not the end of the answer
            raise self._stalled(received)

    def _stalled(self, received: int) -> UpstreamUnreachable:
        return UpstreamUnreachable(
            f"GET {redact(self._asked)}: stalled: less than {_size(STALL_BYTES)} in {self._http.stall:g}s "
            f"after {received:,} bytes",
            hint=f"on a slow link, raise the stall timeout with {ENV_STALL}=<seconds>",
        )


def content_length(value: str | None) -> int | None:
    """A Content-Length value as a number; ValueError when present but not plain ASCII digits (a sign, '²')."""
    if value is None:
        return None
    if not _LENGTH_RE.fullmatch(value.strip()):
        raise ValueError(f"Content-Length {excerpt(value, 40)} is not a number of bytes")
    return int(value)


class Http:
    def __init__(
        self,
        timeout: float | None = None,
        attempts: int = 3,
        backoff: float | None = None,
        deadline: float | None = None,
    ):
        # Environment knobs exist so tests and slow links can tune them without code.
        self.timeout = timeout if timeout is not None else _env_seconds(ENV_TIMEOUT, 20.0, maximum=3600)
        self.deadline = deadline if deadline is not None else _env_seconds(ENV_DEADLINE, 60.0, maximum=86400)
        self.backoff = backoff if backoff is not None else _env_seconds(ENV_BACKOFF, 0.5, maximum=60, zero=True)
        self.stall = _env_seconds(ENV_STALL, 60.0, maximum=3600)
        self.max_bytes = {limit: _env_bytes(limit) for limit in LIMITS}
        self.attempts = max(1, attempts)
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers["User-Agent"] = f"buildkit/{__version__}"
            # Uncompressed answers: the limits then count what is held, and no small answer inflates into a big one.
            session.headers["Accept-Encoding"] = "identity"
            session.trust_env = True  # honour HTTPS_PROXY / NO_PROXY like curl does
            for scheme in ("http://", "https://"):
                session.mount(scheme, _DeadlineAdapter())
            self._local.session = session
        return session

    def request(
        self,
        method: str,
        url: str,
        *,
        limit: Limit | None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        data: dict[str, str] | bytes | None = None,
        allow_redirects: bool = True,
    ) -> Reply:
        """One request, retried on connection problems, timeouts and 5xx. `limit`: the kind of answer, which
        caps the body read; None reads no body (HEAD, or a GET whose headers are all that is wanted). `data`: a
        form body (POST) or bytes (a registry upload); like credentials, it never follows a redirect to another
        origin."""
        host = urlsplit(url).netloc
        last_problem = ""
        for attempt in range(1, self.attempts + 1):
            deadline = _Deadline(self.deadline)
            try:
                with deadline:
                    response = self._open(method, url, headers, params, allow_redirects, data)
                    try:
                        body = self._read(response, limit, method, url) if limit and method != "HEAD" else b""
                    finally:
                        response.close()
                    reply = Reply(response.url, response.status_code, response.reason or "", response.headers, body)
            except Exception as exc:  # noqa: BLE001 -- sorted by _failure; what it does not know is re-raised
                last_problem = self._failure(exc, deadline, method, url)
            else:
                if deadline.expired:  # a body cut short by the deadline can look complete
                    raise self._too_slow(method, url)
                if reply.status not in RETRY_STATUSES:
                    return reply
                last_problem = f"HTTP {reply.status} {excerpt(reply.reason, 60)[1:-1]}"
            if attempt < self.attempts:
                time.sleep(self.backoff * 2 ** (attempt - 1))
        raise UpstreamUnreachable(
            f"{method} {redact(url)}: {last_problem} (host {host}, {self.attempts} attempts)", hint=OFFLINE_HINT
        )

    @contextmanager
    def stream(
        self, url: str, *, limit: Limit, headers: dict[str, str] | None = None, cancel: threading.Event | None = None
    ) -> Iterator[Stream]:
        """One GET whose body the caller reads in chunks (`Stream.chunks`), for answers too big to hold: a wheel
        of hundreds of MiB that takes minutes on a slow link. Connect, redirects and headers are held to the
        deadline like any request; the body to the stall timeout instead. Redirects as in `request`.

        Not retried: the caller knows how many bytes it has and resumes from there. UpstreamUnreachable means
        the transfer broke (refused, dropped, timed out, stalled: worth resuming); UpstreamMalformed, an answer
        that would be just as bad again (larger than the limit, broken HTTP). `cancel` (Ctrl-C, SIGTERM in another
        thread) shuts the sockets at once, wherever the read is blocked: Interrupted."""
        deadline = _Deadline(self.deadline, cancel)
        with deadline:
            try:
                response = self._open("GET", url, headers, None, True)
            except Exception as exc:  # noqa: BLE001 -- sorted by _failure
                if deadline.cancelled:
                    raise Interrupted(f"GET {redact(url)}: interrupted") from None
                problem = self._failure(exc, deadline, "GET", url)
                raise UpstreamUnreachable(f"GET {redact(url)}: {problem}", hint=OFFLINE_HINT) from None
            try:
                yield Stream(self, response, deadline, limit, url)
            finally:
                response.close()

    def _failure(self, exc: Exception, deadline: _Deadline, method: str, url: str) -> str:
        """What went wrong with one attempt, when another might go better: a timeout or a broken connection.
        An answer that would be just as broken again, or too slow for the deadline, is raised as UpstreamMalformed;
        anything else is not an HTTP problem and is raised as it is."""
        if isinstance(exc, requests.exceptions.Timeout):
            return f"no answer within {self.timeout:g}s"
        if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError)):
            if deadline.expired:
                raise self._too_slow(method, url) from None
            # A read timeout in the middle of the body arrives as a ConnectionError.
            return f"no answer within {self.timeout:g}s" if "timed out" in str(exc) else _connection_problem(exc)
        if isinstance(
            exc, (requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException, ValueError)
        ):
            # Broken HTTP (a bad header, a redirect to nowhere): it would be just as broken the next time.
            if deadline.expired:
                raise self._too_slow(method, url) from None
            raise UpstreamMalformed(f"{method} {redact(url)}: {_malformed_problem(exc)}") from None
        raise exc

    def _open(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None,
        params: dict[str, str] | None,
        allow_redirects: bool,
        data: dict[str, str] | bytes | None = None,
    ) -> requests.Response:
        """The final answer, its body not yet read. Follow redirects here rather than in requests' Session, which
        reads a redirect's whole body (however long; even with allow_redirects=False) and decides itself where
        credentials go: here they never leave the origin they were given for. So the request is prepared by the
        session and sent by its adapter."""
        session = self._session()
        asked_origin = origin(url)
        for _ in range(MAX_REDIRECTS + 1):
            # auth=_as_given: without an auth, prepare_request reads ~/.netrc and lets it replace our Authorization
            # header (or add one buildkit never chose); credentials here are only the ones the caller gave.
            prepared = session.prepare_request(
                requests.Request(method, url, headers=headers, params=params, data=data or None, auth=_as_given)
            )
            # Proxies (HTTPS_PROXY, NO_PROXY) and TLS settings from the environment, as Session.request does;
            # stream: the caller reads the body, within its limit.
            # (The stubs allow verify=None; requests falls back to the session's verify=True, so it never is.)
            settings: dict[str, Any] = dict(session.merge_environment_settings(prepared.url, {}, True, None, None))
            response = session.get_adapter(prepared.url or url).send(
                prepared, timeout=(min(self.timeout, 10.0), self.timeout), **settings
            )
            try:
                target = session.get_redirect_target(response) if allow_redirects else None
            except BaseException:
                response.close()
                raise
            if target is None:
                return response
            response.close()  # a redirect's body is never read
            try:
                next_url = urljoin(response.url, target)
                scheme = urlsplit(next_url).scheme
            except ValueError:  # e.g. "http://[zz/"
                scheme = ""
            if scheme not in ("http", "https"):
                raise UpstreamMalformed(f"{method} {redact(url)}: redirected to an unusable URL {excerpt(target, 80)}")
            if headers and origin(next_url) != asked_origin:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            if data and origin(next_url) != asked_origin:
                data = None
            # As browsers and Go do: 303 turns anything but HEAD into a GET, 301 and 302 a POST; without its body.
            if (response.status_code == 303 and method != "HEAD") or (
                response.status_code in (301, 302) and method == "POST"
            ):
                method, data = "GET", None
            url, params = next_url, None
        raise UpstreamMalformed(f"{method} {redact(url)}: more than {MAX_REDIRECTS} redirects")

    def _read(self, response: requests.Response, limit: Limit, method: str, url: str) -> bytes:
        cap = self.max_bytes[limit]
        try:
            declared = content_length(response.headers.get("Content-Length"))
        except ValueError:
            declared = None  # urllib3 ignores it too, and reads until the server closes: the cap still holds
        if declared is not None and declared > cap:
            raise self.too_large(method, url, limit)
        body = bytearray()
        for chunk in response.iter_content(chunk_size=16 * KiB):
            body += chunk
            if len(body) > cap:
                raise self.too_large(method, url, limit)
        return bytes(body)

    def too_large(self, method: str, url: str, limit: Limit) -> UpstreamMalformed:
        return AnswerTooLarge(
            f"{method} {redact(url)}: the answer is larger than {_size(self.max_bytes[limit])}, the limit for "
            f"{limit.what}",
            hint=f"if that is expected, raise it with {limit.env}=<bytes>",
        )

    def _too_slow(self, method: str, url: str) -> UpstreamMalformed:
        return UpstreamMalformed(
            f"{method} {redact(url)}: no complete answer within {self.deadline:g}s, the limit per request",
            hint=f"on a slow link, raise it with {ENV_DEADLINE}=<seconds>",
        )

    def get(self, url: str, *, limit: Limit | None, **kwargs: Any) -> Reply:
        return self.request("GET", url, limit=limit, **kwargs)

    def post_form(self, url: str, data: dict[str, str], *, limit: Limit | None, **kwargs: Any) -> Reply:
        return self.request("POST", url, limit=limit, data=data, **kwargs)

    def head(self, url: str, **kwargs: Any) -> Reply:
        return self.request("HEAD", url, limit=None, **kwargs)


# The deadline: a per-read timeout lets a server that sends one byte every few seconds hold a request for ever, and
# a read can block deep inside http.client (in the headers, in a chunk). So a timer shuts down the sockets of the
# request when its time is up, wherever it is blocked. Connections find the request they serve through a
# thread-local, since the thread that asks is the one that reads.
_current = threading.local()


class _Deadline:
    """Shuts the request's sockets when its time is up. `postpone` moves the time (a streamed body is held to
    the stall timeout: each chunk that arrives buys more time), so one thread waits per request, as a Timer did."""

    def __init__(self, seconds: float, cancel: threading.Event | None = None):
        self.expired = self.cancelled = False
        self._cancel = cancel
        self._left: float | None = None  # while paused: the time that was left
        self._watched: list[HTTPConnection | socket.socket] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._seconds = seconds
        self._due: float | None = None
        self._outer: _Deadline | None = None
        self._thread = threading.Thread(target=self._run, name="http-deadline", daemon=True)

    def __enter__(self) -> _Deadline:
        self._outer = getattr(_current, "deadline", None)
        _current.deadline = self
        self._due = time.monotonic() + self._seconds
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._due = None
            self._wake.notify()
        _current.deadline = self._outer

    def postpone(self, seconds: float) -> None:
        """Move the time up to `seconds` from now (later or, when the stall timeout is the shorter, earlier)."""
        due, now = self._due, time.monotonic()
        if due is None:
            return
        if now + seconds >= due:
            self._due = now + seconds  # later: the thread finds it when it wakes at the earlier time
            return
        with self._lock:
            self._due = now + seconds
            self._wake.notify()

    def pause(self) -> None:
        """Stop the clock (the caller holds a chunk; the socket is not being read) until `resume`."""
        with self._lock:
            if self._due is not None and self._left is None:
                self._left = max(self._due - time.monotonic(), 0.0)
                self._wake.notify()

    def resume(self) -> None:
        with self._lock:
            if self._due is not None and self._left is not None:
                self._due, self._left = time.monotonic() + self._left, None
                self._wake.notify()

    def watch(self, target: HTTPConnection | socket.socket) -> None:
        with self._lock:
            self._watched.append(target)
            if self.expired or self.cancelled:
                _shut(target)

    def _run(self) -> None:
        with self._lock:
            while self._due is not None:
                if self._cancel is not None and self._cancel.is_set():
                    self.cancelled = True
                    for target in self._watched:
                        _shut(target)
                    return
                # A cancel event cannot wake this thread: it looks every 0.1 s.
                poll = 0.1 if self._cancel is not None else None
                if self._left is not None:  # paused
                    self._wake.wait(poll)
                    continue
                left = self._due - time.monotonic()
                if left <= 0:
                    self.expired = True
                    for target in self._watched:
                        _shut(target)
                    return
                self._wake.wait(left if poll is None else min(left, poll))


def _shut(target: HTTPConnection | socket.socket) -> None:
    sock = target if isinstance(target, socket.socket) else target.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv, unlike close()
        except OSError:
            pass


def _watch(target: HTTPConnection | socket.socket | None) -> None:
    deadline = getattr(_current, "deadline", None)
    if deadline is not None and target is not None:
        deadline.watch(target)


# The type checker reads the mixin below as the connection it is always mixed into.
if TYPE_CHECKING:
    _Connection = HTTPConnection
else:
    _Connection = object


class _Watched(_Connection):
    """Connection mixin: registers with the current request's deadline. The connection itself while it connects
    (its socket appears before the TLS handshake), and the socket for the request, since http.client lets go of
    `sock` once the answer starts when the server closes after it."""

    def connect(self) -> None:
        _watch(self)
        super().connect()
        _watch(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch(self.sock)  # a reused connection; a new one registers in connect()
        super().request(*args, **kwargs)


class _WatchedHTTPConnection(_Watched, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _DeadlineAdapter(HTTPAdapter):
    """requests' adapter with connections that obey the deadline (direct, and through an HTTP(S) proxy)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        if not proxy.lower().startswith("socks"):  # SOCKS pools have their own connection classes
            manager.pool_classes_by_scheme = _POOLS
        return manager


def _env_seconds(name: str, default: float, *, maximum: float, zero: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    low_ok = value >= 0 if zero else value > 0
    if not (math.isfinite(value) and low_ok and value <= maximum):
        lowest = "0" if zero else "more than 0"
        raise InputError(
            f"${name}: expected a number of seconds, {lowest} and at most {maximum:g}, found {excerpt(raw, 40)}",
            hint=f"unset it for the default ({default:g})",
        )
    return value


def _env_bytes(limit: Limit) -> int:
    raw = os.environ.get(limit.env, "").strip()
    if not raw:
        return limit.default
    if not re.fullmatch(r"[0-9]{1,19}", raw) or not 0 < int(raw) <= limit.maximum:
        raise InputError(
            f"${limit.env}: expected a number of bytes from 1 to {limit.maximum} ({_size(limit.maximum)}), "
            f"found {excerpt(raw, 40)}",
            hint=f"unset it for the default ({limit.default})",
        )
    return int(raw)


def _size(n: int) -> str:
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB} GiB"
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n:,} bytes"


def _connection_problem(exc: Exception) -> str:
    text = str(exc)
    for needle, meaning in (
        ("Connection refused", "connection refused"),
        ("Name or service not known", "host name not found"),
        ("Temporary failure in name resolution", "host name not found"),
        ("Network is unreachable", "network unreachable"),
        ("RemoteDisconnected", "connection dropped by the server"),
        ("Connection reset", "connection reset"),
        ("IncompleteRead", "the answer ended before the length it announced"),
        ("Connection aborted", "connection dropped by the server"),
        ("Connection broken", "connection dropped by the server"),
        ("CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"),
    ):
        if needle in text:
            return meaning
    return "connection failed"


def _malformed_problem(exc: Exception) -> str:
    """What was wrong, in a few words. Never str(exc): it can quote request headers, and so a token."""
    if isinstance(exc, requests.exceptions.ContentDecodingError):
        return "an answer that cannot be decoded"
    if isinstance(exc, requests.exceptions.InvalidHeader):
        return "a malformed header"
    if isinstance(exc, (requests.exceptions.InvalidSchema, requests.exceptions.InvalidURL)):
        return "a redirect to an unusable URL"
    return f"a malformed answer ({type(exc).__name__})"


def _as_given(request: requests.PreparedRequest) -> requests.PreparedRequest:
    return request


def origin(url: str) -> tuple[str, str]:
    """Scheme and host:port, what credentials are bound to."""
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.rpartition("@")[2].lower()


def redact(url: str) -> str:
    """A URL for messages: no credentials, no query string (tokens live there elsewhere), at most 200 characters."""
    parts = urlsplit(url)
    text = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
    return text if len(text) <= 200 else text[:197] + "..."
