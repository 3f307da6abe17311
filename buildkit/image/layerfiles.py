"""Which file an image ends up with at a path, read from its layers top-down, without unpacking them.

A container sees, at each path, what the topmost layer that writes it put there (OCI image spec, "Applying
Changesets"): a lower layer's file is hidden by an upper layer's whiteout for it, an opaque marker on a directory
above it, or a symlink or file where one of its directories was; a whiteout hides only what lies in lower layers,
never what its own layer writes. So the layers are read from the top, and reading stops as soon as every wanted path
is decided: the base image's libc, say, by the first layer from the top that writes it (or a directory or symlink
on its way), whatever lies below. A layer is streamed and checked against its descriptor (size and digest) like
every blob (ocilayout.walk_layer); of its entries only what can decide a wanted path is kept: symlinks, hardlinks,
whiteouts, opaque markers, directories, and the files whose names `capture` matches. Of those, only the ones in a
directory of a wanted path (the loader's directories, for the base libraries) are handed to `read` as bytes (at most
`max_file` of them, at most MAX_PARSED files in all) and kept only as what `read` made of them; one elsewhere is
recorded as there, and read (its layer streamed again, for that file alone) only when a wanted path turns out to
lead to it through a symlink: a layer of thousands of libc.so.6 copies in other directories costs no parsing.

A directory a layer names only as the parent of an entry does not replace a lower layer's symlink there (BuildKit
and Docker write an entry below a symlink at the symlink's target, so such a layer is not theirs; its entries are
taken at the paths they name).

Paths are followed as the kernel follows them inside the container: symlinks resolve against the image's root, at
most MAX_HOPS of them, and `..` goes to the parent of where the walk is (never above the root). Names are bounded
(MAX_NAME bytes, MAX_DEPTH components), and the whole read runs under one Budget (buildkit/budget.py, LAYERS):
bytes inflated (in all, and as a ratio to the compressed bytes), entries, what is kept of all layers together
(names, links, and what `read` made of captured files) and time, each refused with LimitExceeded (exit 3).
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, TypeVar

from buildkit.budget import LAYERS, Budget, LimitExceeded
from buildkit.errors import UpstreamMalformed, excerpt
from buildkit.files import ChunkReader
from buildkit.image.ocilayout import LAYER_COMPRESSION, CheckedStream, display, walk_layer

T = TypeVar("T")
MAX_HOPS = 40  # symlinks followed for one path, as Linux's MAXSYMLINKS
MAX_NAME = 4096  # bytes in one entry's name or link target: Linux's PATH_MAX
MAX_DEPTH = 256  # components in one name
MAX_PARSED = 256  # files handed to `read` in one find: a base has a few copies of each library in the loader's dirs
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
    found: dict[str, Found[T] | None]  # each wanted path: the file it leads to, or None when the image has none
    layers_read: int  # from the top
    layers: int
    bytes_read: int  # compressed, as downloaded


class TooLarge(NamedTuple):
    size: int


class _Unread(NamedTuple):
    """A captured file outside the wanted paths' directories: not read unless a wanted path leads to it."""

    name: str  # its name in its layer's tar (a hardlink's target, for a hardlink)


@dataclass
class _Layer:
    index: int
    kinds: dict[str, str] = field(default_factory=dict)  # path -> "symlink", "hardlink", "file", "other"
    links: dict[str, str] = field(default_factory=dict)  # symlink or hardlink path -> its target
    values: dict[str, Any] = field(default_factory=dict)  # captured file -> what read() made of it (or TooLarge)
    dirs: set[str] = field(default_factory=set)  # directories it names
    implied: set[str] = field(default_factory=set)  # directories it holds only as parents of its entries
    whiteouts: set[str] = field(default_factory=set)  # paths it removes from the layers below
    opaque: set[str] = field(default_factory=set)  # directories whose lower content it hides ("" the root)


class _Pending(Exception):
    """The layers read so far do not decide the path: a lower one may."""


def find(
    layers: Sequence[LayerBlob],
    paths: list[str],
    capture: re.Pattern[str],
    read: Callable[[str, bytes], T],
    what: str,
    max_file: int,
    on_layer: Callable[[int, int], None] | None = None,
    budget: Budget | None = None,
) -> Scan[T]:
    """For each of `paths`, the file it leads to in the image, reading `layers` (bottom first, as a manifest lists
    them) from the top until every path is decided. `on_layer` hears, before each layer is read, how many were read
    and their bytes. `budget`: what the whole read may spend (LAYERS when None)."""
    seen: list[_Layer] = []
    scan: Scan[T] = Scan({}, 0, len(layers), 0)
    budget = budget or Budget(what, LAYERS)
    dirs = {path.rpartition("/")[0] for path in paths}
    parsed = [0]
    for index in reversed(range(len(layers))):
        blob = layers[index]
        where = f"{what}: layer {index + 1} of {len(layers)}"
        if on_layer is not None:
            on_layer(scan.layers_read, scan.bytes_read)
        wanted = _Wanted(capture, lambda name: name.rpartition("/")[0] in dirs, read, max_file, parsed)
        seen.append(_read_layer(blob, index, wanted, where, budget))
        scan.layers_read, scan.bytes_read = scan.layers_read + 1, scan.bytes_read + blob.size
        decided = _decide(seen, paths, last=index == 0)
        if decided is not None:
            scan.found = decided
            break
    else:  # an image with no layers holds nothing
        scan.found = dict.fromkeys(paths)
    _read_unread(layers, scan, capture, read, what, max_file, parsed, budget)
    for hit in scan.found.values():
        if hit is not None and isinstance(hit.value, TooLarge):
            raise UpstreamMalformed(
                f"{what}: {excerpt(display(hit.path), 120)} is {hit.value.size:,} bytes, more "
                f"than the {max_file:,} buildkit reads of it"
            )
    return scan


def _read_unread(
    layers: Sequence[LayerBlob],
    scan: Scan[Any],
    capture: re.Pattern[str],
    read: Callable[[str, bytes], Any],
    what: str,
    max_file: int,
    parsed: list[int],
    budget: Budget,
) -> None:
    """Read the files a wanted path led to that the first pass did not (outside the wanted paths' directories):
    each layer holding some is streamed again, for those names alone."""
    names: dict[int, set[str]] = {}
    for hit in scan.found.values():
        if hit is not None and isinstance(hit.value, _Unread):
            names.setdefault(hit.layer, set()).add(hit.value.name)
    for index, wanted_names in sorted(names.items(), reverse=True):
        where = f"{what}: layer {index + 1} of {len(layers)}"
        wanted = _Wanted(capture, wanted_names.__contains__, read, max_file, parsed)
        values = _read_layer(layers[index], index, wanted, where, budget).values
        for path, hit in scan.found.items():
            if hit is not None and hit.layer == index and isinstance(hit.value, _Unread):
                scan.found[path] = hit._replace(value=values.get(hit.value.name))


def _decide(seen: list[_Layer], paths: list[str], last: bool) -> dict[str, Found | None] | None:
    out: dict[str, Found | None] = {}
    for path in paths:
        try:
            out[path] = _resolve(seen, path, last)
        except _Pending:
            return None
    return out


def _resolve(seen: list[_Layer], path: str, last: bool) -> Found | None:
    """The file `path` leads to in the layers seen (top first); None: there is none; _Pending: a lower layer may
    decide it (never once `last`, the bottom layer, was read)."""
    parts, done, hops = _split(path), "", 0
    while parts:
        part = parts.pop(0)
        if part == "..":  # `done` is a directory reached by the walk: its parent is where `..` goes
            done = done.rpartition("/")[0]
            continue
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
            if target.startswith("/"):
                done = ""
            parts = _split(target) + parts
            continue
        if parts:  # a file where a directory should be
            return None
        if kind == "hardlink":  # a link to a file of the same layer, by its name in the tar
            target = _clean(layer.links[here])
            return Found(here, layer.index, layer.values[target]) if target in layer.values else None
        if kind == "file" and here in layer.values:
            return Found(here, layer.index, layer.values[here])
        return None  # a file `capture` does not name, or a device: nothing buildkit reads
    return None


def _topmost(seen: list[_Layer], path: str, last: bool) -> tuple[str | None, _Layer | None]:
    """What the topmost layer that decides `path` holds there: a kind ("dir", "symlink", "file" ...), or None when
    the image has nothing there. Its directories were already followed to here, so in a layer below them, a
    whiteout, symlink or file at one of them, or an opaque marker on one (or on the root), hides the rest below."""
    above = ["", *_ancestors(path)[:-1]]
    implied = None
    for layer in seen:
        kind = layer.kinds.get(path)
        if kind is not None:
            return kind, layer
        if path in layer.dirs:
            return "dir", layer
        if path in layer.implied and implied is None:
            implied = layer  # a directory, unless a lower layer has a symlink here (see the module's docstring)
        if path in layer.whiteouts or any(a in layer.opaque or a in layer.whiteouts or a in layer.kinds for a in above):
            return ("dir", implied) if implied else (None, layer)
    if not last:
        raise _Pending
    return ("dir", implied) if implied else (None, None)


def _ancestors(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _split(path: str) -> list[str]:
    """Path components, `.` and empty ones dropped; `..` kept: it is resolved against where the walk is."""
    return [part for part in path.split("/") if part not in ("", ".")]


def _clean(name: str) -> str:
    return "/".join(p for p in _split(name) if p != "..")


class _Wanted(NamedTuple):
    """Which captured files one read of a layer hands to `read`."""

    capture: re.Pattern[str]  # the file names that can decide a wanted path
    parse: Callable[[str], bool]  # of those, the ones read now (the rest are recorded as _Unread)
    read: Callable[[str, bytes], Any]
    max_file: int
    parsed: list[int]  # files read so far in this find (a list: shared by every layer's read)


def _read_layer(blob: LayerBlob, index: int, wanted: _Wanted, what: str, budget: Budget) -> _Layer:
    if blob.media_type not in LAYER_COMPRESSION:
        raise UpstreamMalformed(
            f"{what} {blob.digest} has media type {excerpt(blob.media_type)}, which is not a "
            "layer type buildkit can read (tar, tar+gzip, tar+zstd)"
        )
    layer = _Layer(index)

    def keep(name: str) -> str:
        budget.keep(len(name) + 64)  # (64: about what a set or dict slot and the str object cost besides)
        return name

    def visit(tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        for text in (member.name, member.linkname):
            if len(text) > MAX_NAME or text.count("/") > MAX_DEPTH:
                raise UpstreamMalformed(
                    f"{what} {blob.digest}: an entry name or link target of {len(text):,} "
                    f"characters (a path holds at most {MAX_NAME} bytes)"
                )
        name = _clean(member.name)
        if not name:
            if member.isdir():
                return
            raise UpstreamMalformed(f"{what} {blob.digest}: an entry that is not a directory at the image's root")
        directory, _, base = name.rpartition("/")
        for parent in reversed(_ancestors(directory) if directory else []):
            if parent in layer.implied or parent in layer.dirs:
                break
            layer.implied.add(keep(parent))
        if base == _OPAQUE:
            layer.opaque.add(directory)
        elif base.startswith(_WHITEOUT):
            layer.whiteouts.add(keep(f"{directory}/{base[len(_WHITEOUT) :]}" if directory else base[len(_WHITEOUT) :]))
        elif member.isdir():
            layer.dirs.add(keep(name))
        elif member.issym() or member.islnk():
            layer.kinds[keep(name)] = "symlink" if member.issym() else "hardlink"
            layer.links[name] = keep(member.linkname)
        elif member.isreg() and wanted.capture.fullmatch(base):
            layer.kinds[keep(name)] = "file"
            layer.values[name] = _value(tar, member, name, wanted, budget) if wanted.parse(name) else _Unread(name)
        elif not member.isreg():
            layer.kinds[keep(name)] = "other"  # a device or fifo: it hides a lower file of the same name
        # Another regular file is not kept: no wanted path ends there (capture names them all).

    with blob.open() as chunks:
        raw = CheckedStream(
            ChunkReader(chunks), f"{what} {blob.digest}", blob.digest, blob.size, error=UpstreamMalformed
        )
        walk_layer(raw, blob.media_type, f"{what} {blob.digest}", None, visit, error=UpstreamMalformed, budget=budget)
    return layer


def _value(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, wanted: _Wanted, budget: Budget) -> Any:
    if member.size > wanted.max_file:
        return TooLarge(member.size)
    wanted.parsed[0] += 1
    if wanted.parsed[0] > MAX_PARSED:  # the same path written again and again: each copy would be parsed
        raise LimitExceeded(
            f"{budget.what}: more than {MAX_PARSED} files to read for {excerpt(display(name), 120)}"
            " and its kind: refused",
            hint="no real image holds that many copies of its libraries "
            "in the loader's directories: the image is hostile or damaged",
        )
    source = tar.extractfile(member)
    assert source is not None
    value = wanted.read(name, source.read(member.size))
    budget.keep(_weight(value))  # what read() made of it is held until the end of the read
    return value


def _weight(value: Any) -> int:
    """About the bytes a value from `read` holds: its strings and bytes, and a slot for each item."""
    if isinstance(value, (str, bytes)):
        return 64 + len(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return 64 + sum(_weight(item) for item in value)
    return 64
