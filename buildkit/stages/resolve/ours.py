"""One pins file, one lock. A lock names the pins file it was written from (`pins_file`, relative to the lock's
folder); resolve, and build and bump when they resolve, refuse to replace a lock that names another pins file, so a
second pins file given the first one's lock (`--lock`) never overwrites it silently."""

from __future__ import annotations

import os
from pathlib import Path

from buildkit.errors import InputError
from buildkit.models.lock import Lock
from buildkit.models.paths import Paths, default_lock
from buildkit.models.pins import Pins
from buildkit.stages.context import OnNote


def pins_file_of(paths: Paths) -> str:
    """The pins file as the lock names it: relative to the lock's folder, so the pair can move together."""
    return Path(os.path.relpath(paths.pins.absolute(), paths.lock.absolute().parent)).as_posix()


def check_lock_is_ours(paths: Paths, lock: Lock | None, pins: Pins, on_note: OnNote | None = None) -> None:
    """Refuse (exit 2) to replace a lock written from another pins file. A lock from before locks named their pins
    file cannot tell: when its pins differ, that it will be replaced is said, not done silently."""
    if lock is None:
        return
    ours = pins_file_of(paths)
    if lock.pins_file is None:
        if lock.pins_sha256 != pins.sha256() and on_note is not None:
            on_note(
                f"{paths.lock} does not name the pins file it was written from (an older buildkit wrote it) "
                f"and its pins differ from {ours}: it is replaced once resolve succeeds"
            )
        return
    if lock.pins_file != ours:
        raise InputError(
            f"{paths.lock} was written from {lock.pins_file}, not {ours}: refused to overwrite it",
            hint=_way_on(paths),
        )


def _way_on(paths: Paths) -> str:
    own = default_lock(paths.pins)
    keep = f"give {paths.pins.name} its own lock: --lock {own}" if own != paths.lock else "name another --lock PATH"
    return f"to keep it, {keep}; to replace it, delete {paths.lock} first"
