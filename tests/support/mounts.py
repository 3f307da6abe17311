"""A tmpfs for tests of what a full or read-only disk does (root's: the suite runs as root in CI)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.engine import unavailable


@contextlib.contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at `where` with `options` (size=, ro), unmounted afterwards."""
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root (CI runs the suite as root)")
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
