"""The image's Python environments verified the way `rpm -V` verifies packages: every distribution holds to its own
RECORD (the sha256 and size pip writes per file), the files no RECORD owns are listed, and what Python runs at
start-up without an import (a `.pth` file, `sitecustomize`, `usercustomize`) must be owned by a distribution.

Each environment (a site-packages or dist-packages directory) is read once as the tar stream the engine exports.
Its bytecode is judged as the import system judges it (image/bytecode.py): a hash-based cache against its source's
hash, computed as the source streams by (a source that comes before its directory's caches, as `__init__.py` comes
before `__pycache__/` in Docker's archive, is held until the stream leaves its directory, within MAX_PENDING).
A RECORD is written by the same install whose files it lists, so it proves the files are what that install wrote,
not that the install was honest: vLLM's own files are held to the lock instead (image/vllmpackage.py). vLLM's
editable install is recognised as build-custom-vllm.sh leaves it: pip's `__editable__.vllm-*.pth` imports a
finder whose MAPPING sends `vllm` to the package directory verify proved; any other mapping fails."""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import io
import posixpath
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from buildkit.budget import IMAGE_FILES, Budget, LimitExceeded
from buildkit.image.bytecode import FAILS, HEADER_BYTES, NOT_CHECKED, Source, hash_based, judge, source_hash, source_of
from buildkit.text.sanitize import strip_controls
from buildkit.world.tarstream import members

MAX_RECORD = 16 << 20  # torch's RECORD is about 2 MiB
MAX_TEXT = 64 << 10  # a .pth file or an editable finder is a few KiB
MAX_SOURCE = 16 << 20  # the largest source hashed for its bytecode (as vLLM's package: vllmpackage.MAX_PYTHON_BYTES)
MAX_PENDING = 256 << 20  # the sources held for caches yet to come: a directory's own, a few MiB in torch's largest
MAX_SAID = 5
START_UP = ("sitecustomize", "usercustomize")  # site.py imports these at start-up
_EDITABLE_PTH = re.compile(r"__editable__\.vllm-[A-Za-z0-9_.+-]{1,100}\.pth")
_FINDER_LINE = re.compile(r"import (__editable___vllm_[A-Za-z0-9_]{1,100}_finder); \1\.install\(\)\n?")


@dataclass
class Environment:
    """One environment's files, by their path inside it ("torch/__init__.py")."""

    directory: str
    files: dict[str, tuple[str, int]] = field(default_factory=dict)  # RECORD's form: sha256=<urlsafe b64>, size
    records: dict[str, bytes] = field(default_factory=dict)  # "<name>.dist-info" -> its RECORD
    texts: dict[str, bytes] = field(default_factory=dict)  # top-level .pth files and editable finders
    odd: dict[str, str] = field(default_factory=dict)  # an entry that is no file and no directory -> what it is
    sources: dict[str, Source] = field(default_factory=dict)
    caches: dict[str, bytes] = field(default_factory=dict)


@dataclass
class _Pending:
    """What the read holds for bytecode still to come: the sources of the directories no cache of which has come
    yet (by directory; let go when the stream leaves it), and the magic numbers of the hash-based caches whose
    source has not come yet."""

    where: str
    held: dict[str, dict[str, bytes]] = field(default_factory=dict)
    size: int = 0
    cached_dirs: set[str] = field(default_factory=set)
    magics: dict[str, set[bytes]] = field(default_factory=dict)

    def leave(self, name: str) -> None:
        """The stream is at `name`: every directory it is not in has been read whole."""
        for directory in [d for d in self.held if d and not name.startswith(f"{d}/")]:
            self.size -= sum(len(b) for b in self.held.pop(directory).values())

    def wants(self, source: str) -> bool:
        """Whether a source's bytes are needed: a hash-based cache of it came, or its directory's may still come."""
        return source in self.magics or posixpath.dirname(source) not in self.cached_dirs

    def hold(self, name: str, data: bytes) -> None:
        self.held.setdefault(posixpath.dirname(name), {})[name] = data
        self.size += len(data)
        if self.size > MAX_PENDING:
            raise LimitExceeded(
                f"{self.where}: more than {MAX_PENDING:,} bytes of Python source waiting for its bytecode: refused",
                hint="no real environment comes near this limit (docs/explanation/security.md lists them): the "
                "image is hostile or damaged",
            )


def read_environment(chunks: Iterable[bytes], directory: str, where: str) -> Environment:
    """Every entry of an environment's tar stream (named `<its directory's name>/...`), under the image's budget."""
    env = Environment(directory)
    budget = Budget(where, IMAGE_FILES)
    pending = _Pending(where)
    for tar, member in members(chunks, where, budget):
        _read(tar, member, env, budget, pending)
    return env


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, env: Environment, budget: Budget, pending: _Pending) -> None:
    name = member.name.rstrip("/").partition("/")[2]  # the path inside the environment
    pending.leave(name)
    if not name or member.isdir():
        return
    if not member.isreg():
        env.odd[name] = f"a link to {strip_controls(member.linkname)[:120]}" if member.issym() else "no regular file"
        return
    data = tar.extractfile(member)
    assert data is not None  # a regular file always has contents
    kept = _kept(name, member.size)
    source = name.endswith(".py") and member.size <= MAX_SOURCE and pending.wants(name)
    digest, body, head = hashlib.sha256(), bytearray(), b""
    while chunk := data.read(4 << 20):
        budget.inflate(len(chunk))
        digest.update(chunk)
        head += chunk[: HEADER_BYTES - len(head)]
        if kept or source:
            body += chunk
    if source_of(name) is not None:
        env.caches[name] = head
        _cache_came(name, head, env, pending)
    if kept:
        budget.keep(len(body))
        if name.endswith("/RECORD"):
            env.records[name.rsplit("/", 1)[0]] = bytes(body)
        else:
            env.texts[name] = bytes(body)
    env.files[name] = ("sha256=" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("="), member.size)
    if name.endswith(".py"):
        env.sources[name] = Source(member.size, int(member.mtime))
        if source:
            _source_came(name, bytes(body), env, pending)


def _cache_came(cache: str, header: bytes, env: Environment, pending: _Pending) -> None:
    """A cache: its source's hash under its magic number, from the source's bytes when they are held, else once
    the source comes; its directory's caches have come (Docker's archive sends a directory whole)."""
    origin = source_of(cache)
    assert origin is not None  # the caller asked
    pending.cached_dirs.add(posixpath.dirname(origin))
    magic = hash_based(header)
    if magic is None:
        return
    held = pending.held.get(posixpath.dirname(origin), {}).get(origin)
    if held is None:
        pending.magics.setdefault(origin, set()).add(magic)
    elif (digest := source_hash(magic, held)) is not None:
        env.sources[origin].hashes[magic] = digest


def _source_came(name: str, data: bytes, env: Environment, pending: _Pending) -> None:
    """A source: hashed for the hash-based caches of it that came before it; held while its directory's caches
    may still come."""
    for magic in pending.magics.pop(name, ()):
        if (digest := source_hash(magic, data)) is not None:
            env.sources[name].hashes[magic] = digest
    if posixpath.dirname(name) not in pending.cached_dirs:
        pending.hold(name, data)


def _kept(name: str, size: int) -> bool:
    """A RECORD, a top-level .pth file and an editable finder are kept to be read; nothing past its limit."""
    if re.fullmatch(r"[^/]{1,200}\.dist-info/RECORD", name):
        return size <= MAX_RECORD
    return "/" not in name and (name.endswith(".pth") or name.endswith("_finder.py")) and size <= MAX_TEXT


def judge_environment(env: Environment, vllm_dir: str | None) -> tuple[bool, str]:
    """The environment against its distributions' RECORDs, its start-up files and its bytecode; (ok, reason)."""
    owned: set[str] = set()
    problems: list[str] = []
    outside = 0
    for dist, text in sorted(env.records.items()):
        rows, bad = _rows(text, dist)
        problems += bad
        for path, digest, size in rows:
            if path is None:
                outside += 1
                continue
            owned.add(path)
            problems += _held(env, dist, path, digest, size)
    unowned = sorted(p for p in {*env.files, *env.odd} if p not in owned and p.rsplit("/", 1)[0] not in env.records)
    start_up = [p for p in unowned if _runs_at_start_up(p)]
    if start_up:
        problems.append(f"{len(start_up)} run at start-up and no distribution owns them: {_said(start_up)}")
    problems += _editable_vllm(env, vllm_dir)
    caches: dict[str, list[str]] = {}
    for cache, header in sorted(env.caches.items()):
        origin = source_of(cache)
        caches.setdefault(judge(header, env.sources.get(origin) if origin else None), []).append(cache)
    problems += [f"{len(paths)} {why}: {_said(paths)}" for why, paths in caches.items() if why in FAILS]
    if problems:
        return False, f"{env.directory}: " + "; ".join(problems)[:800]
    said = [f"{len(env.records)} distribution(s) hold to their RECORDs ({len(owned):,} files)"]
    if unowned:
        said.append(f"{len(unowned)} file(s) no RECORD owns: {_said(unowned)}")
    if outside:
        said.append(f"{outside} RECORD entries outside the environment not read (scripts)")
    if NOT_CHECKED in caches:
        said.append(f"{len(caches[NOT_CHECKED])} {NOT_CHECKED}: {_said(caches[NOT_CHECKED])}")
    return True, f"{env.directory}: " + "; ".join(said)


def _rows(text: bytes, dist: str) -> tuple[list[tuple[str | None, str, str]], list[str]]:
    """RECORD's rows as (path inside the environment or None when outside it, hash, size); a RECORD that is not
    CSV of three fields is a problem."""
    rows: list[tuple[str | None, str, str]] = []
    try:
        for row in csv.reader(io.StringIO(text.decode("utf-8"))):
            if not row:
                continue
            if len(row) != 3:
                return rows, [f"{dist}/RECORD: a row of {len(row)} fields, not path,hash,size"]
            path = posixpath.normpath(row[0])
            inside = not (path.startswith(("../", "/")) or path == "..")
            rows.append((path if inside else None, row[1], row[2]))
    except (UnicodeDecodeError, csv.Error) as exc:
        return rows, [f"{dist}/RECORD is not CSV pip writes: {strip_controls(str(exc))[:80]}"]
    return rows, []


def _held(env: Environment, dist: str, path: str, digest: str, size: str) -> list[str]:
    if not digest:
        return []  # RECORD itself, and what the installer chose not to hash
    have = env.files.get(path)
    if have is None:
        return [f"{dist}: {_name(path)} is missing" if path not in env.odd else f"{dist}: {_name(path)} is a link"]
    if not digest.startswith("sha256="):
        return []  # another hashlib algorithm: pip writes sha256; said nowhere as a pass
    if have[0] != digest or (size and size != str(have[1])):
        return [f"{dist}: {_name(path)} differs from its RECORD"]
    return []


def _runs_at_start_up(path: str) -> bool:
    top = path.split("/", 1)[0]
    # the module's name before its suffixes: site.py's import finds sitecustomize.py, a package, or an extension
    return (path == top and top.endswith(".pth")) or top.split(".", 1)[0] in START_UP


def _editable_vllm(env: Environment, vllm_dir: str | None) -> list[str]:
    """pip's editable vLLM: each `__editable__.vllm-*.pth` imports its finder, whose MAPPING sends vllm to the
    package verify proved (and nothing else anywhere)."""
    problems = []
    for pth in sorted(p for p in env.texts if _EDITABLE_PTH.fullmatch(p)):
        line = _FINDER_LINE.fullmatch(env.texts[pth].decode("utf-8", "replace"))
        finder = env.texts.get(f"{line[1]}.py") if line else None
        mapping = _mapping(finder) if finder is not None else None
        if mapping is None:
            problems.append(f"{pth} is not the editable finder pip writes for vLLM")
        elif vllm_dir is None or any(v != _where(k, vllm_dir) for k, v in mapping.items()) or "vllm" not in mapping:
            shown = ", ".join(f"{_name(k)} -> {_name(v)}" for k, v in sorted(mapping.items())[:3])
            problems.append(f"{pth}'s finder maps {shown}, not vllm -> the package verified ({vllm_dir})")
    return problems


def _where(module: str, vllm_dir: str) -> str | None:
    """Where the finder should send a module of vLLM's ("vllm.x.y" -> <package>/x/y); None for any other module."""
    if module == "vllm":
        return vllm_dir
    return f"{vllm_dir}/{module[5:].replace('.', '/')}" if module.startswith("vllm.") else None


def _mapping(finder: bytes) -> dict[str, str] | None:
    """The MAPPING setuptools' editable finder template assigns (`MAPPING: dict[str, str] = {...}`), or None."""
    try:
        tree = ast.parse(finder.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    for node in tree.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None):
            continue
        if node.target.id == "MAPPING":
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                return None
            ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
            return value if ok else None
    return None


def _name(path: str) -> str:
    text = strip_controls(path)
    return text if len(text) <= 120 else text[:60] + "..." + text[-57:]


def _said(paths: list[str]) -> str:
    more = f" and {len(paths) - MAX_SAID} more" if len(paths) > MAX_SAID else ""
    return ", ".join(_name(p) for p in paths[:MAX_SAID]) + more
