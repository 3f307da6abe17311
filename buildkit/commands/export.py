"""`buildkit export`: the built image as an enroot squashfs for Slurm, and its record."""

from __future__ import annotations

import shutil
import sys

from buildkit.models.paths import Paths
from buildkit.options import ExportOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform
from buildkit.stages.export import publish_index
from buildkit.text import ui


def export_command(paths: Paths, opts: ExportOptions) -> None:
    """One squashfs per platform, each named after its own image tag (<tag>-<arch>), so a Slurm user cannot take
    one platform's for another's."""
    each = each_platform(
        paths,
        opts.platform,
        **{"IMAGE": opts.image, "--output": opts.output, "-o -": True if opts.streamed else None},
    )
    results = ui.per_platform(each, lambda one: _export(one, opts))
    if opts.to is not None and opts.key is not None and len(each) > 1:
        attached = publish_index(paths, opts.key)
        if attached:
            ui.err.print(f"attached the signed statement of the image index to {ui.safe(attached)}")
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
    made = ctx.made.export
    if opts.streamed:
        with open(made.path, "rb") as file:
            shutil.copyfileobj(file, sys.stdout.buffer, 1 << 20)
        sys.stdout.buffer.flush()
    if made.record is None:
        ui.err.print(
            f"[green]already there[/] {ui.safe(str(made.path))} ({made.size / 2**20:,.1f} MiB): left untouched"
        )
    else:
        ui.err.print(f"[green]wrote[/] {ui.safe(str(made.path))} ({made.size / 2**20:,.1f} MiB)")
    ui.err.print(f"  sha256 {made.sha256}")
    if made.record and made.record.skipped_count:
        skipped = ", ".join(made.record.skipped)
        ui.err.print(f"  left out {made.record.skipped_count} device node(s): {ui.safe(skipped)}")
    if made.record:
        ui.err.print(f"  mksquashfs options: {ui.safe(' '.join(made.record.options))}")
    ui.err.print(f"  run it: {ui.safe(made.srun)}")
    if made.where:
        ui.err.print(f"record: {ui.safe(str(made.where))}")
    if made.record is not None:
        return made.record.model_dump(mode="json")
    return {"path": str(made.path), "sha256": made.sha256, "size": made.size, "kept": True, "srun": made.srun}
