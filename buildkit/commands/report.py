"""`buildkit report`: the provenance report from the lock and whatever records exist (for several platforms:
what differs between them, the image index, then each platform's report)."""

from __future__ import annotations

import sys
from dataclasses import replace

from buildkit.files import write_atomic
from buildkit.models.paths import Paths
from buildkit.models.results import Reported
from buildkit.options import ReportOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform
from buildkit.stages.report import several
from buildkit.text import ui


def report_command(paths: Paths, opts: ReportOptions) -> None:
    each = each_platform(paths, opts.platform, **{"--record": opts.record})
    if len(each) == 1:
        made = _report(each[0], opts)
        text = made.text
    else:
        quiet = replace(opts, output=None)  # written once, all together, below
        reports = {str(one.platform): _report(one, quiet) for one in each}
        smoke = all(r.record is not None and r.record.endswith("smoke-record.json") for r in reports.values())
        text = several(paths, {p: r.text for p, r in reports.items()}, opts.format, smoke)
        if opts.output is not None:
            write_atomic(opts.output, text)
    if opts.output is None:
        sys.stdout.write(text)
        return
    ui.err.print(f"[green]wrote[/] {ui.safe(str(opts.output))}")


def _report(paths: Paths, opts: ReportOptions) -> Reported:
    ctx = Context(paths, opts, on_note=ui.stage_note)
    pipeline.run_stage("report", ctx)
    made = ctx.made.report
    where = f" ({paths.platform})" if paths.platform else ""
    ui.err.print(f"build record{where}: {ui.safe(made.record) if made.record else 'none (nothing built yet)'}")
    return made
