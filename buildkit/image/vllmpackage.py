"""vLLM's package directory in a built image, read as the tar stream the engine exports: each Python file's git
blob id (held to the source commit's tree) and each shared object's sha256 (held to the locked wheel's members).

NeMo-RL's build-custom-vllm.sh installs vLLM editable from its checkout (3rdparty/vllm), so the package is not in a
site-packages directory: where `python` finds it is asked (importlib's find_spec, which runs nothing of vLLM)."""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from buildkit.budget import IMAGE_FILES, Budget
from buildkit.errors import UpstreamMalformed
from buildkit.files import ChunkReader
from buildkit.models.compiled import is_vllm_python, python_origin
from buildkit.text.sanitize import strip_controls

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
MAX_SAID = 6  # names in one reason


@dataclass
class VllmPackage:
    """What the image's vLLM package holds, by its path in the wheel's terms ("vllm/config/__init__.py")."""

    directory: str
    python: dict[str, str] = field(default_factory=dict)  # a Python file from the source -> git blob id
    wheel_files: dict[str, str] = field(default_factory=dict)  # a shared object, a from-wheel Python file -> sha256
    problems: list[str] = field(default_factory=list)  # members that cannot be vLLM's as installed
    bytecode: int = 0  # __pycache__/*.pyc: not compared (said)
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


def _kind(name: str) -> str | None:
    """What verify makes of a member by its name: "python" (a module file), "so", "pyc", "bytecode" (a cache
    under __pycache__), or None (package data: JSON configs, type stubs ...)."""
    if "/__pycache__/" in f"/{name}":
        return "bytecode" if name.endswith(".pyc") else None
    if name.endswith(".py"):
        return "python"
    if name.endswith(".so"):
        return "so"
    if name.endswith(".pyc"):
        return "pyc"
    return None


def read_package(chunks: Iterable[bytes], directory: str, where: str) -> VllmPackage:
    """Every file of the package's tar stream (members named vllm/...) that Python could import, under the image's
    budget (budget.IMAGE_FILES): module files by git blob id (from the source) or sha256 (from the wheel), shared
    objects by sha256; a link, a sourceless .pyc or a module name outside vLLM's grammar is a problem."""
    found = VllmPackage(directory)
    budget = Budget(where, IMAGE_FILES)
    stream = io.BufferedReader(ChunkReader(chunks), 1 << 20)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                budget.entry()
                budget.tick()
                _read_member(tar, member, found, budget, where)
    except tarfile.TarError as exc:
        raise UpstreamMalformed(f"{where}: not a readable tar stream: {exc}") from None
    return found


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, found: VllmPackage, budget: Budget, where: str) -> None:
    name, kind = member.name, _kind(member.name)
    if kind is None or member.isdir():
        return
    shown = _name(name)
    if kind == "bytecode":
        found.bytecode += 1
        return
    if not member.isreg():  # a link: Python would import what it points at, which nothing here compares
        found.problems.append(f"{shown} is a link, not a file")
        return
    if kind == "pyc":  # sourceless bytecode beside the modules: importable, compared to nothing
        found.problems.append(f"{shown} is bytecode without its source")
        return
    if kind == "python" and not is_vllm_python(name):
        found.problems.append(f"{shown} is a module outside vLLM's file names")
        return
    if kind == "python" and member.size > MAX_PYTHON_BYTES:
        raise UpstreamMalformed(
            f"{where}: {name} is {member.size:,} bytes, more than buildkit reads for a Python "
            f"file ({MAX_PYTHON_BYTES:,})"
        )
    origin = python_origin(name) if kind == "python" else "wheel"
    if origin == "generated" and member.size > MAX_VERSION_FILE:
        raise UpstreamMalformed(f"{where}: {name} is {member.size:,} bytes, more than setuptools-scm writes")
    source = tar.extractfile(member)
    assert source is not None  # a regular file always has contents
    blob = hashlib.sha1(b"blob %d\0" % member.size)  # git's blob id: the header, then the bytes
    sha256 = hashlib.sha256()
    kept = bytearray()
    while chunk := source.read(4 << 20):
        budget.inflate(len(chunk))
        (blob if origin == "source" else sha256).update(chunk)
        if origin == "generated":
            kept += chunk
    if origin == "source":
        found.python[name] = blob.hexdigest()
    elif origin == "generated":
        found.version_file = bytes(kept)
    else:
        found.wheel_files[name] = sha256.hexdigest()


def judge_python(
    listed: dict[str, str], package: VllmPackage, commit: str, from_wheel: Iterable[str] = ()
) -> tuple[bool | None, str]:
    """The image's vLLM package against the source commit's tree and the wheel: every module file from the source
    is byte for byte the commit's (same blob id); none is there that the commit does not have, and none of the
    commit's is missing from a package directory the image installs; every shared object is one of the wheel's
    (their bytes: the compiled-file check); vllm/_version.py holds literals only; nothing is a link or sourceless
    bytecode. Bytecode caches are not compared, and said."""
    found = package.python
    if not found:
        return False, "the image's vLLM package holds no Python file"
    wrong = [p for p in sorted(found) if p in listed and listed[p] != found[p]]
    extra = [p for p in sorted(found) if p not in listed]
    installed = {p.rsplit("/", 1)[0] for p in found if p.endswith("/__init__.py")}
    removed = [p for p in sorted(listed) if p not in found and p.rsplit("/", 1)[0] in installed]
    wheel = set(from_wheel)
    strange = [p for p in sorted(package.wheel_files) if p.endswith(".so") and p not in wheel]
    said = [
        f"{what} {', '.join(_name(p) for p in paths[:MAX_SAID])}"
        for what, paths in (
            (f"{len(wrong)} differ from {commit[:12]}'s:", wrong),
            (f"{len(extra)} are not in {commit[:12]}'s tree:", extra),
            (f"{len(removed)} of {commit[:12]}'s are missing from the package directories installed:", removed),
            (f"{len(strange)} shared object(s) are not the wheel's:", strange),
            (f"{len(package.problems)} cannot be vLLM's as installed:", package.problems),
        )
        if paths
    ]
    version = version_file_problem(package.version_file)
    if version:
        said.append(version)
    if said:
        return False, "; ".join(said)[:900]
    absent = len([p for p in listed if p not in found])
    notes = [f"{len(found)} file(s) are {commit[:12]}'s (git blob ids)"]
    if package.wheel_files:
        notes.append(f"{len(package.wheel_files)} from the wheel (held to its sha256 by the compiled-file check)")
    if package.version_file is not None:
        notes.append("vllm/_version.py (setuptools-scm's) holds literals only")
    if absent:
        notes.append(f"{absent} of the tree's are in no package directory the image installs")
    if package.bytecode:
        notes.append(
            f"{package.bytecode} bytecode file(s) under __pycache__ not compared (Python runs one in place "
            "of its source when its header matches the source's size and time)"
        )
    return True, "; ".join(notes)


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
        if isinstance(node, ast.ImportFrom) and node.module == "typing" and node.level == 0:
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
