"""Lock version 1, as it was written: the wheel's `sha256` was the index's claim, never measured. The upgrade to
version 2 moves the claim to index_sha256 and marks the wheel not content-addressed (V1_REASON); the CUDA facts
that version 3 added are unknown "since version 1"."""

from __future__ import annotations

from typing import Literal

from buildkit.models.grammar import HttpsUrl
from buildkit.models.lock.facts import V1_REASON, Fact, IsoTime, Sha256Hex, Size
from buildkit.models.lock.v2 import ImageV2, LockV2, WheelV2, pre_cuda_reason
from buildkit.models.lock.v3 import LockV3, OlderLock


class WheelV1(Fact):
    index: HttpsUrl
    variant: str
    arch: str
    filename: str
    version: str
    url: HttpsUrl
    size: Size | None
    etag: str | None = None
    last_modified: str | None = None
    sha256: Sha256Hex | None  # what the index's #sha256= fragment claimed
    listed_in: str
    verified_by: Literal["GET", "HEAD", "GET Range: bytes=0-0"]
    resolved_at: IsoTime | None = None


class LockV1(OlderLock):
    lock_version: Literal[1]
    wheel: WheelV1
    base_image: ImageV2

    def upgrade(self) -> LockV3:
        """Version 2 (the index's claim moved to index_sha256, not content-addressed), then straight on to 3
        with the CUDA facts unknown since version 1."""
        wheel = self.wheel.model_dump(exclude={"sha256"})
        v2 = LockV2(
            lock_version=2,
            **self.model_dump(exclude={"lock_version", "wheel", "build", "patches", "known_issues", "gpu"}),
            wheel=WheelV2(
                **wheel,
                sha256=None,
                index_sha256=self.wheel.sha256,
                content_addressed=False,
                not_content_addressed=V1_REASON,
            ),
            build=self.build,
            patches=self.patches,
            known_issues=self.known_issues,
            gpu=self.gpu,
        )
        return v2.upgrade(pre_cuda_reason(1))
