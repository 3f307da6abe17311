"""Typed errors. Library code raises these; only the CLI prints them and picks the exit code.

EXIT_CODES is the one table of exit codes: `buildkit --help` shows it, and docs/reference/exit-codes.md is generated
from it and EXIT_ADVICE (scripts/docs.py; tests/unit/suite/test_docs.py holds the page to the code).
"""

from __future__ import annotations

import reprlib

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success"),
    (1, "check failed: stale lock, upstream moved, a verify or doctor check"),
    (2, "bad input: pins, lock, records, patch files, options, unwritable files"),
    (3, "upstream unreachable or malformed: network, timeout, 5xx, rate limit"),
    (4, "upstream disagrees with the pins, or a patch no longer fits"),
    (5, "engine not ready: Docker, buildx, builder, disk, credentials, mksquashfs"),
    (6, "the build failed"),
    (7, "bump: the pins moved, but `buildkit build` would stop on them (drift)"),
    (8, "the vLLM source changes files its wheel's compiled code is built from"),
    (70, "internal error: a bug in buildkit, please report it"),
    (130, "interrupted (Ctrl-C, SIGTERM, SIGHUP)"),
)

# What to do about each code, for the reference page (not for --help, which stays short). Keys: EXIT_CODES' codes.
EXIT_ADVICE: dict[int, str] = {
    0: "",
    1: "`buildkit resolve`; read the failed check",
    2: "fix what the message names",
    3: "retry later, set `GITHUB_TOKEN`, raise the limit the message names, or use `--offline`",
    4: "fix the pins or the patch",
    5: "what `buildkit doctor` says; `docker login <registry>` for a refused login; `apt-get install squashfs-tools`",
    6: "read the error and the full log in `build/logs/`",
    7: "read the summary's first lines: fix `base_image`, or `--allow-drift`",
    8: "pin another `wheel.commit`, build vLLM from source, or (a reviewer who knows better) set "
    "`wheel.accept_compiled_changes` to the reason",
    70: "rerun with `BUILDKIT_DEBUG=1` and report it",
    130: "",
}


# Messages git prints when the remote itself cannot be reached (as opposed to a ref that is missing there).
_UNREACHABLE_MARKERS = (
    "Could not resolve host",
    "Connection refused",
    "unable to connect",
    "Failed to connect",
    "Network is unreachable",
    "timed out",
    "does not appear to be a git repository",
    "Could not read from remote repository",
    "repository not found",
    "not found",
)


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


class OptionError(InputError):
    """A command-line option's value refused by its options object (stages/*.py); the CLI shows it as typer's
    usage error for `param_hint` (exit 2)."""

    def __init__(self, message: str, param_hint: str):
        super().__init__(message)
        self.param_hint = param_hint


class UpstreamUnreachable(BuildkitError):
    """No usable answer: connection refused, DNS, timeout, 5xx after retries, rate limit, malformed data."""

    exit_code = 3


class GitFailed(UpstreamUnreachable):
    def __init__(self, args: list[str], stderr: str):
        last = stderr.splitlines()[-1] if stderr else "no output"
        super().__init__(f"git {' '.join(args[:2])} failed: {last}")
        self.stderr = stderr

    def remote_unreachable(self) -> bool:
        return any(m.lower() in self.stderr.lower() for m in _UNREACHABLE_MARKERS)


class UpstreamMismatch(BuildkitError):
    """Upstream answered, and the answer contradicts the pins."""

    exit_code = 4


class UpstreamMalformed(UpstreamUnreachable):
    """Upstream answered, but not usably: larger than its limit, slower than the deadline, or not the shape its
    protocol promises. Exit 3 like any answer buildkit cannot use."""


class EngineNotReady(BuildkitError):
    """Docker, buildx or the builder is missing or unusable."""

    exit_code = 5


class CredentialsError(EngineNotReady):
    """Docker's registry credentials cannot be used: the config file is unreadable or malformed, its credential
    helper is missing or fails, or the registry refused the login. Exit 5, like the other things a machine must
    have ready (`buildkit doctor` checks them)."""


class BuildFailed(BuildkitError):
    exit_code = 6


class BuildWouldStop(BuildkitError):
    """`bump` moved the pins, but the build they describe would stop (drift): said with its own code."""

    exit_code = 7


class CompiledSourceChanged(BuildkitError):
    """The vLLM source differs from the commit whose precompiled wheel is used in files vLLM's compiled code is
    built from: the image would run the wheel's old kernels (or miss a new op) on the GPU node."""

    exit_code = 8


class Interrupted(BuildkitError):
    exit_code = 130


def excerpt(value: object, limit: int = 200) -> str:
    """`value` quoted for a message, at most about `limit` characters: repr (so a trailing newline or a control
    character shows), with the middle of long values elided. Bounded work even for a huge nested value."""
    short = reprlib.Repr()
    short.maxstring = short.maxother = limit
    short.maxlevel = 2
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 5
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
