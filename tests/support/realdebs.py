"""Real glibc and libstdc++ from Ubuntu's archive, for the base-image checks: fetched once into the test artifact
cache (tests/support/realwheels.py's `cache_dir`), checked by sha256, and stacked into image layers the way an Ubuntu
base image holds them.

Each package is the one its release's `main` pocket lists (http://archive.ubuntu.com/ubuntu/dists/<release>/main/
binary-amd64/Packages.gz: Filename, Size, SHA256; read 2026-11-24). A release pocket never changes after the
release, so these URLs and hashes hold. 24.04 (noble) is the distribution of the reference base image
(nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04); 18.04 (bionic) is an older one whose glibc (2.27)
is older than vLLM 0.14.0's manylinux_2_31 wheel needs.
"""

from __future__ import annotations

import fcntl
import functools
import gzip
import hashlib
import io
import lzma
import os
import tarfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard

from tests.support.realwheels import cache_dir

ARCHIVE = "http://archive.ubuntu.com/ubuntu/"
GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


@dataclass(frozen=True)
class Deb:
    filename: str  # the Packages index's Filename, under ARCHIVE
    size: int
    sha256: str


NOBLE = (
    Deb("pool/main/g/glibc/libc6_2.39-0ubuntu8_amd64.deb", 3264806,
        "af36c7ac770770fe3d3c10e85d6bc538e76e57570ba7db7d397fb9f654783ef3"),
    Deb("pool/main/g/gcc-14/libstdc++6_14-20240412-0ubuntu1_amd64.deb", 795158,
        "4863e880d6ee538e4734c430c5579c1ac933b88a42c25bc9980d0f148c54b21e"),
    Deb("pool/main/g/gcc-14/libgcc-s1_14-20240412-0ubuntu1_amd64.deb", 78484,
        "a39efdcaa2245f026dc3254ce14fcff255fc430a17064632b6ba7c5da974a912"),
)  # fmt: skip
BIONIC = (
    Deb("pool/main/g/glibc/libc6_2.27-3ubuntu1_amd64.deb", 2824500,
        "1e1eb86fd646aa68f7144ec692b837b6b352d215880c6a2d0c92c19d36938427"),
    Deb("pool/main/g/gcc-8/libstdc++6_8-20180414-1ubuntu2_amd64.deb", 399108,
        "8668c100a679d68520256f9145ef6f9cf3912aa574605884fe866a4962415422"),
    Deb("pool/main/g/gcc-8/libgcc1_8-20180414-1ubuntu2_amd64.deb", 40980,
        "c5a6df527fdfe0da45ff0538414535a04a6753e93a9f5902689cf1a73265423b"),
)  # fmt: skip
# Ubuntu 24.04's root has merged /usr (the ubuntu:24.04 image: /lib -> usr/lib, /lib64 -> usr/lib64, /bin -> usr/bin);
# 18.04's does not.
MERGED_USR = (("lib", "usr/lib"), ("lib64", "usr/lib64"), ("bin", "usr/bin"), ("sbin", "usr/sbin"))


def deb(package: Deb) -> Path:
    """The package in the artifact cache, fetched from Ubuntu's archive when missing or not its bytes."""
    root = cache_dir() / "ubuntu"
    root.mkdir(parents=True, exist_ok=True)
    path = root / package.filename.rsplit("/", 1)[1]
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == package.sha256:
            return path
        try:
            with urllib.request.urlopen(ARCHIVE + package.filename, timeout=120) as answer:
                data = answer.read(package.size + 1)
        except OSError as exc:
            data, problem = b"", str(exc)
        else:
            problem = f"{len(data)} bytes with sha256 {hashlib.sha256(data).hexdigest()}"
        if hashlib.sha256(data).hexdigest() != package.sha256:
            message = f"could not fetch {ARCHIVE}{package.filename} ({problem})"
            if os.environ.get("CI") or os.environ.get("BUILDKIT_ENGINE") == "required":
                pytest.fail(message)  # CI needs the real packages: a skip there would hide the test
            pytest.skip(message)
        tmp = path.with_suffix(".part")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return path


def data_tar(path: Path) -> tarfile.TarFile:
    """The package's files: the data.tar.* member of the .deb (an ar archive)."""
    blob = path.read_bytes()
    assert blob[:8] == b"!<arch>\n", path
    at = 8
    while at < len(blob):
        name, size = blob[at : at + 16].decode().strip().rstrip("/"), int(blob[at + 48 : at + 58])
        body = blob[at + 60 : at + 60 + size]
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
            elif name.endswith(".xz"):
                body = lzma.decompress(body)
            return tarfile.open(fileobj=io.BytesIO(body))
        at += 60 + size + size % 2
    raise AssertionError(f"{path}: no data.tar member")


def layer(entries: Sequence[tuple[tarfile.TarInfo, bytes | None]]) -> tuple[str, bytes]:
    """A gzip layer of the entries, as (media type, bytes)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in entries:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return GZIP_LAYER, gzip.compress(out.getvalue(), mtime=0)


def package_entries(packages: tuple[Deb, ...]) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    entries = []
    for package in packages:
        with data_tar(deb(package)) as tar:
            for info in tar.getmembers():
                content = tar.extractfile(info).read() if info.isreg() else None  # type: ignore[union-attr]
                entries.append((info, content))
    return entries


def symlink(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info, None


def file(name: str, content: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    return info, content


def ubuntu_layers(release: str) -> list[tuple[str, bytes]]:
    """An Ubuntu base image's layers, bottom first: the distribution's (its real libc6, libstdc++6 and libgcc),
    then a layer as a CUDA image adds one (files elsewhere, a copy of libstdc++ in an application's own directory,
    which the loader never looks in), then an empty one (an ENV step writes a layer with no files in BuildKit's
    images as well). Made once per test process (about 2 s of a core each: the packages unpacked, the layer
    gzipped), a new list each call."""
    return list(_ubuntu_layers(release))


@functools.cache
def _ubuntu_layers(release: str) -> tuple[tuple[str, bytes], ...]:
    if release == "noble":
        bottom = layer([symlink(name, target) for name, target in MERGED_USR] + package_entries(NOBLE))
    else:
        bottom = layer(package_entries(BIONIC))
    nsight = next(c for i, c in package_entries(NOBLE[1:2]) if i.name.endswith("libstdc++.so.6.0.33"))
    cuda = layer(
        [
            file("usr/local/cuda/version.json", b'{"cuda": {"version": "12.9.0"}}\n'),
            file("opt/nvidia/nsight-systems/host-linux-x64/libstdc++.so.6", nsight or b""),
        ]
    )
    return (bottom, cuda, layer([]))
