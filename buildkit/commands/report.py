"""`buildkit report`: the provenance report from the lock and whatever records exist."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from buildkit.errors import InputError
from buildkit.files import check_replaceable, is_stdout, write_atomic
from buildkit.models.paths import Paths
from buildkit.text import ui


def report_command(
    paths: Paths, record_path: Path | None, output: Path | None, fmt: str, results_path: Path | None
) -> None:
    from buildkit.stages.report import gather, render_markdown

    if fmt not in ("markdown", "json"):
        raise InputError(f"--format: expected markdown or json, found {fmt!r}")
    if output is not None and not is_stdout(output):
        check_replaceable(output)
    data, used = gather(
        paths, record_path, results_path, on_note=lambda text: ui.err.print(f"[yellow]note[/]: {ui.safe(text)}")
    )
    ui.err.print(f"build record: {ui.safe(used) if used else 'none (nothing built yet)'}")
    text = json.dumps(data, indent=2) + "\n" if fmt == "json" else render_markdown(data)
    if output is None or is_stdout(output):
        sys.stdout.write(text)
        return
    write_atomic(output, text)
    ui.err.print(f"[green]wrote[/] {ui.safe(str(output))}")
