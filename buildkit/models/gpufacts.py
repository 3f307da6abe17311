"""What the GPU checks found, as the lock, the records, the SLSA statement and the report carry it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LibraryKernels(_Fact):
    """One shared object's GPU code and how it loads on each target GPU."""

    library: str = Field(description="Path inside the wheel or the image, e.g. vllm/_C.abi3.so.")
    required: bool = Field(description="Declared to need a kernel for every target GPU (pins: build.gpu_required).")
    sass: list[str] = Field(description="SASS architectures it carries, e.g. sm_90, sm_90a, sm_100f.")
    ptx: list[str] = Field(description="PTX virtual architectures it carries, e.g. compute_80.")
    loads: dict[str, str] = Field(description="Target GPU (sm_90) -> 'SASS', 'PTX-JIT' or 'none', with module counts.")


class UnresolvedSymbol(_Fact):
    library: str
    symbol: str = Field(description="Demangled.")
    version: str | None = Field(default=None, description="The symbol version asked for, e.g. GLIBCXX_3.4.30.")
    expected_in: str = Field(description="The library that should define it.")


class AbiCheck(_Fact):
    against: list[str] = Field(description="What the symbols were resolved against (torch wheel, glibc, ...).")
    checked: int = Field(description="Undefined symbols looked up.")
    unresolved_count: int = 0
    unresolved: list[UnresolvedSymbol] = Field(description="The first 50.")


class DriverCheck(_Fact):
    cuda_runtime: str | None = Field(description="The CUDA runtime the image ships (major.minor).")
    forward_compat: bool = Field(description="Whether it holds the cuda-compat package.")
    minimum_driver: str | None
    drivers: dict[str, str] = Field(
        default_factory=dict,
        description="--driver VERSION -> native / forward compatibility (data-center GPUs) / no, and why.",
    )


class GpuCheck(_Fact):
    """The lock's `gpu` section: kernels for the target GPUs, an ABI that links, a driver that runs it."""

    source: str = Field(description="What was read: the wheel's file name, or the image.")
    gpus: list[str] = Field(description="Target GPUs from build.cuda_arch_list, e.g. sm_90.")
    libraries: list[LibraryKernels]
    abi: AbiCheck | None = None
    driver: DriverCheck | None = None
    # Why a part of the ABI check did not run ("abi": torch's symbols, "glibc": the base image's libraries), in
    # words a reviewer can act on. Written only when not empty, so locks from before it keep their bytes and hash.
    not_checked: dict[str, str] = Field(default_factory=dict, description="abi / glibc -> why it was not checked.")

    @model_serializer(mode="wrap")
    def _without_empty_reasons(self, handler) -> dict[str, Any]:
        data = handler(self)
        if not data.get("not_checked"):
            data.pop("not_checked", None)
        return data
