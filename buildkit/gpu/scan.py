"""The GPU code of every shared object in a wheel (read member by member from the zip, never extracted) or in a
directory tree (the built image's Python environments), and the kernel check on it: a required library with no
kernel for a target GPU is UpstreamMismatch."""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from buildkit.errors import UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.gpu.coverage import NONE, archs, gpu_name, gpus, verdict
from buildkit.gpu.dynsym import DynamicSymbols, read_symbols
from buildkit.gpu.elfsections import ElfFile, GpuFileError
from buildkit.gpu.fatbin import Kernel, kernels
from buildkit.models.gpufacts import LibraryKernels

# vLLM's kernels every pinned GPU needs; vLLM loads the others (FlashAttention 2/3, FlashMLA) only on some GPUs.
DEFAULT_REQUIRED = ("vllm/_C.abi3.so", "vllm/_moe_C.abi3.so")
MAX_LIBRARY_BYTES = 4 << 30
MAX_LIBRARIES = 10_000
UNKNOWN, MISSING = "unknown", "missing"


def is_shared_object(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def wheel_kernels(wheel: Path) -> Iterator[tuple[str, list[Kernel] | None]]:
    """(member name, its kernels) for every shared object in the wheel, in name order."""
    for name, found, _symbols in wheel_libraries(wheel, symbols=False):
        yield name, found


def wheel_libraries(wheel: Path, symbols: bool = True) -> Iterator[tuple[str, list[Kernel] | None,
                                                                         DynamicSymbols | None]]:  # fmt: skip
    """(member name, its kernels, its dynamic symbols when asked) for every shared object in the wheel, each
    member decompressed once."""
    what = f"wheel {wheel.name}"
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = sorted((i for i in archive.infolist() if is_shared_object(i.filename)), key=lambda i: i.filename)
            if len(members) > MAX_LIBRARIES:
                raise UpstreamMalformed(f"{what}: more than {MAX_LIBRARIES:,} shared objects")
            for info in members:
                if info.file_size > MAX_LIBRARY_BYTES:
                    raise UpstreamMalformed(f"{what}: {info.filename} says it is {info.file_size:,} bytes, more "
                                            f"than buildkit reads ({MAX_LIBRARY_BYTES:,})")  # fmt: skip
                # Spooled to a temporary file, 4 MiB at a time: the section headers lie at the end and the fatbin
                # before them, and a zip stream seeks backwards by decompressing again from the start (measured
                # on vLLM 0.14.0's wheel, 1.2 GB of libraries: 20 s through the stream, 14 s spooled).
                with archive.open(info) as member, tempfile.TemporaryFile() as spool:
                    shutil.copyfileobj(member, spool, 4 << 20)
                    where = f"{what}: {info.filename}"
                    size = spool.tell()
                    yield info.filename, _read(spool, size, where), _symbols(spool, size, where) if symbols else None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError, zlib.error,
            OSError) as exc:  # fmt: skip
        raise UpstreamMalformed(f"{what} is not a readable wheel (zip): {excerpt(str(exc), 120)}") from None


def tree_kernels(root: Path) -> Iterator[tuple[str, list[Kernel] | None]]:
    """(path relative to root, its kernels) for every regular shared object file under root (symlinks not
    followed), in path order."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if is_shared_object(name) and path.is_file() and not path.is_symlink():
                found.append(path)
    for path in sorted(found):
        rel = path.relative_to(root).as_posix()
        with path.open("rb") as f:
            yield rel, _read(f, path.stat().st_size, rel)


def _symbols(file: BinaryIO, size: int, what: str) -> DynamicSymbols:
    try:
        return read_symbols(file, size)
    except GpuFileError as exc:
        raise UpstreamMalformed(f"{what} is not a shared object buildkit can read: {exc}") from None


def _read(file: BinaryIO, size: int, what: str) -> list[Kernel] | None:
    """Its kernels; None when it has no section headers (legal, `sstrip` removes them; nothing says where its
    GPU code is, so it is not checked)."""
    try:
        elf = ElfFile(file, size)
        return kernels(elf) if elf.sections else None
    except GpuFileError as exc:
        raise UpstreamMalformed(f"{what} is not a shared object buildkit can read: {exc}") from None


def required(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, f"*/{p}") for p in patterns)


def kernel_table(found: Iterator[tuple[str, list[Kernel] | None]], cuda_arch_list: str,
                 required_patterns: list[str]) -> list[LibraryKernels]:  # fmt: skip
    """One row per shared object with GPU code (and each required one): its architectures and how it loads on
    each target GPU. A required pattern no file matches gets a row saying so."""
    targets = gpus(cuda_arch_list)
    rows = []
    for name, ks in found:
        needed = required(name, required_patterns)
        if not ks and not needed:
            continue
        if ks is None:
            loads = {gpu_name(cc): f"{UNKNOWN} (no section headers: not checked)" for cc in targets}
            rows.append(LibraryKernels(library=name, required=needed, sass=[], ptx=[], loads=loads))
            continue
        sass, ptx = archs(ks)
        loads = {gpu_name(cc): verdict(ks, cc).line() for cc in targets}
        rows.append(LibraryKernels(library=name, required=needed, sass=sass, ptx=ptx, loads=loads))
    for pattern in required_patterns:
        if not any(required(r.library, [pattern]) for r in rows):
            loads = {gpu_name(cc): f"{MISSING} (no such library)" for cc in targets}
            rows.append(LibraryKernels(library=pattern, required=True, sass=[], ptx=[], loads=loads))
    return rows


def check_required(rows: list[LibraryKernels], where: str) -> None:
    """UpstreamMismatch naming the first required library with no kernel for a target GPU, or not there at all
    (vLLM loads `_C` and `_moe_C` on every GPU: without them it does not start). One without section headers is
    shown "not checked", not stopped (nothing says where its GPU code is)."""
    for row in rows:
        if not row.required:
            continue
        if any(load.split(" ", 1)[0] == MISSING for load in row.loads.values()):
            raise UpstreamMismatch(
                f"{where}: the required library {row.library} (build.gpu_required) is not in it, so it has no "
                f"kernel for {', '.join(row.loads)}",
                hint="pin a vLLM wheel that holds it, or change build.gpu_required if vLLM moved or renamed it",
            )
        for gpu, load in row.loads.items():
            if load.split(" ", 1)[0] == NONE:
                has = ", ".join(row.sass + row.ptx) or "no GPU code"
                raise UpstreamMismatch(
                    f"{where}: {row.library} has no kernel for {gpu} (build.cuda_arch_list); it has {has}",
                    hint="pin a vLLM wheel built for that GPU (another wheel.variant or commit), or change "
                    "build.cuda_arch_list",
                )
