"""`buildkit report`: the provenance report from the lock and whatever records exist."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.markup import escape

from buildkit import ui
from buildkit.commands.verify import read_json_record
from buildkit.errors import InputError
from buildkit.lock import default_lock_path, read_lock, write_atomic
from buildkit.source import PrepareRecord


def report_command(
    pins_path: Path,
    lock_path: Path | None,
    record_path: Path | None,
    build_dir: Path | None,
    output: Path | None,
    fmt: str,
    results_path: Path | None,
) -> None:
    from buildkit.build import BuildRecord
    from buildkit.report import facts, read_results, render_markdown
    from buildkit.verify import VerifyRecord

    if fmt not in ("markdown", "json"):
        raise InputError(f"--format: expected markdown or json, found {fmt!r}")
    lock = read_lock(lock_path or default_lock_path(pins_path))
    build_dir = build_dir or pins_path.parent / "build"
    prepare = read_json_record(build_dir / "prepare.json", PrepareRecord)
    if record_path is not None and not record_path.exists():
        raise InputError(f"{record_path}: no such build record")
    record = read_json_record(record_path or build_dir / "record.json", BuildRecord)
    verify = read_json_record(build_dir / "verify.json", VerifyRecord)
    if verify and record and verify.image != record.image.tag:
        verify = None  # it checked another image
    results = read_results(results_path) if results_path else None
    data = facts(lock, prepare, record, verify, results, project_dir=pins_path.parent)
    text = json.dumps(data, indent=2) + "\n" if fmt == "json" else render_markdown(data)
    if output is None:
        sys.stdout.write(text)
        return
    write_atomic(output, text)
    ui.err.print(f"[green]wrote[/] {escape(str(output))}")
