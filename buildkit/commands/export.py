"""`buildkit export`: the built image as an enroot squashfs for Slurm, and its record."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from buildkit.errors import InputError
from buildkit.files import is_stdout
from buildkit.models.paths import Paths
from buildkit.stages.context import load_inputs
from buildkit.stages.export import choose_source, export_squashfs, find_mksquashfs, srun_line
from buildkit.text import ui


@dataclass(frozen=True)
class ExportOptions:
    """`buildkit export`'s options, checked (`parse`) before any work."""

    image: str | None
    output: Path | None  # None: build/<image>.sqsh (also with `-o -`, which then streams it)
    streamed: bool  # `-o -`: made where it goes by default, then streamed to stdout
    json_out: bool

    @classmethod
    def parse(cls, *, image: str | None, output: Path | None, json_out: bool) -> ExportOptions:
        streamed = is_stdout(output)
        if streamed and json_out:
            raise InputError("-o - writes the squashfs to standard output: it cannot go with --json")
        return cls(image, None if streamed else output, streamed, json_out)


def export_command(paths: Paths, opts: ExportOptions) -> None:
    image, output, streamed, json_out = opts.image, opts.output, opts.streamed, opts.json_out
    tool = find_mksquashfs()  # before anything else: without it nothing can be made
    lock = load_inputs(paths, on_note=ui.warn).lock
    source = choose_source(paths, image)
    if source.record_path:
        ui.err.print(f"image {ui.safe(source.ref)}, from {ui.safe(str(source.record_path))}")
    with ui.err.status(f"exporting {ui.safe(source.ref)}...", spinner="dots") as status:
        record, where = export_squashfs(
            paths, lock, source, tool, output, on_step=lambda text: status.update(ui.safe(text))
        )
    if streamed:
        with open(record.path, "rb") as made:
            shutil.copyfileobj(made, sys.stdout.buffer, 1 << 20)
        sys.stdout.buffer.flush()
    if json_out:
        sys.stdout.write(json.dumps(record.model_dump(mode="json"), indent=2) + "\n")
    ui.err.print(f"[green]wrote[/] {ui.safe(record.path)} ({record.size / 2**20:,.1f} MiB)")
    ui.err.print(f"  sha256 {record.sha256}")
    if record.skipped_count:
        ui.err.print(f"  left out {record.skipped_count} device node(s): {ui.safe(', '.join(record.skipped))}")
    ui.err.print(f"  run it: {ui.safe(srun_line(record))}")
    ui.err.print(f"record: {ui.safe(str(where))}")
