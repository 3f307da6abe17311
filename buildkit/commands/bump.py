"""`buildkit bump`: move the pins to newer upstream commits, check the move end to end, and summarize it."""

from __future__ import annotations

import sys

from buildkit.errors import BuildWouldStop
from buildkit.models.paths import Paths
from buildkit.options import BumpOptions
from buildkit.runs.bump import BumpFailed, BumpReport, bump
from buildkit.runs.bumpsummary import markdown
from buildkit.text import ui


def bump_command(paths: Paths, opts: BumpOptions) -> None:
    request, json_out, allow_drift = opts.request, opts.json_out, opts.allow_drift
    try:
        with ui.err.status("bumping: resolve, prepare, render in staging...", spinner="dots"):
            report = bump(paths, request, on_note=ui.stage_note)
    except BumpFailed as failed:
        _present(failed.report, json_out)  # what was found before the failure
        raise failed.cause from None
    _present(report, json_out)
    ui.print_drift(report.drift or [])
    for path in report.written:
        ui.err.print(f"[green]wrote[/] {ui.safe(path)}")
    if report.outcome == "dry run":
        ui.err.print("dry run: nothing written")
    elif report.outcome == "unchanged":
        ui.err.print("[green]ok[/]: the pins already name these commits; nothing written")
    if report.build_would_stop and not allow_drift:
        done = {"bumped": "bumped", "dry run": "dry run: the bump works"}.get(report.outcome, "the pins already moved")
        raise BuildWouldStop(
            f"{done}, but `buildkit build` would stop on these pins: {report.build_would_stop[0]}",
            hint="fix base_image in pins.yaml to upstream's CUDA major, or accept it: `buildkit bump --allow-drift` "
            "(and `buildkit build --allow-drift`)",
        )


def _present(report: BumpReport, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
        return
    sys.stdout.write(ui.without_secrets(markdown(report)))
