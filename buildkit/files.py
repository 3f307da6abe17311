"""Small helpers every stage uses: UTC timestamps, sha256, atomic writes, and reading the records stages write.

Writes are atomic (a temp file in the same directory, fsync, rename), so a failed or killed run leaves the old
file or the new one, never a mix. A temp file (or working directory) orphaned by a kill in the write window names its
process; the next write to the same file removes it once that process is gone.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from buildkit.errors import InputError

M = TypeVar("M", bound=BaseModel)
_TEMP_RE = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.tmp")


def utc_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write text to path so that readers see the old file or the new one, never a mix."""
    with _replacing(path) as (fd, _):
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


@contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """An empty temp file beside `path` for the block (or a program it runs) to fill. When the block succeeds the
    file gets the mode a new file gets (0666 less the umask: others may read what they are meant to share), is
    fsynced and renamed onto `path`; when it fails, removed. An OSError becomes write_error(path)."""
    with _replacing(path) as (fd, tmp):
        os.close(fd)
        yield tmp
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o666 & ~current_umask())
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def _replacing(path: Path) -> Iterator[tuple[int, Path]]:
    """A new temp file beside `path`: its descriptor (the block closes it) and name. Renamed onto `path` when the
    block succeeds, removed when it fails; an OSError becomes write_error(path)."""
    fd, tmp = _make_temp(path)
    try:
        # mkstemp makes the file 0600; the file written gets the mode any new file gets (0644 under umask 022), so
        # teammates on a shared file system can read the lock, the records and the report.
        os.fchmod(fd, 0o666 & ~current_umask())
        yield fd, Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise write_error(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process's umask, read without changing it (os.umask sets it, which races with other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


@contextmanager
def work_dir_beside(path: Path) -> Iterator[Path]:
    """A private working directory (mode 0700) beside `path`, on its file system, so that what is made in it can be
    renamed onto `path` and its space is the space `path` will take. Named like the temp files above, so that if
    this process is killed the next write to `path` removes it; removed when the block ends."""
    _, tmp = _make_temp(path, directory=True)
    try:
        yield Path(tmp)
    finally:
        try:
            remove_tree(tmp)
        except OSError:
            pass  # named as an orphan: the next write to `path` removes it


def _make_temp(path: Path, directory: bool = False) -> tuple[int, str]:
    """A new temp file (its fd and name) or directory (-1 and its name) beside `path`, after removing the orphans
    of earlier runs."""
    prefix = f".{path.name}.{os.getpid()}."
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_orphans(path)
        if directory:
            return -1, tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=path.parent)
        return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from None


def write_error(path: Path, exc: OSError) -> InputError:
    """The one message for a file that cannot be written: what the OS said, and what to do (exit 2)."""
    return InputError(f"cannot write {path}: {exc.strerror or exc}", hint=_write_hint(exc))


def _write_hint(exc: OSError) -> str:
    import errno

    return {
        errno.ENOSPC: "the disk is full: free some space",
        errno.EROFS: "the file system is read-only: choose another directory",
        errno.EACCES: "no permission: choose a directory you can write",
        errno.EISDIR: "that path is a directory: give a file path",
    }.get(exc.errno or 0, "check the path and its directory")


def _remove_orphans(path: Path) -> None:
    """Temp files and working directories a killed run left beside `path` (their process is gone)."""
    for candidate in path.parent.glob(f".{path.name}.*.tmp"):
        m = _TEMP_RE.fullmatch(candidate.name)
        if m and m.group("name") == path.name and not _alive(int(m.group("pid"))):
            if candidate.is_dir() and not candidate.is_symlink():
                try:
                    remove_tree(candidate)
                except OSError:
                    pass  # left for a later write to try again; it blocks nothing
            else:
                candidate.unlink(missing_ok=True)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(name: str | Path, dir_fd: int | None = None) -> None:
    """Remove the directory `name` (relative to `dir_fd`, if given) and everything in it, never following a symlink.
    Iterative, with one directory open at a time, so any depth works: shutil.rmtree recurses once per level, and its
    RecursionError is no OSError (ignore_errors lets it out). Going back up, each parent is checked to be the very
    directory it came down from. Raises OSError."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    above: list[tuple[tuple[int, int], list[str], str]] = []  # each open directory's parent: identity, left, name
    try:
        pending = _remove_files(fd)
        while True:
            if pending:
                child = pending.pop()
                above.append((_identity(fd), pending, child))
                opened = os.open(child, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = opened
                pending = _remove_files(fd)
                continue
            if not above:
                break
            identity, pending, child = above.pop()
            opened = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = opened
            if _identity(fd) != identity:
                raise OSError(errno.ESTALE, f"{child}'s directory moved while it was being removed")
            os.rmdir(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _remove_files(fd: int) -> list[str]:
    """Unlink everything but the directories in the directory `fd`; return the directories' names."""
    with os.scandir(fd) as entries:
        listed = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for child, is_dir in listed:
        if not is_dir:
            os.unlink(child, dir_fd=fd)
    return [child for child, is_dir in listed if is_dir]


def _identity(fd: int) -> tuple[int, int]:
    held = os.fstat(fd)
    return held.st_dev, held.st_ino


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_record(path: Path, model: type[M]) -> M | None:
    """A record an earlier stage wrote, or None when that stage has not run; a broken one is bad input."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the record: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(
            f"{path}: not a valid record: {where}: {first['msg']}", hint="delete it and rerun the stage that writes it"
        ) from None


def write_all_atomic(files: list[tuple[Path, str]]) -> None:
    """Several files that belong together (pins, lock, records): every new file is written and fsynced beside its
    target first, and only when all of them are complete are they renamed into place, one after the other. A
    failure while writing (a full disk) renames none of them and removes every temp file."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        for path, text in files:
            tmp = stack.enter_context(replaced_atomically(path))
            try:
                tmp.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise write_error(path, exc) from None
