"""An in-memory build engine (buildkit.world.engine.ImageEngine) for testing the stages' judgement without Docker.

An image is its `docker image inspect` attributes (Id, Config's Labels and Env, RepoDigests, ...), its files (path ->
bytes, for archives, `sha256sum` and `test -d`) and the answers its programs give (argv -> exit code and output),
which a test copies from what a real image answered (each with where it was seen). A command the image has no answer
for fails as Docker fails a container whose executable is missing. Every call is recorded in `calls`.
"""

from __future__ import annotations

import copy
import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildkit.world.engine import ContainerRefused, ImageInfo

# What Docker 28 says when a container's executable is not in the image (the start fails; run_check gives 127).
NOT_FOUND = (
    "failed to create task for container: failed to create shim task: OCI runtime create failed: runc create "
    'failed: unable to start container process: error during container init: exec: "{0}": executable file not '
    "found in $PATH: unknown"
)
# What Docker says when asked for GPUs without the NVIDIA container runtime (moby daemon/devices.go).
NO_GPU_RUNTIME = 'could not select device driver "" with capabilities: [[gpu]]'
# What a registry without the image answers a pull (Docker's words for a 404 or a denied pull).
PULL_DENIED = (
    "pull access denied for {0}, repository does not exist or may require 'docker login': denied: requested access "
    "to the resource is denied"
)


@dataclass
class MemoryImage:
    attrs: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)
    answers: dict[tuple[str, ...], tuple[int, str]] = field(default_factory=dict)
    gpu_answers: dict[tuple[str, ...], tuple[int, str]] = field(default_factory=dict)  # with --gpus

    def run(self, command: list[str], gpus: bool) -> tuple[int, str]:
        key = tuple(command)
        if gpus and key in self.gpu_answers:
            return self.gpu_answers[key]
        if key in self.answers:
            return self.answers[key]
        if command[0] == "sha256sum" and len(command) == 2 and command[1] in self.files:
            return 0, f"{hashlib.sha256(self.files[command[1]]).hexdigest()}  {command[1]}"
        if command[0] == "sha256sum" and len(command) == 2:
            return 1, f"sha256sum: {command[1]}: No such file or directory"
        if command[:2] == ["test", "-d"] and len(command) == 3:
            inside = command[2].rstrip("/") + "/"
            return (0 if any(path.startswith(inside) for path in self.files) else 1), ""
        return 127, NOT_FOUND.format(command[0])

    def tar(self, path: str) -> bytes:
        """`path` as `docker cp` sends it: a tar whose members start with the path's last part."""
        top = path.rstrip("/")
        base = top.rsplit("/", 1)[-1]
        members = {p: data for p, data in self.files.items() if p == top or p.startswith(top + "/")}
        if not members:
            raise ContainerRefused(f"Could not find the file {path} in container")
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for name, data in sorted(members.items()):
                info = tarfile.TarInfo(base + name[len(top) :])
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return out.getvalue()


@dataclass
class MemoryEngine:
    """The images the engine holds, those a registry would give a pull, and whether containers can get GPUs."""

    images: dict[str, MemoryImage] = field(default_factory=dict)
    registry: dict[str, MemoryImage] = field(default_factory=dict)
    platforms: dict[str, str] = field(default_factory=dict)  # a registry ref of an index holding only this platform
    gpu_runtime: bool = False
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def version(self) -> dict[str, Any]:
        self.calls.append(("version",))
        return {"Version": "28.5.1", "ApiVersion": "1.51"}

    def info(self) -> dict[str, Any]:
        self.calls.append(("info",))
        return {"DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]], "DockerRootDir": "/var/lib/docker"}

    def containerd_store(self) -> bool:
        return any("io.containerd.snapshotter" in str(v) for pair in self.info()["DriverStatus"] for v in pair)

    def free_bytes(self) -> tuple[str, int]:
        self.calls.append(("free_bytes",))
        return "/var/lib/docker", 100 << 30

    def image_attrs(self, ref: str) -> dict[str, Any] | None:
        self.calls.append(("image_attrs", ref))
        found = self.images.get(ref)
        return copy.deepcopy(found.attrs) if found else None

    def image(self, ref: str) -> ImageInfo | None:
        attrs = self.image_attrs(ref)
        if attrs is None:
            return None
        config = attrs.get("Config") or {}
        layers = (attrs.get("RootFS") or {}).get("Layers") or []
        return ImageInfo(attrs.get("Id", ""), int(attrs.get("Size") or 0), len(layers), config.get("Labels") or {})

    def history(self, ref: str) -> list[dict[str, Any]]:
        self.calls.append(("history", ref))
        return []

    def run_check(self, image: str, command: list[str], gpus: bool = False) -> tuple[int, str]:
        self.calls.append(("run_check", image, tuple(command), gpus))
        if image not in self.images:
            raise ContainerRefused(f"No such image: {image}")
        if gpus and not self.gpu_runtime:
            raise ContainerRefused(NO_GPU_RUNTIME)
        return self.images[image].run(command, gpus)

    def archive(self, image: str, path: str) -> Iterator[bytes]:
        self.calls.append(("archive", image, path))
        if image not in self.images:
            raise ContainerRefused(f"No such image: {image}")
        yield self.images[image].tar(path)

    def pull(self, ref: str, auth: dict[str, str], platform: str | None = None) -> str | None:
        self.calls.append(("pull", ref, tuple(sorted(auth))))
        if ref not in self.registry:
            return PULL_DENIED.format(ref.partition(":")[0])
        only = self.platforms.get(ref)
        if only is not None and (platform or "linux/amd64") != only:  # Docker 20.10's words, this machine amd64
            return f"no matching manifest for {platform or 'linux/amd64'} in the manifest list entries"
        self.images[ref] = self.registry[ref]
        return None

    def save_image(
        self,
        ref: str,
        dest: Path,
        limit: int,
        on_bytes: Callable[[int], None] | None = None,
        reported: Path | None = None,
    ) -> int:
        self.calls.append(("save_image", ref))
        data = self.images[ref].tar("/")
        dest.write_bytes(data[:limit])
        if on_bytes:
            on_bytes(len(data))
        return len(data)
