"""`buildkit export`: the built image as an enroot squashfs for Slurm, and its record."""

from __future__ import annotations

import json
import shutil
import sys

from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.context import Context
from buildkit.stages.export import ExportOptions, srun_line
from buildkit.text import ui


def export_command(paths: Paths, opts: ExportOptions) -> None:
    with ui.err.status("exporting...", spinner="dots") as status:
        ctx = Context(
            paths, options=opts, on_note=ui.warn, on_say=lambda text: ui.err.print(ui.safe(text)),
            on_step=lambda text: status.update(ui.safe(text)),
        )  # fmt: skip
        pipeline.run_stage("export", ctx)
    record, where = ctx.made["export"]
    if opts.streamed:
        with open(record.path, "rb") as made:
            shutil.copyfileobj(made, sys.stdout.buffer, 1 << 20)
        sys.stdout.buffer.flush()
    if opts.json_out:
        sys.stdout.write(json.dumps(record.model_dump(mode="json"), indent=2) + "\n")
    ui.err.print(f"[green]wrote[/] {ui.safe(record.path)} ({record.size / 2**20:,.1f} MiB)")
    ui.err.print(f"  sha256 {record.sha256}")
    if record.skipped_count:
        ui.err.print(f"  left out {record.skipped_count} device node(s): {ui.safe(', '.join(record.skipped))}")
    ui.err.print(f"  run it: {ui.safe(srun_line(record))}")
    ui.err.print(f"record: {ui.safe(str(where))}")
