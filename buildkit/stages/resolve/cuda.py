"""Which CUDA the wheel is built for, and whether the base image has the same major.

vLLM's users hit this: a cu129 lookup fell back to a wheel built for CUDA 13, and `import vllm` failed with
`ImportError: libcudart.so.13` on a CUDA 12.9 base image. A wheel's CUDA is known from its name (the pinned variant
`cuNNN`, else the variant metadata.json gives the entry, else the version's local part: `+g<hash>.cu130`,
`+cu129`) and from its bytes when resolve has them: the libcudart its `vllm/_C.abi3.so` needs (elf.py). When both
speak they must agree on the major; the bytes are read from the wheel in the cache, a member of the zip at a time,
never extracted.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import InvalidVersion, Version

from buildkit.budget import WHEEL, Budget
from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch
from buildkit.gpu.scan import spooled
from buildkit.models.lock import CudaCheck, ImageFact, WheelFact, cuda_major
from buildkit.stages.resolve.elf import ElfError, needed
from buildkit.stages.resolve.wheels import FoundWheel, wheel_variant

LIBRARY = "vllm/_C.abi3.so"
_CU_RE = re.compile(r"cu(?P<major>[0-9]{1,2})(?P<minor>[0-9])")  # cu129 -> 12.9, cu118 -> 11.8; fullmatch
_CUDART_RE = re.compile(r"libcudart\.so\.(?P<major>[0-9]{1,3})(?:\.[0-9]{1,4}){0,3}")  # fullmatch


def cuda_of_name(found: FoundWheel) -> tuple[str | None, str]:
    """(major.minor or None, how it is known or why not) from the wheel's names alone."""
    for name, where in (
        (found.variant, f"the pinned variant {found.variant}"),
        (found.listed_variant, f"the variant {found.listed_variant} metadata.json gives it"),
        (_local_variant(found.version), f"its version {found.version}"),
    ):
        m = _CU_RE.fullmatch(name or "")
        if m:
            return f"{int(m['major'])}.{m['minor']}", where
    what = "the default variant's name" if found.variant == "default" else f"the variant {found.variant}'s name"
    return None, f"{what} does not say its CUDA"


def _local_variant(version: str) -> str | None:
    try:
        return wheel_variant(Version(version))
    except InvalidVersion:
        return None


def wheel_cuda(found: FoundWheel, wheel: Path | None, unread: str) -> tuple[str | None, str]:
    """(wheel.cuda, wheel.cuda_source): from the name, and from the bytes at `wheel` when there are any (`unread`
    says why there are none). Bytes that contradict the name, or that are not a readable wheel, are
    UpstreamMalformed: the index names or serves the wheel wrongly."""
    cuda, source = _wheel_cuda(found, wheel, unread)
    return cuda, _line(source)


def _wheel_cuda(found: FoundWheel, wheel: Path | None, unread: str) -> tuple[str | None, str]:
    named, name_source = cuda_of_name(found)
    if wheel is None:
        if named is not None:
            return named, name_source
        return None, f"{name_source}, and the wheel's bytes were not read ({unread})"
    libraries = _needed(found.filename, wheel)
    if libraries is None:
        missing = f"the wheel has no {LIBRARY}"
        return (named, f"{name_source} ({missing})") if named else (None, f"{name_source}, and {missing}")
    majors = set()
    for library in libraries:
        m = _CUDART_RE.fullmatch(library)
        if m:
            majors.add(int(m["major"]))
            cudart = library
    if not majors:
        why = f"{LIBRARY} needs no libcudart: not a CUDA build (or one with a static CUDA runtime)"
        return (named, f"{name_source}; {why}") if named else (None, why)
    if len(majors) > 1:
        raise UpstreamMalformed(f"wheel {found.filename}: {LIBRARY} needs libcudart of several CUDA majors")
    (major,) = majors
    bytes_source = f"{LIBRARY} needs {cudart}"
    if named is None:
        return str(major), bytes_source
    if cuda_major(named) != major:
        raise UpstreamMalformed(
            f"wheel {found.filename}: its name says CUDA {named} ({name_source}), but {bytes_source}: the index "
            "names the wheel wrongly",
            hint="pin another wheel.variant or vLLM commit, and tell vLLM",
        )
    return named, f"{name_source}; {bytes_source}"


def _needed(filename: str, wheel: Path) -> list[str] | None:
    """The DT_NEEDED entries of LIBRARY inside the wheel; None when the wheel has no such member."""
    what = f"wheel {filename}"
    try:
        wheel.open("rb").close()
    except OSError as exc:  # the cache's file, not upstream's answer
        raise InputError(
            f"{wheel}: the cached wheel cannot be read: {exc.strerror or exc}", hint="delete it and run again"
        ) from None
    # Spooled (scan.spooled: its directory sized first by gpu.zipsize, then inflated once by ISA-L, under the
    # wheel's budget): .dynamic lies at the end of the library and its strings at the start, and a zip stream seeks
    # back by inflating again from the start.
    for _name, spool, size, _digest in spooled(wheel, lambda name: name == LIBRARY, Budget(what, WHEEL)):
        try:
            return needed(spool, size)
        except ElfError as exc:
            raise UpstreamMalformed(f"{what}: {LIBRARY} is not a library buildkit can read: {exc}") from None
    return None


def check(base: ImageFact, wheel: WheelFact) -> CudaCheck:
    """The lock's cuda section; a base image and a wheel of different CUDA majors is UpstreamMismatch (exit 4)."""
    base_cuda, wheel_cuda_ = base.cuda_version, wheel.cuda
    if base_cuda is None or wheel_cuda_ is None:
        why = []
        if base_cuda is None:
            why.append(f"the base image's config sets no CUDA_VERSION (config {base.config_digest})")
        if wheel_cuda_ is None:
            why.append(f"the wheel's CUDA is unknown: {wheel.cuda_source}")
        return CudaCheck(base_image=base_cuda, wheel=wheel_cuda_, outcome="not checked", detail=_line("; ".join(why)))
    check_majors(base, wheel_cuda_, wheel.filename, wheel.cuda_source)
    detail = f"base image CUDA_VERSION={base_cuda} and wheel CUDA {wheel_cuda_}: both CUDA {cuda_major(base_cuda)}"
    return CudaCheck(base_image=base_cuda, wheel=wheel_cuda_, outcome="match", detail=_line(detail))


def check_majors(base: ImageFact, wheel_cuda_: str | None, filename: str, source: str) -> None:
    """UpstreamMismatch when both CUDA versions are known and their majors differ (also before the download,
    from the wheel's name: no 430 MB for a wheel that cannot be used)."""
    if base.cuda_version is None or wheel_cuda_ is None:
        return
    if cuda_major(base.cuda_version) == cuda_major(wheel_cuda_):
        return
    ours = cuda_major(base.cuda_version)
    raise UpstreamMismatch(
        f"CUDA mismatch: the base image {base.ref} sets CUDA_VERSION={base.cuda_version} (its config "
        f"{base.config_digest}), but the wheel {filename} is built for CUDA {wheel_cuda_} ({source}); vLLM would "
        f"fail to import (libcudart.so.{cuda_major(wheel_cuda_)} is not in a CUDA {ours} image)",
        hint=f"pin a `wheel.variant: cuNNN` built for CUDA {ours} (the index's variant directories for the commit), "
        f"or a base image for CUDA {cuda_major(wheel_cuda_)}",
    )


def _line(text: str) -> str:
    """At most 300 characters, the lock's limit for one line of text."""
    return text if len(text) <= 300 else text[:297] + "..."
