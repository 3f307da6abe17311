"""`buildkit doctor`: check that this machine can build what the pins describe (engine, buildx, builder and driver,
platform, disk, credentials, and the tools export and attest need), each check with what to do."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

from buildkit.errors import CheckFailed
from buildkit.models.pins import load_pins
from buildkit.models.settings import platform_setting, settings_warning, submodules_setting, target_setting
from buildkit.options import DoctorOptions
from buildkit.stages.build.preflight import run_preflight, tool_checks
from buildkit.text import ui


def doctor_command(pins_path: Path | None, opts: DoctorOptions) -> None:
    """The machine checked for the build the pins describe: their platform and tag unless given, and the target and
    submodule setting said with where each came from (pins_path None: no pins file found)."""
    pins = load_pins(pins_path) if pins_path is not None else None
    name = str(pins_path) if pins_path is not None else "pins.yaml"
    settings = [
        platform_setting(pins, name, opts.platform),
        target_setting(pins, name),
        submodules_setting(opts.submodules, opts.submodules_from),
    ]
    tag = opts.tag or (pins.build.tag if pins is not None else "nemo-rl:latest")
    own = dict(opts.platform_builders)
    platforms = settings[0].value.split(",")
    result = run_preflight(
        opts.builder, ",".join(p for p in platforms if p not in own), opts.min_free_gb, opts.push, tag
    )
    for platform, builder in own.items():  # each on its own builder: that builder's checks, named
        theirs = run_preflight(builder, platform, opts.min_free_gb, False, tag).checks
        result.checks += [replace(c, name=f"{c.name} ({platform})") for c in theirs if c.name != "engine"]
    result.checks += tool_checks()
    if opts.json_out:
        checks = [{**asdict(c), "result": {True: "ok", False: "fail", None: "n/a"}[c.ok]} for c in result.checks]
        shown = [s._asdict() for s in settings]
        sys.stdout.write(json.dumps({"ok": not result.failed, "settings": shown, "checks": checks}, indent=2) + "\n")
    ui.print_settings(settings, settings_warning(settings))
    ui.print_checks(result.checks)
    if result.failed:
        raise CheckFailed(f"{len(result.failed)} check(s) failed", hint=result.failed[0].fix or None)
