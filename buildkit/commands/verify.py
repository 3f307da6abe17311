"""`buildkit verify`: run the image checks and write build/verify.json."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import typer

from buildkit.errors import CheckFailed, InputError
from buildkit.files import read_record, write_atomic
from buildkit.gpu.driver import parse_driver
from buildkit.models.paths import Paths
from buildkit.stages.build import latest_build, latest_successful_build
from buildkit.stages.context import load_inputs
from buildkit.stages.prepare import PrepareRecord
from buildkit.stages.provenance import verify_provenance
from buildkit.stages.render import RenderRecord
from buildkit.stages.slsa import pushed
from buildkit.stages.verify import verify_image
from buildkit.text import ui
from buildkit.world.cosign import check_public_key


@dataclass(frozen=True)
class VerifyOptions:
    """`buildkit verify`'s options, checked (`parse`) before any work."""

    image: str | None
    gpus: bool
    json_out: bool
    provenance: bool
    key: str | None
    drivers: tuple[str, ...]

    @classmethod
    def parse(
        cls, *, image: str | None, gpus: bool, json_out: bool, provenance: bool, key: str | None, drivers: list[str]
    ) -> VerifyOptions:
        if provenance and gpus:
            raise typer.BadParameter("not with --provenance", param_hint="--gpus")
        for value in drivers:
            try:
                parse_driver(value)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), param_hint="--driver") from None
        if provenance:
            if not key:
                raise InputError("--provenance needs --key: the public key buildkit's statement was signed with")
            check_public_key(key)  # bad input before any check: a missing or private key is not a failed check
        return cls(image, gpus, json_out, provenance, key, tuple(drivers))


def verify_command(paths: Paths, opts: VerifyOptions) -> None:
    image, gpus, json_out, provenance, key = opts.image, opts.gpus, opts.json_out, opts.provenance, opts.key
    drivers = list(opts.drivers)
    lock = load_inputs(paths, on_note=ui.warn).lock
    prepare = read_record(paths.prepare_record, PrepareRecord)
    if provenance:
        assert key is not None
        image, smoke = _pushed_image(image, paths, lock)
        with ui.err.status(f"reading the provenance of {image}...", spinner="dots"):
            result = verify_provenance(image, lock, smoke, read_record(paths.render_record(smoke), RenderRecord), key)
        _present(result, paths.provenance_verify_record, json_out)
        return
    if image is None:
        record_path, record = latest_successful_build(
            paths,
            "to verify",
            no_build_hint="`buildkit verify IMAGE`, or build first",
            failed_hint="`buildkit verify IMAGE`, or build again",
        )
        image = record.image.tag
        ui.err.print(f"image {ui.safe(image)}, from {ui.safe(str(record_path))}")
    with ui.err.status(f"verifying {image}...", spinner="dots"):
        result = verify_image(image, lock, prepare, gpus=gpus, drivers=drivers)
    _present(result, paths.verify_record, json_out)


def _pushed_image(image: str | None, paths: Paths, lock) -> tuple[str, bool]:
    """The image to read from its registry and whether it is a smoke build: the one named (a smoke build when its
    tag is the lock's smoke tag), else the newest build's, which must have been pushed."""
    if image is not None:
        return image, image.rsplit("/", 1)[-1].partition("@")[0] == lock.build.tag.rsplit("/", 1)[-1] + "-smoke"
    latest = latest_build(paths)
    if latest is None or latest[1].outcome != "succeeded" or not latest[1].image.digest:
        raise InputError("no image given and no successful build recorded", hint="`buildkit verify --provenance IMAGE`")
    record_path, record = latest
    if not pushed(record):
        raise InputError(
            f"the latest build ({record_path}) was loaded into Docker, not pushed: its provenance is in no registry",
            hint="`buildkit build --push`, then `buildkit attest --key ...`",
        )
    ui.err.print(f"image {ui.safe(record.image.tag)}, from {ui.safe(str(record_path))}")
    return record.image.tag, record.smoke


def _present(result, record_path, json_out: bool) -> None:
    write_atomic(record_path, result.to_json())
    if json_out:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    marks = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}
    for check in result.results:
        ui.err.print(f"{marks[check.status]}  {ui.safe(check.name)}: {ui.safe(check.reason)}")
    ui.err.print(f"record: {ui.safe(str(record_path))}")
    failed = [c for c in result.results if c.status == "fail"]
    if failed:
        raise CheckFailed(f"{len(failed)} check(s) failed on {result.image}: {', '.join(c.name for c in failed)}")
