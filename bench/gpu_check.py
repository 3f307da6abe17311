"""Time of the GPU checks resolve runs on vLLM 0.14.0's real wheel (issue 23): the kernels of every shared object
(fatbin entry headers) and their dynamic symbols, the ABI check against torch 2.9.0's libraries; cold (empty cache:
torch's symbol tables read from its 900 MB wheel) and warm (torch's symbols from the cache). The baseline, taken in
the same run, is decompressing the same shared objects from the wheel and throwing the bytes away: no reader of a
zip can do less.

    python bench/gpu_check.py     # wheels from $BUILDKIT_TEST_ARTIFACTS (tests/realwheels.py fetches them)

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

from buildkit.gpu import abi, scan  # noqa: E402
from tests.realwheels import TORCH_2_9_0, VLLM_0_14_0, real_wheel  # noqa: E402

NOBLE = {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)}


def baseline(wheel: Path) -> float:
    start = time.perf_counter()
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if scan.is_shared_object(info.filename):
                with z.open(info) as f:
                    while f.read(4 << 20):
                        pass
    return time.perf_counter() - start


def whole_check(vllm: Path, torch: Path, cache: Path) -> float:
    start = time.perf_counter()
    libraries = list(scan.wheel_libraries(vllm))
    rows = scan.kernel_table(iter((n, k) for n, k, _s in libraries), "9.0", list(scan.DEFAULT_REQUIRED))
    scan.check_required(rows, "vllm")
    defined = abi.torch_defined(torch, TORCH_2_9_0.sha256, cache)
    result = abi.check([(n, s) for n, _k, s in libraries], defined, NOBLE, [torch.name])
    abi.stop_if_unresolved(result, "vllm")
    return time.perf_counter() - start


def main() -> None:
    vllm, torch = real_wheel(VLLM_0_14_0), real_wheel(TORCH_2_9_0)
    base = baseline(vllm)
    with tempfile.TemporaryDirectory() as cache:
        cold = whole_check(vllm, torch, Path(cache))
        warm = whole_check(vllm, torch, Path(cache))
    print(f"decompress vLLM's shared objects (baseline)  {base:7.1f} s")
    print(f"whole check, cold (torch symbols read)        {cold:7.1f} s   {cold / base:5.2f} x baseline")
    print(f"whole check, warm (torch symbols cached)      {warm:7.1f} s   {warm / base:5.2f} x base (<= 60 s)")


if __name__ == "__main__":
    main()
