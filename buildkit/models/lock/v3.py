"""Lock version 3, as it was written: version 4's facts, each with the time it was read (`resolved_at`, at the top
level too; optional here, as the tests' hand-made older locks leave it out). Version 4 keeps facts only: the
upgrade drops the times, which now go to the resolve record."""

from __future__ import annotations

from typing import Literal

from buildkit.models.gpufacts import GpuCheck
from buildkit.models.lock.facts import (
    CommitFact,
    CudaCheck,
    Fact,
    ImageFact,
    IsoTime,
    PatchFact,
    PullRequestFact,
    WheelFact,
)
from buildkit.models.lock.v4 import LockV4
from buildkit.models.pins import Build, KnownIssue

TIMES = ("nemo_rl", "vllm", "vllm_pr", "wheel", "base_image")  # the facts that carried resolved_at


class CommitV3(CommitFact):
    resolved_at: IsoTime | None = None


class PullRequestV3(PullRequestFact):
    resolved_at: IsoTime | None = None


class WheelV3(WheelFact):
    resolved_at: IsoTime | None = None


class ImageV3(ImageFact):
    resolved_at: IsoTime | None = None


class OlderLock(Fact):
    """What versions 1 to 3 wrote alike; each version's model adds its wheel, base image and (3) CUDA facts."""

    resolved_at: IsoTime | None = None
    buildkit_version: str
    pins_sha256: str
    nemo_rl: CommitV3
    vllm: CommitV3
    vllm_pr: PullRequestV3 | None
    build: Build
    patches: list[PatchFact]
    known_issues: list[KnownIssue]
    gpu: GpuCheck | None = None  # accepted as version 4 writes it (older versions never held one)


class LockV3(OlderLock):
    lock_version: Literal[3]
    wheel: WheelV3
    base_image: ImageV3
    cuda: CudaCheck

    def upgrade(self) -> LockV4:
        """Version 4: the same facts without their times."""
        untimed = {
            name: getattr(self, name).model_dump(exclude={"resolved_at"})
            for name in TIMES
            if getattr(self, name) is not None
        }
        return LockV4(
            lock_version=4,
            buildkit_version=self.buildkit_version,
            pins_sha256=self.pins_sha256,
            nemo_rl=CommitFact(**untimed["nemo_rl"]),
            vllm=CommitFact(**untimed["vllm"]),
            vllm_pr=PullRequestFact(**untimed["vllm_pr"]) if "vllm_pr" in untimed else None,
            wheel=WheelFact(**untimed["wheel"]),
            base_image=ImageFact(**untimed["base_image"]),
            cuda=self.cuda,
            build=self.build,
            patches=self.patches,
            known_issues=self.known_issues,
            gpu=self.gpu,
        )
