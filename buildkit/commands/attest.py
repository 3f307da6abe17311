"""`buildkit attest`: write the build's SLSA statement; with a key, sign it and attach it to the pushed image."""

from __future__ import annotations

import sys

from buildkit.files import read_record
from buildkit.models.paths import Paths
from buildkit.models.records.index import IndexRecord
from buildkit.models.results import Attested
from buildkit.models.slsa import canonical
from buildkit.options import AttestOptions
from buildkit.stages import pipeline
from buildkit.stages.attest import attest_index
from buildkit.stages.context import Context, each_platform
from buildkit.text import ui


def attest_command(paths: Paths, opts: AttestOptions) -> None:
    """Each platform's statement (its own image the subject), signed and attached with a key; for several
    platforms pushed as one image index, the index's too (each platform's image and statement its dependencies)."""
    each = each_platform(paths, opts.platform, **{"--record": opts.record})
    done = ui.per_platform(each, lambda one: _attest(one, opts))
    statements = {p: d.statement for p, d in done.items()}
    if len(each) > 1 and opts.platform is None:
        smoke = done[each[0].platform].statement_file == each[0].statement(True)
        index = read_record(paths.index_record(smoke), IndexRecord)
        ui.platform_heading("image index", paths.index_record(smoke), 2)
        if index is None or index.index_digest is None:
            why = "no build of every platform recorded" if index is None else index.index
            ui.err.print(f"image index: not attested ({ui.safe(why)}); each platform's statement stands alone")
        else:
            payloads = {str(p): canonical(d.statement) for p, d in done.items()}
            indexed = attest_index(paths, smoke, opts.key, opts.builder_id, payloads)
            _say(indexed)
            statements["index"] = indexed.statement
    if opts.json_out:
        if len(each) == 1:  # the canonical bytes, as they were signed
            sys.stdout.write(canonical(statements[each[0].platform]).decode("utf-8") + "\n")
        else:
            ui.write_json_by_platform(statements)


def _attest(paths: Paths, opts: AttestOptions) -> Attested:
    ctx = Context(paths, opts)
    pipeline.run_stage("attest", ctx)
    done = ctx.made.attest
    _say(done)
    return done


def _say(done: Attested) -> None:
    ui.err.print(
        f"statement: {ui.safe(str(done.statement_file))} (SLSA provenance v1 of {ui.safe(done.subject)}, "
        f"from {ui.safe(done.record_name)})"
    )
    if done.envelope_file is None:
        ui.err.print("not signed (no --key): `buildkit attest --key cosign.key` signs it and attaches it to the image")
        return
    ui.err.print(
        f"signed: {ui.safe(str(done.envelope_file))} (DSSE, cosign {ui.safe(done.cosign_version)}, no transparency log)"
    )
    if done.attached_to:
        ui.err.print(f"[green]attached[/] to {ui.safe(done.attached_to)}")
        ui.err.print(
            f"check: cosign verify-attestation --key cosign.pub --type slsaprovenance1 --insecure-ignore-tlog "
            f"{ui.safe(done.attached_to)}"
        )
    else:
        ui.warn(f"not attached: {done.not_attached}")
