"""An image's layers stacked into one directory, the way a container runtime stacks them: each layer in order, its
whiteouts applied (OCI image spec, "Applying Changesets"). It is what the overlay of `enroot import` shows mksquashfs.

Layers are hostile until checked. A name must be relative and free of `..`; every path is opened one component at a
time from the directory's descriptor without following a symlink (O_NOFOLLOW), so nothing a layer holds (a symlink
an earlier layer planted, a hardlink, a whiteout) can make this write or delete outside the directory. A path whose
parent is a symlink or a file in the image is refused: layers as Docker and BuildKit write them never hold one. A
hardlink must name something already unpacked inside the directory; a name (or a hardlink's target) more than
MAX_DEPTH (256) components deep is refused. A symlink is stored as it is, to resolve inside the container (nothing
here follows it). Sparse files, aufs-only whiteouts and unknown entry types are refused.

No root is needed, and the result does not depend on who runs it: owners are not kept (the squashfs makes every file
root's, as enroot's `-all-root` does), nor extended attributes (enroot's `tar -px` keeps none either), nor times
(mksquashfs sets them all); device nodes are left out and listed (enroot run unprivileged cannot make them either).
As enroot does (src/docker.sh, `docker::_prepare_layers`): entries under /dev are left out (`tar --exclude='dev/*'`),
and modes get u+r, u+x where anyone may execute, and u+w on directories (src/common.sh, `common::fixperms`).
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple, overload

from buildkit.errors import InputError, excerpt
from buildkit.files import remove_tree, write_error
from buildkit.image.ocilayout import CHUNK, Image, OciLayout, display

Parts = tuple[str, ...]

MAX_LISTED = 20  # device nodes named in the result; the rest are counted
_OPAQUE = ".wh..wh..opq"
_WHITEOUT = ".wh."
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CACHED_DIRS = 8  # open directory descriptors kept: a layer lists a directory's entries together
_MAX_LINK = 4095  # PATH_MAX less the terminating NUL: the longest symlink target Linux stores
MAX_DEPTH = 256  # path components in a name or a hardlink's target; real images stay far below it


class Unpacked(NamedTuple):
    entries: int  # tar entries read, in all layers
    skipped: list[str]  # device nodes left out, the first MAX_LISTED
    skipped_count: int


def unpack_image(
    layout: OciLayout,
    image: Image,
    dest: Path,
    on_layer: Callable[[int, int], None] | None = None,
    reported: Path | None = None,
) -> Unpacked:
    """Stack `image`'s layers into the empty directory `dest`. Each layer is checked against its digests as it is
    read; one that fails leaves `dest` half made, for the caller to delete. Raises InputError for a layer this
    cannot unpack safely, and for a full disk: write_error for `reported` (default: `dest`'s directory)."""
    with Rootfs(dest, reported) as root:
        for index, descriptor in enumerate(image.layers):
            if on_layer:
                on_layer(index, len(image.layers))
            root.start_layer(f"{layout.path}: layer {index + 1} of {len(image.layers)}")
            layout.walk_layer(descriptor, image.diff_id(index), f"layer {index + 1} of {len(image.layers)}", root.visit)
        return Unpacked(root.entries, root.skipped[:MAX_LISTED], len(root.skipped))


class Rootfs:
    """A directory being filled, layer by layer, and then given files of its own (`put_dir`, `put_file`: what a
    layer on top of all the others would hold). A context manager: it holds directory descriptors."""

    def __init__(self, root: Path, reported: Path | None = None):
        self.root = root
        self._reported = reported or root.parent  # what a full disk is said to keep from being written
        self._root_fd = os.open(root, _DIR_FLAGS)
        self._dirs: OrderedDict[Parts, int] = OrderedDict()
        self._keep: set[Parts] = set()  # what the current layer unpacked, and their parents: no whiteout hides them
        self._what = str(root)
        self.entries = 0
        self.skipped: list[str] = []

    def __enter__(self) -> Rootfs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def start_layer(self, what: str) -> None:
        self._keep = set()
        self._what = what

    # The entries of a layer.

    def visit(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Apply one tar entry of the current layer (buildkit.image.ocilayout.OciLayout.walk_layer calls this)."""
        self.entries += 1
        parts = self._parts(member.name)
        if len(parts) > 1 and parts[0] == "dev":
            return  # enroot: tar --exclude='dev/*' (the runtime mounts its own /dev)
        if not parts:
            if not member.isdir():
                self._refuse(member.name, "the image's root is not a directory")
            return  # the root's mode is the top layer's (enroot's "0": 0755), set by `finish`
        try:
            if parts[-1].startswith(_WHITEOUT):
                self._whiteout(parts)
                return
            if member.issparse():
                self._refuse(member.name, "a sparse file (Docker and BuildKit never write one)")
            if member.ischr() or member.isblk():
                self.skipped.append(display("/" + "/".join(parts)))
                return
            parent = self._dir(parts[:-1])
            if member.isdir():
                self._make_dir(parent, parts, _mode(member.mode, directory=True))
            elif member.isreg():
                source = tar.extractfile(member)
                assert source is not None
                self._make_file(parent, parts, source.read, _mode(member.mode, directory=False))
            elif member.issym():
                self._make_symlink(parent, parts, member.linkname)
            elif member.islnk():
                self._make_hardlink(parent, parts, member.linkname)
            elif member.isfifo():
                self._replace(parent, parts)
                os.mkfifo(parts[-1], 0o600, dir_fd=parent)
                os.chmod(parts[-1], _mode(member.mode, directory=False), dir_fd=parent)
            else:
                self._refuse(member.name, f"an entry of type {member.type!r}, which a layer does not hold")
        except OSError as exc:
            raise self._os_error(parts, exc) from None
        for depth in range(1, len(parts) + 1):
            self._keep.add(parts[:depth])

    def _parts(self, name: str) -> Parts:
        if name.startswith("/"):
            self._refuse(name, "an absolute path (a layer's names are relative to the image's root)")
        parts = tuple(part for part in name.split("/") if part not in ("", "."))
        if ".." in parts:
            self._refuse(name, "a path that goes up with '..'")
        if len(parts) > MAX_DEPTH:
            self._refuse(name, f"a path {len(parts)} directories deep (at most {MAX_DEPTH})")
        return parts

    def _whiteout(self, parts: Parts) -> None:
        name, parent_parts = parts[-1], parts[:-1]
        if name == _OPAQUE:
            parent = self._dir(parent_parts, create=False)
            if parent is not None:
                self._clear(parent_parts, parent)
            return
        hidden = name[len(_WHITEOUT) :]
        if name.startswith(_WHITEOUT + _WHITEOUT) or hidden in ("", ".", ".."):
            self._refuse("/".join(parts), "a whiteout the OCI image spec does not define")
        target = (*parent_parts, hidden)
        if target in self._keep:
            return  # a whiteout hides only what lower layers hold (OCI image spec), never this layer's own entries
        parent = self._dir(parent_parts, create=False)
        if parent is not None:
            self._replace(parent, target)

    def _clear(self, top_parts: Parts, top_fd: int) -> None:
        """An opaque whiteout: everything in the directory that lower layers put there goes; what this layer
        unpacked there (already, or later) stays."""
        stack: list[tuple[Parts, int, bool]] = [(top_parts, top_fd, False)]
        while stack:
            parts, fd, owned = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    children = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
                for name, is_dir in children:
                    child = (*parts, name)
                    if child not in self._keep:
                        self._replace(fd, child)
                    elif is_dir:
                        stack.append((child, os.open(name, _DIR_FLAGS, dir_fd=fd), True))
            finally:
                if owned:
                    os.close(fd)

    # What a layer on top of the others holds (enroot's configuration layer "0").

    def put_dir(self, parts: Parts, mode: int = 0o755) -> None:
        """`mkdir -p` in a top layer: every directory along `parts` exists and has `mode` (a top layer's directory
        is what the overlay shows, whatever the layers below had there)."""
        try:
            for depth in range(1, len(parts) + 1):
                self._make_dir(self._dir(parts[: depth - 1]), parts[:depth], mode)
        except OSError as exc:
            raise self._os_error(parts, exc) from None

    def put_file(self, parts: Parts, data: bytes, mode: int = 0o644) -> None:
        try:
            self._make_file(self._dir(parts[:-1]), parts, io.BytesIO(data).read, mode)
        except OSError as exc:
            raise self._os_error(parts, exc) from None

    def finish(self) -> None:
        """The root as enroot's top layer has it: 0755 (`mkdir 0`)."""
        os.fchmod(self._root_fd, 0o755)

    # Making entries: each replaces what the path held before (a directory over a directory merges with it).

    def _make_dir(self, parent: int, parts: Parts, mode: int) -> None:
        name = parts[-1]
        held = _lstat(parent, name)
        if held is not None and not stat.S_ISDIR(held.st_mode):
            self._replace(parent, parts)
            held = None
        if held is None:
            os.mkdir(name, 0o700, dir_fd=parent)
        os.chmod(name, mode, dir_fd=parent)  # a directory, checked above without following: nothing to follow

    def _make_file(self, parent: int, parts: Parts, read: Callable[[int], bytes], mode: int) -> None:
        self._replace(parent, parts)
        fd = os.open(parts[-1], _FILE_FLAGS, 0o600, dir_fd=parent)
        with os.fdopen(fd, "wb") as out:
            while chunk := read(CHUNK):
                out.write(chunk)
            out.flush()  # before the mode: a write by anyone but root clears the set-id bits
            os.fchmod(out.fileno(), mode)

    def _make_symlink(self, parent: int, parts: Parts, target: str) -> None:
        if not target or len(os.fsencode(target)) > _MAX_LINK:
            self._refuse("/".join(parts), f"a symlink to {excerpt(target, 80)}, which Linux cannot store")
        self._replace(parent, parts)
        os.symlink(target, parts[-1], dir_fd=parent)

    def _make_hardlink(self, parent: int, parts: Parts, linkname: str) -> None:
        target = self._parts(linkname)
        name = "/".join(parts)
        if not target or target[: len(parts)] == parts:
            self._refuse(name, f"a hardlink to {excerpt(linkname, 80)}, which it would replace itself")
        source = None if len(target) > 1 and target[0] == "dev" else self._dir(target[:-1], create=False)
        held = _lstat(source, target[-1]) if source is not None else None
        if held is None or stat.S_ISDIR(held.st_mode):
            self._refuse(name, f"a hardlink to {excerpt(linkname, 80)}, which is no file unpacked in the image")
        self._replace(parent, parts)
        os.link(target[-1], parts[-1], src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)

    def _replace(self, parent: int, parts: Parts) -> None:
        """Remove what `parts` holds (a directory with everything in it), if anything."""
        held = _lstat(parent, parts[-1])
        if held is None:
            return
        for cached in [p for p in self._dirs if p[: len(parts)] == parts]:
            os.close(self._dirs.pop(cached))
        if stat.S_ISDIR(held.st_mode):
            remove_tree(parts[-1], dir_fd=parent)  # descriptor-based: it never follows a symlink
        else:
            os.unlink(parts[-1], dir_fd=parent)

    @overload
    def _dir(self, parts: Parts, create: Literal[True] = True) -> int: ...
    @overload
    def _dir(self, parts: Parts, create: bool) -> int | None: ...

    def _dir(self, parts: Parts, create: bool = True) -> int | None:
        """A descriptor of the directory `parts` (owned here), opened one component at a time without following a
        symlink. A missing directory is made (0755, as tar makes a parent a layer does not list) or, without
        `create`, is None. A component that is not a directory is refused."""
        if not parts:
            return self._root_fd
        if parts in self._dirs:
            self._dirs.move_to_end(parts)
            return self._dirs[parts]
        fd, opened = self._root_fd, []
        try:
            for depth, name in enumerate(parts, start=1):
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        return None
                    os.mkdir(name, 0o700, dir_fd=fd)
                    fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    os.fchmod(fd, 0o755)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    where = "/".join(parts[:depth])
                    self._refuse("/".join(parts), f"a path through {where}, which is a symlink or a file in the image")
                opened.append(fd)
            found = opened.pop()
        finally:
            for extra in opened:
                os.close(extra)
        self._dirs[parts] = found
        if len(self._dirs) > _CACHED_DIRS:
            os.close(self._dirs.popitem(last=False)[1])
        return found

    def _refuse(self, name: str, problem: str) -> None:
        raise InputError(
            f"{self._what}: {excerpt(display(name), 120)}: {problem}",
            hint="the image cannot be unpacked safely; rebuild it, or export another image",
        )

    def _os_error(self, parts: Parts, exc: OSError) -> InputError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return write_error(self._reported, exc)
        return InputError(
            f"{self._what}: cannot unpack {excerpt(display('/'.join(parts)), 120)}: {exc.strerror or exc}"
        )


def _lstat(parent: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _mode(mode: int, directory: bool) -> int:
    """A tar entry's mode as enroot leaves it: `chmod -R u+rX`, and u+w on directories (common::fixperms)."""
    mode = (mode & 0o7777) | stat.S_IRUSR
    if directory or mode & 0o111:
        mode |= stat.S_IXUSR
    if directory:
        mode |= stat.S_IWUSR
    return mode
