"""`buildkit attest`: write the build's SLSA statement; with a key, sign it and attach it to the pushed image."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from buildkit.models.paths import Paths
from buildkit.stages.attest import attest
from buildkit.stages.slsa import builder_id as checked_builder_id
from buildkit.stages.slsa import canonical, checked_repository
from buildkit.text import ui
from buildkit.world.cosign import check_key


@dataclass(frozen=True)
class AttestOptions:
    """`buildkit attest`'s options, checked (`parse`) before anything is read: the builder ID a URI, the key one
    cosign can use, the repository a name without tag or digest."""

    record: Path | None
    key: str | None
    builder_id: str  # runDetails.builder.id
    json_out: bool
    repository: str | None

    @classmethod
    def parse(
        cls, *, record: Path | None, key: str | None, builder_id: str | None, json_out: bool, repository: str | None
    ) -> AttestOptions:
        builder = checked_builder_id(builder_id)
        if key is not None:
            check_key(key)  # a missing key is bad input before anything else is read
        named = checked_repository(repository) if repository is not None else None
        return cls(record, key, builder, json_out, named)


def attest_command(paths: Paths, opts: AttestOptions) -> None:
    done = attest(paths, opts.record, opts.key, opts.builder_id, opts.repository)
    json_out = opts.json_out
    if json_out:
        sys.stdout.write(canonical(done.statement).decode("utf-8") + "\n")
    ui.err.print(f"statement: {ui.safe(str(done.statement_file))} (SLSA provenance v1 of {ui.safe(done.subject)}, "
                 f"from {ui.safe(done.record_name)})")  # fmt: skip
    if done.envelope_file is None:
        ui.err.print("not signed (no --key): `buildkit attest --key cosign.key` signs it and attaches it to the image")
        return
    ui.err.print(f"signed: {ui.safe(str(done.envelope_file))} (DSSE, cosign {ui.safe(done.cosign_version)}, "
                 "no transparency log)")  # fmt: skip
    if done.attached_to:
        ui.err.print(f"[green]attached[/] to {ui.safe(done.attached_to)}")
        ui.err.print(
            f"check: cosign verify-attestation --key cosign.pub --type slsaprovenance1 --insecure-ignore-tlog "
            f"{ui.safe(done.attached_to)}"
        )
    else:
        ui.warn(f"not attached: {done.not_attached}")
