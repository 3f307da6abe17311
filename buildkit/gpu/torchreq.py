"""The torch the vLLM wheel was built for (its `*.dist-info/METADATA`: `Requires-Dist: torch==2.9.1` in vLLM
0.14.0's PyPI wheel), against the torch NeMo-RL's uv.lock installs (torchlock.py).

vLLM's compiled extensions link against torch's C++ ABI, so a wheel built for another torch release line (2.9 on
a uv.lock of 2.11) fails the ABI check on its symbols, or fails to import: resolve stops on it before downloading
torch (exit 4). The same release line a patch apart (2.9.1 named, 2.9.0 locked, as at the reference pins) is said
and left to the ABI check on the symbols, which decides whether it loads.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from buildkit.budget import WHEEL, Budget
from buildkit.errors import UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.gpu.scan import readable_wheel
from buildkit.gpu.torchlock import LockedTorch
from buildkit.gpu.zipsize import open_zip
from buildkit.models.lock import TorchCheck

# vLLM 0.14.0's METADATA is 8.9 KB (its long description is most of it); far more is not a wheel buildkit reads.
MAX_METADATA_BYTES = 1 << 20
_METADATA_RE = re.compile(r"[A-Za-z0-9_.]{1,200}-[A-Za-z0-9_.!+]{1,100}\.dist-info/METADATA")  # fullmatch
_TORCH_LINE_RE = re.compile(r"Requires-Dist:[ \t]*torch(?![A-Za-z0-9_.-])", re.IGNORECASE)  # match; not torchaudio


class TorchMismatch(UpstreamMismatch):
    """The wheel names a torch of another release line than uv.lock's (exit 4). Bump's summary reads the fields."""

    def __init__(self, message: str, hint: str, requires: str, locked: LockedTorch, wheel: str):
        super().__init__(message, hint=hint)
        self.requires, self.locked, self.wheel = requires, locked, wheel


def requires_torch(wheel: Path, filename: str) -> str | None:
    """The specifier of the wheel's unconditional torch requirement ("==2.9.1"); None when its METADATA names none
    or it has no METADATA."""
    found = read_metadata(wheel, filename)
    return None if found is None else _torch_specifier(found[1], f"wheel {filename}: {found[0]}")


def read_metadata(wheel: Path, filename: str) -> tuple[str, bytes] | None:
    """The wheel's `*.dist-info/METADATA` (its member name and bytes); None when it has none. One member read,
    bounded: the zip's directory first (zipsize), its declared size, then its bytes under the wheel's budget
    (budget.WHEEL)."""
    what = f"wheel {filename}"
    budget = Budget(what, WHEEL)
    with readable_wheel(what):
        with open_zip(wheel, what, budget) as (archive, _raw):
            infos = [i for i in archive.infolist() if _METADATA_RE.fullmatch(i.filename)]
            if not infos:
                return None
            if len(infos) > 1:
                raise UpstreamMalformed(f"{what}: {len(infos)} *.dist-info/METADATA files: not a wheel pip installs")
            info = infos[0]
            if info.file_size > MAX_METADATA_BYTES:
                raise UpstreamMalformed(
                    f"{what}: {info.filename} says it is {info.file_size:,} bytes, more than "
                    f"buildkit reads ({MAX_METADATA_BYTES:,})"
                )
            budget.declare(info.file_size, info.compress_size, info.filename)
            with archive.open(info) as member:
                raw = member.read(MAX_METADATA_BYTES + 1)
            budget.inflate(len(raw), info.compress_size)
    return info.filename, raw


def _torch_specifier(raw: bytes, what: str) -> str | None:
    """The headers' `Requires-Dist: torch...` without a marker (one with `extra == ...` is optional)."""
    headers = raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n", 1)[0]
    found: list[str] = []
    for line in headers.split("\n"):
        if not _TORCH_LINE_RE.match(line):
            continue
        value = line.split(":", 1)[1].strip()
        try:
            requirement = Requirement(value)
        except InvalidRequirement as exc:
            raise UpstreamMalformed(f"{what}: an unreadable requirement {excerpt(value, 80)}: {exc}") from None
        if canonicalize_name(requirement.name) == "torch" and _on_linux(requirement):
            found.append(str(requirement.specifier))
    if len(found) > 1:
        raise UpstreamMalformed(f"{what}: {len(found)} unconditional torch requirements: {', '.join(found)}")
    return found[0] if found else None


# What a Linux image's pip evaluates a marker with (an extra is never asked for: vLLM's torch is not optional).
_LINUX = {"extra": "", "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix"}


def _on_linux(requirement: Requirement) -> bool:
    """Whether pip in a Linux image installs this requirement: no marker, or one that holds there."""
    return requirement.marker is None or requirement.marker.evaluate(_LINUX)


def check(requires: str | None, locked: LockedTorch | str | None, wheel: str) -> TorchCheck:
    """The lock's torch section: the wheel's requirement against uv.lock's torch. TorchMismatch when they name
    different release lines (the local part, +cu130, is ignored as pip ignores it)."""
    source = f"wheel {wheel}'s METADATA"
    if not isinstance(locked, LockedTorch):
        why = (locked or "NeMo-RL's uv.lock was not read").removeprefix("not checked: ")
        return TorchCheck(requires=requires, uv_lock=None, outcome="not checked", detail=_line(why))
    if requires is None:
        return TorchCheck(
            requires=None, uv_lock=locked.version, outcome="not checked", detail=f"{source} names no torch requirement"
        )
    try:
        version = Version(locked.version)
    except InvalidVersion:
        return TorchCheck(
            requires=requires,
            uv_lock=None,
            outcome="not checked",
            detail=_line(f"NeMo-RL's uv.lock names torch {locked.version}, not a version pip reads"),
        )
    if SpecifierSet(requires).contains(version.public, prereleases=True):
        detail = f"{source} requires torch{requires}; NeMo-RL's uv.lock installs torch {locked.version}"
        return TorchCheck(requires=requires, uv_lock=locked.version, outcome="match", detail=_line(detail))
    lines = release_lines(requires)
    if lines == {version.release[:2]}:
        detail = (
            f"{source} requires torch{requires}; NeMo-RL's uv.lock installs torch {locked.version}, of the "
            f"same release line {_dotted(version.release[:2])}: the ABI check on vLLM's symbols decides"
        )
        return TorchCheck(requires=requires, uv_lock=locked.version, outcome="same release line", detail=_line(detail))
    named = ", ".join(sorted(_dotted(r) for r in lines)) or requires
    raise TorchMismatch(
        f"torch mismatch: the vLLM wheel {wheel} was built for torch{requires} (its METADATA), but NeMo-RL's "
        f"uv.lock installs torch {locked.version}: vLLM's compiled extensions link against torch's C++ ABI, so "
        f"they would not load against torch {_dotted(version.release[:2])}",
        hint=f"pin a vLLM commit whose wheel requires torch {_dotted(version.release[:2])} (`buildkit bump "
        f"--vllm-branch main` moves vLLM to main's newest with a wheel), or NeMo-RL at a commit whose uv.lock "
        f"installs torch {named}",
        requires=requires,
        locked=locked,
        wheel=wheel,
    )


def release_lines(requires: str) -> set[tuple[int, ...]]:
    """The major.minor lines the requirement's versions name ("==2.9.1" -> {(2, 9)}); empty when it names none."""
    out: set[tuple[int, ...]] = set()
    for spec in SpecifierSet(requires):
        try:
            out.add(Version(spec.version.rstrip(".*")).release[:2])
        except InvalidVersion:
            continue
    return out


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in release)


def _line(text: str) -> str:
    return text if len(text) <= 300 else text[:297] + "..."
