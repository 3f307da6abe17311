"""The current lock (version 5) and its facts: every pin turned into a verified fact and where it came from, plus
the hash of the pins.

Facts only: no time read from the clock, so resolving unchanged upstreams writes the same bytes on any machine, any
day (its hash labels the image). When each fact was read goes into the resolve record beside it
(buildkit/models/records/resolve.py).

Later stages trust only the lock, so reading one (read.py) validates it with the same strict grammars as the pins,
and `consistency_problems` (checks.py) holds it to the pins before anything uses it. Written with files.write_atomic.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    WithJsonSchema,
    model_validator,
)

from buildkit.errors import excerpt
from buildkit.models.gpufacts import GpuCheck
from buildkit.models.grammar import (
    CudaVersion,
    Digest,
    FullSha,
    GitPath,
    GitRef,
    GitUrl,
    HttpsUrl,
    ImageRef,
    OneLine,
    Platform,
    WheelCuda,
)
from buildkit.models.pins import Build, KnownIssue, dump_build

# The versions and what each changed: v1.py to v4.py (each the model of what that version wrote and its upgrade to
# the next). Older locks are read, upgraded in memory, and reported stale; they are never written.
LOCK_VERSION: Final = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)

SHA256_HEX_RE = re.compile(r"[0-9a-f]{64}")
SKIPPED_REASON = "resolve --no-wheel-download was given: the wheel's bytes were not hashed; the build trusts its URL"
V1_REASON = "written by lock version 1, before wheels were hashed"
V1_STALE = "lock version 1: the wheel is not content-addressed; run `buildkit resolve`"
V2_STALE = "lock version 2: CUDA versions were not checked; run `buildkit resolve`"
V3_STALE = "lock version 3: it holds the times its facts were read (its hash changes with them); run `buildkit resolve`"
V4_STALE = "lock version 4: the vLLM source and the commit whose wheel is used were one pin; run `buildkit resolve`"
STALE = {1: V1_STALE, 2: V2_STALE, 3: V3_STALE, 4: V4_STALE}

# CUDA_VERSION as the CUDA images' config sets it ("12.9.1"); a wheel's CUDA is major.minor or just the major.


def _sha256_hex(value: str) -> str:
    if not SHA256_HEX_RE.fullmatch(value):
        raise ValueError(f"expected a sha256 (64 lowercase hex digits), found {excerpt(value)}")
    return value


Sha256Hex = Annotated[str, AfterValidator(_sha256_hex), WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{64}$"})]


def cuda_major(version: str) -> int:
    """12 of "12.9.1", "12.9" or "12" (values already held to their grammar)."""
    return int(version.split(".", 1)[0])


# Strict values (issue 20): a lock is a file anyone can edit, so its values are held to bounds (read.py bounds its
# JSON before that): strings of at most MAX_STRING characters, sizes and numbers within range and never booleans,
# dates that parse.
MAX_STRING = 16384


_ISO_TIME_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})"
)


def _iso_time(value: str) -> str:
    try:
        if _ISO_TIME_RE.fullmatch(value):
            datetime.fromisoformat(value)
            return value
    except ValueError:
        pass
    raise ValueError(f"expected an ISO 8601 time with its offset (2026-02-05T12:34:56Z), found {excerpt(value)}")


IsoTime = Annotated[str, AfterValidator(_iso_time)]
Size = Annotated[int, Field(strict=True, ge=0, le=1 << 40)]
PrNumber = Annotated[int, Field(strict=True, ge=1, le=10_000_000)]


class Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_max_length=MAX_STRING)


class PatchFact(Fact):
    """A declared patch as the lock records it: its bytes are pinned by sha256."""

    file: str
    reason: str
    sha256: str


class CommitFact(Fact):
    repo: GitUrl
    ref: GitRef = Field(description="The ref as pinned.")
    commit: FullSha
    date: IsoTime = Field(description="Committer date, ISO 8601.")
    subject: str
    url: str | None = Field(default=None, description="Web page of the commit, when the host has one.")
    source: str = Field(description="How it was resolved: the API URL, or the git command and remote.")


class PullRequestFact(Fact):
    number: PrNumber
    title: str
    state: str = Field(description="GitHub's state: open or closed (a merged PR is closed, with merged_at).")
    merged_at: IsoTime | None = Field(description="When it was merged; null while it is open.")
    merge_commit: FullSha | None = Field(description="Its merge commit on the base branch; null while it is open.")
    url: str
    source: str
    # Written from lock version 5: the head an open PR is built from (its merge commit's, once merged).
    head_commit: FullSha | None = Field(default=None, description="The PR's head commit when it was read.")
    head_repo: GitUrl | None = Field(
        default=None, description="The repository the head lives in (a fork); null when that fork was deleted."
    )
    head_ref: str | None = Field(default=None, description="The head's branch name in head_repo.")

    @property
    def merged(self) -> bool:
        return self.merged_at is not None


class WheelFact(Fact):
    index: HttpsUrl
    variant: str
    arch: str
    filename: str
    version: str
    url: HttpsUrl = Field(description="Absolute URL exactly as the index encodes it.")
    size: Size | None
    etag: str | None = None
    last_modified: str | None = None
    sha256: Sha256Hex | None = Field(description="Of the bytes, measured by resolve downloading the wheel.")
    index_sha256: Sha256Hex | None = Field(description="What the index's #sha256= fragment claimed, if it gave one.")
    content_addressed: StrictBool = Field(description="True when sha256 was measured; the build then checks the bytes.")
    not_content_addressed: OneLine | None = Field(description="Why the wheel is not content-addressed, when it is not.")
    listed_in: str = Field(description="The metadata.json or PEP 503 page that listed the wheel.")
    verified_by: Literal["GET", "HEAD", "GET Range: bytes=0-0"] = Field(
        description="How the wheel was found to exist: the GET that downloaded it, or HEAD (--no-wheel-download)."
    )
    cuda: WheelCuda | None = Field(
        description="The CUDA the wheel is built for: major.minor (12.9), or only the major when just its bytes "
        "say (libcudart.so.12); null when unknown."
    )
    cuda_source: OneLine = Field(description="How the CUDA is known (the variant's name, the bytes), or why not.")

    @model_validator(mode="after")
    def _coherent(self) -> WheelFact:
        if self.content_addressed != (self.sha256 is not None):
            raise ValueError("content_addressed must be true exactly when sha256 is set")
        if self.content_addressed == (self.not_content_addressed is not None):
            raise ValueError("not_content_addressed gives the reason exactly when the wheel is not content-addressed")
        return self


class ImageFact(Fact):
    ref: ImageRef = Field(description="The base image as pinned.")
    registry: str
    repository: str
    tag: str | None
    index_digest: Digest | None = Field(description="Digest of the multi-platform index the tag points at.")
    manifest_digest: Digest = Field(description="Digest of the manifest for the build platform.")
    platform: str
    pinned: ImageRef = Field(description="What FROM uses: name@digest.")
    source: str
    cuda_version: CudaVersion | None = Field(
        description="CUDA_VERSION from the image config's Env, as it says it (12.9.1); null when it sets none."
    )
    config_digest: Digest | None = Field(description="Digest of the build platform's image config, read for it.")


class CudaCheck(Fact):
    """The base image's CUDA against the wheel's, at resolve. A mismatch stops resolve: it never reaches a lock."""

    base_image: CudaVersion | None = Field(description="base_image.cuda_version.")
    wheel: WheelCuda | None = Field(description="wheel.cuda.")
    outcome: Literal["match", "not checked"]
    detail: OneLine = Field(description="What was compared, or why it could not be.")


class TorchCheck(Fact):
    """The torch the wheel was built for against the torch NeMo-RL's uv.lock installs, at resolve
    (buildkit/gpu/torchreq.py). Another release line stops resolve: it never reaches a lock."""

    requires: OneLine | None = Field(description="The wheel's METADATA `Requires-Dist: torch` specifier (==2.9.1).")
    uv_lock: OneLine | None = Field(description="The torch version NeMo-RL's uv.lock installs (2.9.0+cu129).")
    outcome: Literal["match", "same release line", "not checked"]
    detail: OneLine = Field(description="What was compared, or why it could not be.")


WheelChoice = Literal["the source commit", "the merge base", "an ancestor of the merge base", "pinned"]


class WheelCommitFact(Fact):
    """Whose precompiled wheel carries vLLM's compiled files, and how that commit was chosen."""

    commit: FullSha = Field(description="The commit whose wheel is used (wheel.url lies in its index directory).")
    upstream: GitUrl = Field(description="vLLM's repository, whose branch holds it.")
    branch: GitRef = Field(description="The branch of upstream with per-commit wheels (main).")
    merge_base: FullSha | None = Field(description="The source's merge base with the branch (null: not asked).")
    chosen_by: WheelChoice
    detail: OneLine = Field(description="How it was chosen, in words: what was tried and why each was passed over.")


ChangeKind = Literal["added", "modified", "removed"]  # whether the source has the path, and the wheel commit had it
Changes = dict[str, ChangeKind]
MAX_CHANGED = 10_000  # paths the lock lists; a longer difference is counted only (and rebuilt whole)


class SourceComparison(Fact):
    """The paths that differ between the wheel's commit and the source, held to vLLM's compiled inputs
    (buildkit/models/compiled.py): the proof that the wheel carries the source's compiled code."""

    method: Literal["same commit", "GitHub compare", "git diff"]
    source: str = Field(description="The API URL or git command that listed the paths.")
    paths: Annotated[int, Field(strict=True, ge=0, le=10_000_000)] = Field(description="Paths that differ.")
    compiled: list[OneLine] = Field(max_length=1000, description="Those that are compiled inputs: [] proves it.")
    accepted: OneLine | None = Field(
        default=None,
        description="wheel.accept_compiled_changes: a reviewer's reason to build although `compiled` is not empty.",
    )
    # Optional: locks written before it keep their bytes and hash (render then installs the source as before).
    changed: dict[Annotated[GitPath, Field(max_length=1024)], ChangeKind] | None = Field(
        default=None,
        max_length=MAX_CHANGED,
        description="Each path that differs and whether the source has it: render lays the source's over an "
        "install of the wheel commit (the vLLM overlay). Null: none differ, more than 10,000, or an older lock.",
    )

    @model_validator(mode="after")
    def _counted(self) -> SourceComparison:
        if self.changed is not None and len(self.changed) != self.paths:
            raise ValueError(f"changed lists {len(self.changed)} path(s), paths counts {self.paths}")
        return self


MAX_REQUIRES = 1000  # Requires-Dist lines of vLLM's METADATA: 77 in 0.14.0


class VllmInstall(Fact):
    """How NeMo-RL at the locked commit installs vLLM when build-custom-vllm.sh does not: uv builds it from a git
    source in precompiled mode (models/uvsource.py), as NeMo-RL's release branches do. Absent: the script."""

    mode: Literal["uv-source"]
    repo: GitUrl = Field(description="The git source pyproject.toml's [tool.uv.sources] names for vllm.")
    ref: GitRef | None = Field(description="Its branch, tag or rev (null: the default branch).")
    commit: FullSha = Field(description="The commit uv.lock pins: the lock's vllm.commit.")
    locked: OneLine = Field(description="uv.lock's source URL for vllm, whole.")
    wheel_commit: FullSha | None = Field(
        description="[tool.uv.extra-build-variables] vllm.VLLM_PRECOMPILED_WHEEL_COMMIT: the lock's wheel commit."
    )
    precompiled: StrictBool = Field(description='VLLM_USE_PRECOMPILED is "1" there.')
    source: OneLine = Field(description="Where pyproject.toml and uv.lock were read.")
    # Optional: locks of a mode NeMo-RL wrote keep their bytes and hash.
    written: StrictBool = Field(
        default=False,
        description="true: NeMo-RL at the locked commit uses build-custom-vllm.sh and the pins ask for uv-source: "
        "prepare writes this mode into its pyproject.toml and runs `uv lock` (stages/prepare/uvsource.py).",
    )
    version: Annotated[str, Field(pattern=r"^[0-9A-Za-z.!+_-]{1,100}$")] | None = Field(
        default=None, description="Written mode: the wheel's METADATA Version, the version uv records for vLLM."
    )
    requires_dist: list[Annotated[str, Field(min_length=1, max_length=1000, pattern=r"^[^\x00-\x1f\x7f]+$")]] | None = (
        Field(
            default=None,
            max_length=MAX_REQUIRES,
            description="Written mode: the wheel's METADATA Requires-Dist, written as vLLM's uv dependency metadata "
            "(the wheel commit's: resolve refused a head that changes vLLM's packaging).",
        )
    )
    provides_extra: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")]] | None = Field(
        default=None, max_length=200, description="Written mode: the wheel's METADATA Provides-Extra."
    )

    @model_validator(mode="after")
    def _written_has_metadata(self) -> VllmInstall:
        if (self.version is None) != (self.requires_dist is None) or (self.version is not None and not self.written):
            raise ValueError("version and requires_dist come together, and only with a written uv-source mode")
        return self


GitBlobId = Annotated[str, Field(pattern=r"^[0-9a-f]{40}$", description="A git blob id (SHA-1).")]


MAX_LISTED = 50_000  # files under vllm/ in a listing: vLLM 0.14.0 has 1,703


class PythonFiles(Fact):
    """vLLM's Python files at the source commit, by their git blob ids (read from the commit's tree, no file
    contents): verify holds the image's vLLM package to them, file by file, with no network."""

    commit: FullSha = Field(description="The source commit whose tree was listed.")
    source: OneLine = Field(description="The API URL or git command that listed the tree.")
    files: dict[Annotated[str, Field(max_length=400)], GitBlobId] = Field(
        max_length=MAX_LISTED,
        description="vllm/** (every regular file; vllm/**/*.py only without scope) -> git blob id.",
    )
    scope: Literal["package"] | None = Field(
        default=None,
        description="package: every regular file under vllm/, which verify holds the image's package to entry by "
        "entry; absent (older locks): the Python files only, which verify no longer judges by.",
    )

    @property
    def digest(self) -> str:
        """One hash of the whole listing, for `resolve --check` to compare (sha256 of its canonical JSON)."""
        return hashlib.sha256(json.dumps(self.files, sort_keys=True).encode()).hexdigest()


VllmFiles = dict[Annotated[str, Field(max_length=400)], Sha256Hex]


class PlatformFacts(Fact):
    """What resolve read for one more platform of build.platforms (issue 30): its wheel, its manifest of the base
    image, and the checks on them. The primary platform's are the lock's own top-level facts."""

    wheel: WheelFact
    base_image: ImageFact
    cuda: CudaCheck
    gpu: GpuCheck | None = None
    vllm_files: VllmFiles | None = Field(default=None, max_length=10_000)
    torch: TorchCheck | None = None


class Lock(Fact):
    # 1 to 4 only in memory, for an older lock read and migrated by read_lock: it is stale (consistency_problems).
    lock_version: Literal[1, 2, 3, 4, 5] = LOCK_VERSION
    buildkit_version: str
    pins_sha256: str
    # Optional, like gpu: a lock written before it keeps its bytes and hash (resolve refuses to overwrite a lock
    # that names another pins file: stages/resolve/ours.py).
    pins_file: OneLine | None = Field(
        default=None,
        description="The pins file it was written from, relative to the lock's folder (`pins.yaml`).",
    )
    nemo_rl: CommitFact
    vllm: CommitFact = Field(description="The vLLM source: its repository (a fork, for an open PR) and commit.")
    vllm_pr: PullRequestFact | None
    vllm_wheel: WheelCommitFact
    vllm_compare: SourceComparison
    wheel: WheelFact
    base_image: ImageFact
    cuda: CudaCheck
    build: Build
    patches: list[PatchFact] = Field(description="Declared patches to NeMo-RL, each pinned by sha256.")
    known_issues: list[KnownIssue]
    # Optional: written only when resolve read the wheel's GPU code, so locks without it keep their bytes and hash.
    gpu: GpuCheck | None = Field(default=None, description="Kernels per target GPU, ABI, driver (buildkit.gpu).")
    vllm_files: VllmFiles | None = Field(
        default=None,
        max_length=10_000,
        description="The sha256 of each of vLLM's files that come from the wheel (its shared objects, vllm/_C.abi3.so "
        "..., and the Python files precompiled mode copies out of it, vllm/vllm_flash_attn/**/*.py ...), as resolve "
        "read them: verify holds the image's to these. Written only when resolve read the wheel's bytes.",
    )
    vllm_python: PythonFiles | None = Field(
        default=None,
        description="vLLM's Python files at the source commit (git blob ids), for verify; null when "
        "the tree could not be listed (resolve said why).",
    )
    torch: TorchCheck | None = Field(
        default=None,
        description="The wheel's torch requirement against uv.lock's torch; written only when "
        "resolve read the wheel's bytes.",
    )
    other_platforms: dict[Platform, PlatformFacts] | None = Field(
        default=None,
        description="build.platforms after the first: each one's wheel, base image manifest and "
        "checks (the first's are the top-level facts). Written only for several platforms.",
    )
    vllm_install: VllmInstall | None = Field(
        default=None,
        description="NeMo-RL's way to install vLLM when it is not build-custom-vllm.sh (uv builds the fork from a "
        "git source); written only then.",
    )

    # An older lock as read_lock decoded it, before migration (None for a current one).
    _as_read: dict[str, Any] | None = PrivateAttr(default=None)
    # A platform's view of a multi-platform lock (checks.platform_lock): the hash of the lock file it is a view of,
    # which that platform's records and labels carry.
    _whole_sha256: str | None = PrivateAttr(default=None)

    def to_json(self) -> str:
        # A migrated lock serializes as the lock it was read from, so its hash (lock_sha256, which labels and
        # records carry) stays the one its builds were stamped with.
        data = (
            self._as_read
            if self._as_read is not None
            else {**self.model_dump(mode="json"), "build": dump_build(self.build)}
        )
        for key in ("pins_file", "gpu", "vllm_files", "vllm_python", "torch", "other_platforms", "vllm_install"):
            if data.get(key, ...) is None:
                data = {k: v for k, v in data.items() if k != key}
        listed = data.get("vllm_python")
        if isinstance(listed, dict) and listed.get("scope", ...) is None:  # an older listing keeps its bytes
            data = {**data, "vllm_python": {k: v for k, v in listed.items() if k != "scope"}}
        compared = data.get("vllm_compare")
        if isinstance(compared, dict) and compared.get("changed", ...) is None:  # so does a comparison
            data = {**data, "vllm_compare": {k: v for k, v in compared.items() if k != "changed"}}
        install = data.get("vllm_install")
        if isinstance(install, dict) and not install.get("written"):  # and NeMo-RL's own uv-source mode
            written = ("written", "version", "requires_dist", "provides_extra")
            data = {**data, "vllm_install": {k: v for k, v in install.items() if k not in written}}
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    def platforms(self) -> list[str]:
        """Every platform the lock holds facts for, the primary (build.platform) first."""
        return [self.build.platform, *(self.other_platforms or {})]

    def for_platform(self, platform: str) -> Lock:
        """A single-platform view of one platform's facts (for checks and stages that read one platform); never
        written."""
        build = self.build.for_platform(platform) if self.build.platforms else self.build
        if platform == self.build.platform:
            return self.model_copy(update={"build": build, "other_platforms": None})
        facts = (self.other_platforms or {})[platform]
        own = {name: getattr(facts, name) for name in type(facts).model_fields}
        return self.model_copy(update={**own, "build": build, "other_platforms": None})

    def times_as_read(self) -> dict[str, str]:
        """The `resolved_at` values an older lock held ("lock" for its top level), for the report; {} from v4."""
        data = self._as_read or {}
        times = {"lock": data.get("resolved_at")}
        times.update({k: v.get("resolved_at") for k, v in data.items() if isinstance(v, dict)})
        return {k: v for k, v in times.items() if isinstance(v, str)}
