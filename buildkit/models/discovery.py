"""Which pins.yaml a command uses when none is named, and whether its build/ directory may be written.

A pins.yaml found above the working directory is trusted the way git trusts a repository (`safe.directory`): the
search stops at the top of the current git repository, and a file found is used only inside a repository the user
owns, or when the file and its directory are the user's. Otherwise a pins.yaml in /tmp, another user's, would bring
its lock, patches and `build.tag` (and `build --push` would push their image with this user's credentials).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from buildkit.errors import InputError

PINS_NAME = "pins.yaml"


def find_pins(start: Path) -> Path | None:
    """pins.yaml in `start` or the nearest directory above it, up to the current repository's top; one found above
    `start` must be trusted (InputError, exit 2, otherwise)."""
    here = start.absolute()
    for directory in (here, *here.parents):
        candidate = directory / PINS_NAME
        if candidate.is_file():
            if directory != here:
                _check_trusted(candidate)
            return candidate
        if (directory / ".git").exists():
            return None
    return None


def _check_trusted(pins: Path) -> None:
    top = _repository_top(pins.parent)
    if top is not None and _mine(top.stat().st_uid):
        return  # inside the user's own repository (the search did not pass its top)
    for path in (pins, pins.parent):
        owner = path.stat().st_uid
        if not _mine(owner):
            raise InputError(
                f"{pins}: found above the working directory, but {path} is owned by {_name(owner)}, not you: "
                "refused (a pins file another user can write decides what is built and pushed)",
                hint=f"if you trust it, name it: --pins {pins}; or cd {pins.parent} and run there",
            )


def _repository_top(directory: Path) -> Path | None:
    for above in (directory, *directory.parents):
        if (above / ".git").exists():
            return above
    return None


def _mine(uid: int) -> bool:
    """git's ownership rule: the effective user's, or under sudo the invoking user's."""
    me = os.geteuid()
    sudo = os.environ.get("SUDO_UID", "")
    return uid == me or (me == 0 and sudo.isdigit() and uid == int(sudo))


def _name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_build_dir(build_dir: Path) -> None:
    """Records and outputs are never written through a symlinked build/: a link planted beside a pins file would
    send them (and the files they replace) anywhere."""
    if build_dir.is_symlink():
        raise InputError(
            f"{build_dir}: the build directory is a symlink (to {os.readlink(build_dir)}): refused",
            hint="remove the link, or name the directory itself with --build-dir DIR",
        )
