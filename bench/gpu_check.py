"""Time of the GPU checks resolve runs on vLLM 0.14.0's real wheel (issue 23; buildkit.gpu.check.wheel_check, the
function resolve calls): the kernels of every shared object (fatbin entry headers) and their dynamic symbols, the
ABI check against the libraries of torch 2.9.0 as NeMo-RL's uv.lock names it; cold (empty cache: torch's symbol
tables read from its 900 MB wheel, already on disk: the download is not timed) and warm (torch's symbols from the
cache). The baseline, taken in the same run, is decompressing the same shared objects from the wheel with zipfile
(zlib) and throwing the bytes away; beside it, the same through buildkit's reader (gpu.zipmember: ISA-L's inflate,
the size and CRC-32 checked), the least the check itself can do.

    python bench/gpu_check.py     # wheels from $BUILDKIT_TEST_ARTIFACTS (tests/support/realwheels.py fetches them)

Goal: warm, the whole check <= 60 s.
"""

from __future__ import annotations

import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildkit.gpu import abi, check, scan, zipmember  # noqa: E402
from buildkit.gpu.torchlock import torch_of_uv_lock  # noqa: E402
from buildkit.models.pins import load_pins  # noqa: E402
from tests.support.fake_upstreams import NEMO_RL_TORCH_PYPI, NEMO_RL_UV_LOCK_HEADER  # noqa: E402
from tests.support.realwheels import TORCH_2_9_0, VLLM_0_14_0, real_wheel  # noqa: E402


def baseline(wheel: Path) -> float:
    start = time.perf_counter()
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if scan.is_shared_object(info.filename):
                with z.open(info) as f:
                    while f.read(4 << 20):
                        pass
    return time.perf_counter() - start


def inflate_only(wheel: Path) -> float:
    start = time.perf_counter()
    with zipfile.ZipFile(wheel) as z, wheel.open("rb") as raw:
        for info in z.infolist():
            if scan.is_shared_object(info.filename):
                for _chunk in zipmember.member_bytes(raw, z, info):
                    pass
    return time.perf_counter() - start


# The base image's OS, Ubuntu 24.04: libc6 2.39, libstdc++6 of GCC 14, libgcc-s1 (packages.ubuntu.com, noble).
NOBLE = check.System(
    {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)}, "Ubuntu 24.04's (noble)"
)


def whole_check(vllm: Path, torch: Path, cache: Path) -> float:
    """resolve's GPU checks (buildkit.gpu.check.wheel_check) on the real wheels: kernels for the pinned GPUs (9.0)
    and vLLM's symbols against torch 2.9.0's, as NeMo-RL's uv.lock names it (its PyPI table)."""
    start = time.perf_counter()
    build = load_pins(ROOT / "pins.yaml").build
    locked = torch_of_uv_lock((NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_PYPI).encode(), "uv.lock", "x86_64")
    gpu, notes = check.wheel_check(
        vllm, VLLM_0_14_0.filename, build, locked, lambda t: abi.torch_defined(torch, t.sha256, cache), NOBLE
    )
    assert notes == [] and gpu.abi is not None and gpu.abi.unresolved == [], (notes, gpu.abi)
    return time.perf_counter() - start


def main() -> None:
    vllm, torch = real_wheel(VLLM_0_14_0), real_wheel(TORCH_2_9_0)
    base, floor = baseline(vllm), inflate_only(vllm)
    with tempfile.TemporaryDirectory() as cache:
        cold = whole_check(vllm, torch, Path(cache))
        warm = whole_check(vllm, torch, Path(cache))
    print(f"decompress vLLM's shared objects (baseline)  {base:7.1f} s")
    print(f"the same through gpu.zipmember (ISA-L)        {floor:7.1f} s   {floor / base:5.2f} x baseline")
    print(f"whole check, cold (torch symbols read)        {cold:7.1f} s   {cold / base:5.2f} x baseline")
    print(f"whole check, warm (torch symbols cached)      {warm:7.1f} s   {warm / base:5.2f} x base (<= 60 s)")


if __name__ == "__main__":
    main()
