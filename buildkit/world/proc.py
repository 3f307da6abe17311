"""The one way buildkit runs a program: git, buildx, cosign, mksquashfs, c++filt and the credential helpers all come
through here (tests/unit/suite/test_layers.py holds that no other module calls subprocess).

The rules, each held here once:
- argv only: a list of strings, never a shell (a string is refused: it would be one program name, or a shell line);
- bounded output: subprocess.run(capture_output=True) holds everything a child prints before anyone can check its
  size, and a broken or hostile helper printing gigabytes would take that much memory. Here stdout is read into a
  buffer of at most `stdout_limit` bytes (past it the child is killed and the result says it ran over: an answer cut
  short is no answer), stderr keeps its last `stderr_limit` bytes (a failure's words come last), and a streamed run
  hands over lines of at most `line_limit` bytes and keeps the tail;
- a deadline: past `timeout` seconds the child is killed and TimedOut raised (None: no deadline, for a build);
- secrets never in messages: every message this module writes, and `Result.said`, have each of `secrets` blanked;
- one error type: ProcError (NotStarted when the program cannot be started, TimedOut past the deadline); a streamed
  run stopped by Ctrl-C stops its child and raises Interrupted (a KeyboardInterrupt) with the child's exit status.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO

from buildkit.text.sanitize import strip_controls

CHUNK = 64 << 10
STDERR_LIMIT = 64 << 10
LINE_LIMIT = 64 << 10
TAIL_LIMIT = 64 << 10
REDACTED = "<redacted>"
# How a streamed run in its own session is stopped: asked (SIGINT, as Ctrl-C would), told, then killed.
STOP_STEPS = ((signal.SIGINT, 15.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))


class ProcError(Exception):
    """A program that did not run to its end. `program` is argv[0]; the message has every secret blanked."""

    def __init__(self, message: str, program: str):
        super().__init__(message)
        self.message = message
        self.program = program


class NotStarted(ProcError):
    """The program could not be started (missing, not executable, a working directory that is not there)."""

    def __init__(self, message: str, program: str, error: OSError):
        super().__init__(message, program)
        self.error = error
        self.strerror = error.strerror or str(error)


class TimedOut(ProcError):
    """The program ran past its deadline and was killed."""

    def __init__(self, message: str, program: str, timeout: float):
        super().__init__(message, program)
        self.timeout = timeout


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or a signal the CLI turned into it) during a streamed run: the child was stopped first.
    args[0] is the reason KeyboardInterrupt carried ("Ctrl-C" when none)."""

    def __init__(self, reason: str, returncode: int):
        super().__init__(reason)
        self.reason = reason
        self.returncode = returncode


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with every (non-empty) secret blanked, longest first (one secret may hold another)."""
    kept = sorted({s for s in secrets if s}, key=len, reverse=True)
    if not kept:
        return text
    return re.sub("|".join(re.escape(s) for s in kept), REDACTED, text)  # one pass: never inside a blank


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: bytes  # at most stdout_limit bytes, from the start
    stderr: bytes  # at most stderr_limit bytes, the last ones
    over: bool  # stdout passed its limit: the child was killed, and stdout is cut at the limit
    secrets: tuple[str, ...] = ()

    def said(self, fallback: str = "no output") -> str:
        """The child's last words for a message: the last non-empty line of stderr (else stdout), without control
        characters, secrets blanked."""
        for stream in (self.stderr, self.stdout):
            lines = [strip_controls(line).strip() for line in stream.decode("utf-8", "replace").splitlines()]
            lines = [line for line in lines if line]
            if lines:
                return redact(lines[-1], self.secrets)
        return fallback


@dataclass(frozen=True)
class Streamed:
    returncode: int
    tail: bytes  # the last tail_limit bytes of what it printed (stdout and stderr together)
    seconds: float


def _checked(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(word, str) for word in argv):
        raise TypeError(f"argv must be a non-empty list of strings, never a shell line: {argv!r}")
    return list(argv)


def _start(argv: list[str], secrets: Sequence[str], **kwargs) -> subprocess.Popen:
    try:
        return subprocess.Popen(argv, **kwargs)  # never shell=True
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise NotStarted(redact(f"cannot run {argv[0]}: {why}", secrets), argv[0], exc) from None


def _timed_out(argv: list[str], timeout: float, secrets: Sequence[str]) -> TimedOut:
    name = " ".join(argv[:2])
    return TimedOut(redact(f"{name} did not finish within {timeout:g}s", secrets), argv[0], timeout)


def _head(child: subprocess.Popen, pipe: IO[bytes], into: bytearray, limit: int, over: threading.Event) -> None:
    """Read the pipe into `into` up to `limit` bytes; one byte more and the child is killed, `over` set."""
    with pipe:
        while chunk := pipe.read1(CHUNK):  # type: ignore[attr-defined]
            into.extend(chunk[: limit + 1 - len(into)])
            if len(into) > limit:
                over.set()
                child.kill()
                return


def _tail(pipe: IO[bytes], into: bytearray, limit: int) -> None:
    """Read the pipe to its end, keeping its last `limit` bytes in `into`."""
    with pipe:
        while chunk := pipe.read1(CHUNK):  # type: ignore[attr-defined]
            into.extend(chunk)
            del into[: max(0, len(into) - limit)]


def _lines(pipe: IO[bytes], on_line: Callable[[str], None], line_limit: int, tail: bytearray, tail_limit: int) -> None:
    """Hand each line to `on_line`, cut at `line_limit` bytes (the rest of a longer line dropped), keeping the
    last `tail_limit` bytes in `tail`."""
    with pipe:
        while line := pipe.readline(line_limit):
            if len(line) == line_limit and not line.endswith(b"\n"):
                while (rest := pipe.readline(line_limit)) and not rest.endswith(b"\n"):
                    pass  # the rest of an over-long line is dropped, up to its end
                line += b"\n"
            tail.extend(line)
            del tail[: max(0, len(tail) - tail_limit)]
            on_line(line.decode("utf-8", "replace"))


def _deadline(
    child: subprocess.Popen, timeout: float | None, new_session: bool
) -> tuple[threading.Timer | None, threading.Event]:
    """A timer that stops the child after `timeout` seconds (none without one), and the event it sets then."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _stop(child, new_session)

    if timeout is None:
        return None, expired
    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    return timer, expired


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    stdout_limit: int,
    stderr_limit: int = STDERR_LIMIT,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    secrets: Sequence[str] = (),
) -> Result:
    """Run argv with `stdin` as its input and wait for it; raises NotStarted or TimedOut (after killing it)."""
    words = _checked(argv)
    child = _start(
        words,
        secrets,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, err, over = bytearray(), bytearray(), threading.Event()
    readers = [
        threading.Thread(target=_head, args=(child, child.stdout, out, stdout_limit, over), daemon=True),
        threading.Thread(target=_tail, args=(child.stderr, err, stderr_limit), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None:
        try:
            child.stdin.write(stdin)  # type: ignore[union-attr]
            child.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass  # it did not read its input: what it printed says why
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise _timed_out(words, timeout, secrets) from None
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=5)
    return Result(child.returncode, bytes(out[:stdout_limit]), bytes(err), over.is_set(), tuple(secrets))


def stream(
    argv: Sequence[str],
    on_line: Callable[[str], None],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    new_session: bool = False,
    line_limit: int = LINE_LIMIT,
    tail_limit: int = TAIL_LIMIT,
    secrets: Sequence[str] = (),
) -> Streamed:
    """Run argv with stdout and stderr together, handing each line (decoded, cut at `line_limit` bytes, its end of
    line kept) to `on_line` as it comes; returns the exit status and the tail of the output.

    `new_session`: the child gets its own process group, so Ctrl-C reaches this process first, and is passed on
    (SIGINT, then SIGTERM, then SIGKILL), letting the child stop cleanly; then Interrupted is raised. Without it the
    child is killed. Past the deadline the child is stopped the same way and TimedOut raised; any other exception
    (from `on_line`, say) kills it and goes on."""
    words = _checked(argv)
    begun = time.monotonic()
    child = _start(
        words,
        secrets,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=new_session,
    )
    timer, expired = _deadline(child, timeout, new_session)
    tail = bytearray()
    try:
        assert child.stdout is not None
        _lines(child.stdout, on_line, line_limit, tail, tail_limit)
        code = child.wait()
    except KeyboardInterrupt as stop:
        reason = str(stop.args[0]) if stop.args else "Ctrl-C"
        raise Interrupted(reason, _stop(child, new_session)) from None
    except BaseException:
        child.kill()
        child.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if expired.is_set():
        raise _timed_out(words, timeout or 0, secrets)
    return Streamed(code, bytes(tail), time.monotonic() - begun)


def _stop(child: subprocess.Popen, new_session: bool) -> int:
    """Stop the child (its whole process group when it has one) and return its exit status."""
    if not new_session:
        child.kill()
        return child.wait()
    for sig, wait in STOP_STEPS:
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        try:
            return child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return child.wait()
