"""`buildkit render`: prepare the sources, then the Dockerfile from the lock (each platform's, for several)."""

from __future__ import annotations

import sys

from rich.syntax import Syntax

from buildkit.models.paths import Paths
from buildkit.options import RenderOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform, load_inputs
from buildkit.text import ui


def render_command(paths: Paths, opts: RenderOptions, platform: str | None = None) -> None:
    """The Dockerfile of each platform (build/<os>-<arch>/Dockerfile for several: each names its own wheel)."""
    each = each_platform(paths, platform, **{"--output": opts.output, "-o -": True if opts.streamed else None})
    summaries = ui.per_platform(each, lambda one: _render(one, opts))
    if opts.json_out:
        ui.write_json_by_platform(summaries)


def _render(paths: Paths, opts: RenderOptions) -> dict:
    output, streamed, submodules, json_out = opts.output, opts.streamed, opts.submodules, opts.json_out
    syntax, strict, diff = opts.syntax, opts.strict, opts.diff
    ctx = Context(
        paths,
        load_inputs(paths, on_note=ui.warn),
        submodules=submodules,
        syntax=syntax,
        refuse_drift=strict,
        output=output,
    )
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
