"""The GPU checks resolve runs on the downloaded vLLM wheel: kernels, and its symbols against the torch NeMo-RL's
uv.lock installs at the locked commit (verify's, on the built image's files, are in image.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from buildkit.gpu import abi
from buildkit.gpu.coverage import gpu_name, gpus
from buildkit.gpu.scan import check_required, kernel_table, wheel_libraries, wheel_python_hashes
from buildkit.gpu.torchlock import LockedTorch
from buildkit.models.gpufacts import GpuCheck
from buildkit.models.pins import ARCH_OF_PLATFORM, Build

TorchSymbols = Callable[[LockedTorch], "set[str] | str"]


class Step(NamedTuple):
    """What the GPU checks do now, for a progress display (with real wheels they take tens of seconds): `line`, a
    step worth a line of its own (they start, torch's symbols are read, they are done); otherwise one more shared
    object of the wheel was read (`libraries`: how many so far), for a display's row."""

    text: str
    line: bool
    libraries: int = 0


OnStep = Callable[[Step], None]


class System(NamedTuple):
    """The symbol versions a base image's glibc, libstdc++ and libgcc_s provide, and what the check calls them."""

    versions: dict[str, tuple[int, ...]]  # the newest of each family: {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33)...}
    against: str  # "glibc/libstdc++/libgcc_s of the base image (newest: GLIBC_2.39, ...)"


def wheel_check(
    wheel: Path,
    filename: str,
    build: Build,
    torch: LockedTorch | str | None = None,
    torch_symbols: TorchSymbols | None = None,
    system: System | str | None = None,
    hashes: dict[str, str] | None = None,
    on_step: OnStep | None = None,
) -> tuple[GpuCheck, list[str]]:
    """The lock's gpu section for the wheel, and notes on what the ABI check could not check. UpstreamMismatch when
    a required library has no kernel for a target GPU, or vLLM's modules need symbols that the torch of NeMo-RL's
    uv.lock or the base image's glibc/libstdc++ do not define. torch: that torch (a string: why there is none);
    torch_symbols gives the names its libraries define (a string: why not), asked only when vLLM's modules need some
    (a wheel without C++ from torch's namespaces, like the test index's, needs no torch download). system: the
    newest symbol versions the base image provides and what provides them (a string: why they are unknown).
    hashes: gets each shared object's sha256 (verify holds the image's vLLM files to them). on_step hears what they
    read as they go (Step)."""
    said = on_step or (lambda step: None)
    began = time.monotonic()
    targets = ", ".join(gpu_name(cc) for cc in gpus(build.cuda_arch_list))
    said(Step(f"reading {filename}'s shared objects: kernels for {targets}, and vLLM's symbols", True))
    libraries = []
    for library in wheel_libraries(wheel, arch=ARCH_OF_PLATFORM[build.platform], hashes=hashes):
        libraries.append(library)
        said(Step(f"read {library[0]}", False, len(libraries)))
    if hashes is not None:
        wheel_python_hashes(wheel, hashes)
    rows = kernel_table(iter((name, ks) for name, ks, _s in libraries), build.cuda_arch_list, build.gpu_required)
    check_required(rows, f"wheel {filename}")
    modules = [(name, s) for name, _ks, s in libraries if name.startswith("vllm/") and s is not None]
    defined: set[str] | None = None
    against: list[str] = []
    unchecked: dict[str, str] = {}  # abi / glibc -> why not (the lock keeps it: the report shows every check)
    if isinstance(torch, str):
        unchecked["abi"] = torch
    elif torch is None or torch_symbols is None:
        unchecked["abi"] = "no torch was given to check vLLM's symbols against"
    else:
        wanted = any(abi.wants_torch(u.name) for _n, s in modules for u in s.undefined if u.version is None)
        if wanted:
            said(
                Step(
                    f"reading torch {torch.version}'s symbols ({torch.filename}, NeMo-RL's uv.lock; downloaded "
                    "once, then cached)",
                    True,
                    len(libraries),
                )
            )
        names = torch_symbols(torch) if wanted else set()
        if isinstance(names, str):
            unchecked["abi"] = names
        else:
            defined = names
            against.append(f"torch {torch.version} ({torch.filename}, NeMo-RL's uv.lock)")
    versions: dict[str, tuple[int, ...]] = {}
    if isinstance(system, str):
        unchecked["glibc"] = system
    elif system is None:
        unchecked["glibc"] = "the base image's glibc and libstdc++ were not given"
    else:
        versions = system.versions
        against.append(system.against)
    found = None
    if against:
        found = abi.check(modules, defined, versions, against)
        abi.stop_if_unresolved(found, f"wheel {filename}")
    unchecked = {k: v.removeprefix("not checked: ") for k, v in unchecked.items()}
    gpu = GpuCheck(
        source=filename,
        gpus=[gpu_name(cc) for cc in gpus(build.cuda_arch_list)],
        libraries=rows,
        abi=found,
        not_checked=unchecked,
    )
    notes = [
        f"ABI not checked: {why}" if key == "abi" else f"ABI glibc/libstdc++ not checked: {why}"
        for key, why in unchecked.items()
    ]
    abi_said = "not checked" if found is None else "checked in part" if unchecked else "checked"
    seconds = time.monotonic() - began
    said(
        Step(
            f"done in {seconds:.1f}s: {len(libraries)} shared objects read, every required kernel found, "
            f"ABI {abi_said}",
            True,
            len(libraries),
        )
    )
    return gpu, notes
