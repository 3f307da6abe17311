"""What each stage leaves on the context for the command that ran it and for the stages after it (ctx.made, typed in
stages/context.py's `Made`), beyond the records it writes: the engine's facts the build runs on, the rendered
Dockerfile, the build, the statement made, the report's text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from buildkit.models.plan import BuildPlan
from buildkit.models.records.build import BuildRecord
from buildkit.models.records.render import RenderRecord
from buildkit.models.records.squashfs import SquashfsRecord, srun_line


@dataclass(frozen=True)
class Builder:
    """What the record says about where the build ran (from the preflight checks)."""

    name: str
    driver: str
    endpoint: str
    buildkit_version: str
    buildx_version: str
    docker_version: str


class Preflighted(NamedTuple):
    """What the engine checks found that the build needs (the command runs them before the long stages, and leaves
    this in ctx.made.preflight): the builder's facts, and whether a provenance attestation is attached."""

    builder: Builder
    provenance: bool
    provenance_note: str  # attached, or why not: the record keeps it


class Built(NamedTuple):
    """What the build stage leaves in ctx.made.build: the record (written, whatever the outcome), the plan, the
    full log and the start stamp that names it."""

    record: BuildRecord
    plan: BuildPlan
    log_path: Path
    stamp: str


@dataclass(frozen=True)
class Attested:
    """The statement attest made, where it went, and whether it was signed and attached."""

    statement: dict
    statement_file: Path
    subject: str  # name@digest
    record_name: str
    envelope_file: Path | None = None  # when signed
    attached_to: str | None = None  # name@digest in its registry, when attached
    not_attached: str | None = None  # why a signed envelope was not attached
    cosign_version: str | None = None


class Reported(NamedTuple):
    """The report, as the command prints or wrote it."""

    text: str  # the report, markdown or JSON
    record: str | None  # the build record it used, as the report shows it (None: nothing built yet)


class Rendered(NamedTuple):
    """What render made: the Dockerfile's text and its record (both written)."""

    text: str
    record: RenderRecord


class Exported(NamedTuple):
    """What `buildkit export` leaves: the .sqsh, and the record of its making (None when a file of the same digest
    was already published and kept as it was)."""

    path: Path
    sha256: str
    size: int
    srun: str
    record: SquashfsRecord | None
    where: Path | None

    @classmethod
    def of(cls, record: SquashfsRecord, where: Path) -> Exported:
        return cls(Path(record.path), record.sha256, record.size, srun_line(record), record, where)
