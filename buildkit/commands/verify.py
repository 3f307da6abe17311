"""`buildkit verify`: run the image checks and write build/verify.json."""

from __future__ import annotations

import json
import sys

from buildkit import pipeline, ui
from buildkit.errors import CheckFailed, InputError
from buildkit.files import read_record, write_atomic
from buildkit.pipeline import Paths


def verify_command(image: str | None, paths: Paths, gpus: bool, json_out: bool) -> None:
    from buildkit.source import PrepareRecord
    from buildkit.verify import verify_image

    lock = pipeline.load_inputs(paths, on_note=ui.warn).lock
    prepare = read_record(paths.prepare_record, PrepareRecord)
    if image is None:
        latest = pipeline.latest_build(paths)
        if latest is None:
            raise InputError("no image given and no build recorded", hint="`buildkit verify IMAGE`, or build first")
        record_path, record = latest
        if record.outcome != "succeeded":
            raise InputError(
                f"the latest build ({record_path}) {record.outcome}; it made no image to verify",
                hint="`buildkit verify IMAGE`, or build again",
            )
        image = record.image.tag
        ui.err.print(f"image {ui.safe(image)}, from {ui.safe(str(record_path))}")
    with ui.err.status(f"verifying {image}...", spinner="dots"):
        result = verify_image(image, lock, prepare, gpus=gpus)
    write_atomic(paths.verify_record, result.to_json())
    if json_out:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for check in result.results:
        ui.err.print(f"{marks[check.status]}  {ui.safe(check.name)}: {ui.safe(check.reason)}")
    ui.err.print(f"record: {ui.safe(str(paths.verify_record))}")
    failed = [c for c in result.results if c.status == "fail"]
    if failed:
        raise CheckFailed(f"{len(failed)} check(s) failed on {image}: {', '.join(c.name for c in failed)}")
