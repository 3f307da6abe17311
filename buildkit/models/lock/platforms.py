"""What differs between the platforms of one lock (build.platforms), for the report: the facts resolve read for
each (wheel, base image manifest, CUDA, target GPUs, and each shared object's kernels: one present on a platform
only, one that loads by SASS on one platform's GPUs and not at all on the other's). Pure: it reads the lock."""

from __future__ import annotations

from typing import NamedTuple

from buildkit.models.lock.facts import Lock

ABSENT = "absent"


class Row(NamedTuple):
    fact: str
    values: dict[str, str]  # platform -> what the lock holds for it

    @property
    def differs(self) -> bool:
        return len(set(self.values.values())) > 1


def platform_rows(lock: Lock) -> list[Row]:
    """One row per fact, each platform's value beside the others' (the primary first)."""
    views = {p: lock.for_platform(p) for p in lock.platforms()}
    rows = [
        Row("vLLM wheel", {p: v.wheel.filename for p, v in views.items()}),
        Row("wheel sha256", {p: v.wheel.sha256 or "?" for p, v in views.items()}),
        Row("base image manifest", {p: v.base_image.manifest_digest for p, v in views.items()}),
        Row(
            "CUDA (base image / wheel)",
            {p: f"{v.cuda.base_image or '?'} / {v.cuda.wheel or '?'}" for p, v in views.items()},
        ),
        Row("target GPUs", {p: ", ".join(v.gpu.gpus) if v.gpu else "not checked" for p, v in views.items()}),
    ]
    libraries = {p: {lib.library: lib for lib in v.gpu.libraries} if v.gpu else None for p, v in views.items()}
    names = dict.fromkeys(name for libs in libraries.values() if libs for name in libs)
    for name in names:
        values = {}
        for platform, libs in libraries.items():
            if libs is None:
                values[platform] = "not checked"
            elif name not in libs:
                values[platform] = ABSENT
            else:
                loads = libs[name].loads
                values[platform] = ", ".join(f"{gpu}: {how}" for gpu, how in loads.items()) or "no GPU code"
        rows.append(Row(name, values))
    rows.append(Row("ABI check", {p: _abi(v) for p, v in views.items()}))
    return rows


def _abi(lock: Lock) -> str:
    if lock.gpu is None or lock.gpu.abi is None:
        return "not checked"
    return f"{lock.gpu.abi.unresolved_count} unresolved of {lock.gpu.abi.checked}"
