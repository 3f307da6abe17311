"""The GPU checks over a built image (verify): every shared object in its Python environments (each
site-packages or dist-packages directory, read as the tar stream the engine exports, one member spooled at a time),
vLLM's modules linked against the torch of the same environment and the image's glibc and libstdc++, and the
drivers its CUDA runtime runs on. No GPU, no network: the files are read, nothing in the image is run but `find`
and `readlink`."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from functools import partial

from buildkit.budget import IMAGE_FILES, Budget
from buildkit.errors import UpstreamMalformed
from buildkit.gpu import abi, driver
from buildkit.gpu.coverage import gpu_name, gpus
from buildkit.gpu.dynsym import DynamicSymbols
from buildkit.gpu.fatbin import Kernel
from buildkit.gpu.scan import MAX_LIBRARY_BYTES, _read, _spool, _symbols, is_shared_object, kernel_table
from buildkit.models.gpufacts import AbiCheck, DriverCheck, GpuCheck
from buildkit.models.pins import ARCH_OF_PLATFORM, Build
from buildkit.world.tarstream import members

ENVIRONMENT_RE = re.compile(r"/[A-Za-z0-9._+/-]{1,400}/(?:site|dist)-packages")  # fullmatch
MAX_ENVIRONMENTS = 64
FIND = ["sh", "-c", "find / -xdev \\( -name site-packages -o -name dist-packages \\) -type d -prune -print 2>/dev/null"]
SYSTEM_LIBRARIES = ("libc.so.6", "libstdc++.so.6", "libgcc_s.so.1")
COMPAT_DIR = "/usr/local/cuda/compat"

Library = tuple[str, list[Kernel] | None, DynamicSymbols]


def tar_libraries(
    chunks: Iterable[bytes], where: str, arch: str | None = None, hashes: dict[str, str] | None = None
) -> Iterator[Library]:
    """(path in the tar, kernels, dynamic symbols) for each regular shared object in a tar stream, under the
    image's budget (budget.IMAGE_FILES); with `arch`, each must be an ELF file for that machine. `hashes` gets each
    one's sha256."""
    budget = Budget(where, IMAGE_FILES)
    for tar, member in members(chunks, where, budget):
        if not member.isreg() or not is_shared_object(member.name):
            continue
        if member.size > MAX_LIBRARY_BYTES:
            raise UpstreamMalformed(
                f"{where}: {member.name} is {member.size:,} bytes, more than buildkit reads ({MAX_LIBRARY_BYTES:,})"
            )
        source = tar.extractfile(member)
        assert source is not None  # a regular file always has contents
        with tempfile.TemporaryFile() as spool:
            chunks = iter(partial(source.read, 4 << 20), b"")  # (iterating a file would give lines)
            digest = _spool(chunks, spool, budget, f"{where}: {member.name}", hashes is not None)
            size = spool.tell()
            spool.seek(0)
            if spool.read(4) != b"\x7fELF":
                continue  # a linker script (libc.so) or data named *.so: not a shared object
            what = f"{where}: {member.name}"
            if hashes is not None and digest is not None:
                hashes[member.name] = digest
            yield member.name, _read(spool, size, what, arch), _symbols(spool, size, what)


def image_check(
    run: Callable[[list[str]], tuple[int, str]],
    archive: Callable[[str], Iterable[bytes]],
    build: Build,
    cuda_version: str | None,
    drivers: list[str],
    source: str,
    hashes: dict[str, str] | None = None,
) -> GpuCheck:
    """The gpu section of verify's record. run: a command in a throwaway container (exit code, output);
    archive: the tar stream of a path in the image; `hashes` gets each shared object's sha256 by its path in the
    image, relative to its environment ("vllm/_C.abi3.so")."""
    _code, out = run(FIND)
    environments = [line for line in out.splitlines() if ENVIRONMENT_RE.fullmatch(line)][:MAX_ENVIRONMENTS]
    found: list[tuple[str, list[Kernel] | None]] = []
    abi_results: list[AbiCheck] = []
    for env in environments:
        found_hashes: dict[str, str] = {}
        libraries = list(tar_libraries(archive(env), f"{source}:{env}", ARCH_OF_PLATFORM[build.platform], found_hashes))
        if hashes is not None:  # the archive's names start with the environment's own directory
            hashes.update({name.split("/", 1)[-1]: digest for name, digest in found_hashes.items()})
        found += [(f"{env}/{name.split('/', 1)[-1]}", k) for name, k, _s in libraries]
        vllm = [(name.split("/", 1)[-1], s) for name, _k, s in libraries if "/vllm/" in f"/{name}"]
        torch = [s for name, _k, s in libraries if "/torch/lib/" in f"/{name}"]
        if vllm and torch:
            defined = {sym.name for s in torch for sym in s.defined}
            abi_results.append(
                abi.check(
                    vllm,
                    defined,
                    _system_versions(run, archive, source),
                    [f"{env}/torch/lib", "the image's glibc and libstdc++"],
                )
            )
    rows = kernel_table(iter(found), build.cuda_arch_list, build.gpu_required)
    abi_check = abi_results[0] if abi_results else None
    compat = run(["test", "-d", COMPAT_DIR])[0] == 0
    return GpuCheck(
        source=source,
        gpus=[gpu_name(cc) for cc in gpus(build.cuda_arch_list)],
        libraries=rows,
        abi=abi_check,
        driver=driver_check(cuda_version, compat, drivers),
    )


def driver_check(cuda_version: str | None, compat: bool, drivers: list[str]) -> DriverCheck:
    if cuda_version is None:
        return DriverCheck(
            cuda_runtime=None,
            forward_compat=compat,
            minimum_driver=None,
            drivers={d: "unknown: the image sets no CUDA_VERSION" for d in drivers},
        )
    major, minor = driver.cuda_of(cuda_version)
    judged = {}
    for d in drivers:
        verdict, why = driver.judge(cuda_version, d, compat)
        judged[d] = f"{verdict}: {why}"
    return DriverCheck(
        cuda_runtime=f"{major}.{minor}",
        forward_compat=compat,
        minimum_driver=driver.minimum_driver(cuda_version),
        drivers=judged,
    )


def _system_versions(run, archive, source: str) -> dict[str, tuple[int, ...]]:
    """The newest GLIBC/GLIBCXX/CXXABI/GCC versions the image's own libc, libstdc++ and libgcc_s define."""
    script = (
        "for l in " + " ".join(SYSTEM_LIBRARIES) + "; do readlink -f "
        "$(ldconfig -p 2>/dev/null | grep -m1 \"$l \" | sed 's/.*=> //'); done"
    )
    _code, out = run(["sh", "-c", script])
    names: list[str] = []
    for path in out.splitlines():
        if re.fullmatch(r"/[A-Za-z0-9._+/-]{1,400}", path):
            for _name, _k, symbols in tar_libraries(archive(path), f"{source}:{path}"):
                names += symbols.version_defs
    return abi.provided_versions(names)
