"""Does vLLM link against the torch the image installs? The undefined dynamic symbols of vLLM's extension modules,
looked up in the symbols torch's libraries define, and their symbol versions (GLIBC_2.x, GLIBCXX_3.4.x,
CXXABI_1.3.x, GCC_x) held to what the base image's glibc and libstdc++ define.

Which undefined symbols torch must define: the unversioned C++ ones of torch's namespaces (c10::, at::, torch::,
caffe2::, c10d::) — what `undefined symbol` names when a wheel was built against another torch (vLLM issues
41659, 52544). Python's C API (Py*, _Py*) comes from the interpreter, the CUDA driver API (cu*) from libcuda, so
those are not looked up. The library that should define a missing symbol is named from its namespace.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import shutil
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from buildkit.budget import CACHE, WHEEL, Budget, LimitExceeded
from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.files import read_local, replaced_atomically
from buildkit.gpu.dynsym import DynamicSymbols, read_symbols
from buildkit.gpu.elfsections import MACHINES, GpuFileError, machine_name
from buildkit.gpu.scan import is_shared_object, spooled
from buildkit.models.gpufacts import AbiCheck, UnresolvedSymbol
from buildkit.world import proc

# Itanium-mangled names in torch's namespaces: _ZN3c10..., _ZNK2at..., _ZTVN5torch... (nested names, consts,
# vtables/typeinfo); the number is the length of the namespace's name.
_TORCH_RE = re.compile(r"_Z(?:T[VISH])?N(?:K)?(?:3c10|2at|5torch|6caffe2|4c10d)")
_NAMESPACE_LIBRARY = (  # the first match names the library (torch 2.x's layout)
    ("_ZN3c104cuda", "libc10_cuda.so"), ("_ZNK3c104cuda", "libc10_cuda.so"),
    ("3c10", "libc10.so"), ("2at4cuda", "libtorch_cuda.so"), ("5torch4cuda", "libtorch_cuda.so"),
    ("5torch6python", "libtorch_python.so"), ("", "libtorch_cpu.so"),
)  # fmt: skip
_VERSION_RE = re.compile(r"(?P<family>GLIBC|GLIBCXX|CXXABI|GCC)_(?P<number>[0-9]+(?:\.[0-9]+){0,3})")  # fullmatch
# An Itanium-mangled name (its grammar's characters; `.` for GCC's clones: .cold, .isra.0), and any name fit to be
# one line of a message or of the cache (printable ASCII, no space).
_MANGLED_RE = re.compile(r"_Z[A-Za-z0-9_.$]+")  # fullmatch
_LISTED_RE = re.compile(r"[!-~]+")  # fullmatch
MAX_REPORTED = 50
MAX_CACHE_BYTES = 64 << 20  # the cache entry on disk (torch 2.9.0's: about 2 MB of gzip)
DEMANGLED_MAX = 1 << 20  # bytes c++filt may answer for MAX_REPORTED names
CACHE_FORMAT = 1


def wants_torch(name: str) -> bool:
    return bool(_TORCH_RE.match(name))


def torch_library_for(name: str) -> str:
    for needle, library in _NAMESPACE_LIBRARY:
        if needle in name[:24]:
            return library
    return "libtorch_cpu.so"


def torch_cache(cache_dir: Path, sha256: str) -> Path:
    """Where the names a torch wheel's libraries define are kept (gzipped, a few MB), by the wheel's sha256."""
    return cache_dir / "gpu-abi" / f"torch-{sha256}.v{CACHE_FORMAT}.txt.gz"


def torch_defined(
    torch_wheel: Path | Callable[[], Path], sha256: str, cache_dir: Path, arch: str | None = None
) -> set[str]:
    """The names torch/lib/*.so in the wheel define, cached by the wheel's sha256 (the symbol tables of a 900 MB
    wheel take seconds to read; their names, gzipped, a few MB). torch_wheel may be a function that downloads it:
    called only when the cache has no usable entry."""
    names = cached_torch(cache_dir, sha256)
    if names is not None:
        return names
    names = set()
    wheel = torch_wheel if isinstance(torch_wheel, Path) else torch_wheel()
    for _member, symbols in wheel_symbols(wheel, prefix="torch/lib/", arch=arch):
        # one name a line in the cache: a name with a newline (or another control character) would become two
        names.update(s.name for s in symbols.defined if _LISTED_RE.fullmatch(s.name))
    path = torch_cache(cache_dir, sha256)
    with contextlib.suppress(OSError):  # the unusable entry (a fifo, a link): removed, never written through
        path.unlink(missing_ok=True)
    with replaced_atomically(path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
        f.write("\n".join(sorted(names)))
    return names


def cached_torch(cache_dir: Path, sha256: str) -> set[str] | None:
    """The cached names of torch_defined, read as hostile (a planted or damaged entry: a symlink, a fifo, a gzip
    bomb, not UTF-8) within budget.CACHE; None when there is none or it is not usable (the wheel is read again)."""
    path = torch_cache(cache_dir, sha256)
    if path.is_symlink():
        return None
    try:
        raw = read_local(path, "the cached torch symbols", MAX_CACHE_BYTES)
        text = _gunzip(raw, Budget(f"cache entry {path.name}", CACHE))
    except (FileNotFoundError, InputError, LimitExceeded, zlib.error, UnicodeDecodeError):
        return None
    return set(text.split("\n"))


def _gunzip(raw: bytes, budget: Budget) -> str:
    """One gzip member, inflated a MiB at a time under `budget`."""
    inflater = zlib.decompressobj(wbits=31)
    parts, pending = [], raw
    while not inflater.eof:
        chunk = inflater.decompress(pending, 1 << 20)
        pending = inflater.unconsumed_tail
        if not chunk and not pending:
            break  # truncated
        budget.inflate(len(chunk), len(raw))
        budget.keep(len(chunk))
        parts.append(chunk)
    if not inflater.eof or inflater.unused_data:
        raise zlib.error("not one whole gzip member")
    return b"".join(parts).decode("utf-8")


def wheel_symbols(wheel: Path, prefix: str = "", arch: str | None = None) -> Iterable[tuple[str, DynamicSymbols]]:
    """(member, its dynamic symbols) for each shared object in the wheel under prefix, each inflated once (scan's
    spool) under the wheel's budget (budget.WHEEL). With `arch`, each must be an ELF file for that machine
    (UpstreamMismatch)."""
    what = f"wheel {wheel.name}"

    def select(name: str) -> bool:
        return name.startswith(prefix) and is_shared_object(name)

    for name, spool, size, _digest in spooled(wheel, select, Budget(what, WHEEL)):
        try:
            symbols = read_symbols(spool, size)
        except GpuFileError as exc:
            raise UpstreamMalformed(f"{what}: {name} is not a shared object buildkit can read: {exc}") from None
        if arch is not None and symbols.machine != MACHINES[arch]:
            raise UpstreamMismatch(
                f"{what}: {name} is an ELF file for {machine_name(symbols.machine)}, not {arch}",
                hint="pin the wheel built for the platform's arch",
            )
        yield name, symbols


def _number(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def provided_versions(version_defs: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """The newest version of each family a glibc/libstdc++/libgcc_s defines: {'GLIBC': (2, 39), ...}."""
    out: dict[str, tuple[int, ...]] = {}
    for name in version_defs:
        m = _VERSION_RE.fullmatch(name)
        if m:
            out[m["family"]] = max(out.get(m["family"], ()), _number(m["number"]))
    return out


def check(
    modules: Iterable[tuple[str, DynamicSymbols]],
    torch: set[str] | None,
    system: dict[str, tuple[int, ...]],
    against: list[str],
) -> AbiCheck:
    """The ABI check over vLLM's extension modules; `torch`: the names torch's libraries define (None when
    unknown: not checked); `system`: the newest GLIBC/GLIBCXX/CXXABI/GCC versions the base image provides ({} when
    unknown: not checked)."""
    checked = 0
    missing: list[tuple[str, str, str | None, str]] = []
    for library, symbols in modules:
        for s in symbols.undefined:
            if s.weak:
                continue
            if s.version is not None:
                m = _VERSION_RE.fullmatch(s.version)
                if m and m["family"] in system:
                    checked += 1
                    if _number(m["number"]) > system[m["family"]]:
                        missing.append((library, s.name, s.version, s.library or "the base image"))
            elif torch is not None and wants_torch(s.name):
                checked += 1
                if s.name not in torch:
                    missing.append((library, s.name, None, torch_library_for(s.name)))
    names = demangle([m[1] for m in missing[:MAX_REPORTED]])
    unresolved = [
        UnresolvedSymbol(library=lib, symbol=names[i][:300], version=ver, expected_in=where)
        for i, (lib, _name, ver, where) in enumerate(missing[:MAX_REPORTED])
    ]
    return AbiCheck(against=against, checked=checked, unresolved=unresolved, unresolved_count=len(missing))


def demangle(names: list[str]) -> list[str]:
    """C++ names demangled by binutils' c++filt, one per line on stdin (argv, no shell); as they are when it is
    not installed. Only mangled names go to c++filt: one with a newline would be two lines and shift every answer
    after it onto the wrong symbol. A name with a control character or a space is shown escaped."""
    shown = [name if _LISTED_RE.fullmatch(name) else excerpt(name, 300) for name in names]
    mangled = [i for i, name in enumerate(names) if _MANGLED_RE.fullmatch(name)]
    tool = shutil.which("c++filt")
    if not mangled or not tool:
        return shown
    stdin = ("\n".join(names[i] for i in mangled) + "\n").encode()
    try:
        done = proc.run([tool], stdin=stdin, timeout=60, stdout_limit=DEMANGLED_MAX)
    except proc.ProcError:
        return shown
    out = done.stdout.decode("utf-8", "replace").split("\n")
    if done.returncode != 0 or done.over or len(out) != len(mangled) + 1 or out[-1]:
        return shown  # not one answer a name: keep them as they are
    for i, demangled in zip(mangled, out, strict=False):
        shown[i] = demangled
    return shown


def stop_if_unresolved(abi: AbiCheck, where: str, shown: int = 3) -> None:
    """UpstreamMismatch naming the missing symbols (demangled, the first `shown` distinct ones), the library that
    should define each and vLLM's modules that need it, on one line."""
    if not abi.unresolved:
        return
    needs: dict[tuple[str, str], list[str]] = {}  # (symbol@version, library that should define it) -> modules
    for u in abi.unresolved:
        symbol = f"{u.symbol}@{u.version}" if u.version else u.symbol
        needs.setdefault((symbol, u.expected_in), []).append(u.library.rsplit("/", 1)[-1])
    named = [
        f"{symbol} (should be in {library}; needed by {', '.join(modules)})"
        for (symbol, library), modules in list(needs.items())[:shown]
    ]
    more = f"; and {len(needs) - shown} more" if len(needs) > shown else ""
    raise UpstreamMismatch(
        f"{where}: {abi.unresolved_count} undefined symbol(s) would not resolve against {', '.join(abi.against)}: "
        f"{'; '.join(named)}{more}",
        hint=_hint(abi.unresolved),
    )


def _hint(unresolved: list[UnresolvedSymbol]) -> str:
    torch = (
        "pin a vLLM wheel built against the torch NeMo-RL's uv.lock installs (or a NeMo-RL commit whose torch "
        "matches the wheel)"
    )
    system = (
        "pin a base image of a newer distribution (its glibc/libstdc++ define these versions), or a wheel "
        "built for an older one"
    )
    kinds = {u.version is None for u in unresolved}
    return torch if kinds == {True} else system if kinds == {False} else f"{torch}; {system}"
