"""`python -m buildkit.cli` without paying Python's start-up and buildkit's imports in every child the tests start.

A zygote process imports every buildkit module once; each CLI run is a process forked from it: its own pid, argv,
environment, working directory, umask, stdin, stdout, stderr and exit code, run as `python -m` runs a module
(runpy, a fresh `__main__`, the interpreter's exit: non-daemon threads joined, atexit handlers, streams flushed).
It is what the tests' child processes spent most of their CPU on: about 0.3 s of imports each, some 800 times a run.

What could make a forked run differ from a fresh one is state computed while importing. The zygote records every
environment variable any import reads (rich's consoles read COLUMNS and NO_COLOR; pydantic, typer and zoneinfo read
a few more); a run whose environment gives any of them, or any variable Python's own start-up reads (PYTHON*, LANG,
LC_*), another value than the zygote saw gets a zygote of its own, or, past a few, a fresh `python -m buildkit.cli`
(tests/conftest.py's Cli). Left the same as in a fresh process: the hash seed (one per zygote, not per run).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pkgutil
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from tests.support.paths import REPO_ROOT

PYTHON = sys.executable
# Variables the interpreter reads before any import (its paths, its locale): they must match, read or not.
STARTUP_PREFIXES = ("PYTHON", "LC_")
STARTUP_NAMES = ("LANG",)
MAX_ZYGOTES = 3  # per test process; past that, a run with yet another signature starts a fresh interpreter
SETUP_FAILED = 250  # the forked child could not become the run (the caller raises: never taken for the CLI's exit)
MAX_REQUEST = 1 << 20


# --- the zygote ---------------------------------------------------------------------------------------------------


class _Recording(os._Environ):
    """os.environ, noting every name read (os.environ's class is swapped while importing: same object, same data,
    so whatever an import keeps a reference to stays the live environment)."""

    read: set[str] = set()

    def __getitem__(self, key):
        _Recording.read.add(key)
        return super().__getitem__(key)

    def __iter__(self):
        _Recording.read.add("*")
        return super().__iter__()

    def copy(self):
        _Recording.read.add("*")
        return super().copy()


def _preload() -> set[str]:
    """Import buildkit and every module of it; return the environment variables the imports read."""
    import buildkit

    environ_class = os.environ.__class__
    os.environ.__class__ = _Recording
    try:
        for module in pkgutil.walk_packages(buildkit.__path__, "buildkit."):
            __import__(module.name)
    finally:
        os.environ.__class__ = environ_class
    return set(_Recording.read)


def _stream(fd: int, like: Any, line_buffering: bool) -> io.TextIOWrapper:
    """A standard stream on `fd` with the encoding and error handler the interpreter gave `like` (the zygote's own:
    the same start-up variables chose them, e.g. surrogateescape under a C.UTF-8 locale)."""
    write = fd != 0
    raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
    buffered = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
    return io.TextIOWrapper(
        buffered, encoding=like.encoding, errors=like.errors, newline="\n", line_buffering=line_buffering
    )


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter exits with for an uncaught SystemExit (Python/pythonrun.c: handle_system_exit)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f"{code}\n")
    return 1


def _run_command(request: dict[str, Any], fds: list[int]) -> None:
    """The forked child: become `python -m buildkit.cli ARGS` in the caller's directory and environment."""
    stdin, stdout, stderr = fds
    for target, fd in ((0, stdin), (1, stdout), (2, stderr)):
        os.dup2(fd, target)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as subprocess's close_fds: only 0, 1 and 2 are inherited
    try:
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        own = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
        for fd, name, like, line_buffering in (
            (0, "stdin", own[0], False),
            (1, "stdout", own[1], os.isatty(1)),
            (2, "stderr", own[2], True),
        ):
            stream = _stream(fd, like, line_buffering)
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
    except BaseException as exc:  # noqa: BLE001 -- the harness failed, not the CLI: the caller raises
        os.write(2, f"clizygote: the forked run could not start: {exc!r}\n".encode())
        os._exit(SETUP_FAILED)
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
    sys.argv = ["-m", *request["args"]]
    import runpy
    import types

    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.modules.pop("buildkit.cli")  # `python -m` runs it as __main__ only (runpy warns about a copy imported before)
    code = 0
    try:
        runpy._run_module_as_main("buildkit.cli")  # type: ignore[attr-defined]
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 -- what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    # The interpreter's exit, in its order: non-daemon threads joined, atexit handlers, the streams flushed.
    threading._shutdown()  # type: ignore[attr-defined]
    import atexit

    atexit._run_exitfuncs()
    for std in (sys.stdout, sys.stderr):
        try:
            std.flush()
        except (OSError, ValueError):
            code = 120  # the interpreter's exit status when flushing its streams fails
    if code < 0:  # killed by a signal, as the interpreter does for an uncaught KeyboardInterrupt
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _monitor(request: dict[str, Any], fds: list[int], reply: socket.socket) -> None:
    """A forked child of the zygote that forks the command, tells its pid, waits for it and tells its exit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        try:
            reply.close()
            _run_command(request, fds)
        finally:
            os._exit(1)  # never back into the zygote's loop, whatever went wrong
    for fd in fds:
        os.close(fd)
    reply.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    reply.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


def serve(control_fd: int) -> None:
    """The zygote: preload, say which variables the imports read, then fork a run for each request until the
    control socket closes (the test process is gone)."""
    control = socket.socket(fileno=control_fd)
    os.chdir("/")
    read = _preload()
    control.sendall(json.dumps(sorted(read)).encode())
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the monitors are reaped by the kernel
    while True:
        message, fds, _flags, _addr = socket.recv_fds(control, MAX_REQUEST, 4)
        if not message:
            return
        request = json.loads(message)
        if threading.active_count() != 1:  # forking with threads running can leave a lock held forever
            raise RuntimeError("the zygote must stay single-threaded")
        reply = socket.socket(fileno=fds[0])
        if os.fork() == 0:
            try:
                control.close()
                _monitor(request, fds[1:], reply)
            finally:
                os._exit(0)  # the caller sees a missing status if the monitor failed
        reply.close()
        for fd in fds[1:]:
            os.close(fd)


# --- the caller's side --------------------------------------------------------------------------------------------


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES}


class _Zygote:
    def __init__(self, env: Mapping[str, str]):
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Its own stdout and stderr are no terminal (rich's consoles, made at import, ask whether they are one);
        # what it says goes to a log, shown if it fails to start.
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [PYTHON, "-c", f"from tests.support.clizygote import serve; serve({theirs.fileno()})"],
            env=dict(env),
            cwd="/",
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        theirs.close()
        answer = self.control.recv(MAX_REQUEST)
        if not answer:
            self.log.seek(0)
            said = self.log.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"the CLI zygote did not start (exit {self.process.wait()}): {said}")
        self.read: set[str] = set(json.loads(answer))
        self.seen = self._view(env)  # what its imports saw: a run is forked from it only where this is the same
        self.lock = threading.Lock()

    def _view(self, env: Mapping[str, str]) -> tuple[dict[str, str | None], dict[str, str]]:
        return {name: env.get(name) for name in self.read}, _startup(env)

    def fits(self, env: Mapping[str, str]) -> bool:
        return "*" not in self.read and self._view(env) == self.seen

    def start(self, args: list[str], cwd: str, env: Mapping[str, str], stdout: int, stderr: int) -> socket.socket:
        mine, theirs = socket.socketpair()
        umask = _umask()
        request = json.dumps({"args": args, "cwd": cwd, "env": dict(env), "umask": umask}).encode()
        with self.lock:
            socket.send_fds(self.control, [request], [theirs.fileno(), 0, stdout, stderr])
        theirs.close()
        return mine


class Zygotes:
    """The zygotes of one test process, one per signature: the values of the variables their imports read and of
    those the interpreter's start-up reads."""

    def __init__(self) -> None:
        self._zygotes: list[_Zygote] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        """Stop the zygotes (closing its control socket ends one) and reap them."""
        with self._lock:
            for zygote in self._zygotes:
                self._stop(zygote)
            self._zygotes.clear()

    @staticmethod
    def _stop(zygote: _Zygote) -> None:
        zygote.control.close()
        zygote.log.close()
        try:
            zygote.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            zygote.process.kill()
            zygote.process.wait()

    def _for(self, env: Mapping[str, str], cwd: str) -> _Zygote | None:
        if env.get("PYTHONPATH") != str(REPO_ROOT) or not os.path.isdir(cwd) or os.path.exists(f"{cwd}/buildkit"):
            return None  # the zygote imports from this checkout only; `-m` would import ./buildkit
        with self._lock:
            for zygote in self._zygotes:
                if zygote.fits(env):
                    return zygote
            if len(self._zygotes) >= MAX_ZYGOTES:
                return None
            made = _Zygote(env)
            self._zygotes.append(made)
            return made if made.fits(env) else None  # (an import that read the whole environment: never)

    def _drop(self, zygote: _Zygote) -> None:
        """A zygote that stopped answering: later runs start another, or a fresh interpreter."""
        with self._lock:
            if zygote in self._zygotes:
                self._zygotes.remove(zygote)
        self._stop(zygote)

    def run(self, args: list[str], cwd: str, env: Mapping[str, str], timeout: float) -> tuple[int, str, str] | None:
        """(exit code, stdout, stderr) as subprocess.run(capture_output=True, text=True) gives them; None where
        this environment needs a fresh interpreter. Raises subprocess.TimeoutExpired as subprocess.run does."""
        zygote = self._for(env, cwd)
        if zygote is None:
            return None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            try:
                status = zygote.start(args, cwd, env, out_w, err_w)
            finally:
                os.close(out_w)
                os.close(err_w)
            with status:
                lines = _lines(status)
                pid = int(next(lines))
                deadline = time.monotonic() + timeout
                chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
                try:
                    _drain(chunks, deadline)
                except subprocess.TimeoutExpired:
                    # As subprocess.run: the child killed and waited for (here: its status read), then raised with
                    # its argv and the bytes it wrote.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    status.settimeout(30)
                    with contextlib.suppress(OSError, RuntimeError, StopIteration):
                        next(lines)
                    cmd = [PYTHON, "-m", "buildkit.cli", *args]
                    raise subprocess.TimeoutExpired(
                        cmd, timeout, b"".join(chunks[out_r]), b"".join(chunks[err_r])
                    ) from None
                code = int(next(lines))
        except (OSError, RuntimeError, StopIteration, ValueError) as exc:
            self._drop(zygote)
            raise RuntimeError(f"the CLI zygote failed: {exc!r}") from exc
        finally:
            os.close(out_r)
            os.close(err_r)
        if code == SETUP_FAILED:
            raise RuntimeError(b"".join(chunks[err_r]).decode(errors="replace"))
        return code, _text(chunks[out_r]), _text(chunks[err_r])


def _umask() -> int:
    """This process's umask, read without setting it (os.umask would, for a moment, for every thread)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    raise RuntimeError("no Umask line in /proc/self/status")


def _lines(sock: socket.socket) -> Iterator[str]:
    buffered = b""
    while True:
        while b"\n" not in buffered:
            more = sock.recv(4096)
            if not more:
                raise RuntimeError("the CLI zygote's run ended without an exit status")
            buffered += more
        line, buffered = buffered.split(b"\n", 1)
        yield line.decode()


def _drain(chunks: dict[int, list[bytes]], deadline: float) -> None:
    """Both pipes read to their end (every process holding them gone), as communicate() does."""
    open_fds = list(chunks)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired("buildkit", 0)
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            data = os.read(fd, 1 << 16)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)


def _text(chunks: list[bytes]) -> str:
    """subprocess's text mode: the locale's encoding, universal newlines."""
    import locale

    text = b"".join(chunks).decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")
