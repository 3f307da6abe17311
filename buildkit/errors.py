"""Typed errors. Library code raises these; only the CLI prints them and picks the exit code.

Exit codes (documented in the README):
  1  check failed: the lock is stale, or upstream no longer agrees with it
  2  bad input: pins.yaml, the lock, or command-line values are invalid
  3  upstream unreachable: network down, timeouts, 5xx after retries, rate limited
  4  upstream disagrees with the pins: ref not found, PR not merged, no wheel for the commit
"""

from __future__ import annotations

import reprlib


class BuildkitError(Exception):
    """A failure a user can act on. `str(err)` is the whole message; `hint` says what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class CheckFailed(BuildkitError):
    exit_code = 1


class InputError(BuildkitError):
    exit_code = 2


class UpstreamUnreachable(BuildkitError):
    """No usable answer: connection refused, DNS, timeout, 5xx after retries, rate limit."""

    exit_code = 3


class UpstreamMismatch(BuildkitError):
    """Upstream answered, and the answer contradicts the pins."""

    exit_code = 4


class UpstreamMalformed(UpstreamUnreachable):
    """Upstream answered, but not usably: larger than its limit, slower than the deadline, or not the shape its
    protocol promises. Exit 3 like any answer buildkit cannot use."""


def excerpt(value: object, limit: int = 200) -> str:
    """`value` quoted for a message, at most about `limit` characters: repr (so a trailing newline or a control
    character shows), with the middle of long values elided. Bounded work even for a huge nested value."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = limit
    short.maxlevel = 2
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 5
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
