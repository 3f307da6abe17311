"""`buildkit prepare`: NeMo-RL at the locked commit, with its submodules and the declared patches, and its record."""

from __future__ import annotations

import sys

from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.context import Context, load_inputs
from buildkit.text import ui


def prepare_command(paths: Paths, submodules: bool, json_out: bool, submodules_from: str = "default") -> None:
    # The tree is the same for every platform of build.platforms: prepared once, recorded at the top.
    ctx = Context(paths, load_inputs(paths, on_note=ui.warn, whole=True), submodules=submodules)
    with ui.err.status("preparing NeMo-RL sources...", spinner="dots"):
        pipeline.run_stage("prepare", ctx)
    record = ctx.made.prepare
    if json_out:
        sys.stdout.write(record.to_json())
    else:
        ui.print_prepare(record, paths.prepare_record, submodules_from)
