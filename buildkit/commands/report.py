"""`buildkit report`: the provenance report from the lock and whatever records exist."""

from __future__ import annotations

import sys

from buildkit.models.choices import ReportFormat
from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.context import Context
from buildkit.stages.report import Reported, ReportOptions
from buildkit.text import ui

__all__ = ["ReportFormat", "ReportOptions", "report_command"]


def report_command(paths: Paths, opts: ReportOptions) -> None:
    ctx = Context(paths, options=opts, on_note=lambda text: ui.err.print(f"[yellow]note[/]: {ui.safe(text)}"))
    pipeline.run_stage("report", ctx)
    made: Reported = ctx.made["report"]
    ui.err.print(f"build record: {ui.safe(made.record) if made.record else 'none (nothing built yet)'}")
    if opts.output is None:
        sys.stdout.write(made.text)
        return
    ui.err.print(f"[green]wrote[/] {ui.safe(str(opts.output))}")
