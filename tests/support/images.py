"""OCI images written by hand for the tests: layers as tars of `F` entries, and `image`, which lays them out as
buildx does (a nested index with an attestation manifest). Shared by the imagediff and unpack tests."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
TAR = "application/vnd.oci.image.layer.v1.tar"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
EPOCH = "1970-01-01T00:00:00Z"


@dataclass
class F:
    """One entry of a test layer."""

    path: str
    data: bytes = b""
    mode: int = 0o644
    mtime: float = 0
    kind: bytes = tarfile.REGTYPE
    linkname: str = ""
    uid: int = 0


def layer_tar(files: list[F]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, errors="surrogateescape") as tar:
        for f in files:
            info = tarfile.TarInfo(f.path)
            info.type, info.mode, info.mtime, info.uid, info.linkname = f.kind, f.mode, f.mtime, f.uid, f.linkname
            if f.kind == tarfile.REGTYPE:
                info.size = len(f.data)
                tar.addfile(info, io.BytesIO(f.data))
            else:
                tar.addfile(info)
    return buffer.getvalue()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Spec:
    """An OCI layout in memory: index.json and the blobs by hex digest. Tests may alter the blobs before writing."""

    index: dict
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifest: str = ""
    config: str = ""
    layers: list[str] = field(default_factory=list)

    def add(self, data: bytes, media_type: str, **extra) -> dict:
        self.blobs[sha(data).removeprefix("sha256:")] = data
        return {"mediaType": media_type, "digest": sha(data), "size": len(data), **extra}

    def write(self, dest: Path, form: str = "tar", extra: dict[str, bytes] | None = None, skip=()) -> Path:
        files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": json.dumps(self.index).encode()}
        files |= {f"blobs/sha256/{h}": data for h, data in self.blobs.items() if h not in skip}
        files |= extra or {}
        if form == "dir":
            for name, data in files.items():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                (dest / name).write_bytes(data)
            return dest
        return write_tar(dest.with_suffix(".tar"), files)


def write_tar(path: Path, files: dict[str, bytes]) -> Path:
    """A plain tar of regular files, in the order given."""
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def image(
    layers: list[list[F]],
    *,
    created: str = EPOCH,
    commands: list[str] | None = None,
    media: list[str] | None = None,
    platforms: tuple[str, ...] = ("linux/amd64",),
    nested: bool = True,
    attestation: str = "invocation 1",
    labels: dict[str, str] | None = None,
    diff_ids: list[str] | None = None,
) -> Spec:
    """An image as buildx writes it: index.json -> a nested index -> the image manifest for each platform and an
    attestation manifest (whose content, like a real provenance's, changes from build to build)."""
    spec = Spec(index={})
    commands = commands or [f"RUN step {i}" for i in range(len(layers))]
    media = media or [GZIP] * len(layers)
    tars = [layer_tar(files) for files in layers]
    blobs = [gzip.compress(t, mtime=0) if m == GZIP else t for t, m in zip(tars, media, strict=True)]
    layer_descriptors = [spec.add(blob, m) for blob, m in zip(blobs, media, strict=True)]
    history: list[dict[str, str | bool]] = [{"created": created, "created_by": c} for c in commands]
    history.insert(1, {"created": created, "created_by": "ENV A=1", "empty_layer": True})  # makes no layer
    manifests = []
    for platform in platforms:
        os_name, arch = platform.split("/")
        config = {
            "architecture": arch,
            "os": os_name,
            "created": created,
            "config": {"Env": ["PATH=/bin"], "Labels": labels or {}},
            "rootfs": {"type": "layers", "diff_ids": diff_ids or [sha(t) for t in tars]},
            "history": history,
        }
        config_descriptor = spec.add(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_descriptor,
            "layers": layer_descriptors,
        }
        descriptor = spec.add(
            json.dumps(manifest).encode(),
            "application/vnd.oci.image.manifest.v1+json",
            platform={"architecture": arch, "os": os_name},
        )
        manifests.append(descriptor)
        if platform == "linux/amd64":
            spec.manifest, spec.config = descriptor["digest"], config_descriptor["digest"]
            spec.layers = [d["digest"] for d in layer_descriptors]
    statement = spec.add(json.dumps({"predicate": attestation}).encode(), "application/vnd.in-toto+json")
    empty = spec.add(b"{}", "application/vnd.oci.empty.v1+json")
    attestation_manifest = {"schemaVersion": 2, "config": empty, "layers": [statement]}
    manifests.insert(
        0,
        spec.add(
            json.dumps(attestation_manifest).encode(),
            "application/vnd.oci.image.manifest.v1+json",
            platform={"architecture": "unknown", "os": "unknown"},
            annotations={"vnd.docker.reference.type": "attestation-manifest"},
        ),
    )
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
    if nested:
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [spec.add(json.dumps(index).encode(), "application/vnd.oci.image.index.v1+json")],
        }
    spec.index = index
    return spec
