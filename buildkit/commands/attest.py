"""`buildkit attest`: write the build's SLSA statement; with a key, sign it and attach it to the pushed image."""

from __future__ import annotations

import sys

from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.attest import Attested, AttestOptions
from buildkit.stages.context import Context, each_platform
from buildkit.stages.slsa import canonical
from buildkit.text import ui

__all__ = ["AttestOptions", "attest_command"]


def attest_command(paths: Paths, opts: AttestOptions, platform: str | None = None) -> None:
    """Each platform's statement (its own image manifest the subject), signed and attached with a key."""
    each = each_platform(paths, platform, **{"--record": opts.record})
    statements = {}
    for one in each:
        ui.platform_heading(one.platform, one.build_dir, len(each))
        statements[one.platform] = _attest(one, opts)
    if opts.json_out:
        if len(each) == 1:  # the canonical bytes, as they were signed
            sys.stdout.write(canonical(statements[each[0].platform]).decode("utf-8") + "\n")
        else:
            ui.write_json_by_platform(statements)


def _attest(paths: Paths, opts: AttestOptions) -> dict:
    ctx = Context(paths, options=opts)
    pipeline.run_stage("attest", ctx)
    done: Attested = ctx.made["attest"]
    _say(done)
    return done.statement


def _say(done: Attested) -> None:
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
