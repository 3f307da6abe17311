"""Two images compared (buildkit/image/diff.py makes it): identical or not and, if not, the manifest and config
fields, the layers and the files that differ. Data for the build record's reproducibility check; every string in it
that came from an image is untrusted text."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

Change = Literal["added", "removed", "changed"]


class FieldDifference(BaseModel):
    """One value that differs between two JSON documents (manifest or config). `path` is dotted
    ("history.3.created", "rootfs.diff_ids.2"; keys that are not plain words in brackets: `config.Labels["a.b"]`);
    `a` or `b` is null when the value is only in the other document."""

    model_config = ConfigDict(extra="forbid")

    path: str
    change: Change
    a: JsonValue = None
    b: JsonValue = None


class FileEntry(BaseModel):
    """A file as a layer's tar records it."""

    model_config = ConfigDict(extra="forbid")

    type: str  # file, dir, symlink, hardlink, char, block, fifo
    size: int
    mode: str  # octal, as in the tar header: "0644" (some writers add the type bits: "100644")
    mtime: int  # seconds since the epoch
    mtime_ns: int | None = None  # the fraction of a second, in nanoseconds, when a PAX record gives one
    uid: int
    gid: int
    uname: str = ""
    gname: str = ""
    linkname: str | None = None  # symlinks and hardlinks
    sha256: str | None = None  # of the content, regular files only
    pax: dict[str, str] = {}  # PAX records with no field above: xattrs (SCHILY.xattr.*), atime, ctime...


class FileDifference(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layer: int  # 0-based index in the manifest's layers
    path: str  # absolute in the image: "/stamp"
    change: Change
    a: FileEntry | None
    b: FileEntry | None
    fields: list[str] = []  # changed only: which of FILE_FIELDS differ


class LayerDifference(BaseModel):
    """A layer index at which the two manifests name different blobs (or only one has a layer)."""

    model_config = ConfigDict(extra="forbid")

    index: int  # 0-based
    digest_a: str | None
    digest_b: str | None
    media_type_a: str | None
    media_type_b: str | None
    diff_id_a: str | None  # the uncompressed digests, from the configs
    diff_id_b: str | None
    created_by: str | None  # the config history's command for this layer (image a's; b's when a has none)
    compared: bool  # whether the files were compared
    file_differences: int | None = None  # how many, listed or not; None when not compared
    note: str | None = None  # when the blobs differ but no file does: where the difference is instead


class ImageComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    identical: bool
    platform: str
    manifest_digest_a: str
    manifest_digest_b: str
    config_digest_a: str
    config_digest_b: str
    manifest_differences: list[FieldDifference] = []  # besides the config's and layers' digests and sizes
    config_differences: list[FieldDifference] = []
    layers_a: int
    layers_b: int
    first_differing_layer: int | None = None  # 0-based
    layers: list[LayerDifference] = []  # every differing layer, in order
    files: list[FileDifference] = []  # in the compared layers, by layer then path
    files_truncated: int = 0  # file differences found but not listed
