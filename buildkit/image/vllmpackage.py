"""vLLM's package directory in a built image, read as the tar stream the engine exports, and the composition proof
over it (judge_package): every entry is a file of the source commit's tree (git blob id), a member of the locked
wheel that precompiled mode takes (sha256), vllm/_version.py, a gRPC stub generated from one of the source's .proto
files (image/grpcstubs.py), or a bytecode cache bound to its source; nothing else.

NeMo-RL's build-custom-vllm.sh installs vLLM editable from its checkout (3rdparty/vllm), so the package is not in a
site-packages directory: where `python` finds it is asked (importlib's find_spec, which runs nothing of vLLM)."""

from __future__ import annotations

import ast
import hashlib
import re
import tarfile
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from buildkit.budget import IMAGE_FILES, Budget
from buildkit.image.bytecode import BOUND, FAILS, HEADER_BYTES, Source, judge, source_of
from buildkit.image.grpcstubs import stub_of, stub_problem
from buildkit.models.compiled import GENERATED_PYTHON
from buildkit.text.sanitize import strip_controls
from buildkit.world.tarstream import members

# The directories `import vllm` would search, one per line (a namespace package may have several; vLLM has one).
FIND_SPEC = [
    "python",
    "-c",
    "import importlib.util as u; s = u.find_spec('vllm'); "
    "print('\\n'.join(s.submodule_search_locations or []) if s else '')",
]
_DIR_RE = re.compile(r"/[A-Za-z0-9._+/-]{0,400}/vllm")  # fullmatch: an absolute path ending in the package's name
MAX_PYTHON_BYTES = 16 << 20  # vLLM's largest Python file is a few hundred KiB
MAX_VERSION_FILE = 64 << 10  # setuptools-scm's vllm/_version.py is under 1 KiB
MAX_KEPT = 64 << 20  # the Python sources kept for hash-based bytecode: vLLM 0.14.0's are 16 MiB
MAX_SAID = 6  # names in one reason


@dataclass
class VllmPackage:
    """What the image's vLLM package holds, every entry by its path in the wheel's terms ("vllm/config/__init__.py")."""

    directory: str
    python: dict[str, str] = field(default_factory=dict)  # a file the lock does not take from the wheel -> blob id
    wheel_files: dict[str, str] = field(default_factory=dict)  # a file the lock takes from the wheel -> sha256
    odd: dict[str, str] = field(default_factory=dict)  # an entry that is no file and no directory -> what it is
    dirs: set[str] = field(default_factory=set)
    sources: dict[str, Source] = field(default_factory=dict)  # each .py file's size and mtime (bytes: kept ones)
    caches: dict[str, bytes] = field(default_factory=dict)  # __pycache__/*.pyc -> its header
    version_file: bytes | None = None  # vllm/_version.py, held to setuptools-scm's shape


def package_dir(code: int, output: str) -> str | None:
    """The package directory from FIND_SPEC's answer, or None when python found none (or said something else)."""
    lines = output.strip().splitlines()
    if code != 0 or not lines or not _DIR_RE.fullmatch(lines[0]) or "/../" in f"{lines[0]}/":
        return None
    return lines[0]


def _name(path: str) -> str:
    """A path from the image, as a reason may hold it: no control characters, at most 160 characters."""
    text = strip_controls(path)
    return text if len(text) <= 160 else text[:80] + "..." + text[-77:]


def read_package(chunks: Iterable[bytes], directory: str, where: str, from_wheel: Collection[str] = ()) -> VllmPackage:
    """Every entry of the package's tar stream (members named vllm/...), under the image's budget
    (budget.IMAGE_FILES): each regular file by sha256 when the lock takes it from the wheel (`from_wheel`), else by
    git blob id; each bytecode cache by its header; links, devices and the like by what they are."""
    found = VllmPackage(directory)
    budget = Budget(where, IMAGE_FILES)
    wheel = set(from_wheel)
    for tar, member in members(chunks, where, budget):
        _read_member(tar, member, found, wheel, budget)
    return found


def _read_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, found: VllmPackage, wheel: set[str], budget: Budget
) -> None:
    name = member.name.rstrip("/")
    if member.isdir():
        found.dirs.add(name)
        return
    if not member.isreg():
        found.odd[name] = _what(member)
        return
    source = tar.extractfile(member)
    assert source is not None  # a regular file always has contents
    if source_of(name) is not None:  # a bytecode cache: its header binds it to a source, or not
        header = source.read(HEADER_BYTES)
        budget.inflate(len(header))
        found.caches[name] = header
        return
    by_sha256 = name in wheel
    digest = hashlib.sha256() if by_sha256 else hashlib.sha1(b"blob %d\0" % member.size)  # git's blob id
    keep = name.endswith(".py") and member.size <= MAX_PYTHON_BYTES and budget.kept + member.size <= MAX_KEPT
    kept = bytearray()
    while chunk := source.read(4 << 20):
        budget.inflate(len(chunk))
        digest.update(chunk)
        if keep:
            kept += chunk
    if keep:
        budget.keep(len(kept))
    if name.endswith(".py"):
        found.sources[name] = Source(member.size, int(member.mtime), bytes(kept) if keep else None)
    if name in GENERATED_PYTHON:
        # past its limit: no Python setuptools-scm writes (a NUL byte never parses)
        found.version_file = bytes(kept) if keep and member.size <= MAX_VERSION_FILE else b"\0"
    elif by_sha256:
        found.wheel_files[name] = digest.hexdigest()
    else:
        found.python[name] = digest.hexdigest()


def _what(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link to {_name(member.linkname)}"
    if member.islnk():
        return f"a hard link to {_name(member.linkname)}"
    if member.isdev():
        return "a device or a FIFO"
    return "not a regular file"


def judge_package(
    listed: dict[str, str], package: VllmPackage, commit: str, from_wheel: dict[str, str] | None = None
) -> tuple[bool | None, str]:
    """The composition proof: the image's vLLM package, entry by entry, against two lists. Every file is a file of
    the source commit's tree with its git blob id, or a member of the locked wheel that precompiled mode takes
    (the lock's vllm_files) with its sha256, or vllm/_version.py in setuptools-scm's shape; every bytecode cache is
    bound to its source. Anything else fails, named: a file that differs, one neither list has, one of either list
    that is missing, a link of any name, a device, a directory where a list has a file."""
    wheel = {p: h for p, h in (from_wheel or {}).items() if p.startswith("vllm/")}
    source = {p: b for p, b in listed.items() if p not in wheel and p not in GENERATED_PYTHON}
    if not package.python and not package.wheel_files:
        return False, "the image's vLLM package holds no file"
    stubs = {p: proto for p in package.python if p not in source and (proto := stub_of(p, set(listed)))}
    problems = _differences(source, wheel, package, commit, set(stubs))
    unlike = [f"{_name(p)} ({why})" for p in sorted(stubs) if (why := stub_problem(p, _kept(package, p)))]
    if unlike:
        problems.append(f"{len(unlike)} generated gRPC stub(s) are not what protoc writes: {', '.join(unlike[:3])}")
    version = version_file_problem(package.version_file)
    if version:
        problems.append(version)
    caches = _caches(package)
    problems += [f"{len(paths)} {why}: {_said(paths)}" for why, paths in caches.items() if why in FAILS]
    if problems:
        return False, "; ".join(problems)[:900]
    notes = [f"{len(package.python)} file(s) are {commit[:12]}'s (git blob ids), and nothing else is there"]
    if wheel:
        notes.append(f"{len(package.wheel_files)} are the locked wheel's members (sha256)")
    if package.version_file is not None:
        notes.append("vllm/_version.py (setuptools-scm's) holds literals only")
    if stubs:
        protos = ", ".join(sorted(set(stubs.values())))
        notes.append(
            f"{len(stubs)} are gRPC stubs the build generated from {protos} (held to the statements gRPC's "
            "generators write, not to bytes)"
        )
    notes += [f"{len(paths)} bytecode cache(s) {why}" for why, paths in sorted(caches.items(), key=_bound_first)]
    return True, "; ".join(notes)


def _bound_first(item: tuple[str, list[str]]) -> tuple[bool, str]:
    return item[0] != BOUND, item[0]


def _kept(package: VllmPackage, path: str) -> bytes | None:
    source = package.sources.get(path)
    return source.data if source is not None else None


def _differences(
    source: dict[str, str], wheel: dict[str, str], package: VllmPackage, commit: str, generated: set[str]
) -> list[str]:
    """What sets the package apart from the two lists (but the `generated` stubs), one phrase a kind, the first names
    of each."""
    found = {p: b for p, b in package.python.items() if p not in generated}
    shadowed = [p for p in sorted({*source, *wheel}) if p in package.dirs]
    kinds = (
        (f"differ from {commit[:12]}'s", [p for p in sorted(found) if p in source and source[p] != found[p]]),
        (
            "differ from the locked wheel's",
            [p for p in sorted(package.wheel_files) if package.wheel_files[p] != wheel.get(p)],
        ),
        (f"are neither {commit[:12]}'s nor the wheel's", [p for p in sorted(found) if p not in source]),
        (f"of {commit[:12]}'s are missing", [p for p in sorted(source) if p not in found and p not in package.dirs]),
        ("of the wheel's are missing", [p for p in sorted(wheel) if p not in package.wheel_files]),
        ("are directories where a file belongs", shadowed),
    )
    said = [f"{len(paths)} {what}: {_said(paths)}" for what, paths in kinds if paths]
    odd = sorted(package.odd)
    if odd:
        said.append(
            f"{len(odd)} are no regular file: {', '.join(f'{_name(p)} ({package.odd[p]})' for p in odd[:MAX_SAID])}"
        )
    return said


def _caches(package: VllmPackage) -> dict[str, list[str]]:
    """The package's bytecode caches by what the import system makes of each (image/bytecode.py)."""
    kinds: dict[str, list[str]] = {}
    for cache, header in sorted(package.caches.items()):
        origin = source_of(cache)
        kinds.setdefault(judge(header, package.sources.get(origin) if origin else None), []).append(cache)
    return kinds


def _said(paths: list[str]) -> str:
    more = f" and {len(paths) - MAX_SAID} more" if len(paths) > MAX_SAID else ""
    return ", ".join(_name(p) for p in paths[:MAX_SAID]) + more


_TYPING_NAMES = {"Tuple", "Union", "Optional", "TYPE_CHECKING"}


def version_file_problem(text: bytes | None) -> str | None:
    """vllm/_version.py is written by setuptools-scm at install: assignments of literals (and its typing-only
    aliases), nothing that runs. Anything else, a call, an import other than typing's, a definition, is said."""
    if text is None:
        return None
    try:
        tree = ast.parse(text.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return "vllm/_version.py is not Python setuptools-scm writes"
    for node in ast.walk(tree):
        # typing's names; __future__'s annotations (setuptools-scm >= 9, vcs-versioning, writes the import)
        if isinstance(node, ast.ImportFrom) and node.module in ("typing", "__future__") and node.level == 0:
            if node.module == "typing" or [a.name for a in node.names] == ["annotations"]:
                continue
        allowed = (
            ast.Module,
            ast.Assign,
            ast.AnnAssign,
            ast.If,
            ast.Name,
            ast.Constant,
            ast.Tuple,
            ast.List,
            ast.Subscript,
            ast.Load,
            ast.Store,
            ast.alias,
            ast.BinOp,
            ast.BitOr,
        )
        if not isinstance(node, allowed):
            what = type(node.value).__name__ if isinstance(node, ast.Expr) else type(node).__name__
            return (
                f"vllm/_version.py holds more than setuptools-scm writes: {what} at line {getattr(node, 'lineno', '?')}"
            )
        if isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            return f"vllm/_version.py holds more than setuptools-scm writes: an if at line {node.lineno}"
    return None
