"""build/squashfs.json (build/smoke/squashfs.json for a smoke build): the enroot squashfs `buildkit export` made, from
which image, and how enroot and pyxis start a container from it (`srun_line`: how a Slurm user runs it)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit.models.records import RecordHeader


class EnrootLayout(BaseModel):
    """What `docker::configure` put into the squashfs: how enroot and pyxis start a container from it."""

    model_config = ConfigDict(extra="forbid")
    uri: str  # the provenance line of /etc/rc
    environment: list[str]  # /etc/environment
    workdir: str  # where /etc/rc goes first
    entrypoint: list[str]
    cmd: list[str]  # what follows the entrypoint when the container is given no command
    volumes: list[str]  # /etc/fstab


class SquashfsRecord(BaseModel):
    """build/squashfs.json (build/smoke/squashfs.json for a smoke build): what `buildkit export` made, and from what."""

    model_config = ConfigDict(extra="forbid")
    record_version: Literal[1] = 1
    buildkit_version: str
    lock_sha256: str
    smoke: bool
    image: str  # as the build tagged it (or as given)
    image_id: str  # the engine's ID of the image saved
    config_digest: str  # of the config read from the saved image (its bytes checked against it)
    manifest_digest: str | None  # the build's image manifest digest, from the build record
    build_record: str | None  # the build record the image came from
    path: str  # the .sqsh, absolute
    sha256: str
    size: int
    source_date_epoch: int
    created: str  # SOURCE_DATE_EPOCH as a time: the time of the filesystem and of every file in it
    mksquashfs: str  # its version
    options: list[str]  # the mksquashfs options that shape the bytes
    layout: EnrootLayout
    entries: int  # tar entries read from the layers
    skipped: list[str]  # device nodes left out (the first 20)
    skipped_count: int
    exported_at: str
    seconds: float
    header: RecordHeader | None = None  # None in a record written before headers

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def srun_line(record: SquashfsRecord) -> str:
    """How pyxis runs it: `srun --container-image=FILE`, in the image's working directory, with a shell."""
    return srun(record.path, record.layout.workdir)


def srun(path: str, workdir: str) -> str:
    shown = f" --container-workdir={shlex.quote(workdir)}" if workdir != "/" else ""
    return f"srun --container-image={shlex.quote(path)}{shown} --pty bash"


MAX_SIDECAR = 64 << 20  # bytes of a bundle, an SBOM or a statement read (NeMo-RL's SBOM lists a few thousand packages)


def sidecars(published: Path) -> tuple[Path, Path]:
    """The SBOM and the Sigstore bundle `export --to DIR --key` writes beside a published `<name>.sqsh`."""
    stem = published.name.removesuffix(".sqsh")
    return published.with_name(f"{stem}.cdx.json"), published.with_name(f"{stem}.sigstore.json")
