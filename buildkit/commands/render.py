"""`buildkit render`: prepare the sources, then the Dockerfile from the lock (each platform's, for several)."""

from __future__ import annotations

import sys

from rich.syntax import Syntax

from buildkit.models.paths import Paths
from buildkit.options import RenderCommandOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, each_platform, load_inputs
from buildkit.text import ui


def render_command(paths: Paths, opts: RenderCommandOptions) -> None:
    """The Dockerfile of each platform (build/<os>-<arch>/Dockerfile for several: each names its own wheel)."""
    given = {"--output": opts.render.output, "-o -": True if opts.streamed else None}
    each = each_platform(paths, opts.platform, **given)
    summaries = ui.per_platform(each, lambda one: _render(one, opts))
    if opts.json_out:
        ui.write_json_by_platform(summaries)


def _render(paths: Paths, opts: RenderCommandOptions) -> dict:
    output, streamed, json_out, diff = opts.render.output, opts.streamed, opts.json_out, opts.diff
    ctx = Context(paths, opts.prepare, load_inputs(paths, on_note=ui.warn))
    with ui.err.status("preparing NeMo-RL sources...", spinner="dots"):
        pipeline.run_stage("prepare", ctx)
    prepared = ctx.made.prepare
    if not json_out:
        ui.print_prepare(prepared, paths.prepare_record, opts.prepare.submodules_from)
    rendering = ctx.using(opts.render)
    pipeline.run_stage("render", rendering)
    text, record = rendering.made.render
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
