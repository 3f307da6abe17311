"""Python's bytecode caches (`__pycache__/NAME.TAG.pyc`) held to the source beside them, as the import system
would hold them (PEP 552): Python runs a cache in place of its source when its header matches the source, so a
cache whose source is absent, or whose header names other source, is code nothing compared.

Header: magic (4 bytes), flags (4, little-endian); flags bit 0 clear: the source's mtime and size (4 + 4); set: a
hash of the source (8), checked on import only when bit 1 is set or Python is told to, and run unchecked
otherwise. What the header binds is checked here; the code after it is not (it is what `py_compile` made of the
source, which only the image's own interpreter could make again): docs/explanation/security.md says so. Pure."""

from __future__ import annotations

import importlib.util
import re
import struct
from dataclasses import dataclass

HEADER_BYTES = 16
# __pycache__/<module>.<implementation tag>[.opt-N].pyc, as importlib.util.cache_from_source names them
_CACHE_RE = re.compile(r"(?P<dir>(?:.*/)?)__pycache__/(?P<module>[^/.]+)\.[A-Za-z0-9_-]+(?:\.opt-[12])?\.pyc")


@dataclass(frozen=True)
class Source:
    """What the image holds of a Python source: its size and mtime as the tar stream says them, and its bytes when
    they were kept (for a hash-based cache)."""

    size: int
    mtime: int
    data: bytes | None = None


def source_of(cache: str) -> str | None:
    """The source a cache under __pycache__ stands for ("vllm/__pycache__/envs.cpython-311.pyc" ->
    "vllm/envs.py"), or None when the name is no cache name importlib would look for."""
    found = _CACHE_RE.fullmatch(cache)
    return f"{found['dir']}{found['module']}.py" if found else None


NOT_CHECKED = "hash-based bytecode whose source hash buildkit cannot compute (another Python, or its source not kept)"


def unbound(header: bytes, source: Source | None) -> str | None:
    """Why the import system would not hold this cache to `source`, or None when its header binds it; NOT_CHECKED
    for a hash-based cache whose hash cannot be computed here (the caller says it, and fails nothing)."""
    if source is None:
        return "bytecode whose source is absent (Python runs it as the module)"
    if len(header) < HEADER_BYTES:
        return "bytecode shorter than its header"
    magic, flags = header[:4], struct.unpack("<I", header[4:8])[0]
    if flags & 1 == 0:
        mtime, size = struct.unpack("<II", header[8:16])
        if (mtime, size) != (source.mtime & 0xFFFFFFFF, source.size & 0xFFFFFFFF):
            return "bytecode whose header names another source (mtime and size differ from the file's)"
        return None
    if magic != importlib.util.MAGIC_NUMBER or source.data is None:
        return NOT_CHECKED  # the key of the hash is the magic: only this Python's own can be computed
    if importlib.util.source_hash(source.data) != header[8:16]:
        return "hash-based bytecode whose hash is not its source's"
    return None
