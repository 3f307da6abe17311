"""Python's bytecode caches (`__pycache__/NAME.TAG.pyc`) held to the source beside them, as the import system
holds them (PEP 3147, PEP 552): a cache runs in place of its source only when its header matches the source (or it
is hash-based and unchecked), and never without its source.

Header: magic (4 bytes), flags (4, little-endian); flags bit 0 clear: the source's mtime and size (4 + 4); set: a
hash of the source (8), checked on import only when bit 1 is set or Python is told to, and run unchecked
otherwise. What the header binds is checked here; the code after it is not (it is what `py_compile` made of the
source, which only the image's own interpreter could make again): docs/explanation/security.md says so. Pure."""

from __future__ import annotations

import _imp
import importlib.util
import re
import struct
from dataclasses import dataclass, field

HEADER_BYTES = 16
# __pycache__/<module>.<implementation tag>[.opt-N].pyc, as importlib.util.cache_from_source names them
_CACHE_RE = re.compile(r"(?P<dir>(?:.*/)?)__pycache__/(?P<module>[^/.]+)\.[A-Za-z0-9_-]+(?:\.opt-[12])?\.pyc")


@dataclass(frozen=True)
class Source:
    """What the image holds of a Python source: its size and mtime as the tar stream says them, and its bytes when
    they were kept (for a hash-based cache), or its hash under each magic number a hash-based cache of it has
    (source_hash, computed as the bytes streamed by, where they are not kept)."""

    size: int
    mtime: int
    data: bytes | None = None
    hashes: dict[bytes, bytes] = field(default_factory=dict)


def source_of(cache: str) -> str | None:
    """The source a cache under __pycache__ stands for ("vllm/__pycache__/envs.cpython-311.pyc" ->
    "vllm/envs.py"), or None when the name is no cache name importlib would look for."""
    found = _CACHE_RE.fullmatch(cache)
    return f"{found['dir']}{found['module']}.py" if found else None


# What the import system makes of a cache, as judge() says it. Only RUNS_UNCHECKED and SOURCELESS fail a proof: a
# stale cache is never run (Python compiles the source again), and BuildKit's rewrite-timestamp makes every cache
# written during a build stale (it sets the sources' mtimes to SOURCE_DATE_EPOCH, not the headers').
BOUND = "bound to its source by its header (run in its place; the code in it not compared)"
STALE = "stale (its header names other source: Python compiles the source again and never runs it)"
SOURCELESS = "bytecode whose source is absent (no install leaves one)"
RUNS_UNCHECKED = "unchecked hash-based bytecode whose hash is not its source's (Python runs it without checking)"
NOT_CHECKED = (
    "hash-based bytecode whose source hash buildkit cannot compute (a Python before 3.11, or its source not kept)"
)
FAILS = (SOURCELESS, RUNS_UNCHECKED)


def judge(header: bytes, source: Source | None) -> str:
    """What the import system would do with this cache beside `source` (PEP 552), one of the constants above."""
    if source is None:
        return SOURCELESS
    if len(header) < HEADER_BYTES:
        return STALE  # importlib's _classify_pyc refuses it, and the source is compiled instead
    magic, flags = header[:4], struct.unpack("<I", header[4:8])[0]
    if flags & 1 == 0:
        mtime, size = struct.unpack("<II", header[8:16])
        return BOUND if (mtime, size) == (source.mtime & 0xFFFFFFFF, source.size & 0xFFFFFFFF) else STALE
    digest = source.hashes.get(magic) if source.data is None else source_hash(magic, source.data)
    if digest is None:
        return NOT_CHECKED
    if digest == header[8:16]:
        return BOUND
    return STALE if flags & 2 else RUNS_UNCHECKED  # bit 1: checked on import


def hash_based(header: bytes) -> bytes | None:
    """The magic number of a hash-based cache (PEP 552: flags bit 0), None for any other header."""
    return header[:4] if len(header) >= HEADER_BYTES and header[4] & 1 else None


def source_hash(magic: bytes, data: bytes) -> bytes | None:
    """The hash a hash-based cache written by the Python of `magic` holds for the source `data`, or None when
    buildkit's Python cannot compute it (an older hash)."""
    if not _same_hash(magic):
        return None
    # importlib.util.source_hash with the cache's own key: its magic number, read as importlib's _RAW_MAGIC_NUMBER
    return _imp.source_hash(int.from_bytes(magic, "little"), data)


SIPHASH13_FROM = 3495  # CPython 3.11's magic number: from 3.11 on, source hashes are SipHash-1-3 (before: 2-4)


def _same_hash(magic: bytes) -> bool:
    """Whether this Python computes the source hash of the Python that wrote `magic`: its own, or another CPython of
    3.11 or later (SipHash-1-3 keyed by the magic number: buildkit runs on 3.11+)."""
    number = int.from_bytes(magic[:2], "little")
    return magic == importlib.util.MAGIC_NUMBER or (magic[2:4] == b"\r\n" and number >= SIPHASH13_FROM)
