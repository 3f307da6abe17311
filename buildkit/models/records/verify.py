"""build/verify.json (and build/provenance-verify.json): what `buildkit verify` found, each check a pass, fail or skip
with its reason; written from the image checks (stages/verify) or from the provenance (stages/verify/provenance.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit.models.gpufacts import GpuCheck
from buildkit.models.records import RecordHeader


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    status: Literal["pass", "fail", "skip"]
    reason: str


class VerifyRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_version: Literal[1] = 1
    buildkit_version: str
    image: str
    image_id: str
    lock_sha256: str
    smoke: bool
    gpus: bool
    checked_at: str
    results: list[CheckResult]
    header: RecordHeader | None = None  # None in a record written before headers
    seconds: float | None = None  # how long the checks took (None: a record from before it was kept)
    gpu: GpuCheck | None = None  # kernels per target GPU, ABI, drivers (buildkit.gpu); None for smoke images
    vllm: str | None = None  # where the image's vLLM Python and kernels come from (none in a smoke image)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"
