"""`buildkit verify`: run the image checks (or read the provenance) and present build/verify.json (each
platform's, for several)."""

from __future__ import annotations

from buildkit.errors import CheckFailed
from buildkit.models.paths import Paths
from buildkit.models.records.verify import VerifyRecord
from buildkit.options import VerifyOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform
from buildkit.text import ui


def verify_command(paths: Paths, opts: VerifyOptions) -> None:
    each = each_platform(paths, opts.platform, **{"IMAGE": opts.image})
    records = ui.per_platform(each, lambda one: _verify(one, opts))
    failed: list[tuple[str, list[str]]] = []  # (image, the checks that failed on it)
    for record in records.values():
        names = [c.name for c in record.results if c.status == "fail"]
        if names:
            failed.append((record.image, names))
    if opts.json_out:
        ui.write_json_by_platform({p: r.model_dump(mode="json") for p, r in records.items()})
    if failed:
        count = sum(len(names) for _, names in failed)
        where = "; ".join(f"on {image}: {', '.join(names)}" for image, names in failed)
        raise CheckFailed(f"{count} check(s) failed {where}")


def _verify(paths: Paths, opts: VerifyOptions) -> VerifyRecord:
    with ui.err.status("verifying...", spinner="dots") as status:
        ctx = Context(
            paths,
            opts,
            on_note=ui.warn,
            on_say=lambda text: ui.err.print(ui.safe(text)),
            on_step=lambda text: status.update(ui.safe(text)),
        )
        pipeline.run_stage("verify", ctx)
    result, record_path = ctx.made.verify
    marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for check in result.results:
        ui.err.print(f"{marks[check.status]}  {ui.safe(check.name)}: {ui.safe(check.reason)}")
    ui.err.print(f"record: {ui.safe(str(record_path))}")
    return result
