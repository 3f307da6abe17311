"""vLLM's package directory in a built image, read as the tar stream the engine exports: each Python file's git
blob id (held to the source commit's tree) and each shared object's sha256 (held to the locked wheel's members).

NeMo-RL's build-custom-vllm.sh installs vLLM editable from its checkout (3rdparty/vllm), so the package is not in a
site-packages directory: where `python` finds it is asked (importlib's find_spec, which runs nothing of vLLM)."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from buildkit.budget import IMAGE_FILES, Budget
from buildkit.errors import UpstreamMalformed
from buildkit.files import ChunkReader
from buildkit.models.compiled import GENERATED_PYTHON, is_vllm_python, python_origin

# The directories `import vllm` would search, one per line (a namespace package may have several; vLLM has one).
FIND_SPEC = [
    "python", "-c",
    "import importlib.util as u; s = u.find_spec('vllm'); "
    "print('\\n'.join(s.submodule_search_locations or []) if s else '')",
]  # fmt: skip
_DIR_RE = re.compile(r"/[A-Za-z0-9._+/-]{0,400}/vllm")  # fullmatch: an absolute path ending in the package's name
MAX_PYTHON_BYTES = 16 << 20  # vLLM's largest Python file is a few hundred KiB


@dataclass
class VllmPackage:
    """What the image's vLLM package holds, by its path in the wheel's terms ("vllm/config/__init__.py")."""

    directory: str
    python: dict[str, str] = field(default_factory=dict)  # path -> git blob id
    shared_objects: dict[str, str] = field(default_factory=dict)  # path -> sha256


def package_dir(code: int, output: str) -> str | None:
    """The package directory from FIND_SPEC's answer, or None when python found none (or said something else)."""
    lines = output.strip().splitlines()
    if code != 0 or not lines or not _DIR_RE.fullmatch(lines[0]) or "/../" in f"{lines[0]}/":
        return None
    return lines[0]


def read_package(chunks: Iterable[bytes], directory: str, where: str) -> VllmPackage:
    """Every regular file of the package's tar stream (members named vllm/...) that verify holds to the lock,
    under the image's budget (budget.IMAGE_FILES). Bytecode caches and other files are passed over."""
    found = VllmPackage(directory)
    budget = Budget(where, IMAGE_FILES)
    stream = io.BufferedReader(ChunkReader(chunks), 1 << 20)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                budget.entry()
                budget.tick()
                name = member.name
                python = is_vllm_python(name)
                if not member.isreg() or not (python or name.endswith(".so")) or "/__pycache__/" in name:
                    continue
                if python and member.size > MAX_PYTHON_BYTES:
                    raise UpstreamMalformed(f"{where}: {name} is {member.size:,} bytes, more than buildkit reads "
                                            f"for a Python file ({MAX_PYTHON_BYTES:,})")  # fmt: skip
                source = tar.extractfile(member)
                assert source is not None  # a regular file always has contents
                blob = hashlib.sha1(b"blob %d\0" % member.size)  # git's blob id: the header, then the bytes
                sha256 = hashlib.sha256()
                while chunk := source.read(4 << 20):
                    budget.inflate(len(chunk))
                    (blob if python else sha256).update(chunk)
                if python:
                    found.python[name] = blob.hexdigest()
                else:
                    found.shared_objects[name] = sha256.hexdigest()
    except tarfile.TarError as exc:
        raise UpstreamMalformed(f"{where}: not a readable tar stream: {exc}") from None
    return found


def judge_python(listed: dict[str, str], found: dict[str, str], commit: str) -> tuple[bool | None, str]:
    """The image's vLLM Python files against the source commit's tree: each one from the source is byte for byte
    the commit's (same blob id), and none is there that the commit does not have. Files precompiled mode takes from
    the wheel, or writes at install, are passed over and counted; files of the tree the package does not install
    (a directory without __init__.py) are counted, not failed."""
    wrong, extra, matched, other = [], [], 0, 0
    for path, blob in sorted(found.items()):
        if python_origin(path) != "source":
            other += 1
        elif path not in listed:
            extra.append(path)
        elif listed[path] != blob:
            wrong.append(path)
        else:
            matched += 1
    if not found:
        return False, "the image's vLLM package holds no Python file"
    absent = len([p for p in listed if p not in found])
    if wrong or extra:
        said = [f"{len(wrong)} differ from {commit[:12]}'s: {', '.join(wrong[:6])}"] if wrong else []
        said += [f"{len(extra)} are not in {commit[:12]}'s tree: {', '.join(extra[:6])}"] if extra else []
        return False, "; ".join(said)[:600]
    notes = [f"{matched} file(s) are {commit[:12]}'s (git blob ids)"]
    if other:
        notes.append(f"{other} from the wheel or written at install ({', '.join(GENERATED_PYTHON)}) not compared")
    if absent:
        notes.append(f"{absent} of the tree's are not installed")
    return True, "; ".join(notes)
