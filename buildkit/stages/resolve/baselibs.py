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
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from buildkit import budget as budgets
from buildkit.errors import InputError, Interrupted
from buildkit.files import read_local, write_atomic
from buildkit.gpu import abi
from buildkit.gpu.check import System
from buildkit.gpu.dynsym import read_symbols
from buildkit.gpu.elfsections import GpuFileError
from buildkit.image.layerfiles import LayerBlob, find
from buildkit.image.ocilayout import display
from buildkit.models.lock import ImageFact
from buildkit.world.registry import Registry

Name = Literal["libc.so.6", "libstdc++.so.6", "libgcc_s.so.1"]
NAMES: tuple[Name, ...] = ("libc.so.6", "libstdc++.so.6", "libgcc_s.so.1")
# The files those names are, or lead to: glibc before 2.34 made libc.so.6 a symlink to libc-2.27.so, RHEL's
# libgcc_s.so.1 is a symlink to libgcc_s-8-20210514.so.1.
CAPTURE = re.compile(
    r"libc\.so\.6|libc-[0-9.]{1,16}\.so|libstdc\+\+\.so\.6(?:\.[0-9]{1,6}){0,3}|libgcc_s\.so\.1"
    r"|libgcc_s-[0-9A-Za-z.-]{1,40}\.so\.1"
)
MAX_FILE = 64 << 20  # libstdc++.so.6.0.33 is 2.5 MB, libc.so.6 2.1 MB (Ubuntu 24.04)
MAX_CACHE = 1 << 20
CACHE_FORMAT = 2
_TRIPLES = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu"}

_VERSION_NAME_RE = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
_VersionName = Annotated[str, Field(pattern=f"^{_VERSION_NAME_RE.pattern}$")]


class BaseLibrary(BaseModel):
    """One copy of a library in the loader's directories."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Name
    path: Annotated[str, Field(max_length=400)]  # where it led, shown (escaped, shortened)
    layer: Annotated[int, Field(ge=0, le=1000)]  # the manifest's index (0: the bottom layer)
    versions: Annotated[list[_VersionName], Field(max_length=4096)]  # the version nodes it defines ([]: unreadable)


class BaseLibraries(BaseModel):
    """What the base image provides, as cached: every copy found of each library."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    manifest_digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    libraries: Annotated[list[BaseLibrary], Field(max_length=64)]
    layers: Annotated[int, Field(ge=0, le=1000)]
    layers_read: Annotated[int, Field(ge=0, le=1000)]
    bytes_read: Annotated[int, Field(ge=0)]


def directories(platform: str) -> list[str]:
    """The directories the loader finds these libraries in without help: its defaults and what Debian's, Ubuntu's
    and RHEL's ld.so.conf add (/usr/local/lib first). Which copy it takes when there are several depends on
    ld.so.cache and LD_LIBRARY_PATH, so every copy counts (`system`: the oldest decides)."""
    triple = _TRIPLES.get(platform.split("/")[1] if "/" in platform else "", "")
    multiarch = [f"usr/local/lib/{triple}", "usr/local/lib", f"lib/{triple}", f"usr/lib/{triple}"] if triple else []
    return (
        [*multiarch, "lib64", "usr/lib64", "lib", "usr/lib"]
        if triple
        else ["usr/local/lib", "lib64", "usr/lib64", "lib", "usr/lib"]
    )


def cache_path(cache_dir: Path, manifest_digest: str) -> Path:
    return cache_dir / "gpu-abi" / f"base-{manifest_digest.removeprefix('sha256:')}.v{CACHE_FORMAT}.json"


def cached(cache_dir: Path, fact: ImageFact) -> BaseLibraries | None:
    """The cached answer, read strictly: a regular file (never a symlink or a fifo) of at most MAX_CACHE bytes."""
    path = cache_path(cache_dir, fact.manifest_digest)
    if path.is_symlink():
        return None  # planted: read from the layers again
    try:
        found = BaseLibraries.model_validate_json(read_local(path, "the cached base libraries", MAX_CACHE))
    except (FileNotFoundError, InputError, ValidationError):
        return None  # none yet, or broken: read from the layers again
    return found if found.manifest_digest == fact.manifest_digest else None


def read(
    registry: Registry,
    fact: ImageFact,
    cache_dir: Path,
    on_layer: Callable[[int, int, int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> BaseLibraries:
    """The libraries of the base image `fact` names, from the cache or its layers (then cached). `on_layer` hears,
    before each layer is read: layers read, of how many, their bytes, of how many. The layers are read under one
    Budget (budget.LAYERS: inflated bytes, ratio, entries, memory, time): crossing it is LimitExceeded. `cancel`
    (Ctrl-C, SIGTERM) stops the read between chunks, or wherever the network read waits: Interrupted, and nothing
    is cached."""
    hit = cached(cache_dir, fact)
    if hit is not None:
        return hit
    what = f"base image {fact.pinned}"
    budget = budgets.Budget(what, budgets.LAYERS, cancel=cancel)  # looked up now: tests lower the limits
    refs = registry.layers(fact)
    blobs = [LayerBlob(r.digest, r.size, r.media_type, partial(registry.layer, fact, r, cancel)) for r in refs]
    wanted: dict[str, Name] = {f"{d}/{name}": name for name in NAMES for d in directories(fact.platform)}
    total = sum(r.size for r in refs)
    said = None if on_layer is None else lambda n, done: on_layer(n, len(refs), done, total)
    scan = find(blobs, list(wanted), CAPTURE, _version_nodes, what, MAX_FILE, said, budget)
    copies: dict[tuple[str, int], BaseLibrary] = {}  # merged /usr: lib/<triple>/x and usr/lib/<triple>/x are one
    for wanted_path, found in scan.found.items():
        if found is not None:
            versions = found.value if isinstance(found.value, list) else []
            copies.setdefault(
                (found.path, found.layer),
                BaseLibrary(name=wanted[wanted_path], path=_shown(found.path), layer=found.layer, versions=versions),
            )
    out = BaseLibraries(
        manifest_digest=fact.manifest_digest,
        libraries=list(copies.values()),
        layers=scan.layers,
        layers_read=scan.layers_read,
        bytes_read=scan.bytes_read,
    )
    if cancel is not None and cancel.is_set():
        raise Interrupted(f"{what}: interrupted")  # never a cache entry written after Ctrl-C
    path = cache_path(cache_dir, fact.manifest_digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, out.model_dump_json(indent=1))
    return out


def system(found: BaseLibraries) -> System | str:
    """The versions the check holds vLLM's modules to: of each family, the newest the oldest copy defines (the
    loader may take any); or why there are none (a base with no glibc: busybox)."""
    versions: dict[str, tuple[int, ...]] = {}
    for lib in found.libraries:
        for family, number in abi.provided_versions(lib.versions).items():
            versions[family] = min(versions.get(family, number), number)
    if "GLIBC" not in versions:
        return "not checked: the base image holds no readable libc.so.6 in the loader's directories"
    shown = ", ".join(f"{family}_{'.'.join(map(str, v))}" for family, v in sorted(versions.items()))
    return System(versions, f"glibc/libstdc++/libgcc_s of the base image (newest: {shown})")


def describe(found: BaseLibraries) -> str:
    """One note: where each library was found, and how much was read to find it."""
    where = [f"{lib.name} from layer {lib.layer + 1} ({lib.path})" for lib in found.libraries]
    where += [f"no {name}" for name in NAMES if all(lib.name != name for lib in found.libraries)]
    return (
        f"base image: {'; '.join(where)}; {found.layers_read} of {found.layers} layers read from the top "
        f"({found.bytes_read / 1e9:.2f} GB), cached by its manifest digest"
    )


def _shown(path: str) -> str:
    """A path from a tar, for messages and the cache: bytes that are not UTF-8 and control characters escaped."""
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", display(path))
    return text if len(text) <= 300 else text[:150] + "..." + text[-147:]


def _version_nodes(name: str, data: bytes) -> list[str] | str:
    """The version nodes a library defines (GLIBC_2.2.5 ... GLIBC_2.39); a string says why it could not be read."""
    try:
        nodes = read_symbols(io.BytesIO(data), len(data)).version_defs
    except GpuFileError as exc:
        return f"{name}: {exc}"
    return [n for n in nodes if _VERSION_NAME_RE.fullmatch(n)][:4096]  # the names a version node can have
