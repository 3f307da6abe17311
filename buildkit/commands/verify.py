"""`buildkit verify`: run the image checks (or read the provenance) and present build/verify.json (each
platform's, for several)."""

from __future__ import annotations

import json
from pathlib import Path

from buildkit.errors import CheckFailed
from buildkit.models.paths import Paths
from buildkit.models.records.verify import VerifyRecord
from buildkit.options import VerifyOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform
from buildkit.stages.verify.sqsh import verify_sqsh
from buildkit.text import ui


def verify_command(paths: Paths, opts: VerifyOptions) -> None:
    if opts.sqsh is not None:
        return _verify_sqsh(opts.sqsh, opts.key or "", opts.json_out)
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


def _verify_sqsh(file: Path, key: str, json_out: bool) -> None:
    """A published squashfs against the evidence beside it (stages/verify/sqsh.py), offline; exit 1 when a check
    fails."""
    with ui.err.status("verifying...", spinner="dots"):
        results = verify_sqsh(file, key)
    marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for check in results:
        ui.err.print(f"{marks[check.status]}  {ui.safe(check.name)}: {ui.safe(check.reason)}")
    if json_out:
        print(json.dumps({"file": str(file), "results": [r.model_dump(mode="json") for r in results]}, indent=2))
    failed = [r.name for r in results if r.status == "fail"]
    if failed:
        raise CheckFailed(f"{len(failed)} check(s) failed on {file.name}: {', '.join(failed)}")
