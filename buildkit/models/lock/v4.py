"""Lock version 4, as it was written: version 5's facts without the wheel's own commit and the comparison, because
the vLLM source and the commit whose wheel was used were one pin (a merged PR's merge commit, or a commit of main).
The upgrade says exactly that: the wheel's commit is the source commit, and no path differs between them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from buildkit.models.gpufacts import GpuCheck
from buildkit.models.lock.facts import (
    CommitFact,
    CudaCheck,
    Fact,
    ImageFact,
    Lock,
    PatchFact,
    PullRequestFact,
    SourceComparison,
    WheelCommitFact,
    WheelFact,
)
from buildkit.models.pins import DEFAULT_VLLM_REPO, Build, KnownIssue


class LockV4(Fact):
    lock_version: Literal[4]
    buildkit_version: str
    pins_sha256: str
    nemo_rl: CommitFact
    vllm: CommitFact
    vllm_pr: PullRequestFact | None
    wheel: WheelFact
    base_image: ImageFact
    cuda: CudaCheck
    build: Build
    patches: list[PatchFact]
    known_issues: list[KnownIssue]
    gpu: GpuCheck | None = Field(default=None)

    def upgrade(self) -> Lock:
        """Version 5: the wheel's commit is the source commit (chosen as "the source commit"), compared with itself."""
        commit = self.vllm.commit
        return Lock(
            lock_version=5,
            buildkit_version=self.buildkit_version,
            pins_sha256=self.pins_sha256,
            nemo_rl=self.nemo_rl,
            vllm=self.vllm,
            vllm_pr=self.vllm_pr,
            vllm_wheel=WheelCommitFact(
                commit=commit,
                upstream=DEFAULT_VLLM_REPO,
                branch="main",
                merge_base=None,
                chosen_by="the source commit",
                detail="lock version 4: the wheel's commit was the source commit",
            ),
            vllm_compare=SourceComparison(method="same commit", source="lock version 4", paths=0, compiled=[]),
            wheel=self.wheel,
            base_image=self.base_image,
            cuda=self.cuda,
            build=self.build,
            patches=self.patches,
            known_issues=self.known_issues,
            gpu=self.gpu,
        )
