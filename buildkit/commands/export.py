"""`buildkit export`: the built image as an enroot squashfs for Slurm, and its record."""

from __future__ import annotations

import shutil
import sys

from buildkit.models.paths import Paths
from buildkit.models.records.squashfs import srun_line
from buildkit.options import ExportOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform
from buildkit.text import ui


def export_command(paths: Paths, opts: ExportOptions) -> None:
    """One squashfs per platform, each named after its own image tag (<tag>-<arch>), so a Slurm user cannot take
    one platform's for another's."""
    each = each_platform(
        paths, opts.platform, **{"IMAGE": opts.image, "--output": opts.output, "-o -": True if opts.streamed else None}
    )
    results = ui.per_platform(each, lambda one: _export(one, opts))
    if opts.json_out:
        ui.write_json_by_platform(results)


def _export(paths: Paths, opts: ExportOptions) -> dict:
    with ui.err.status("exporting...", spinner="dots") as status:
        ctx = Context(
            paths,
            opts,
            on_note=ui.warn,
            on_say=lambda text: ui.err.print(ui.safe(text)),
            on_step=lambda text: status.update(ui.safe(text)),
        )
        pipeline.run_stage("export", ctx)
    record, where = ctx.made.export
    if opts.streamed:
        with open(record.path, "rb") as made:
            shutil.copyfileobj(made, sys.stdout.buffer, 1 << 20)
        sys.stdout.buffer.flush()
    ui.err.print(f"[green]wrote[/] {ui.safe(record.path)} ({record.size / 2**20:,.1f} MiB)")
    ui.err.print(f"  sha256 {record.sha256}")
    if record.skipped_count:
        ui.err.print(f"  left out {record.skipped_count} device node(s): {ui.safe(', '.join(record.skipped))}")
    ui.err.print(f"  run it: {ui.safe(srun_line(record))}")
    ui.err.print(f"record: {ui.safe(str(where))}")
    return record.model_dump(mode="json")
