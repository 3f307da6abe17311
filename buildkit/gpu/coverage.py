"""How a library's kernels load on a GPU: SASS for it, PTX the driver JIT-compiles, or none.

NVIDIA's rules, cited:
- SASS (a cubin) for compute capability X.y runs on X.z with z >= y, never on another major: CUDA C++ Programming
  Guide, "Binary Compatibility" (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility).
- PTX for compute_XY is JIT-compiled by the driver for any GPU of compute capability >= X.Y: same guide, "PTX
  Compatibility" and "Application Compatibility"; the driver prefers a compatible cubin over PTX.
- `a` (arch-specific, sm_90a / compute_90a): "code compiled for sm_90a runs only on devices of compute capability
  9.0", neither forward nor backward compatible: same guide, "Feature Availability", and the NVCC guide's
  "GPU Feature List" (https://docs.nvidia.com/cuda/cuda-compiler-driver-nvcc/#gpu-feature-list).
- `f` (family-specific, CUDA 12.9+, sm_100f / compute_100f): runs on the GPUs of the same family, that is the same
  major and a minor >= its own (sm_100f on 10.0 and 10.3, not on 11.0 or 12.0): same guide, "Feature
  Availability" ("Family-Specific Features").
A library is a set of fatbins (one per translation unit); a library loads on a GPU when some of its kernels do, and
the modules without any kernel for it are counted (vLLM's _C holds sm_75-only and sm_100a-only ones, used only on
those GPUs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from buildkit.gpu.fatbin import Kernel

SASS, PTX_JIT, NONE = "SASS", "PTX-JIT", "none"
_ENTRY_RE = re.compile(r"(?P<major>[0-9]{1,2})\.(?P<minor>[0-9])[af]?(?:\+PTX)?")  # fullmatch


def gpus(cuda_arch_list: str) -> list[tuple[int, int]]:
    """The compute capabilities a TORCH_CUDA_ARCH_LIST targets, in order, once each: '9.0 10.0a+PTX' ->
    [(9, 0), (10, 0)]."""
    out: list[tuple[int, int]] = []
    for entry in cuda_arch_list.replace(";", " ").split():
        m = _ENTRY_RE.fullmatch(entry)
        if m is None:
            raise ValueError(f"not a TORCH_CUDA_ARCH_LIST entry: {entry!r}")
        cc = (int(m["major"]), int(m["minor"]))
        if cc not in out:
            out.append(cc)
    return out


def gpu_name(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def runs(kernel: Kernel, cc: tuple[int, int]) -> bool:
    """Whether the driver can load `kernel` on a GPU of compute capability `cc` (PTX: by JIT)."""
    major, minor = divmod(kernel.number, 10)
    if kernel.kind == "other":
        return False
    if kernel.suffix == "a":
        return cc == (major, minor)
    if kernel.suffix == "f" or kernel.kind == "sass":
        return cc[0] == major and cc[1] >= minor
    return cc >= (major, minor)  # plain PTX: any later GPU


@dataclass(frozen=True)
class Verdict:
    gpu: str  # sm_90
    load: str  # SASS | PTX-JIT | none
    modules: int  # fatbins in the library
    modules_sass: int
    modules_ptx: int  # loadable only through PTX
    used: tuple[str, ...]  # the entries that load, e.g. ('sm_90', 'sm_90a', 'compute_90')

    def line(self) -> str:
        if not self.modules:
            return "no GPU code"
        parts = [f"{self.load}"]
        none = self.modules - self.modules_sass - self.modules_ptx
        if self.load != NONE and (self.modules_ptx or none):
            parts.append(
                f"({self.modules_sass} of {self.modules} modules SASS, {self.modules_ptx} PTX-JIT, {none} none)"
            )
        return " ".join(parts)


def verdict(kernels: list[Kernel], cc: tuple[int, int]) -> Verdict:
    by_module: dict[int, list[Kernel]] = {}
    for k in kernels:
        by_module.setdefault(k.container, []).append(k)
    sass = ptx = 0
    used: set[str] = set()
    for module in by_module.values():
        loaded = [k for k in module if runs(k, cc)]
        if any(k.kind == "sass" for k in loaded):
            sass += 1
            used.update(k.arch for k in loaded if k.kind == "sass")
        elif loaded:
            ptx += 1
            used.update(k.arch for k in loaded)
    load = SASS if sass else PTX_JIT if ptx else NONE
    return Verdict(gpu_name(cc), load, len(by_module), sass, ptx, tuple(sorted(used, key=_arch_key)))


def archs(kernels: list[Kernel]) -> tuple[list[str], list[str]]:
    """(SASS architectures, PTX architectures) a library carries, each once, in architecture order."""
    sass = sorted({k.arch for k in kernels if k.kind == "sass"}, key=_arch_key)
    ptx = sorted({k.arch for k in kernels if k.kind == "ptx"}, key=_arch_key)
    return sass, ptx


def _arch_key(arch: str) -> tuple[int, str]:
    number = arch.rsplit("_", 1)[1]
    return int(number.rstrip("af")), arch
