"""`buildkit report`: the provenance report from the lock and whatever records exist."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from buildkit.errors import InputError
from buildkit.files import check_replaceable, is_stdout, write_atomic
from buildkit.models.paths import Paths
from buildkit.stages.report import gather, render_markdown
from buildkit.text import ui


class ReportFormat(StrEnum):
    markdown = "markdown"
    json = "json"


@dataclass(frozen=True)
class ReportOptions:
    """`buildkit report`'s options, checked (`parse`) before any work."""

    record: Path | None
    output: Path | None  # None or `-`: standard output
    format: ReportFormat
    results: Path | None

    @classmethod
    def parse(cls, *, record: Path | None, output: Path | None, fmt: str, results: Path | None) -> ReportOptions:
        if fmt not in ReportFormat.__members__:
            raise InputError(f"--format: expected markdown or json, found {fmt!r}")
        if output is not None and not is_stdout(output):
            check_replaceable(output)  # a device or FIFO is never replaced
        return cls(record, None if output is None or is_stdout(output) else output, ReportFormat(fmt), results)


def report_command(paths: Paths, opts: ReportOptions) -> None:
    data, used = gather(
        paths, opts.record, opts.results, on_note=lambda text: ui.err.print(f"[yellow]note[/]: {ui.safe(text)}")
    )
    ui.err.print(f"build record: {ui.safe(used) if used else 'none (nothing built yet)'}")
    text = json.dumps(data, indent=2) + "\n" if opts.format == "json" else render_markdown(data)
    output = opts.output
    if output is None:
        sys.stdout.write(text)
        return
    write_atomic(output, text)
    ui.err.print(f"[green]wrote[/] {ui.safe(str(output))}")
