"""Reading pins.lock, whatever version wrote it (conda-lock's habit: one model per lock version, explicit upgrades;
read old, write new).

A lock is a file anyone can edit, so its JSON is held to bounds before anything reads it (issue 20): no duplicate
keys, no integer longer than 19 digits, no NaN; then the model of its version validates every value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from buildkit.errors import InputError, excerpt
from buildkit.files import MAX_LOCK_BYTES, read_local
from buildkit.models.lock.facts import LOCK_VERSION, READABLE_VERSIONS, Lock
from buildkit.models.lock.v1 import LockV1
from buildkit.models.lock.v2 import LockV2
from buildkit.models.lock.v3 import LockV3
from buildkit.models.lock.v4 import LockV4

# Strict reading (issue 20): no duplicate keys, no integer longer than 19 digits, no NaN; the models bound strings,
# sizes and dates.
MAX_DIGITS = 19


class _Refused(ValueError):
    """JSON the lock's decoder refuses (its message names what)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # json.loads would keep the last one silently
            raise _Refused(f"duplicate key {excerpt(key, 60)}")
        out[key] = value
    return out


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def strict_json(text: str) -> Any:
    """JSON as a lock may hold it; raises _Refused or json.JSONDecodeError (both ValueError)."""
    return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=_bounded_int, parse_constant=_no_constant)


REWRITE_HINT = "run `buildkit resolve` to rewrite it"


def read_lock(path: Path) -> Lock:
    """The lock at path as the current model. An older version is validated as the model of what it wrote, then
    upgraded one version at a time; the result keeps the version it was read as (so consistency_problems reports
    it stale) and the JSON it was read from (so to_json gives back its bytes, and its hash stays the one its
    builds were stamped with)."""
    try:
        raw = read_local(path, "the lock", MAX_LOCK_BYTES)
        data = strict_json(raw.decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no lock yet", hint="run `buildkit resolve` to write one") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else excerpt(str(exc))
        raise InputError(f"{path}: not a readable lock: {reason}", hint=REWRITE_HINT) from None
    version = _version(path, data)
    try:
        model: LockV1 | LockV2 | LockV3 | LockV4 | Lock = MODELS[version].model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        raise InputError(f"{path}: invalid lock: {problems}", hint=REWRITE_HINT) from None
    while not isinstance(model, Lock):
        model = model.upgrade()
    if version == LOCK_VERSION:
        return model
    lock = model.model_copy(update={"lock_version": version})
    lock._as_read = data
    return lock


def _version(path: Path, data: Any) -> int:
    version = data.get("lock_version") if isinstance(data, dict) else None
    if type(version) is not int or version not in READABLE_VERSIONS:  # not bool: True == 1
        found = "no lock_version" if version is None else f"lock_version {excerpt(version, 40)}"
        raise InputError(
            f"{path}: invalid lock: {found}; this buildkit reads lock versions "
            + ", ".join(map(str, READABLE_VERSIONS[:-1]))
            + f" and {READABLE_VERSIONS[-1]}",
            hint="run `buildkit resolve` to rewrite it, or use the buildkit that wrote it",
        )
    return version


# The model of each readable version's file.
MODELS: dict[int, type[LockV1] | type[LockV2] | type[LockV3] | type[LockV4] | type[Lock]] = {
    1: LockV1,
    2: LockV2,
    3: LockV3,
    4: LockV4,
    5: Lock,
}
