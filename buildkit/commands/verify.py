"""`buildkit verify`: run the image checks (or read the provenance) and present build/verify.json."""

from __future__ import annotations

import json
import sys

from buildkit.errors import CheckFailed
from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.context import Context
from buildkit.stages.verify import VerifyOptions
from buildkit.text import ui


def verify_command(paths: Paths, opts: VerifyOptions) -> None:
    with ui.err.status("verifying...", spinner="dots") as status:
        ctx = Context(
            paths, options=opts, on_note=ui.warn, on_say=lambda text: ui.err.print(ui.safe(text)),
            on_step=lambda text: status.update(ui.safe(text)),
        )  # fmt: skip
        pipeline.run_stage("verify", ctx)
    result, record_path = ctx.made["verify"]
    if opts.json_out:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for check in result.results:
        ui.err.print(f"{marks[check.status]}  {ui.safe(check.name)}: {ui.safe(check.reason)}")
    ui.err.print(f"record: {ui.safe(str(record_path))}")
    failed = [c for c in result.results if c.status == "fail"]
    if failed:
        raise CheckFailed(f"{len(failed)} check(s) failed on {result.image}: {', '.join(c.name for c in failed)}")
