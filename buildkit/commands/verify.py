"""`buildkit verify`: run the image checks and write build/verify.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.markup import escape

from buildkit import ui
from buildkit.errors import CheckFailed, InputError
from buildkit.lock import default_lock_path, read_lock, write_atomic
from buildkit.source import PrepareRecord


def read_json_record(path: Path, model):
    """A record written by an earlier stage, or None when that stage has not run."""
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_text())
    except ValueError as exc:
        raise InputError(f"{path}: not a valid record: {str(exc).splitlines()[0]}") from None


def verify_command(
    image: str | None, pins_path: Path, lock_path: Path | None, build_dir: Path | None, gpus: bool, json_out: bool
) -> None:
    from buildkit.build import BuildRecord
    from buildkit.verify import verify_image

    lock = read_lock(lock_path or default_lock_path(pins_path))
    build_dir = build_dir or pins_path.parent / "build"
    prepare = read_json_record(build_dir / "prepare.json", PrepareRecord)
    record = read_json_record(build_dir / "record.json", BuildRecord)
    smoke_record = read_json_record(build_dir / "smoke-record.json", BuildRecord)
    if image is None:
        # The image the latest successful build made: the real one, else the smoke one.
        built = [r for r in (record, smoke_record) if r and r.outcome == "succeeded"]
        if not built:
            raise InputError("no image given and no successful build recorded", hint="`buildkit verify IMAGE`")
        image = max(built, key=lambda r: r.ended).image.tag
    with ui.err.status(f"verifying {image}...", spinner="dots"):
        result = verify_image(image, lock, prepare, gpus=gpus)
    write_atomic(build_dir / "verify.json", result.to_json())
    if json_out:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for check in result.results:
        ui.err.print(f"{marks[check.status]}  {escape(check.name)}: {escape(check.reason)}")
    ui.err.print(f"record: {escape(str(build_dir / 'verify.json'))}")
    failed = [c for c in result.results if c.status == "fail"]
    if failed:
        raise CheckFailed(f"{len(failed)} check(s) failed on {image}: {', '.join(c.name for c in failed)}")
