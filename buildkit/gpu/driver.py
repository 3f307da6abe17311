"""Which NVIDIA drivers run the CUDA runtime an image ships: natively, through forward compatibility (the
cuda-compat package, data-center GPUs only), or not.

Sources, NVIDIA's published tables:
- CUDA Toolkit release notes, Table "CUDA Toolkit and Corresponding Driver Versions" (Linux x86_64 "Toolkit Driver
  Version"): https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/#cuda-driver -- TOOLKIT_DRIVER below.
- Same page, "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version Compatibility": a runtime of
  major M runs on any driver of that major's minimum (12.x: >= 525.60.13, 13.x: >= 580.65.06), with limits (PTX
  compiled by a newer toolkit cannot be JIT-compiled) -- MINOR_COMPAT below.
- CUDA Compatibility guide, "Forward Compatibility" (https://docs.nvidia.com/deploy/cuda-compatibility/): an older
  driver runs a newer CUDA through the cuda-compat package's libcuda, only on data-center GPUs (and some NGC-ready
  RTX), from the driver branches its support matrix lists -- FORWARD_COMPAT_MIN below (12.x: R470 and later, 13.x:
  R535 and later).
Transcribed 2026-11-24 (this machine reaches no NVIDIA page; the device machine's driver 580.159.04 running a CUDA
13.0 runtime natively is the one reading taken here).
"""

from __future__ import annotations

import re

# (CUDA major, minor) -> minimum Linux driver of the GA release of that toolkit (the table's "GA" rows).
TOOLKIT_DRIVER: dict[tuple[int, int], tuple[int, ...]] = {
    (11, 8): (520, 61, 5),
    (12, 0): (525, 60, 13),
    (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3),
    (12, 3): (545, 23, 6),
    (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2),
    (12, 6): (560, 28, 3),
    (12, 8): (570, 26),
    (12, 9): (575, 51, 3),
    (13, 0): (580, 65, 6),
}
MINOR_COMPAT: dict[int, tuple[int, ...]] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}
FORWARD_COMPAT_MIN: dict[int, tuple[int, ...]] = {12: (470, 57, 2), 13: (535, 54, 3)}
_DRIVER_RE = re.compile(r"[0-9]{3,4}(?:\.[0-9]{1,3}){1,2}")  # fullmatch: 580.159.04, 570.26
_CUDA_RE = re.compile(r"(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,2})(?:\.[0-9]{1,4}){0,2}")  # fullmatch

NATIVE, MINOR, FORWARD, NO = "native", "minor-version compatibility", "forward compatibility", "no"


def parse_driver(text: str) -> tuple[int, ...]:
    if not _DRIVER_RE.fullmatch(text):
        raise ValueError(f"not an NVIDIA driver version: {text!r} (like 580.65.06)")
    return tuple(int(p) for p in text.split("."))


def cuda_of(text: str) -> tuple[int, int]:
    m = _CUDA_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a CUDA version: {text!r}")
    return int(m["major"]), int(m["minor"])


def _show(version: tuple[int, ...]) -> str:
    return ".".join(f"{p:02d}" if i else str(p) for i, p in enumerate(version))


def minimum_driver(cuda: str) -> str | None:
    """The driver the toolkit's table names for this CUDA (a minor not in the table: the next one below)."""
    major, minor = cuda_of(cuda)
    known = [k for k in TOOLKIT_DRIVER if k[0] == major and k[1] <= minor]
    if not known or max(k for k in TOOLKIT_DRIVER if k[0] == major) < (major, minor):
        return None  # newer than the table (CuPy's CUDA 13.2 on the device machine): its GA driver is not known here
    return _show(TOOLKIT_DRIVER[max(known)])


def judge(cuda: str, driver: str, forward_compat: bool) -> tuple[str, str]:
    """(native | minor-version compatibility | forward compatibility | no, why) for a CUDA runtime on a driver."""
    major, minor = cuda_of(cuda)
    have = parse_driver(driver)
    needed = minimum_driver(cuda)
    if needed is None:
        if major in MINOR_COMPAT and have >= MINOR_COMPAT[major] and any(k[0] == major for k in TOOLKIT_DRIVER):
            return MINOR, (f"CUDA {major}.{minor} is newer than buildkit's driver table; driver {driver} >= "
                           f"{_show(MINOR_COMPAT[major])}, the CUDA {major}.x minimum: runs, except PTX from a newer "
                           "toolkit")  # fmt: skip
        return NO, f"CUDA {major}.{minor} is not in buildkit's driver table"
    if have >= parse_driver(needed):
        return NATIVE, f"driver {driver} >= {needed}, the minimum for CUDA {major}.{minor}"
    if major in MINOR_COMPAT and have >= MINOR_COMPAT[major]:
        return MINOR, (f"driver {driver} is older than {needed} but >= {_show(MINOR_COMPAT[major])}, the CUDA "
                       f"{major}.x minimum: runs, except PTX from a newer toolkit")  # fmt: skip
    if forward_compat and major in FORWARD_COMPAT_MIN and have >= FORWARD_COMPAT_MIN[major]:
        return FORWARD, (f"driver {driver} < {needed}; the image's cuda-compat package runs it on data-center GPUs "
                         f"only (driver >= {_show(FORWARD_COMPAT_MIN[major])})")  # fmt: skip
    why = "" if forward_compat else "; the image has no cuda-compat package"
    return NO, f"driver {driver} < {needed}, the minimum for CUDA {major}.{minor}{why}"


def compare(cuda: str, driver: str, forward_compat: bool, started: bool) -> tuple[bool, str]:
    """The prediction for a real driver against whether a CUDA runtime of that version started on it (verify
    --gpus: torch in the image; scripts/gpu_proof.py: torch, CuPy and the toolkit on the device machine):
    (they agree, one line saying both)."""
    verdict, why = judge(cuda, driver, forward_compat)
    seen = "started" if started else "did not start"
    return (verdict != NO) == started, f"CUDA {cuda} on driver {driver}: predicted {verdict} ({why}); CUDA {seen}"
