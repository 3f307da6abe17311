"""The glibc, libstdc++ and libgcc_s the base image provides, read from its layers before the build.

vLLM's modules ask for versioned symbols (`memcpy@GLIBC_2.14`, `...@GLIBCXX_3.4.21`); the loader finds them in the
libc.so.6, libstdc++.so.6 and libgcc_s.so.1 of the image. Which files those are is decided by the topmost layer
that writes them, so the base image's layers are read from the top (image/layerfiles.py) until each name is decided:
one layer when the image's last step upgraded them, all of them (cuda-dl-base: gigabytes) when they come from the
distribution's own layer at the bottom. The answer -- the version nodes each library defines -- is cached by the
platform manifest's digest (`<cache>/gpu-abi/`), so a pinned base is read once. NeMo-RL's Dockerfile installs
packages on top of the base, but a distribution release never adds a symbol version to its glibc or libstdc++ in an
update; `verify` checks the built image's own libraries all the same.
"""

from __future__ import annotations

import io
import re
from functools import partial
from pathlib import Path
from typing import Annotated, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from buildkit.files import write_atomic
from buildkit.gpu import abi
from buildkit.gpu.dynsym import read_symbols
from buildkit.gpu.elfsections import GpuFileError
from buildkit.image.layerfiles import LayerBlob, find
from buildkit.image.ocilayout import display
from buildkit.models.lock import ImageFact
from buildkit.world.registry import Registry

NAMES = ("libc.so.6", "libstdc++.so.6", "libgcc_s.so.1")
# The files those names are, or lead to (glibc before 2.34 made libc.so.6 a symlink to libc-2.27.so, say).
CAPTURE = re.compile(r"libc\.so\.6|libc-[0-9.]{1,16}\.so|libstdc\+\+\.so\.6(?:\.[0-9]{1,6}){0,3}|libgcc_s\.so\.1")
MAX_FILE = 64 << 20  # libstdc++.so.6.0.33 is 2.5 MB, libc.so.6 2.1 MB (Ubuntu 24.04)
CACHE_FORMAT = 1
_TRIPLES = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu"}

_VERSION_NAME_RE = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
_VersionName = Annotated[str, Field(pattern=f"^{_VERSION_NAME_RE.pattern}$")]


class BaseLibrary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: Annotated[str, Field(max_length=4096)]
    layer: Annotated[int, Field(ge=0, le=1000)]  # the manifest's index (0: the bottom layer)
    versions: Annotated[list[_VersionName], Field(max_length=4096)]  # the version nodes it defines


class BaseLibraries(BaseModel):
    """What the base image provides, as cached; a library the image lacks is None."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    manifest_digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    libraries: dict[str, BaseLibrary | None]
    layers: Annotated[int, Field(ge=0, le=1000)]
    layers_read: Annotated[int, Field(ge=0, le=1000)]
    bytes_read: Annotated[int, Field(ge=0)]


class System(NamedTuple):
    versions: dict[str, tuple[int, ...]]  # the newest of each family: {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33)...}
    against: str  # what the check names: "glibc/libstdc++/libgcc_s of the base image (GLIBC_2.39, ...)"


def candidates(platform: str, name: str) -> list[str]:
    """Where the loader looks for `name`, in order: the multiarch directories, then lib64 and lib."""
    triple = _TRIPLES.get(platform.split("/")[1] if "/" in platform else "", "")
    dirs = [f"usr/lib/{triple}", f"lib/{triple}"] if triple else []
    return [f"{d}/{name}" for d in [*dirs, "usr/lib64", "lib64", "usr/lib", "lib"]]


def cache_path(cache_dir: Path, manifest_digest: str) -> Path:
    return cache_dir / "gpu-abi" / f"base-{manifest_digest.removeprefix('sha256:')}.v{CACHE_FORMAT}.json"


def cached(cache_dir: Path, fact: ImageFact) -> BaseLibraries | None:
    path = cache_path(cache_dir, fact.manifest_digest)
    try:
        if path.stat().st_size > 1 << 20:
            return None
        found = BaseLibraries.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None  # none yet, or broken: read from the layers again
    return found if found.manifest_digest == fact.manifest_digest else None


def read(registry: Registry, fact: ImageFact, cache_dir: Path) -> BaseLibraries:
    """The libraries of the base image `fact` names, from the cache or its layers (then cached)."""
    hit = cached(cache_dir, fact)
    if hit is not None:
        return hit
    refs = registry.layers(fact)
    blobs = [LayerBlob(r.digest, r.size, r.media_type, partial(registry.layer, fact, r)) for r in refs]
    wanted = {name: candidates(fact.platform, name) for name in NAMES}
    scan = find(blobs, wanted, CAPTURE, _version_nodes, f"base image {fact.pinned}", MAX_FILE)
    libraries: dict[str, BaseLibrary | None] = {}
    for name, hit_ in scan.found.items():
        if hit_ is None or isinstance(hit_.value, str):
            libraries[name] = None if hit_ is None else BaseLibrary(path=display(hit_.path), layer=hit_.layer,
                                                                     versions=[])  # fmt: skip
        else:  # (a path from a tar may hold bytes that are not UTF-8: shown escaped)
            libraries[name] = BaseLibrary(path=display(hit_.path), layer=hit_.layer, versions=hit_.value)
    out = BaseLibraries(manifest_digest=fact.manifest_digest, libraries=libraries, layers=scan.layers,
                        layers_read=scan.layers_read, bytes_read=scan.bytes_read)  # fmt: skip
    path = cache_path(cache_dir, fact.manifest_digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, out.model_dump_json(indent=1))
    return out


def system(found: BaseLibraries) -> System | str:
    """The versions the check holds vLLM's modules to, or why there are none (a base with no glibc: busybox)."""
    names = [v for lib in found.libraries.values() if lib is not None for v in lib.versions]
    versions = abi.provided_versions(names)
    if "GLIBC" not in versions:
        return "not checked: the base image holds no readable libc.so.6 in the loader's directories"
    shown = ", ".join(f"{family}_{'.'.join(map(str, v))}" for family, v in sorted(versions.items()))
    return System(versions, f"glibc/libstdc++/libgcc_s of the base image (newest: {shown})")


def describe(found: BaseLibraries) -> str:
    """One note: which layers were read to find them."""
    where = "; ".join(f"{name} from layer {lib.layer + 1} ({lib.path})" if lib else f"no {name}"
                      for name, lib in found.libraries.items())  # fmt: skip
    return (f"base image: {where}; {found.layers_read} of {found.layers} layers read from the top "
            f"({found.bytes_read / 1e9:.2f} GB), cached by its manifest digest")  # fmt: skip


def _version_nodes(name: str, data: bytes) -> list[str] | str:
    """The version nodes a library defines (GLIBC_2.2.5 ... GLIBC_2.39); a string says why it could not be read."""
    try:
        nodes = read_symbols(io.BytesIO(data), len(data)).version_defs
    except GpuFileError as exc:
        return f"{name}: {exc}"
    return [n for n in nodes if _VERSION_NAME_RE.fullmatch(n)][:4096]  # the names a version node can have
