"""Reading an OCI image layout as `docker buildx build --output type=oci` writes it: a tar file, or a directory
with `tar=false`; and the tar `docker save` writes, which Docker 25 and later make an OCI layout too, and Docker
before 25 a docker-archive (read here as the layout it describes: see `OciLayout._from_docker_archive`).

A layout is input from outside, so it is hostile until checked: a blob is found only through its descriptor's
digest (`blobs/sha256/<64 hex>`, never through a name the tar chooses), every blob read is checked against its
descriptor's size and sha256 (and a layer's uncompressed stream against the config's diff_id), JSON documents are
bounded, and a layer is streamed (real layers are GBs), never held in memory.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import stat
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any

from isal import igzip, isal_zlib
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from buildkit.budget import Budget
from buildkit.errors import BuildkitError, InputError, excerpt
from buildkit.text.sanitize import strip_controls
from buildkit.world.tarstream import BoundedInfo

MAX_JSON_BYTES = 4 * 1024 * 1024  # index, manifest or config; real ones are a few KiB
MAX_JSON_DEPTH = 64
MAX_LAYOUT_ENTRIES = 100_000  # entries in a tar layout: one per blob, a handful per image
MAX_LAYER_ENTRIES = 5_000_000  # files in one layer: memory grows with this (about 300 bytes each)
CHUNK = 1024 * 1024

INDEX_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
MANIFEST_TYPES = frozenset(
    {"application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"}
)
CONFIG_TYPES = frozenset({"application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json"})
LAYER_COMPRESSION = {
    "application/vnd.oci.image.layer.v1.tar": "none",
    "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd": "zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar": "none",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar": "none",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
}

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
# The only names a tar layout may use for what buildkit reads; anything else in the tar is never looked at. A
# docker-archive (`docker save` before Docker 25) names its manifest list, its config (by its sha256) and its layers
# (by Docker's v1 layer IDs): these are looked up only through manifest.json, and read only through the digests the
# config names.
_TAR_NAME_RE = re.compile(
    r"(?:\./)?(index\.json|blobs/sha256/[0-9a-f]{64}|manifest\.json|[0-9a-f]{64}\.json|[0-9a-f]{64}/layer\.tar)"
)
_ARCHIVE_CONFIG_RE = re.compile(r"([0-9a-f]{64})\.json")
_ARCHIVE_LAYER_RE = re.compile(r"[0-9a-f]{64}/layer\.tar")
DOCKER_ARCHIVE_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_ARCHIVE_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_ARCHIVE_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
_PLATFORM_RE = re.compile(r"([a-z0-9_.-]+)/([a-z0-9_.-]+)(?:/([a-z0-9_.-]+))?")
_ArchiveLayerName = Annotated[str, Field(pattern=_ARCHIVE_LAYER_RE.pattern)]

_TAR_TYPES = {
    tarfile.REGTYPE: "file",
    tarfile.AREGTYPE: "file",
    tarfile.CONTTYPE: "file",
    tarfile.GNUTYPE_SPARSE: "file",
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
    tarfile.CHRTYPE: "char",
    tarfile.BLKTYPE: "block",
    tarfile.FIFOTYPE: "fifo",
}
# PAX records TarEntry has a field for; the others (xattrs, atime, ctime...) are kept as they are.
_PAX_MODELLED = frozenset({"path", "linkpath", "size", "uid", "gid", "uname", "gname", "mtime"})


class Platform(BaseModel):
    model_config = ConfigDict(extra="allow")

    os: str
    architecture: str
    variant: str | None = None

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


class Descriptor(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    media_type: str = Field(alias="mediaType")
    digest: str = Field(pattern=DIGEST_RE.pattern)
    size: int = Field(ge=0)
    platform: Platform | None = None
    annotations: dict[str, str] | None = None

    def is_attestation(self) -> bool:
        # buildx lists provenance and SBOM attestations beside the image, for platform unknown/unknown.
        annotations = self.annotations or {}
        unknown = self.platform is not None and (self.platform.os, self.platform.architecture) == ("unknown",) * 2
        return annotations.get("vnd.docker.reference.type") == "attestation-manifest" or unknown


class _Index(BaseModel):
    model_config = ConfigDict(extra="allow")

    manifests: list[Descriptor]


class _Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")

    config: Descriptor
    layers: list[Descriptor]


class _ArchiveEntry(BaseModel):
    """One image in a docker-archive's manifest.json (RepoTags and the rest are not used)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    config: str = Field(alias="Config", pattern=_ARCHIVE_CONFIG_RE.pattern)
    layers: list[_ArchiveLayerName] = Field(alias="Layers")


@dataclass(frozen=True)
class Image:
    """One platform's image in a layout: its manifest and config (both read and checked) and layer descriptors."""

    source: str
    manifest_descriptor: Descriptor
    manifest: dict[str, Any]
    config_descriptor: Descriptor
    config: dict[str, Any]
    layers: list[Descriptor]

    def diff_id(self, index: int) -> str:
        """The sha256 of layer `index` uncompressed, as the config records it (checked by `resolve_image`)."""
        return self.config["rootfs"]["diff_ids"][index]


@dataclass(frozen=True, slots=True)
class TarEntry:
    """One entry of a layer's tar: the metadata that lands on disk, and its content's sha256 for regular files.
    Strings are as the tar has them (bytes that are not UTF-8 are surrogate escapes: see `display`)."""

    name: str  # without a leading "./" or "/": the path inside the image, "" for the root
    type: str
    size: int
    mode: int
    mtime: int
    mtime_ns: int | None  # the fraction of a second, when a PAX record gives one
    uid: int
    gid: int
    uname: str
    gname: str
    linkname: str
    sha256: str | None
    pax: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Layer:
    entries: list[TarEntry]
    diff_id: str  # sha256 of the uncompressed tar, as read


def display(text: str) -> str:
    """Text from a tar as a str that survives JSON: bytes that were not UTF-8 become backslash escapes."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def parse_platform(value: str) -> Platform:
    match = _PLATFORM_RE.fullmatch(value)
    if not match:
        raise InputError(f"platform {excerpt(value)}: expected os/architecture[/variant], such as linux/amd64")
    os_name, arch, variant = match.groups()
    return Platform(os=os_name, architecture=arch, variant=variant)


def platform_matches(wanted: Platform, have: Platform) -> bool:
    if (wanted.os, wanted.architecture) != (have.os, have.architecture):
        return False
    if wanted.variant is None:
        return True
    # arm64 without a variant is v8 (as containerd normalises it).
    default = "v8" if have.architecture == "arm64" else None
    return wanted.variant == (have.variant or default)


# What a layer's bytes are read from: a blob file, a decompressor, or another checked stream.
_ByteStream = IO[bytes] | io.RawIOBase | io.BufferedIOBase


class CheckedStream(io.RawIOBase):
    """A stream that hashes and counts what passes through it. Reading never goes more than one byte past `size`
    (a blob longer than its descriptor, or a file that keeps growing, stops there). `verify` reads the rest and
    raises InputError unless all of it is what the descriptor promised."""

    def __init__(
        self,
        raw: _ByteStream,
        what: str,
        digest: str | None,
        size: int | None,
        watch_zeros: bool = False,
        error: type[BuildkitError] = InputError,
    ):
        self._raw = raw
        self._error = error
        self._what = what
        self._digest = digest
        self._size = size
        self._hash = hashlib.sha256()
        self.count = 0
        self.eof = False
        # Whether every byte so far was zero: an empty tar (only its end-of-archive blocks) is a valid layer.
        self.all_zeros = watch_zeros

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()

    def readinto(self, buffer: Any) -> int:
        if self.eof:
            return 0
        view = memoryview(buffer).cast("B")
        want = len(view) if self._size is None else min(len(view), self._size - self.count + 1)
        data = self._raw.read(want)
        if not data:
            self.eof = True
            return 0
        self.count += len(data)
        if self._size is not None and self.count > self._size:
            raise self._error(f"{self._what}: larger than the {self._size} bytes its descriptor says")
        self._hash.update(data)
        if self.all_zeros and data.count(0) != len(data):
            self.all_zeros = False
        view[: len(data)] = data
        return len(data)

    def drain(self) -> None:
        while self.read(CHUNK):
            pass

    def hexdigest(self) -> str:
        return "sha256:" + self._hash.hexdigest()

    def verify(self) -> None:
        self.drain()
        if self._size is not None and self.count != self._size:
            raise self._error(f"{self._what}: {self.count} bytes, but its descriptor says {self._size}")
        if self._digest is not None and self.hexdigest() != self._digest:
            raise self._error(
                f"{self._what}: content is {self.hexdigest()}, not {self._digest} as its descriptor says",
                hint="the layout is damaged or was altered; build it again",
            )


class OciLayout:
    """An OCI image layout on disk, a directory or a tar file (`docker save`'s tar too). Use it as a context manager:
    a tar stays open."""

    def __init__(self, path: Path | str):
        path = self.path = Path(path)
        self._tar: tarfile.TarFile | None = None
        self._members: dict[str, tarfile.TarInfo] = {}
        self._made: dict[str, bytes] = {}  # index.json and the manifest made for a docker-archive
        self.docker_archive = False
        if path.is_dir():
            return
        if not path.is_file():
            raise InputError(f"{path}: no OCI layout there (expected the tar file or directory of `--output type=oci`)")
        try:
            self._tar = tarfile.open(path, mode="r:", encoding="utf-8", errors="surrogateescape", tarinfo=BoundedInfo)
            self._index_tar()
            if "index.json" not in self._members and "manifest.json" in self._members:
                self._from_docker_archive()
        except (tarfile.TarError, OSError, EOFError) as exc:
            self.close()
            raise InputError(f"{path}: not a readable OCI layout tar ({exc})") from None
        except BaseException:
            self.close()
            raise

    def _index_tar(self) -> None:
        assert self._tar is not None
        count = 0
        while (member := self._tar.next()) is not None:
            count += 1
            if count > MAX_LAYOUT_ENTRIES:
                raise InputError(f"{self.path}: more than {MAX_LAYOUT_ENTRIES} entries; not an OCI layout")
            match = _TAR_NAME_RE.fullmatch(member.name)
            if not match:
                continue  # never used: only the names buildkit derives from digests are looked up
            name = match.group(1)
            if name in self._members:
                raise InputError(f"{self.path}: {name} appears twice in the tar; which one is meant is unclear")
            self._members[name] = member
        # The headers needed are kept above; the rest need not stay in memory. (TarFile.members is real but
        # undocumented, so typeshed omits it.)
        self._tar.members = []  # type: ignore[attr-defined]

    def _from_docker_archive(self) -> None:
        """A docker-archive (`docker save` before Docker 25: manifest.json, `<config sha256>.json`,
        `<v1 id>/layer.tar`) read as the OCI layout it describes. manifest.json must list exactly one image; its
        config is found by the sha256 its name claims (and checked against it when read), and each layer by the
        diff_id the config gives it in order (the layers are uncompressed, so a diff_id is the blob's own digest,
        checked when the layer is read). The index and manifest that point at them are made here: this layout's
        manifest digest is buildkit's, not a registry's."""
        with self._open("manifest.json", None, MAX_JSON_BYTES) as raw:
            data = raw.read(MAX_JSON_BYTES + 1)
        where = f"{self.path}: manifest.json"
        entries = _parse_json_value(data, where)
        if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
            count = len(entries) if isinstance(entries, list) else "no list of"
            raise InputError(f"{where}: expected exactly one image in a docker-archive, found {count} images")
        entry = _model(_ArchiveEntry, entries[0], where)
        config_name = entry.config
        config_member = self._members.get(config_name)
        if config_member is None:
            raise InputError(f"{self.path}: {config_name}, the config manifest.json names, is missing")
        config_descriptor = Descriptor(
            mediaType=DOCKER_ARCHIVE_CONFIG,
            digest="sha256:" + config_name.removesuffix(".json"),
            size=config_member.size,
        )
        self._members.setdefault(f"blobs/sha256/{config_name.removesuffix('.json')}", config_member)
        config = self.read_json(config_descriptor, "config")
        diff_ids = _diff_ids(config)
        if diff_ids is None or len(diff_ids) != len(entry.layers):
            raise InputError(
                f"{self.path}: config {config_descriptor.digest} does not list a sha256 diff_id for each of the "
                f"{len(entry.layers)} layers manifest.json names"
            )
        layers = []
        for name, diff_id in zip(entry.layers, diff_ids, strict=True):
            member = self._members.get(name)
            if member is None:
                raise InputError(f"{self.path}: {name}, a layer manifest.json names, is missing")
            # The same layer twice has one diff_id: either copy serves, since each read is checked against it.
            self._members.setdefault(f"blobs/sha256/{diff_id.removeprefix('sha256:')}", member)
            layers.append({"mediaType": DOCKER_ARCHIVE_LAYER, "digest": diff_id, "size": member.size})
        manifest = _canonical(
            {
                "schemaVersion": 2,
                "mediaType": DOCKER_ARCHIVE_MANIFEST,
                "config": config_descriptor.model_dump(by_alias=True, exclude_none=True),
                "layers": layers,
            }
        )
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        self._made[f"blobs/sha256/{digest.removeprefix('sha256:')}"] = manifest
        self._made["index.json"] = _canonical(
            {
                "schemaVersion": 2,
                "manifests": [{"mediaType": DOCKER_ARCHIVE_MANIFEST, "digest": digest, "size": len(manifest)}],
            }
        )
        self.docker_archive = True

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._tar = None

    def __enter__(self) -> OciLayout:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, name: str, expected_size: int | None, limit: int | None = None) -> IO[bytes]:
        """The file `name` (index.json or blobs/sha256/<hex>) as a binary stream, after checking it is a regular
        file of the expected size (and at most `limit` bytes)."""
        where = f"{self.path}: {name}"
        stream: IO[bytes]
        if name in self._made:
            stream = io.BytesIO(self._made[name])
            size = len(self._made[name])
        elif self._tar is not None:
            member = self._members.get(name)
            if member is None:
                raise InputError(f"{where} is missing from the layout")
            if not member.isreg():
                raise InputError(f"{where} is not a regular file in the tar")
            size = member.size
            extracted = self._tar.extractfile(member)
            assert extracted is not None
            stream = extracted
        else:
            path = self.path.joinpath(*name.split("/"))
            try:
                # No symlinks, and no blocking on a FIFO planted where a blob should be.
                stream = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb")
            except FileNotFoundError:
                raise InputError(f"{where} is missing from the layout") from None
            except OSError as exc:
                raise InputError(f"{where} cannot be read ({exc.strerror or exc})") from None
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                stream.close()
                raise InputError(f"{where} is not a regular file")
            size = info.st_size
        problem = None
        if limit is not None and size > limit:
            problem = f"{where} is {size} bytes, more than the {limit} allowed for it"
        elif expected_size is not None and size != expected_size:
            problem = f"{where} is {size} bytes, but its descriptor says {expected_size}"
        if problem:
            stream.close()
            raise InputError(problem)
        return stream

    def blob(self, descriptor: Descriptor, what: str, limit: int | None = None) -> CheckedStream:
        """The blob a descriptor names, as a stream that checks its size and digest (call `verify` at the end)."""
        hexdigest = descriptor.digest.removeprefix("sha256:")
        raw = self._open(f"blobs/sha256/{hexdigest}", descriptor.size, limit)
        return CheckedStream(raw, f"{self.path}: {what} {descriptor.digest}", descriptor.digest, descriptor.size)

    def read_index(self) -> dict[str, Any]:
        with self._open("index.json", None, MAX_JSON_BYTES) as raw:
            data = raw.read(MAX_JSON_BYTES + 1)
        return _parse_json(data, f"{self.path}: index.json")

    def read_json(self, descriptor: Descriptor, what: str) -> dict[str, Any]:
        if descriptor.size > MAX_JSON_BYTES:
            raise InputError(
                f"{self.path}: {what} {descriptor.digest} is {descriptor.size} bytes, more than the "
                f"{MAX_JSON_BYTES} allowed for it"
            )
        stream = self.blob(descriptor, what, MAX_JSON_BYTES)
        with stream:
            data = stream.readall()  # at most one byte more than the descriptor's size, which is within the bound
            stream.verify()
        return _parse_json(data, f"{self.path}: {what} {descriptor.digest}")

    def read_layer(self, descriptor: Descriptor, diff_id: str, what: str) -> Layer:
        """Every entry of a layer, in tar order, with regular files' content hashed on the way. The blob is checked
        against its descriptor and the uncompressed stream against `diff_id` before this returns."""
        entries: list[TarEntry] = []
        measured = self.walk_layer(descriptor, diff_id, what, lambda tar, member: entries.append(_entry(tar, member)))
        return Layer(entries, measured)

    def walk_layer(
        self,
        descriptor: Descriptor,
        diff_id: str,
        what: str,
        visit: Callable[[tarfile.TarFile, tarfile.TarInfo], None],
    ) -> str:
        """Hand every entry of a layer to `visit`, in tar order, with the tar (to `extractfile` a regular file's
        content; a layer is streamed, never held). Afterwards the blob is checked against its descriptor and the
        uncompressed stream against `diff_id`: a caller that acts on entries as they come must discard what it made
        when this raises. `visit` raises a BuildkitError to stop. Returns the uncompressed stream's digest."""
        if descriptor.media_type not in LAYER_COMPRESSION:
            raise InputError(
                f"{self.path}: {what} {descriptor.digest} has media type {excerpt(descriptor.media_type)}, "
                "which is not a layer type buildkit can read (tar, tar+gzip, tar+zstd)"
            )
        with self.blob(descriptor, what) as raw:
            return walk_layer(raw, descriptor.media_type, f"{self.path}: {what} {descriptor.digest}", diff_id, visit)


def walk_layer(
    raw: CheckedStream,
    media_type: str,
    what: str,
    diff_id: str | None,
    visit: Callable[[tarfile.TarFile, tarfile.TarInfo], None],
    error: type[BuildkitError] = InputError,
    budget: Budget | None = None,
) -> str:
    """Hand every entry of the layer blob `raw` (its media type one of LAYER_COMPRESSION's) to `visit`, then check
    the blob against its descriptor and the uncompressed stream against `diff_id` (None: not checked). A layer that
    is not a readable tar raises `error`. Returns the uncompressed stream's digest. `budget` hears every
    decompressed read (with the compressed bytes behind it) and every entry, as they come: a bomb is refused
    within the read that crosses its limit, never after it inflated."""
    try:
        decompressed = _decompress(raw, LAYER_COMPRESSION[media_type], media_type)
        if budget is not None:
            decompressed = _Metered(decompressed, raw, budget)
        tar_stream = CheckedStream(decompressed, f"{what} (uncompressed)", diff_id, None, watch_zeros=True)
        _walk_entries(tar_stream, what, visit, budget)
        tar_stream.drain()
    except BuildkitError:
        raise
    except (*_READ_ERRORS, *_zstd_errors()) as exc:
        # A blob that is not what its descriptor says is the clearer error, so check that first.
        raw.verify()
        raise error(f"{what} is not a readable layer ({excerpt(str(exc), 120)})") from None
    raw.verify()
    tar_stream.verify()
    return tar_stream.hexdigest()


# What ISA-L raises for a broken deflate stream (isal's stubs declare it an instance of Exception; it is a class).
_INFLATE_ERROR: type[Exception] = isal_zlib.error  # type: ignore[assignment]
_READ_ERRORS: tuple[type[Exception], ...] = (
    tarfile.TarError,
    OSError,
    EOFError,
    zlib.error,
    ValueError,
    _INFLATE_ERROR,
)


def _zstd_errors() -> tuple[type[Exception], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


class _Metered(io.RawIOBase):
    """A decompressed stream that reports each read to its Budget, with the compressed bytes read so far in all:
    this layer's and those of the layers the budget heard before it (the ratio is of the whole read; against this
    layer's bytes alone, the first kilobytes of a small layer under a large one looked like a bomb)."""

    def __init__(self, inner: _ByteStream, compressed: CheckedStream, budget: Budget):
        self._inner, self._compressed, self._budget = inner, compressed, budget
        self._before = budget.compressed

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._inner.read(len(view))
        self._budget.inflate(len(data), self._before + self._compressed.count)
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._inner.close()
        super().close()


def _decompress(raw: CheckedStream, compression: str, media_type: str) -> _ByteStream:
    if compression == "none":
        return raw
    if compression == "gzip":
        return igzip.IGzipFile(fileobj=raw, mode="rb")  # gzip's reader on ISA-L's inflate: twice zlib's speed
    try:
        import zstandard  # optional: buildx writes zstd layers only when asked to
    except ImportError:
        raise InputError(
            f"layer media type {media_type} needs the zstandard package, which is not installed",
            hint="pip install zstandard",
        ) from None
    # zstandard reads any object with read(); its stubs name only IO[bytes], which io.RawIOBase is not.
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)  # type: ignore[arg-type]


def _walk_entries(
    stream: CheckedStream,
    what: str,
    visit: Callable[[tarfile.TarFile, tarfile.TarInfo], None],
    budget: Budget | None = None,
) -> None:
    try:
        tar = tarfile.open(fileobj=stream, mode="r|", encoding="utf-8", errors="surrogateescape", tarinfo=BoundedInfo)
    except tarfile.ReadError:
        stream.drain()
        if stream.all_zeros:
            return  # an empty layer: nothing but end-of-archive blocks
        raise
    count = 0
    with tar:
        while (member := tar.next()) is not None:
            # TarFile keeps every header it read; `visit` takes what it needs. (typeshed omits .members, see above)
            tar.members = []  # type: ignore[attr-defined]
            count += 1
            if budget is not None:
                budget.entry()
            if count > MAX_LAYER_ENTRIES:
                raise InputError(f"{what}: more than {MAX_LAYER_ENTRIES} entries in one layer")
            visit(tar, member)


def _entry(tar: tarfile.TarFile, member: tarfile.TarInfo) -> TarEntry:
    content = None
    if member.isreg():
        digest = hashlib.sha256()
        source = tar.extractfile(member)
        assert source is not None
        while chunk := source.read(CHUNK):
            digest.update(chunk)
        content = "sha256:" + digest.hexdigest()
    pax = member.pax_headers
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    return TarEntry(
        name=name.strip("/") if name != "." else "",
        type=_TAR_TYPES.get(member.type, f"other:{member.type.decode('latin-1')}"),
        size=member.size,
        mode=member.mode,
        mtime=_pax_seconds(pax.get("mtime"), member.mtime),
        mtime_ns=_pax_nanoseconds(pax.get("mtime")),
        uid=member.uid,
        gid=member.gid,
        uname=member.uname,
        gname=member.gname,
        linkname=member.linkname,
        sha256=content,
        pax=tuple(sorted((k, v) for k, v in pax.items() if k not in _PAX_MODELLED)),
    )


def _pax_seconds(value: str | None, parsed: float) -> int:
    """Whole seconds of a PAX time, from its text (the float tarfile makes of it can round)."""
    whole = (value or "").partition(".")[0]
    try:
        return int(whole)
    except ValueError:
        return math.floor(parsed)


def _pax_nanoseconds(value: str | None) -> int | None:
    """The fraction of a PAX time ("1700000000.5" -> 500000000), exactly (tarfile keeps only a float)."""
    if value is None or "." not in value:
        return None
    fraction = value.partition(".")[2]
    if not fraction.isdigit():
        return None
    return int(fraction[:9].ljust(9, "0"))


def _parse_json(data: bytes, what: str) -> dict[str, Any]:
    value = _parse_json_value(data, what)
    if not isinstance(value, dict):
        raise InputError(f"{what} is not a JSON object")
    return value


def _parse_json_value(data: bytes, what: str) -> Any:
    if len(data) > MAX_JSON_BYTES:
        raise InputError(f"{what} is more than the {MAX_JSON_BYTES} bytes allowed for it")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{what} is not JSON ({excerpt(str(exc), 120)})") from None
    _check_shape(value, what)
    return value


def _canonical(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _diff_ids(config: dict[str, Any]) -> list[str] | None:
    """The config's rootfs.diff_ids when each is a sha256 digest; None otherwise."""
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if isinstance(diff_ids, list) and all(isinstance(d, str) and DIGEST_RE.fullmatch(d) for d in diff_ids):
        return diff_ids
    return None


def _check_shape(value: Any, what: str) -> None:
    """Refuse what later steps cannot handle: nesting deeper than real documents have (the comparison walks them
    recursively), and strings that are not Unicode (JSON's lone "\\udc80" escapes: they cannot be written back)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InputError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(item, dict):
            strings: list[Any] = list(item)
            children: Any = item.values()
        elif isinstance(item, list):
            strings, children = [], item
        else:
            strings, children = [item], ()
        for text in strings:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise InputError(f"{what} has a string that is not valid Unicode") from None
        stack.extend((child, depth + 1) for child in children)


def _model(model: type[BaseModel], value: dict[str, Any], what: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top)"
        raise InputError(f"{what}: {where}: {first['msg']}") from None


def resolve_image(layout: OciLayout, platform: str) -> Image:
    """The image for `platform` in a layout: index.json -> (one nested index, as buildx writes with attestations)
    -> the manifest for that platform (attestation manifests skipped) -> its config."""
    wanted = parse_platform(platform)
    source = str(layout.path)
    index = _model(_Index, layout.read_index(), f"{source}: index.json")
    candidates: list[Descriptor] = []
    others: set[str] = set()

    def consider(descriptor: Descriptor) -> None:
        if descriptor.is_attestation():
            return
        if descriptor.platform is None or platform_matches(wanted, descriptor.platform):
            candidates.append(descriptor)  # without a platform, the config's os and architecture decide below
        else:
            others.add(strip_controls(descriptor.platform))

    for descriptor in index.manifests:
        if descriptor.media_type in INDEX_TYPES:
            nested = _model(_Index, layout.read_json(descriptor, "index"), f"{source}: index {descriptor.digest}")
            for inner in nested.manifests:
                if inner.media_type in MANIFEST_TYPES:
                    consider(inner)  # an index nested deeper is not followed: buildx never writes one
        elif descriptor.media_type in MANIFEST_TYPES:
            consider(descriptor)
    unique = list({d.digest: d for d in candidates}.values())
    if not unique:
        has = f"it has {', '.join(sorted(others))}" if others else "it has no image manifest"
        raise InputError(f"{source}: no image for platform {wanted} ({has})")
    if len(unique) > 1:
        raise InputError(
            f"{source}: {len(unique)} different images match platform {wanted}; name the platform exactly "
            "(with its variant)"
        )
    chosen = unique[0]
    manifest = layout.read_json(chosen, "manifest")
    parsed = _model(_Manifest, manifest, f"{source}: manifest {chosen.digest}")
    if parsed.config.media_type not in CONFIG_TYPES:
        raise InputError(
            f"{source}: manifest {chosen.digest} has a config of media type {excerpt(parsed.config.media_type)}, "
            "not an image config"
        )
    config = layout.read_json(parsed.config, "config")
    if chosen.platform is None:
        have = Platform(
            os=str(config.get("os", "")),
            architecture=str(config.get("architecture", "")),
            variant=config.get("variant") if isinstance(config.get("variant"), str) else None,
        )
        if not platform_matches(wanted, have):
            raise InputError(f"{source}: no image for platform {wanted} (it has {excerpt(str(have), 80)})")
    diff_ids = _diff_ids(config)
    if diff_ids is None or len(diff_ids) != len(parsed.layers):
        raise InputError(
            f"{source}: config {parsed.config.digest} does not list a sha256 diff_id for each of the "
            f"{len(parsed.layers)} layers in rootfs.diff_ids"
        )
    return Image(source, chosen, manifest, parsed.config, config, parsed.layers)
