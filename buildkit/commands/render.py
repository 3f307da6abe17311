"""`buildkit prepare` and `buildkit render`: the pinned, patched source tree, and the Dockerfile from the lock."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from rich.syntax import Syntax

from buildkit.errors import InputError
from buildkit.files import check_replaceable, is_stdout
from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform, load_inputs
from buildkit.text import ui


def prepare_command(paths: Paths, submodules: bool, json_out: bool, submodules_from: str = "default") -> None:
    # The tree is the same for every platform of build.platforms: prepared once, recorded at the top.
    ctx = Context(paths, load_inputs(paths, on_note=ui.warn, whole=True), submodules=submodules)
    with ui.err.status("preparing NeMo-RL sources...", spinner="dots"):
        pipeline.run_stage("prepare", ctx)
    record = ctx.made.prepare
    if json_out:
        sys.stdout.write(record.to_json())
    else:
        ui.print_prepare(record, paths.prepare_record, submodules_from)


@dataclass(frozen=True)
class RenderOptions:
    """`buildkit render`'s options, checked (`parse`) before any work."""

    output: Path | None  # None: build/Dockerfile (also with `-o -`, which then streams it)
    streamed: bool  # `-o -`: written where it goes by default, and streamed to stdout
    submodules: bool
    diff: bool
    strict: bool
    syntax: bool
    json_out: bool
    submodules_from: str = "default"  # the flag or variable that set `submodules`, as messages name it

    @classmethod
    def parse(
        cls, *, output: Path | None, submodules: bool, diff: bool, strict: bool, syntax: bool, json_out: bool,
        submodules_from: str = "default",
    ) -> RenderOptions:  # fmt: skip
        streamed = is_stdout(output)
        if streamed and (json_out or diff):
            raise InputError("-o - writes the Dockerfile to standard output: it cannot go with --json or --diff")
        output = None if streamed else output
        if output is not None:
            check_replaceable(output)  # before the work: a device or FIFO is never replaced
        return cls(output, streamed, submodules, diff, strict, syntax, json_out, submodules_from)


def render_command(paths: Paths, opts: RenderOptions, platform: str | None = None) -> None:
    """The Dockerfile of each platform (build/<os>-<arch>/Dockerfile for several: each names its own wheel)."""
    each = each_platform(paths, platform, **{"--output": opts.output, "-o -": True if opts.streamed else None})
    summaries = {}
    for one in each:
        ui.platform_heading(one.platform, one.build_dir, len(each))
        summaries[one.platform] = _render(one, opts)
    if opts.json_out:
        ui.write_json_by_platform(summaries)


def _render(paths: Paths, opts: RenderOptions) -> dict:
    output, streamed, submodules, json_out = opts.output, opts.streamed, opts.submodules, opts.json_out
    syntax, strict, diff = opts.syntax, opts.strict, opts.diff
    ctx = Context(
        paths, load_inputs(paths, on_note=ui.warn), submodules=submodules, syntax=syntax, refuse_drift=strict,
        output=output,
    )  # fmt: skip
    with ui.err.status("preparing NeMo-RL sources...", spinner="dots"):
        pipeline.run_stage("prepare", ctx)
    prepared = ctx.made.prepare
    if not json_out:
        ui.print_prepare(prepared, paths.prepare_record, opts.submodules_from)
    pipeline.run_stage("render", ctx)
    text, record = ctx.made.render
    if streamed:
        sys.stdout.write(text)
    if not json_out:
        ui.print_transformations(record.transformations)
    ui.print_drift(record.drift)
    output = output or paths.dockerfile(False)
    summary = {
        "dockerfile": str(output.resolve()),
        "sha256": record.dockerfile_sha256,
        "upstream_sha256": record.upstream_sha256,
        "prepared_tree": prepared.tree,
        "prepare_record": str(paths.prepare_record.resolve()),
        "render_record": str(Paths.render_record_beside(output).resolve()),
        "drift": record.drift,
        "transformations": [t.model_dump(mode="json") for t in record.transformations],
    }
    if diff and not json_out:
        if sys.stdout.isatty():
            ui.out.print(Syntax(record.diff, "diff", theme="ansi_dark", word_wrap=True))
        else:
            sys.stdout.write(record.diff)
    ui.err.print(f"[green]wrote[/] {ui.safe(str(output))} (sha256 {record.dockerfile_sha256[:16]}...)")
    return summary
