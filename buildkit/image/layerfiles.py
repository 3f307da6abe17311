"""Which file an image ends up with at a path, read from its layers top-down, without unpacking them.

A container sees, at each path, what the topmost layer that writes it put there (OCI image spec, "Applying
Changesets"): a lower layer's file is hidden by an upper layer's whiteout for it, an opaque marker on a directory
above it, or a symlink or file where one of its directories was. So the layers are read from the top, and reading
stops as soon as every wanted name is decided: the base image's libc, say, is decided by the first layer from the top
that writes it (or a directory or symlink on its way), whatever lies below. A layer is streamed and checked against
its descriptor (size and digest) like every blob (ocilayout.walk_layer); of its entries only what can decide a path
is kept: symlinks, whiteouts, opaque markers, the directories, and the files whose names `capture` matches, each
handed to `read` as bytes (at most `max_file` of them) and kept only as what `read` made of them.

Paths are followed as the kernel follows them inside the container: symlinks resolve against the image's root,
at most MAX_HOPS of them, and `..` never climbs above the root.
"""

from __future__ import annotations

import io
import posixpath
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from buildkit.errors import UpstreamMalformed, excerpt
from buildkit.image.ocilayout import LAYER_COMPRESSION, CheckedStream, walk_layer

T = TypeVar("T")
MAX_HOPS = 40  # symlinks followed for one path, as Linux's MAXSYMLINKS
MAX_KEPT = 1_000_000  # symlinks, whiteouts and directories kept from one layer
_OPAQUE = ".wh..wh..opq"
_WHITEOUT = ".wh."


class LayerBlob(NamedTuple):
    """One layer as its manifest names it, and how to open its bytes (chunks, as a registry streams them)."""

    digest: str
    size: int
    media_type: str
    open: Callable[[], AbstractContextManager[Iterable[bytes]]]


class Found(NamedTuple, Generic[T]):
    path: str  # where the wanted path led, symlinks followed ("usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33")
    layer: int  # the manifest's index of the layer that wrote it (0: the bottom one)
    value: T  # what `read` made of its bytes


@dataclass
class Scan(Generic[T]):
    found: dict[str, Found[T] | None]  # each wanted name: where it resolved, or None when the image has none
    layers_read: int  # from the top
    layers: int
    bytes_read: int  # compressed, as downloaded


class TooLarge(NamedTuple):
    size: int


@dataclass
class _Layer:
    index: int
    kinds: dict[str, str] = field(default_factory=dict)  # path -> "symlink", "whiteout", "file", "hardlink", "other"
    links: dict[str, str] = field(default_factory=dict)  # symlink or hardlink path -> its target
    values: dict[str, Any] = field(default_factory=dict)  # captured file -> what read() made of it (or TooLarge)
    dirs: set[str] = field(default_factory=set)  # directories it holds, named or implied by what lies below them
    opaque: set[str] = field(default_factory=set)  # directories whose lower content it hides


class _Pending(Exception):
    """The layers read so far do not decide the path: a lower one may."""


def find(
    layers: Sequence[LayerBlob],
    wanted: dict[str, list[str]],
    capture: re.Pattern[str],
    read: Callable[[str, bytes], T],
    what: str,
    max_file: int,
) -> Scan[T]:
    """For each wanted name, the first of its candidate paths (in search order) that holds a file in the image,
    reading `layers` (bottom first, as a manifest lists them) from the top until every name is decided."""
    seen: list[_Layer] = []
    scan: Scan[T] = Scan({}, 0, len(layers), 0)
    for index in reversed(range(len(layers))):
        blob = layers[index]
        seen.append(_read_layer(blob, index, capture, read, f"{what}: layer {index + 1} of {len(layers)}", max_file))
        scan.layers_read, scan.bytes_read = scan.layers_read + 1, scan.bytes_read + blob.size
        decided = _decide(seen, wanted, last=index == 0)
        if decided is not None:
            scan.found = decided
            break
    else:
        scan.found = _decide(seen, wanted, last=True) or {}
    for name, hit in scan.found.items():
        if hit is not None and isinstance(hit.value, TooLarge):
            raise UpstreamMalformed(f"{what}: {name} resolves to {hit.path}, {hit.value.size:,} bytes, more than the "
                                    f"{max_file:,} buildkit reads of it")  # fmt: skip
    return scan


def _decide(seen: list[_Layer], wanted: dict[str, list[str]], last: bool) -> dict[str, Found | None] | None:
    out: dict[str, Found | None] = {}
    for name, candidates in wanted.items():
        try:
            out[name] = _first(seen, candidates, last)
        except _Pending:
            return None
    return out


def _first(seen: list[_Layer], candidates: list[str], last: bool) -> Found | None:
    for path in candidates:
        hit = _resolve(seen, path, last)
        if hit is not None:
            return hit
    return None


def _resolve(seen: list[_Layer], path: str, last: bool) -> Found | None:
    """The file `path` leads to in the layers seen (top first); None: there is none; _Pending: a lower layer may
    decide it (never once `last`, the bottom layer, was read)."""
    parts, done, hops = _split(path), "", 0
    while parts:
        part = parts.pop(0)
        here = f"{done}/{part}" if done else part
        kind, layer = _topmost(seen, here, last)
        if kind is None or layer is None:
            return None
        if kind == "dir":
            done = here
            continue
        if kind == "symlink":
            hops += 1
            if hops > MAX_HOPS:
                return None  # ELOOP: the loader finds nothing there either
            target = layer.links[here]
            base = "" if target.startswith("/") else done
            parts = _split(posixpath.join(base, target)) + parts
            done = ""
            continue
        if parts:  # a file where a directory should be
            return None
        if kind == "hardlink":
            target = _clean(layer.links[here])
            if target not in layer.values:
                return None
            return Found(here, layer.index, layer.values[target])
        if kind == "file" and here in layer.values:
            return Found(here, layer.index, layer.values[here])
        return None  # a file `capture` does not name, or a device: nothing buildkit reads
    return None


def _topmost(seen: list[_Layer], path: str, last: bool) -> tuple[str | None, _Layer | None]:
    """What the topmost layer that decides `path` holds there: a kind ("dir", "symlink", "file" ...), or None when
    the image has nothing there. Its directories were already followed to here, so in a layer below them, a
    whiteout, symlink or file at one of them, or an opaque marker on one, hides the rest below."""
    above = _ancestors(path)[:-1]
    for layer in seen:
        kind = layer.kinds.get(path)
        if kind is not None:
            return (None if kind == "whiteout" else kind), layer
        if path in layer.dirs:
            return "dir", layer
        if any(a in layer.opaque or a in layer.kinds for a in above):
            return None, layer
    if last:
        return None, None
    raise _Pending


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _split(path: str) -> list[str]:
    """Path components as the kernel walks them from the root: `.` dropped, `..` going up, never above the root."""
    out: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return out


def _clean(name: str) -> str:
    return "/".join(_split(name))


def _read_layer(blob: LayerBlob, index: int, capture: re.Pattern[str], read: Callable[[str, bytes], Any],
                what: str, max_file: int) -> _Layer:  # fmt: skip
    if blob.media_type not in LAYER_COMPRESSION:
        raise UpstreamMalformed(f"{what} {blob.digest} has media type {excerpt(blob.media_type)}, which is not a "
                                "layer type buildkit can read (tar, tar+gzip, tar+zstd)")  # fmt: skip
    layer = _Layer(index)
    kept = 0

    def visit(tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        nonlocal kept
        name = _clean(member.name)
        if not name:
            return
        directory, _, base = name.rpartition("/")
        layer.dirs.update(_ancestors(directory) if directory else ())
        if base == _OPAQUE:
            layer.opaque.add(directory)
        elif base.startswith(_WHITEOUT):
            layer.kinds[posixpath.join(directory, base[len(_WHITEOUT) :])] = "whiteout"
        elif member.isdir():
            layer.dirs.add(name)
        elif member.issym() or member.islnk():
            layer.kinds[name] = "symlink" if member.issym() else "hardlink"
            layer.links[name] = member.linkname
        elif member.isreg() and capture.fullmatch(base):
            layer.kinds[name] = "file"
            layer.values[name] = _value(tar, member, name, read, max_file)
        else:
            layer.kinds[name] = "file" if member.isreg() else "other"
            return  # kept only as a name: it may hide a lower one
        kept += 1
        if kept > MAX_KEPT or len(layer.dirs) > MAX_KEPT:
            raise UpstreamMalformed(f"{what} {blob.digest}: more than {MAX_KEPT:,} links, whiteouts or directories")

    with blob.open() as chunks:
        raw = CheckedStream(_ChunkReader(iter(chunks)), f"{what} {blob.digest}", blob.digest, blob.size,
                            error=UpstreamMalformed)  # fmt: skip
        walk_layer(raw, blob.media_type, f"{what} {blob.digest}", None, visit, error=UpstreamMalformed)
    return layer


def _value(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, read: Callable[[str, bytes], Any],
           max_file: int) -> Any:  # fmt: skip
    if member.size > max_file:
        return TooLarge(member.size)
    source = tar.extractfile(member)
    assert source is not None
    return read(name, source.read(member.size))


class _ChunkReader(io.RawIOBase):
    """Chunks (an HTTP body) as the file object CheckedStream reads from."""

    def __init__(self, chunks: Iterator[bytes]):
        super().__init__()
        self._chunks, self._held = chunks, memoryview(b"")  # a view: taking from it copies nothing

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._held:
            try:
                self._held = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self._held))
        view[:n], self._held = self._held[:n], self._held[n:]
        return n
