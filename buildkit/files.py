"""Small helpers every stage uses: UTC timestamps, sha256, atomic writes, reading the records stages write, and a
file object over streamed chunks.

Writes are atomic (a temp file in the same directory, fsync, rename), so a failed or killed run leaves the old
file or the new one, never a mix. A temp file (or working directory) orphaned by a kill in the write window names its
process; the next write to the same file removes it once that process is gone.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from buildkit.errors import InputError

M = TypeVar("M", bound=BaseModel)
_TEMP_RE = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.tmp")


def utc_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """The sha256 of a regular file, streamed; opened without blocking, so a FIFO is refused, never waited on."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{path}: not a regular file: refused")
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
        check_replaceable(path)  # again: the path may have changed while the block ran
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
    check_replaceable(path)
    prefix = f".{path.name}.{os.getpid()}."
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_orphans(path)
        if directory:
            return -1, tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=path.parent)
        return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from None


def is_stdout(path: Path | None) -> bool:
    """`-o -` and `-o /dev/stdout` mean standard output: streamed there, never a file renamed over the name."""
    return path is not None and str(path) in ("-", "/dev/stdout")


def check_replaceable(path: Path) -> None:
    """A write replaces `path` by renaming a new file onto it: only a regular file, a symlink to one (the link
    is replaced, not what it points at) or a new path may be there. A device, FIFO or socket, or a symlink to one,
    is refused (InputError), and nothing is replaced: as root, renaming onto /dev/null would replace the device for
    every process on the machine. So is a symlink to a directory: the rename would replace the link, which names a
    directory, not a file (`-o reports/` through a link). A directory gets the rename's own error (EISDIR)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return  # a new path; or the write itself says what is wrong
    through = ""
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return  # a dangling link: the link itself is replaced
        through = " through a symlink"
    if stat.S_ISREG(mode) or (stat.S_ISDIR(mode) and not through):
        return
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    raise InputError(
        f"{path} is {kind}{through}, not a regular file: refusing to replace it",
        hint="give a file path, or `-o -` for standard output",
    )


def check_folders(top: Path, folders: Iterable[Path]) -> None:
    """The folders below `top` (a build folder) that buildkit writes into, and every folder on the way to each, are
    real directories or not there yet (buildkit makes them): a symlink, dangling or not, would send the records
    and the files they replace wherever it points, so it is refused (InputError, exit 2), as is anything else that
    is not a directory. `top` itself is checked where it is named (discovery.check_build_dir); a folder not below
    it is one the user named."""
    for folder in folders:
        try:
            parts = folder.relative_to(top).parts
        except ValueError:
            continue
        at = top
        for part in parts:
            at = at / part
            try:
                mode = os.lstat(at).st_mode
            except OSError:
                break  # not there yet (or unreadable: the write says why): nothing below it is either
            if stat.S_ISLNK(mode):
                raise InputError(
                    f"{at}: a folder buildkit writes into is a symlink (to {_link(at)}): refused",
                    hint="remove the link: buildkit makes the folder itself (or name another --build-dir)",
                )
            if not stat.S_ISDIR(mode):
                kind = _KINDS.get(stat.S_IFMT(mode), "a regular file")
                raise InputError(
                    f"{at}: a folder buildkit writes into is {kind}, not a directory: refused",
                    hint="move it away: buildkit makes the folder itself",
                )


def _link(path: Path) -> str:
    """Where a planted link points, as one bounded line (its target is anyone's bytes: a line break stays escaped)."""
    try:
        target = os.readlink(path)
    except OSError:
        return "?"  # replaced again since lstat: still refused
    shown = re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", target)
    return shown if len(shown) <= 200 else shown[:100] + "..." + shown[-97:]


def write_error(path: Path, exc: OSError) -> InputError:
    """The one message for a file that cannot be written: what the OS said, and what to do (exit 2)."""
    return InputError(f"cannot write {path}: {exc.strerror or exc}", hint=write_hint(exc))


def write_hint(exc: OSError) -> str:
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


# The one way a local file is read: the most bytes each kind may have (docs/explanation/security.md lists them).
MAX_PINS_BYTES = 1 << 20  # a pins file is a few KiB
MAX_LOCK_BYTES = 1 << 20  # a lock is a few KiB
MAX_PATCH_BYTES = 4 << 20  # a patch to a few build files
MAX_RECORD_BYTES = 16 << 20  # buildx's metadata file carries BuildKit's whole mode=max provenance
MAX_RESULTS_BYTES = 16 << 20  # report --results: metrics per step
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFSOCK: "a socket",
}


def read_local(path: Path, what: str, limit: int, within: Path | None = None) -> bytes:
    """The bytes of the local file `path` (`what` names it in messages), at most `limit`. Only a regular file:
    checked before it is opened (opening a device can act on it), opened without blocking (a FIFO never waits for a
    writer) and checked again with fstat on the descriptor read. With `within`, the path and every symlink on it
    must resolve inside that directory (a patch inside the project). FileNotFoundError passes through; anything
    else is InputError (exit 2) naming the file, what it is, and the limit."""
    if within is not None:
        resolved, root = os.path.realpath(path), os.path.realpath(within)
        if os.path.commonpath([resolved, root]) != root:
            raise InputError(
                f"{path}: {what} resolves outside {within} (to {resolved}): refused",
                hint=f"keep {what} a regular file inside {within}",
            )
    try:
        _regular(path, os.stat(path).st_mode, what)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        held = os.fstat(fd)
        _regular(path, held.st_mode, what)
        if held.st_size > limit:
            raise _too_large(path, what, limit)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise _too_large(path, what, limit)
    return b"".join(chunks)


def _regular(path: Path, mode: int, what: str) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise InputError(f"{path}: {what} must be a regular file, found {kind}", hint=f"give {what} as a plain file")


def _too_large(path: Path, what: str, limit: int) -> InputError:
    return InputError(
        f"{path}: {what} is larger than {_size(limit)}, the limit for it",
        hint="the limits are in docs/explanation/security.md",
    )


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and not limit % (1 << 20) else f"{limit:,} bytes"


def read_record(path: Path, model: type[M]) -> M | None:
    """A record an earlier stage wrote, or None when that stage has not run; a broken one is bad input."""
    try:
        text = read_local(path, "the record", MAX_RECORD_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: cannot read the record: not UTF-8 (byte {exc.start})") from None
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
    with ExitStack() as stack:
        for path, text in files:
            tmp = stack.enter_context(replaced_atomically(path))
            try:
                tmp.write_text(text, encoding="utf-8")
            except OSError as exc:
                raise write_error(path, exc) from None


class ChunkReader(io.RawIOBase):
    """A readable file over an iterable of byte chunks (an HTTP body, the engine's archive stream), for tarfile's
    stream mode and the decompressors."""

    def __init__(self, chunks: Iterable[bytes]):
        super().__init__()
        self._chunks, self._held = iter(chunks), memoryview(b"")  # a view: taking from it copies nothing

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._held:
            try:
                self._held = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self._held))
        view[:n], self._held = self._held[:n], self._held[n:]
        return n
