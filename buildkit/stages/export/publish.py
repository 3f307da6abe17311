"""`buildkit export --to DIR`: the squashfs published on shared storage, named by the image's platform manifest
digest (`<name>@sha256-<hex>.sqsh`, as a cluster user finds it again), so that one name always means one image.

Two exports of one digest into one directory (two CI jobs) take turns on a lock file in it (`.buildkit-export.lock`,
flock, which NFSv4 and Lustre honour), and the second finds the first's file and leaves it untouched. The file
appears only when complete (a temp file beside it, fsynced, renamed), so a reader never sees half a file under the
final name. A file already there is taken when its squashfs superblock is whole (magic, and the size the superblock
says it used within the file's padded size); its sha256 is read, never rewritten. Whether its bytes are the image's
is not checked here: that needs evidence beside the file (issue 43's signed statement, not made yet).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from buildkit.errors import InputError, excerpt
from buildkit.models.grammar import DIGEST_RE

LOCK_NAME = ".buildkit-export.lock"
SQUASHFS_MAGIC = 0x73717368  # "hsqs", little-endian: squashfs 4 (squashfs-tools, squashfs_fs.h)
SUPERBLOCK = struct.Struct("<IIIIIHHHHHHQQQQQQQQ")  # 96 bytes; bytes_used is the 4th Q (offset 40)
PAD = 4096  # mksquashfs pads the file to a multiple of 4 KiB unless -nopad
_NAME_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")  # one path component of a repository (distribution's grammar)


def published_name(tag: str, manifest_digest: str) -> str:
    """`<last path component of the repository>@sha256-<hex>.sqsh`: the digest names the image, the name a person."""
    if not DIGEST_RE.fullmatch(manifest_digest):
        raise InputError(f"not a manifest digest: {excerpt(manifest_digest, 80)}")
    repository = tag.rsplit("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    name = last.rsplit(":", 1)[0] if ":" in last else last
    if not _NAME_RE.fullmatch(name):
        raise InputError(f"{excerpt(tag, 120)}: its repository's last component is not a plain name")
    return f"{name}@{manifest_digest.replace(':', '-')}.sqsh"


def checked_dir(directory: Path) -> Path:
    """DIR as given, refused (one line, nothing written) when it is not a directory buildkit can write into: missing,
    a file, a symlink (the file would land where the link points, which the user did not name), not writable."""
    shown = excerpt(str(directory), 200)
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        raise InputError(f"--to {shown}: no such directory", hint="create it (mkdir -p), then run again") from None
    except OSError as exc:
        raise InputError(f"--to {shown}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        raise InputError(f"--to {shown} is a symlink", hint="give the directory it points to itself")
    if not stat.S_ISDIR(info.st_mode):
        raise InputError(f"--to {shown} is not a directory", hint="give a directory; -o PATH names a file")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"--to {shown}: not writable by this user", hint="pick a directory you can write to")
    return directory.absolute()


@contextmanager
def turn(directory: Path) -> Iterator[None]:
    """This process's turn at exporting into `directory`: an exclusive flock on its lock file, waited for."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise InputError(f"{excerpt(str(directory / LOCK_NAME), 200)}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
            # A file system without locks: the rename still makes one whole file, only the work may be done twice.
        yield
    finally:
        os.close(fd)


def whole_squashfs(path: Path) -> int | None:
    """The size of the squashfs at `path` when its superblock says it is whole; None when there is no such regular
    file (a symlink is not taken) or it is not a whole squashfs."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size < SUPERBLOCK.size:
            return None
        head = os.pread(fd, SUPERBLOCK.size, 0)
    finally:
        os.close(fd)
    if len(head) < SUPERBLOCK.size:
        return None
    fields = SUPERBLOCK.unpack(head)
    magic, major, used = fields[0], fields[9], fields[12]  # s_magic, s_major, bytes_used
    if magic != SQUASHFS_MAGIC or major != 4 or not 0 < used <= info.st_size:
        return None
    return info.st_size if info.st_size <= -(-used // PAD) * PAD else None
