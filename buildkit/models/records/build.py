"""build/record.json (build/smoke-record.json): one run of buildx, whatever its outcome: the exact command, where it
ran, BuildKit's steps with their times, the image made and, with `--check-reproducible`, the rebuild's comparison;
and which record is the newest build's (`latest_build`: verify, attest, export and report all start from it)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit.errors import InputError
from buildkit.files import read_record
from buildkit.models.comparison import ImageComparison
from buildkit.models.paths import Paths
from buildkit.models.records import Build, RecordHeader


class Rebuild(BaseModel):
    """The second build: where and how it ran."""

    model_config = ConfigDict(extra="forbid")
    builder: str
    no_cache: bool
    second_clone: bool  # from a tree prepared afresh in its own cache directory
    started: str
    ended: str
    seconds: float
    outcome: Literal["succeeded", "failed", "interrupted"]
    steps_total: int
    steps_cached: int
    log: str


class ReproCheck(BaseModel):
    """The outcome that goes into the build record and the report's Reproducibility section."""

    model_config = ConfigDict(extra="forbid")
    identical: bool
    manifest_digest: str | None  # the platform image manifest, when both builds agree
    config_digest: str | None
    rebuild: Rebuild
    summary: list[str]
    comparison: ImageComparison
    layouts_kept: list[str]  # the OCI layouts left for inspection (none when identical)


class BuildInputs(BaseModel):
    """What the build's steps read from the lock, in the order upstream's Dockerfile reads it: what the next build
    compares with to say before it starts what will run again (models/rebuild.py)."""

    model_config = ConfigDict(extra="forbid")
    base_image: str  # name@digest: the lock's, or the smoke build's stand-in
    nemo_rl_commit: str
    cuda_arch_list: str
    drop_extras: list[str]
    wheel_commit: str
    wheel_url: str
    wheel_sha256: str | None
    vllm_repo: str
    vllm_commit: str
    pr: int | None = None
    pr_head: str | None = None  # an open PR's head when the lock was written
    # The commit the vLLM install RUN installs (the wheel's, with an overlay) and how many paths the overlay lays
    # over it (None: no overlay); absent in records written before the overlay existed.
    vllm_install: str | None = None
    vllm_overlay: int | None = None


class LayerFact(BaseModel):
    """One entry of the image's history: the size it added and the instruction that made it."""

    model_config = ConfigDict(extra="forbid")
    size: int
    created_by: str


class ImageFacts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str
    digest: str | None = None
    config_digest: str | None = None
    id: str | None = None
    size: int | None = None
    layers: int | None = None
    labels: dict[str, str] = {}
    history: list[LayerFact] = []  # oldest first, from the engine after --load ([]: not loaded, or older record)


class StepTime(BaseModel):
    """One BuildKit step with BuildKit's own times (for the report's timeline)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    started: str
    completed: str
    cached: bool = False
    error: bool = False


class CacheUse(BaseModel):
    """The registry caches a build imported from and exported to, and what failed with them (never fatal)."""

    model_config = ConfigDict(extra="forbid")
    cache_from: list[str]
    cache_to: list[str]
    problems: list[str] = []


class InstalledImage(BaseModel):
    """A pushed build with a vLLM overlay (stages/build/installed.py): the image of the install's stage, pushed by
    digest, that the overlay's stage started FROM, and whether this build pushed it or took an earlier build's."""

    model_config = ConfigDict(extra="forbid")
    image: str  # repository@sha256:...
    probe_digest: str  # the install's stage as BuildKit built it, before the rewrite: same digest, same install
    reused: bool
    commands: list[str]  # the buildx runs before the final one, as a person would type them


class BuildRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_version: Literal[1] = 1
    buildkit_version: str
    lock_sha256: str
    smoke: bool
    host: str | None = None  # the machine that ran buildx
    command: str
    argv: list[str]
    source_date_epoch: int
    builder: str
    driver: str
    endpoint: str
    buildx_version: str
    buildkit_daemon_version: str
    docker_version: str
    provenance: str = ""  # attached, or why not
    metadata_provenance: bool = False  # the metadata file carries buildx.build.provenance
    started: str
    ended: str
    seconds: float
    outcome: Literal["succeeded", "failed", "interrupted"]
    exit_code: int
    error: str | None = None
    failed_step: str | None = None  # the instruction (BuildKit's vertex name) whose failure stopped the build
    failed_output: list[str] = []  # the last lines of that step's own output
    steps: list[StepTime] = []  # BuildKit's steps with its own times ([]: a record from before they were kept)
    image: ImageFacts
    steps_total: int  # every vertex BuildKit reported, its internal ones (metadata, context, export) included
    steps_cached: int
    instructions_total: int | None = None  # the Dockerfile's instructions that ran, FROM aside (None: older record)
    instructions_cached: int | None = None
    cache: CacheUse | None = None
    compression: str = "gzip"  # of the pushed layers
    force_compression: bool = False
    log: str
    metadata_file: str
    reproducibility: ReproCheck | None = None  # `build --check-reproducible`: the rebuild and the comparison
    inputs: BuildInputs | None = None  # None in a record written before buildkit kept them
    installed: InstalledImage | None = None  # a pushed build with a vLLM overlay; None otherwise
    header: RecordHeader | None = None  # None in a record written before headers

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def build(self) -> Build:
        """The build this record describes, as records.belongs matches records to it: its lock, smoke or release,
        and its image's identities (manifest digest, image ID, config digest)."""
        images = (self.image.digest, self.image.id, self.image.config_digest)
        return Build(self.lock_sha256, self.smoke, frozenset(x for x in images if x))


def latest_build(paths: Paths) -> tuple[Path, BuildRecord] | None:
    """The newest build record, real or smoke (by end time), with its path; None when nothing was built.

    verify and report both pick the record this way, so they speak of the same build."""
    found = []
    for smoke in (False, True):
        path = paths.build_record(smoke)
        record = read_record(path, BuildRecord)
        if record is not None:
            found.append((record.ended, path, record))
    if not found:
        return None
    _, path, record = max(found, key=lambda item: item[0])
    return path, record


def latest_successful_build(paths: Paths, what: str, no_build_hint: str, failed_hint: str) -> tuple[Path, BuildRecord]:
    """The newest build record (as latest_build picks it), refused unless that build made an image: the one
    choice `verify` and `export` make when no image is named. `what` says what the image was wanted for."""
    latest = latest_build(paths)
    if latest is None:
        raise InputError("no image given and no build recorded", hint=no_build_hint)
    path, record = latest
    if record.outcome != "succeeded":
        raise InputError(f"the latest build ({path}) {record.outcome}; it made no image {what}", hint=failed_hint)
    return latest


def argv_values(record: BuildRecord, flag: str) -> list[str]:
    """The values the build's argv gave `flag`, in order."""
    argv = record.argv
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


def pushed(record: BuildRecord) -> bool:
    """Whether the build pushed its image to a registry (and did not load it into Docker)."""
    return any(v.startswith("type=image,") and "push=true" in v.split(",") for v in argv_values(record, "--output"))
