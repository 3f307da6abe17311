"""Run a helper program and keep at most a bounded part of what it prints.

subprocess.run(capture_output=True) holds everything a child prints before anyone can check its size: a broken or
hostile credential helper printing gigabytes would take that much memory. Here each pipe is read into a buffer of at
most `limit` bytes; past it the child is killed and the result says it ran over.
"""

from __future__ import annotations

import subprocess
import threading
from typing import IO, NamedTuple

CHUNK = 64 << 10


class Bounded(NamedTuple):
    returncode: int
    stdout: bytes
    stderr: bytes
    over: bool  # a pipe passed its limit: the child was killed, and what it printed is cut at the limit


def run_bounded(
    argv: list[str],
    *,
    limit: int,
    timeout: float,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
    stderr_limit: int = 64 << 10,
) -> Bounded:
    """Run argv (never through a shell) with `stdin` as its input; raises subprocess.TimeoutExpired (after killing
    it) when it runs longer than `timeout`, and OSError when it cannot start."""
    child = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    over = threading.Event()
    out, err = bytearray(), bytearray()

    def drain(pipe: IO[bytes], into: bytearray, cap: int) -> None:
        with pipe:
            while chunk := pipe.read1(CHUNK):  # type: ignore[attr-defined]
                into += chunk[: cap + 1 - len(into)]
                if len(into) > cap:
                    over.set()
                    child.kill()
                    return

    readers = [
        threading.Thread(target=drain, args=(child.stdout, out, limit), daemon=True),
        threading.Thread(target=drain, args=(child.stderr, err, stderr_limit), daemon=True),
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
        raise
    finally:
        for reader in readers:
            reader.join(timeout=5)
    return Bounded(child.returncode, bytes(out[:limit]), bytes(err[:stderr_limit]), over.is_set())
