"""The GPU checks resolve runs on the downloaded vLLM wheel, and verify on the built image's files."""

from __future__ import annotations

from pathlib import Path

from buildkit.gpu.coverage import gpu_name, gpus
from buildkit.gpu.scan import check_required, kernel_table, tree_kernels, wheel_kernels
from buildkit.models.gpufacts import AbiCheck, DriverCheck, GpuCheck
from buildkit.models.lock import WheelFact
from buildkit.models.pins import Build
from buildkit.stages.context import Context
from buildkit.world.http import Http


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


def abi_before_build(tree: Path, wheel: WheelFact, cache_dir: Path, http, on_progress=None) -> AbiCheck | str:
    """vLLM's wheel (from resolve's cache) against the torch the prepared NeMo-RL tree's uv.lock installs (its
    symbols from the cache, else its wheel downloaded and checked against uv.lock's sha256); UpstreamMismatch
    naming the first unresolved symbol. A string says why it was not checked."""
    from buildkit.gpu import abi
    from buildkit.gpu.torchlock import locked_torch
    from buildkit.stages.resolve import download
    from buildkit.stages.resolve.wheels import FoundWheel

    torch = locked_torch(tree / "uv.lock", wheel.arch)
    if torch is None:
        return "not checked: NeMo-RL's uv.lock lists no torch"
    if wheel.etag is None:
        return "not checked: the vLLM wheel is not in resolve's cache (no ETag)"
    names = ("index", "variant", "arch", "filename", "version", "url", "size", "etag", "last_modified",
             "index_sha256", "listed_in", "verified_by")
    fields = {k: getattr(wheel, k) for k in names}
    hashed = download.cached(cache_dir, FoundWheel(**fields), on_progress)
    if hashed is None:
        return "not checked: the vLLM wheel is not in resolve's cache; run `buildkit resolve`"

    def fetch_torch() -> Path:
        found = FoundWheel(index=torch.index, variant="torch", arch=wheel.arch, filename=torch.filename,
                           version=torch.version, url=torch.url, size=torch.size, etag=None, last_modified=None,
                           index_sha256=torch.sha256, listed_in="uv.lock", verified_by="HEAD")  # fmt: skip
        return download.fetch(http, cache_dir, found, on_progress).path

    defined = abi.torch_defined(fetch_torch, torch.sha256, cache_dir)
    modules = [(name, symbols) for name, symbols in abi.wheel_symbols(hashed.path, prefix="vllm/")]
    result = abi.check(modules, defined, {}, [f"torch {torch.version} ({torch.filename}, NeMo-RL's uv.lock)"])
    abi.stop_if_unresolved(result, f"vLLM wheel {wheel.filename}")
    return result


# -- the pipeline's stage (stages/pipeline.py) --------------------------------------------------------------------


def run(ctx: Context) -> None:
    """Before the long build (not a smoke build's): does vLLM's wheel link against the torch NeMo-RL's uv.lock
    installs? ctx.made["gpucheck"] is the AbiCheck, or a string saying why it was not checked. It reads the prepared
    tree and resolve's cache and writes nothing, so there is no `current`: it runs before every release build."""
    if not ctx.smoke:
        tree = ctx.paths.tree(ctx.lock.nemo_rl.commit)
        ctx.made["gpucheck"] = abi_before_build(tree, ctx.lock.wheel, ctx.paths.cache_dir, Http())
