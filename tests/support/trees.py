"""A directory tree as comparable data, for tests that compare trees (unpacked layers, prepared clones)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def listing(root: Path) -> dict[str, tuple]:
    """Every path under root (hidden ones too) -> (mode string, file bytes | link target | None for the rest):
    what an image layer keeps of it. No times: the exporter clamps them to SOURCE_DATE_EPOCH."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                what: object = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                what = path.read_bytes()
            else:
                what = None
            out[path.relative_to(root).as_posix()] = (stat.filemode(info.st_mode), what)
    return out
