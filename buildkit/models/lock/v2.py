"""Lock version 2, as it was written: the wheel content-addressed (wheel.sha256 measured by downloading it, the
index's claim in wheel.index_sha256), but no CUDA versions read: no base_image.cuda_version or config_digest, no
wheel.cuda, no cuda section. The upgrade to version 3 says those are unknown and the CUDA match "not checked"."""

from __future__ import annotations

from typing import Literal

from pydantic import StrictBool, model_validator

from buildkit.models.grammar import Digest, HttpsUrl, ImageRef, OneLine
from buildkit.models.lock.facts import CudaCheck, Fact, IsoTime, Sha256Hex, Size
from buildkit.models.lock.v3 import ImageV3, LockV3, OlderLock, WheelV3


def pre_cuda_reason(version: int) -> str:
    return f"written by lock version {version}, before CUDA versions were read"


class WheelV2(Fact):
    index: HttpsUrl
    variant: str
    arch: str
    filename: str
    version: str
    url: HttpsUrl
    size: Size | None
    etag: str | None = None
    last_modified: str | None = None
    sha256: Sha256Hex | None
    index_sha256: Sha256Hex | None
    content_addressed: StrictBool
    not_content_addressed: OneLine | None
    listed_in: str
    verified_by: Literal["GET", "HEAD", "GET Range: bytes=0-0"]
    resolved_at: IsoTime | None = None

    @model_validator(mode="after")
    def _coherent(self) -> WheelV2:
        if self.content_addressed != (self.sha256 is not None):
            raise ValueError("content_addressed must be true exactly when sha256 is set")
        if self.content_addressed == (self.not_content_addressed is not None):
            raise ValueError("not_content_addressed gives the reason exactly when the wheel is not content-addressed")
        return self


class ImageV2(Fact):
    ref: ImageRef
    registry: str
    repository: str
    tag: str | None
    index_digest: Digest | None
    manifest_digest: Digest
    platform: str
    pinned: ImageRef
    source: str
    resolved_at: IsoTime | None = None


class LockV2(OlderLock):
    lock_version: Literal[2]
    wheel: WheelV2
    base_image: ImageV2

    def upgrade(self, reason: str | None = None) -> LockV3:
        """Version 3: the CUDA facts unknown (`reason` says since when), the check "not checked"."""
        reason = reason or pre_cuda_reason(2)
        return LockV3(
            lock_version=3,
            resolved_at=self.resolved_at,
            buildkit_version=self.buildkit_version,
            pins_sha256=self.pins_sha256,
            nemo_rl=self.nemo_rl,
            vllm=self.vllm,
            vllm_pr=self.vllm_pr,
            wheel=WheelV3(**self.wheel.model_dump(), cuda=None, cuda_source=reason),
            base_image=ImageV3(**self.base_image.model_dump(), cuda_version=None, config_digest=None),
            cuda=CudaCheck(base_image=None, wheel=None, outcome="not checked", detail=reason),
            build=self.build,
            patches=self.patches,
            known_issues=self.known_issues,
            gpu=self.gpu,
        )
