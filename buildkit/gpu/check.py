"""The GPU checks resolve runs on the downloaded vLLM wheel, and verify on the built image's files."""

from __future__ import annotations

from pathlib import Path

from buildkit.gpu.coverage import gpu_name, gpus
from buildkit.gpu.facts import AbiCheck, DriverCheck, GpuCheck
from buildkit.gpu.scan import check_required, kernel_table, tree_kernels, wheel_kernels
from buildkit.pins import Build


def wheel_check(wheel: Path, filename: str, build: Build, abi: AbiCheck | None = None,
                driver: DriverCheck | None = None) -> GpuCheck:  # fmt: skip
    """The lock's gpu section for the wheel; UpstreamMismatch when a required library has no kernel for a target
    GPU (or the ABI check found unresolved symbols: abi.py raises that itself)."""
    rows = kernel_table(wheel_kernels(wheel), build.cuda_arch_list, build.gpu_required)
    check_required(rows, f"wheel {filename}")
    return GpuCheck(source=filename, gpus=[gpu_name(cc) for cc in gpus(build.cuda_arch_list)], libraries=rows,
                    abi=abi, driver=driver)  # fmt: skip


def tree_check(root: Path, build: Build, source: str) -> GpuCheck:
    """The same over every shared object under root (the image's Python environments); required libraries are
    matched anywhere below root (…/site-packages/vllm/_C.abi3.so)."""
    rows = kernel_table(tree_kernels(root), build.cuda_arch_list, build.gpu_required)
    check_required(rows, source)
    return GpuCheck(source=source, gpus=[gpu_name(cc) for cc in gpus(build.cuda_arch_list)], libraries=rows)
