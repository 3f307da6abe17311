"""The one place buildkit talks HTTP: timeouts, bounded retries with backoff, a user agent, clear errors.

Callers get a `requests.Response` for any answer the server gave (they interpret 404s and 401s themselves) and an
`UpstreamUnreachable` when there was no usable answer: connection refused, DNS failure, timeout, or a 5xx that
outlived the retries. Sessions are per thread because resolve runs lookups concurrently.
"""

from __future__ import annotations

import os
import threading
import time
from urllib.parse import urlsplit

import requests

from buildkit import __version__
from buildkit.errors import UpstreamUnreachable

RETRY_STATUSES = frozenset({500, 502, 503, 504})
OFFLINE_HINT = (
    "check the network or the endpoint settings; `buildkit resolve --offline` validates the pins and lock "
    "with no network"
)


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class Http:
    def __init__(
        self,
        timeout: float | None = None,
        attempts: int = 3,
        backoff: float | None = None,
    ):
        # Environment knobs exist so tests and slow links can tune them without code.
        self.timeout = timeout if timeout is not None else _env_float("BUILDKIT_HTTP_TIMEOUT", 20.0)
        self.backoff = backoff if backoff is not None else _env_float("BUILDKIT_HTTP_BACKOFF", 0.5)
        self.attempts = max(1, attempts)
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers["User-Agent"] = f"buildkit/{__version__}"
            session.trust_env = True  # honour HTTPS_PROXY / NO_PROXY like curl does
            self._local.session = session
        return session

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        allow_redirects: bool = True,
        stream: bool = False,
    ) -> requests.Response:
        host = urlsplit(url).netloc
        last_problem = ""
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._session().request(
                    method,
                    url,
                    headers=headers,
                    params=params,
                    timeout=(min(self.timeout, 10.0), self.timeout),
                    allow_redirects=allow_redirects,
                    stream=stream,
                )
            except requests.exceptions.Timeout:
                last_problem = f"no answer within {self.timeout:g}s"
            except requests.exceptions.ConnectionError as exc:
                last_problem = _connection_problem(exc)
            except requests.exceptions.RequestException as exc:
                last_problem = type(exc).__name__
            else:
                if response.status_code not in RETRY_STATUSES:
                    return response
                last_problem = f"HTTP {response.status_code} {response.reason}"
                response.close()
            if attempt < self.attempts:
                time.sleep(self.backoff * 2 ** (attempt - 1))
        raise UpstreamUnreachable(
            f"{method} {_redact(url)}: {last_problem} (host {host}, {self.attempts} attempts)", hint=OFFLINE_HINT
        )

    def get(self, url: str, **kwargs) -> requests.Response:
        return self.request("GET", url, **kwargs)

    def head(self, url: str, **kwargs) -> requests.Response:
        return self.request("HEAD", url, **kwargs)


def _connection_problem(exc: requests.exceptions.ConnectionError) -> str:
    text = str(exc)
    for needle, meaning in (
        ("Connection refused", "connection refused"),
        ("Name or service not known", "host name not found"),
        ("Temporary failure in name resolution", "host name not found"),
        ("Network is unreachable", "network unreachable"),
        ("RemoteDisconnected", "connection dropped by the server"),
        ("Connection reset", "connection reset"),
        ("Connection aborted", "connection dropped by the server"),
        ("CERTIFICATE_VERIFY_FAILED", "TLS certificate not trusted"),
    ):
        if needle in text:
            return meaning
    return "connection failed"


def _redact(url: str) -> str:
    """URLs never carry credentials in buildkit, but never echo a query string (tokens live there elsewhere)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
