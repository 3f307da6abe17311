"""mksquashfs, the tool `buildkit export` makes the squashfs with: found on PATH (4.5 or later, which `buildkit
doctor` checks too) and run with the options that shape the bytes, never through a shell."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import NamedTuple

from buildkit.errors import BuildFailed, EngineNotReady, excerpt
from buildkit.files import write_error
from buildkit.world import proc

MIN_VERSION = (4, 5)  # -exit-on-error came with 4.5; -mkfs-time, -all-time and reproducible output with 4.4
_VERSION_RE = re.compile(
    r"mksquashfs version (?P<version>(?P<major>[0-9]+)\.(?P<minor>[0-9]+)[0-9A-Za-z.+~-]*)(?: \([0-9/]{10}\))?"
)


class Mksquashfs(NamedTuple):
    path: str
    version: str


def find_mksquashfs() -> Mksquashfs:
    """mksquashfs from PATH, 4.5 or later; EngineNotReady (exit 5) with what to install otherwise."""
    install = (
        "install squashfs-tools 4.5 or later: `apt-get install squashfs-tools` (Debian 12, Ubuntu 22.04 and later)"
    )
    path = shutil.which("mksquashfs")
    if path is None:
        raise EngineNotReady("mksquashfs is not installed: it makes the squashfs file", hint=install)
    try:
        done = proc.run([path, "-version"], timeout=30, stdout_limit=4096, env=_tool_env())
    except proc.ProcError as exc:
        raise EngineNotReady(f"{path} -version did not run ({exc.message})", hint=install) from None
    first = done.stdout.decode("utf-8", "replace").partition("\n")[0].strip()
    match = _VERSION_RE.fullmatch(first)
    if match is None:
        raise EngineNotReady(
            f"{path} -version said {excerpt(first, 80)}: not a mksquashfs buildkit knows", hint=install
        )
    if (int(match.group("major")), int(match.group("minor"))) < MIN_VERSION:
        raise EngineNotReady(f"mksquashfs {match.group('version')} is older than 4.5", hint=install)
    return Mksquashfs(path, match.group("version"))


def squash(
    tool: Mksquashfs,
    rootfs: Path,
    dest: Path,
    options: list[str],
    processors: int | None,
    output: Path,
) -> None:
    """mksquashfs `rootfs` into the (empty, existing) file `dest`, for `output`. A full disk is write_error(output)
    (exit 2), any other failure BuildFailed (exit 6) with mksquashfs's last words; Ctrl-C stops it."""
    count = processors or len(os.sched_getaffinity(0))  # enroot: -processors $(nproc)
    argv = [tool.path, str(rootfs), str(dest), *options, "-processors", str(count)]
    argv += ["-noappend", "-no-progress", "-quiet"]  # a fresh file; no progress bar or summary
    # What it says is read through a pipe, not a file: on a full disk a file would hold nothing. Its last 4 KiB are
    # kept (-exit-on-error stops it at the first error); Ctrl-C kills it.
    try:
        done = proc.stream(argv, lambda line: None, env=_tool_env(), tail_limit=4096)
    except proc.NotStarted as exc:
        raise EngineNotReady(exc.message, hint="install squashfs-tools 4.5 or later") from None
    code, tail = done.returncode, done.tail
    if code == 0:
        return
    said = tail.decode("utf-8", "replace")
    if "No space left on device" in said or "Disk quota exceeded" in said:
        raise write_error(output, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    raise BuildFailed(
        f"mksquashfs failed (exit {code}): {excerpt(lines[-1] if lines else 'no output', 200)}",
        hint="nothing was written; if it fails the same way again, report it with mksquashfs's words above",
    )


def _tool_env() -> dict[str, str]:
    """mksquashfs's environment: no SOURCE_DATE_EPOCH (it refuses that beside -mkfs-time), the C locale."""
    return {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}
