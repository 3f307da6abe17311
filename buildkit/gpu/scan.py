"""The GPU code of every shared object in a wheel (read member by member from the zip, never extracted), and the
kernel check on it: a required library with no kernel for a target GPU is UpstreamMismatch. verify reads an
image's files with the same readers (image.py)."""

from __future__ import annotations

import fnmatch
import hashlib
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, BinaryIO
from zipfile import ZipInfo

from buildkit.budget import WHEEL, Budget, LimitExceeded
from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.files import write_hint
from buildkit.gpu.coverage import NONE, archs, gpu_name, gpus, verdict
from buildkit.gpu.dynsym import DynamicSymbols, read_symbols
from buildkit.gpu.elfsections import MACHINES, ElfFile, GpuFileError, machine_name
from buildkit.gpu.fatbin import Kernel, kernels
from buildkit.gpu.zipmember import InflateError, member_bytes
from buildkit.gpu.zipsize import open_zip
from buildkit.models.compiled import is_vllm_python, python_origin
from buildkit.models.gpufacts import LibraryKernels

# vLLM's kernels every pinned GPU needs; vLLM loads the others (FlashAttention 2/3, FlashMLA) only on some GPUs.
DEFAULT_REQUIRED = ("vllm/_C.abi3.so", "vllm/_moe_C.abi3.so")
MAX_LIBRARY_BYTES = 4 << 30
MAX_LIBRARIES = 10_000
UNKNOWN, MISSING = "unknown", "missing"


def is_shared_object(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def wheel_kernels(wheel: Path, arch: str | None = None) -> Iterator[tuple[str, list[Kernel] | None]]:
    """(member name, its kernels) for every shared object in the wheel, in name order."""
    for name, found, _symbols in wheel_libraries(wheel, symbols=False, arch=arch):
        yield name, found


def wheel_libraries(
    wheel: Path, symbols: bool = True, arch: str | None = None, hashes: dict[str, str] | None = None
) -> Iterator[tuple[str, list[Kernel] | None, DynamicSymbols | None]]:
    """(member name, its kernels, its dynamic symbols when asked) for every shared object in the wheel, each
    member decompressed once, under the wheel's budget (budget.WHEEL). With `arch` (x86_64, aarch64) every one
    must be an ELF file for that machine, or UpstreamMismatch names it. `hashes` gets each one's sha256."""
    what = f"wheel {wheel.name}"
    for name, spool, size, digest in spooled(wheel, is_shared_object, Budget(what, WHEEL), hashes is not None):
        if hashes is not None and digest is not None:
            hashes[name] = digest
        where = f"{what}: {name}"
        found = _read(spool, size, where, arch)
        yield name, found, _symbols(spool, size, where) if symbols else None


def spooled(
    wheel: Path, select: Callable[[str], bool], budget: Budget, hashed: bool = False
) -> Iterator[tuple[str, BinaryIO, int, str | None]]:
    """(member name, its bytes in a temporary file, their size, their sha256 when `hashed`) for each member
    `select` names, in name order, each inflated once under `budget`. Spooled because the ELF readers seek: the
    section headers and .dynamic lie at the end, the symbol tables at the start, and a zip stream seeks backwards
    by inflating again from the start (torch 2.9.0's libtorch_cuda.so, 1 GB, was inflated twice)."""
    what = f"wheel {wheel.name}"
    with readable_wheel(what), open_zip(wheel, what, budget) as (archive, raw):
        for info in members(archive, what, select, budget):
            budget.compressed += info.compress_size
            with tempfile.TemporaryFile() as spool:
                where = f"{what}: {info.filename}"
                digest = _spool(member_bytes(raw, archive, info), spool, budget, where, hashed)
                yield info.filename, spool, spool.tell(), digest


@contextmanager
def readable_wheel(what: str) -> Iterator[None]:
    """Whatever zipfile raises for a wheel it cannot read (a broken or hostile zip): one refusal naming it (exit 3)."""
    try:
        yield
    except UnicodeDecodeError as exc:  # zipfile decodes a name flagged UTF-8 (bit 11) strictly
        why = f"an entry's name is flagged UTF-8 but is not ({excerpt(str(exc), 100)})"
        raise UpstreamMalformed(f"{what} is not a readable wheel (zip): {why}") from None
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,
        RuntimeError,
        EOFError,
        zlib.error,
        OSError,
        InflateError,
    ) as exc:
        raise UpstreamMalformed(f"{what} is not a readable wheel (zip): {excerpt(str(exc), 120)}") from None


def wheel_python_hashes(wheel: Path, hashes: dict[str, str]) -> None:
    """The sha256 of each Python file precompiled mode copies out of the wheel (vllm/vllm_flash_attn/**/*.py ...:
    buildkit.models.compiled's from-wheel rules), under the wheel's budget: verify holds the image's to them, as it
    holds the shared objects."""
    member_hashes(wheel, lambda n: is_vllm_python(n) and python_origin(n) == "wheel", hashes)


def member_names(wheel: Path) -> list[str]:
    """Every member's name, the archive sized first (zipsize: its entries within the wheel's budget)."""
    what = f"wheel {wheel.name}"
    with readable_wheel(what), open_zip(wheel, what, Budget(what, WHEEL)) as (archive, _raw):
        return [info.filename for info in archive.infolist()]


def member_hashes(wheel: Path, select: Callable[[str], bool], hashes: dict[str, str]) -> None:
    """The sha256 of each member `select` names, into `hashes`, under the wheel's budget."""
    what = f"wheel {wheel.name}"
    budget = Budget(what, WHEEL)
    with readable_wheel(what), open_zip(wheel, what, budget) as (archive, raw):
        for info in members(archive, what, select, budget):
            digest = hashlib.sha256()
            for chunk in member_bytes(raw, archive, info):
                budget.inflate(len(chunk))
                digest.update(chunk)
            hashes[info.filename] = digest.hexdigest()


def members(archive: zipfile.ZipFile, what: str, select: Callable[[str], bool], budget: Budget) -> list[ZipInfo]:
    """The members `select` names, in name order, once the whole archive was held to the budget: no two entries of
    one name, no two whose bytes overlap (a zip bomb names one compressed entry many times over, each inflated
    again), declared sizes within the budget. Its entries were counted to the budget by zipsize.sized (open_zip)
    before zipfile parsed them."""
    infos = archive.infolist()
    names: set[str] = set()
    for info in infos:
        if info.filename in names:
            raise LimitExceeded(f"{what}: two entries named {excerpt(info.filename, 120)}: not a wheel pip writes")
        names.add(info.filename)
    # Each local entry: a 30-byte header, its name (at least a byte a character), then its compressed bytes.
    spans = sorted(
        (i.header_offset, i.header_offset + 30 + len(i.orig_filename) + i.compress_size, i.filename) for i in infos
    )
    for (_s, end, first), (start, _e, second) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise LimitExceeded(
                f"{what}: the entries {excerpt(first, 80)} and {excerpt(second, 80)} overlap: not a wheel pip writes"
            )
    if spans and spans[-1][1] > archive.start_dir:
        raise LimitExceeded(f"{what}: {excerpt(spans[-1][2], 80)} runs into the zip's central directory")
    chosen = sorted((i for i in infos if select(i.filename)), key=lambda i: i.filename)
    if len(chosen) > MAX_LIBRARIES:
        raise UpstreamMalformed(f"{what}: more than {MAX_LIBRARIES:,} shared objects")
    declared = 0
    for info in chosen:
        if info.file_size > MAX_LIBRARY_BYTES:
            raise UpstreamMalformed(
                f"{what}: {info.filename} says it is {info.file_size:,} bytes, more "
                f"than buildkit reads ({MAX_LIBRARY_BYTES:,})"
            )
        budget.declare(info.file_size, info.compress_size, excerpt(info.filename, 120))
        declared += info.file_size
    budget.declare(declared, sum(i.compress_size for i in chosen), "its shared objects")
    return chosen


def _spool(chunks: Iterable[bytes], spool: IO[bytes], budget: Budget, what: str, hashed: bool) -> str | None:
    """The member's bytes into `spool`, counted against the budget as they inflate; returns their sha256 (when
    `hashed`: torch's 1.6 GB need none). A full or unwritable $TMPDIR is this machine's problem (exit 2, with the
    disk hint), not the wheel's."""
    digest = hashlib.sha256() if hashed else None
    for chunk in chunks:
        budget.inflate(len(chunk))
        if digest is not None:
            digest.update(chunk)
        try:
            spool.write(chunk)
            spool.flush()
        except OSError as exc:
            raise InputError(
                f"cannot spool {what} to {tempfile.gettempdir()}: {exc.strerror or exc}",
                hint=write_hint(exc) + " (or point $TMPDIR at a larger disk)",
            ) from None
    return digest.hexdigest() if digest is not None else None


def _symbols(file: BinaryIO, size: int, what: str) -> DynamicSymbols:
    try:
        return read_symbols(file, size)
    except GpuFileError as exc:
        raise UpstreamMalformed(f"{what} is not a shared object buildkit can read: {exc}") from None


def _read(file: BinaryIO, size: int, what: str, arch: str | None = None) -> list[Kernel] | None:
    """Its kernels; None when it has no section headers (legal, `sstrip` removes them; nothing says where its
    GPU code is, so it is not checked). With `arch`, an ELF file for another machine is UpstreamMismatch."""
    try:
        elf = ElfFile(file, size)
        if arch is not None and elf.machine != MACHINES[arch]:
            raise UpstreamMismatch(
                f"{what} is an ELF file for {machine_name(elf.machine)}, not {arch}: it would not load on the "
                f"pinned platform",
                hint="pin the wheel built for the platform's arch (wheel.arch follows build.platform)",
            )
        return kernels(elf) if elf.sections else None
    except GpuFileError as exc:
        raise UpstreamMalformed(f"{what} is not a shared object buildkit can read: {exc}") from None


def required(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, f"*/{p}") for p in patterns)


def kernel_table(
    found: Iterator[tuple[str, list[Kernel] | None]], cuda_arch_list: str, required_patterns: list[str]
) -> list[LibraryKernels]:
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
