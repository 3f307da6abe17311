"""One budget for the bytes buildkit reads from outside: a wheel's members, an image's layers, NeMo-RL's uv.lock, a
cache entry. Each read of one such input runs under a Budget and reports as it goes: bytes inflated (in all, and as
a ratio to the compressed bytes they came from), entries, bytes kept in memory, and time. Crossing a limit raises
LimitExceeded at once (exit 3, like any upstream answer buildkit cannot use), naming the input and the limit; never
a "not checked" with exit 0, never an internal error.

The limits sit far above what real upstreams publish (docs/explanation/security.md lists them beside the real sizes):
vLLM 0.14.0's x86_64 wheel is 495 MB and inflates to 1.2 GB of shared objects (its `_C.abi3.so` 468 MB, the
largest member; ratio under 3); NeMo-RL's uv.lock is 1.7 MB at 946862e7.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from buildkit.errors import InputError, Interrupted, UpstreamMalformed
from buildkit.stopping import STOPPED

# Below this many inflated bytes the ratio is not held: a small member of zeros (an empty table) is legal.
RATIO_FLOOR = 64 << 20


class LimitExceeded(UpstreamMalformed):
    """An input crossed a limit of its budget: hostile, or not what its upstream publishes."""


@dataclass(frozen=True)
class Limits:
    inflated: int  # bytes decompressed, in all
    ratio: int  # inflated bytes per compressed byte, once past RATIO_FLOOR
    entries: int  # members, tar entries, tables
    kept: int  # bytes of what the reader holds on to
    seconds: float  # wall time for the whole read
    env: str | None = None  # the variable that moves `seconds` (a slow link needs more; docs/explanation/security.md)


def _gib(n: float) -> int:
    return int(n * (1 << 30))


# A wheel: vLLM 0.14.0 (x86_64) inflates to 1.2 GB of shared objects; torch 2.9.0's wheel is 900 MB compressed.
WHEEL = Limits(inflated=_gib(16), ratio=100, entries=100_000, kept=_gib(1), seconds=1800)
# The base image's layers read at resolve: cuda-dl-base is about 8 GB compressed (docs/explanation/gpu-checks.md).
# Its time: 8 GB within an hour is 2.2 MB/s; a slower link raises BUILDKIT_BASE_DEADLINE.
LAYERS = Limits(
    inflated=_gib(64), ratio=100, entries=4_000_000, kept=256 << 20, seconds=3600, env="BUILDKIT_BASE_DEADLINE"
)
# The download of torch's wheel (NeMo-RL's uv.lock: 900 MB for x86_64) before its symbols are read.
TORCH_DOWNLOAD = Limits(inflated=0, ratio=1, entries=0, kept=0, seconds=1800, env="BUILDKIT_TORCH_DEADLINE")
# The shared objects of a built image's Python environments, read by verify (uncompressed: the ratio never binds).
# vLLM's are 1.2 GB; torch's come from a 900 MB wheel.
IMAGE_FILES = Limits(inflated=_gib(64), ratio=1 << 30, entries=4_000_000, kept=_gib(1), seconds=3600)
# NeMo-RL's uv.lock (1.7 MB at 946862e7); only torch's tables are parsed.
UV_LOCK = Limits(inflated=64 << 20, ratio=1, entries=20_000, kept=1 << 20, seconds=30)
# A cache entry buildkit wrote itself (torch's symbol names: a few MB gzipped).
CACHE = Limits(inflated=256 << 20, ratio=100, entries=4_000_000, kept=256 << 20, seconds=120)


class Budget:
    """What one read of `what` may still spend. Call the counters as the read goes; each raises LimitExceeded."""

    def __init__(
        self,
        what: str,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
        cancel: threading.Event | None = None,
    ):
        """`cancel`: set by the caller on Ctrl-C or SIGTERM; the next count raises Interrupted (exit 130), as it does
        once main's signal handlers set stopping.STOPPED."""
        self.what, self.limits, self._clock, self._cancel = what, limits, clock, cancel
        self.seconds = seconds(limits)
        self._deadline = clock() + self.seconds
        self.inflated = self.compressed = self.entries = self.kept = 0

    def inflate(self, n: int, compressed: int | None = None) -> None:
        """`n` more bytes decompressed; `compressed`: the compressed bytes read so far, in all (when known)."""
        self.inflated += n
        if compressed is not None:
            self.compressed = compressed
        if self.inflated > self.limits.inflated:
            self._over(f"more than {_size(self.limits.inflated)} decompressed")
        if self.inflated > RATIO_FLOOR and self.compressed and self.inflated > self.limits.ratio * self.compressed:
            self._over(
                f"{_size(self.inflated)} decompressed from {_size(self.compressed)}, a ratio over "
                f"{self.limits.ratio}:1 (a decompression bomb)"
            )
        self.tick()

    def declare(self, inflated: int, compressed: int, name: str = "a member") -> None:
        """A member's declared sizes, held to the limits before a byte of it is decompressed."""
        if inflated > RATIO_FLOOR and inflated > self.limits.ratio * max(compressed, 1):
            self._over(
                f"{name}: {_size(inflated)} stored in {_size(compressed)}, a ratio over "
                f"{self.limits.ratio}:1 (a decompression bomb)"
            )
        if self.inflated + inflated > self.limits.inflated:
            self._over(f"{name}: more than {_size(self.limits.inflated)} to decompress in all")

    def entry(self, n: int = 1) -> None:
        self.entries += n
        if self.entries > self.limits.entries:
            self._over(f"more than {self.limits.entries:,} entries")

    def keep(self, n: int) -> None:
        """`n` more bytes held in memory for the rest of the read."""
        self.kept += n
        if self.kept > self.limits.kept:
            self._over(f"more than {_size(self.limits.kept)} to keep in memory")

    def tick(self) -> None:
        """Between chunks: stops at once when the caller cancelled, or when the read's time is up."""
        if (self._cancel is not None and self._cancel.is_set()) or STOPPED.is_set():
            raise Interrupted(f"{self.what}: interrupted")
        if self._clock() > self._deadline:
            env = self.limits.env
            self._over(
                f"more than {self.seconds:,.0f} s to read", f"on a slow link, raise {env}=<seconds>" if env else None
            )

    def _over(self, why: str, hint: str | None = None) -> None:
        raise LimitExceeded(
            f"{self.what}: {why}: refused",
            hint=hint
            or "no real upstream comes near this limit (docs/explanation/security.md lists them): the "
            "input is hostile or damaged; check where it came from",
        )


def seconds(limits: Limits) -> float:
    """The limits' time, or what their variable says (a positive number of seconds; anything else is refused)."""
    text = os.environ.get(limits.env) if limits.env else None
    if text is None or not text.strip():
        return limits.seconds
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e9:  # (also NaN)
        raise InputError(
            f"{limits.env}={text[:40]!r}: expected a positive number of seconds",
            hint=f"unset {limits.env} for the default of {limits.seconds:,.0f} s",
        )
    return value


def _size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n:,} bytes"
