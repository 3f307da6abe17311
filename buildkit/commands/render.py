"""`buildkit prepare` and `buildkit render`: the pinned, patched source tree, and the Dockerfile from the lock."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape
from rich.syntax import Syntax

from buildkit import ui
from buildkit.errors import CheckFailed, InputError
from buildkit.lock import Lock, consistency_problems, default_lock_path, lock_sha256, read_lock, write_atomic
from buildkit.patches import patch_facts, sha256_bytes
from buildkit.pins import Pins, load_pins
from buildkit.source import PrepareRecord


@dataclass
class Inputs:
    pins: Pins
    lock: Lock
    project_dir: Path
    build_dir: Path


def load_inputs(pins_path: Path, lock_path: Path | None, build_dir: Path | None) -> Inputs:
    """Pins and a lock that agree with them: later stages trust only a lock that is current."""
    pins = load_pins(pins_path)
    patches = patch_facts(pins, pins_path.parent)
    lock_path = lock_path or default_lock_path(pins_path)
    lock = read_lock(lock_path)
    problems = consistency_problems(pins, lock, patches)
    if problems:
        raise CheckFailed(
            f"{lock_path} does not match the pins:" + "".join(f"\n  - {p}" for p in problems),
            hint="run `buildkit resolve`",
        )
    return Inputs(pins, lock, pins_path.parent, build_dir or pins_path.parent / "build")


def run_prepare(inputs: Inputs, cache_dir: Path | None, submodules: bool, quiet: bool = False) -> PrepareRecord:
    from buildkit.cache import default_cache_dir
    from buildkit.source import prepare

    with ui.err.status("preparing NeMo-RL sources...", spinner="dots"):
        record = prepare(
            inputs.lock,
            lock_sha256(inputs.lock),
            inputs.project_dir,
            cache_dir or default_cache_dir(),
            inputs.pins.git_url_rewrites,
            submodules=submodules,
        )
    record_path = inputs.build_dir / "prepare.json"
    write_atomic(record_path, record.to_json())
    if not quiet:
        _print_prepare(record, record_path)
    return record


def _print_prepare(record: PrepareRecord, record_path: Path) -> None:
    if record.fetched:
        for line in record.fetched:
            ui.err.print(f"fetched {escape(line)}")
        ui.err.print(f"  {record.fetched_bytes / 2**20:.1f} MiB of git objects")
    else:
        ui.err.print(f"reused the cached tree at {escape(record.tree)} (nothing fetched)")
    if record.submodules is None:
        ui.err.print("submodules skipped (--no-submodules)")
    else:
        ui.err.print(f"{len(record.submodules)} submodule(s) at the commits the tree records")
    for patch in record.patches:
        targets = ", ".join(t.path for t in patch.targets)
        ui.err.print(f"applied {escape(patch.file)} to {escape(targets)}: {escape(patch.reason)}")
    ui.err.print(
        f"[green]prepared[/] {escape(record.tree)} in {record.seconds:.2f}s; record: {escape(str(record_path))}"
    )


def prepare_command(
    pins_path: Path,
    lock_path: Path | None,
    build_dir: Path | None,
    cache_dir: Path | None,
    submodules: bool,
    json_out: bool,
) -> None:
    inputs = load_inputs(pins_path, lock_path, build_dir)
    record = run_prepare(inputs, cache_dir, submodules, quiet=json_out)
    if json_out:
        sys.stdout.write(record.to_json())


def render_command(
    pins_path: Path,
    lock_path: Path | None,
    output: Path | None,
    build_dir: Path | None,
    cache_dir: Path | None,
    *,
    submodules: bool,
    diff: bool,
    strict: bool,
    syntax: bool,
    json_out: bool,
) -> None:
    from buildkit.drift import drift, shape_of
    from buildkit.render import TEMPLATE_ADDS_ARGS, render_dockerfile, unified_diff

    inputs = load_inputs(pins_path, lock_path, build_dir)
    record = run_prepare(inputs, cache_dir, submodules, quiet=json_out)
    rendered = render_dockerfile(inputs.lock, syntax=syntax)
    output = output or inputs.build_dir / "Dockerfile"

    upstream_path = Path(record.tree) / "docker" / "Dockerfile"
    try:
        upstream = upstream_path.read_text(encoding="utf-8")
    except OSError:
        raise InputError(f"upstream has no docker/Dockerfile at {record.commit}; the template expects one") from None
    dropped = {extra.name for extra in inputs.lock.build.drop_extras}
    warnings = drift(
        shape_of(upstream, "upstream docker/Dockerfile"), shape_of(rendered, str(output)), dropped, TEMPLATE_ADDS_ARGS
    )
    for warning in warnings:
        ui.err.print(f"[yellow]drift[/]: {escape(warning)}")
    if warnings and strict:
        raise CheckFailed(
            f"upstream docker/Dockerfile at {record.commit[:12]} has drifted from the template "
            f"({len(warnings)} difference(s))",
            hint="update templates/Dockerfile.j2 for the new upstream, or drop --strict to build anyway",
        )

    write_atomic(output, rendered)
    digest = sha256_bytes(rendered.encode())
    if json_out:
        summary = {
            "dockerfile": str(output.resolve()),
            "sha256": digest,
            "prepared_tree": record.tree,
            "prepare_record": str((inputs.build_dir / "prepare.json").resolve()),
            "drift": warnings,
        }
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif diff:
        text = unified_diff(upstream, rendered, "upstream docker/Dockerfile", str(output))
        if sys.stdout.isatty():
            ui.out.print(Syntax(text, "diff", theme="ansi_dark", word_wrap=True))
        else:
            sys.stdout.write(text)
    ui.err.print(f"[green]wrote[/] {escape(str(output))} (sha256 {digest[:16]}...)")
