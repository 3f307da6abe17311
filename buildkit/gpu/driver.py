"""Which NVIDIA drivers run the CUDA runtime an image ships: natively, through minor-version compatibility, through
forward compatibility (the cuda-compat package, data-center GPUs only), or not.

Every value below is NVIDIA's, from the page and table named beside it. This machine reaches no NVIDIA page: the
tables were read (2026-11-24) through the `search` tool's stored copies, NVIDIA's own page where it held one, else a
verbatim transcription that names the page as its source (both are said beside the value). Pages:
- RN: CUDA Toolkit release notes, https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html (the edition
  of CUDA 13.2 Update 2), Table 2 "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
  Compatibility" and Table 3 "CUDA Toolkit and Corresponding Driver Versions" (read through a transcription).
- MVC: CUDA Compatibility guide, https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html,
  Table 1 "CUDA Toolkit 11.x, 12.x, and 13.x Minimum and Maximum Required Driver Versions" (NVIDIA's page).
- FC: CUDA Compatibility guide, https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html,
  "Forward Compatibility is applicable only for systems with: NVIDIA Data Center GPUs, select NGC Server Ready SKUs
  of RTX cards, Jetson boards" (NVIDIA's page) and the table under "Use the Right CUDA Forward Compatibility
  Package" (cuda-compat package x driver branch; read through a transcription of the edition for CUDA 13.4).
"""

from __future__ import annotations

import re

from buildkit.errors import excerpt

# (CUDA major, minor) -> the Linux x86_64 "Toolkit Driver Version" of that toolkit's GA release: RN Table 3, the
# "CUDA <major.minor> GA" rows (an Update row of the same minor asks for more; the GA row is the least that minor
# needs). There was no 12.7 release (the table has no row for it).
TOOLKIT_DRIVER: dict[tuple[int, int], tuple[int, ...]] = {
    (11, 8): (520, 61, 5),  # RN Table 3 "CUDA 11.8 GA >=520.61.05"
    (12, 0): (525, 60, 13),  # RN Table 3 "CUDA 12.0 GA >=525.60.13"
    (12, 1): (530, 30, 2),  # RN Table 3 "CUDA 12.1 GA >=530.30.02"
    (12, 2): (535, 54, 3),  # RN Table 3 "CUDA 12.2 GA >=535.54.03"
    (12, 3): (545, 23, 6),  # RN Table 3 "CUDA 12.3 GA >=545.23.06"
    (12, 4): (550, 54, 14),  # RN Table 3 "CUDA 12.4 GA >=550.54.14"
    (12, 5): (555, 42, 2),  # RN Table 3 "CUDA 12.5 GA >=555.42.02"
    (12, 6): (560, 28, 3),  # RN Table 3 "CUDA 12.6 GA >=560.28.03"
    (12, 8): (570, 26),  # RN Table 3 "CUDA 12.8 GA >=570.26"
    (12, 9): (575, 51, 3),  # RN Table 3 "CUDA 12.9 GA >=575.51.03"
    (13, 0): (580, 65, 6),  # RN Table 3 "CUDA 13.0 GA >=580.65.06"
    (13, 1): (590, 44, 1),  # RN Table 3 "CUDA 13.1 GA >=590.44.01"
    (13, 2): (595, 45, 4),  # RN Table 3 "CUDA 13.2 GA >=595.45.04"
}
# CUDA major -> the least driver that runs any toolkit of that major (minor-version compatibility: no PTX from a
# newer toolkit JIT-compiled). RN Table 2 and MVC Table 1 agree: 13.x ">= 580", 12.x ">= 525" (and "< 580": a
# newer driver runs 12.x natively), 11.x ">= 450"; for 11.x RN's footnote names the driver, "Tesla Recommended
# Drivers 450.80.02 (Linux)".
MINOR_COMPAT: dict[int, tuple[int, ...]] = {11: (450, 80, 2), 12: (525,), 13: (580,)}
# FC's table: the driver branches a cuda-compat package may run on ("Branches not listed in the table above are
# end of life and are not supported targets for compatibility"), each with the CUDA it was paired with (the
# column heads "535+ (CUDA 12.2)" ... "615+ (CUDA 13.4)"). Its rows, cuda-compat-12-3 to cuda-compat-13-4, say C
# (compatible) exactly where the branch's CUDA is older than the package's, N/A where it is the same.
FORWARD_COMPAT_BRANCHES: dict[int, tuple[int, int]] = {
    535: (12, 2),
    570: (12, 8),
    580: (13, 0),
    590: (13, 1),
    595: (13, 2),
    610: (13, 3),
    615: (13, 4),
}
FORWARD_COMPAT_PACKAGES = ((12, 3), (13, 4))  # FC's rows: cuda-compat-12-3 (oldest) to cuda-compat-13-4 (newest)
_DRIVER_RE = re.compile(r"[0-9]{3,4}(?:\.[0-9]{1,3}){1,2}")  # fullmatch: 580.159.04, 570.26
_CUDA_RE = re.compile(r"(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,2})(?:\.[0-9]{1,4}){0,2}")  # fullmatch

NATIVE, MINOR, FORWARD, NO = "native", "minor-version compatibility", "forward compatibility", "no"


def parse_driver(text: str) -> tuple[int, ...]:
    if not _DRIVER_RE.fullmatch(text):
        raise ValueError(f"not an NVIDIA driver version: {excerpt(text, 40)} (like 580.65.06)")
    return tuple(int(p) for p in text.split("."))


def cuda_of(text: str) -> tuple[int, int]:
    m = _CUDA_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"not a CUDA version: {excerpt(text, 40)}")
    return int(m["major"]), int(m["minor"])


def _show(version: tuple[int, ...]) -> str:
    return ".".join(f"{p:02d}" if i else str(p) for i, p in enumerate(version))


def minimum_driver(cuda: str) -> str | None:
    """The driver the toolkit's table names for this CUDA (a minor the table skips, like 12.7: the one below); None
    for a CUDA outside the table (older than 11.8, or newer than its newest row: its driver is not known here)."""
    major, minor = cuda_of(cuda)
    if (major, minor) > max(TOOLKIT_DRIVER):
        return None
    known = [k for k in TOOLKIT_DRIVER if k[0] == major and k[1] <= minor]
    if not known or max(k for k in TOOLKIT_DRIVER if k[0] == major) < (major, minor):
        return None  # newer than the table (CuPy's CUDA 13.2 on the device machine): its GA driver is not known here
    return _show(TOOLKIT_DRIVER[max(known)])


def _forward_compat(major: int, minor: int, have: tuple[int, ...]) -> bool:
    """FC's table: a cuda-compat package for this CUDA exists and the driver's branch is a supported target of it."""
    paired = FORWARD_COMPAT_BRANCHES.get(have[0])
    oldest, newest = FORWARD_COMPAT_PACKAGES
    return paired is not None and oldest <= (major, minor) <= newest and paired < (major, minor)


def judge(cuda: str, driver: str, forward_compat: bool) -> tuple[str, str]:
    """(native | minor-version compatibility | forward compatibility | no, why) for a CUDA runtime on a driver."""
    major, minor = cuda_of(cuda)
    have = parse_driver(driver)
    needed = minimum_driver(cuda)
    if needed is None and major not in MINOR_COMPAT:
        return NO, f"CUDA {major}.{minor} is not in buildkit's driver table"
    if needed is not None and have >= parse_driver(needed):
        return NATIVE, f"driver {driver} >= {needed}, the minimum for CUDA {major}.{minor}"
    below = f"older than {needed}" if needed else f"not checked against CUDA {major}.{minor}'s own (not in the table)"
    least = _show(MINOR_COMPAT[major])
    if have >= MINOR_COMPAT[major]:
        return MINOR, (
            f"driver {driver} is {below} but >= {least}, the CUDA {major}.x minimum: runs, except PTX "
            "from a newer toolkit"
        )
    if forward_compat and _forward_compat(major, minor, have):
        return FORWARD, (
            f"driver {driver} < {least}; the image's cuda-compat package runs it on data-center GPUs "
            f"only (branch {have[0]} is a target of cuda-compat-{major}-{minor})"
        )
    if not forward_compat:
        why = "; the image has no cuda-compat package"
    elif have[0] not in FORWARD_COMPAT_BRANCHES:
        why = f"; branch {have[0]} is no cuda-compat target (end of life, or a new-feature branch)"
    else:
        why = f"; NVIDIA ships no cuda-compat-{major}-{minor} for branch {have[0]}"
    return NO, f"driver {driver} < {least}, the CUDA {major}.x minimum{why}"


def compare(cuda: str, driver: str, forward_compat: bool, started: bool) -> tuple[bool, str]:
    """The prediction for a real driver against whether a CUDA runtime of that version started on it (verify
    --gpus: torch in the image; scripts/gpu_proof.py: torch, CuPy and the toolkit on the device machine):
    (they agree, one line saying both)."""
    verdict, why = judge(cuda, driver, forward_compat)
    seen = "started" if started else "did not start"
    return (verdict != NO) == started, f"CUDA {cuda} on driver {driver}: predicted {verdict} ({why}); CUDA {seen}"
