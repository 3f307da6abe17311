"""`buildkit prepare`: NeMo-RL at the locked commit, with its submodules and the declared patches, and its record."""

from __future__ import annotations

import sys

from buildkit.models.paths import Paths
from buildkit.options import PrepareOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, load_inputs
from buildkit.text import ui


def prepare_command(paths: Paths, opts: PrepareOptions) -> None:
    # The tree is the same for every platform of build.platforms: prepared once, recorded at the top.
    inputs = load_inputs(paths, on_note=ui.warn, whole=True)
    with ui.err.status("preparing NeMo-RL sources...", spinner="dots") as status:
        ctx = Context(paths, opts, inputs, on_step=lambda text: status.update(ui.safe(text)))
        pipeline.run_stage("prepare", ctx)
    record = ctx.made.prepare
    if opts.json_out:
        sys.stdout.write(record.to_json())
    else:
        ui.print_prepare(record, paths.prepare_record, opts.submodules_from)
