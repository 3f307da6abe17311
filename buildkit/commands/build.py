"""`buildkit build`: load inputs, run the pipeline's stages, present progress and results."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.text import Text

from buildkit.errors import BuildFailed, CheckFailed, EngineNotReady, InputError, Interrupted, OptionError
from buildkit.files import write_atomic
from buildkit.models.grammar import image_ref
from buildkit.models.overlay import vllm_layers
from buildkit.models.paths import Paths
from buildkit.models.pins import Pins, load_pins
from buildkit.models.plan import BuildPlan, plan_for_lock, shell_command
from buildkit.models.rebuild import said_before_build
from buildkit.models.records.build import BuildRecord
from buildkit.models.records.index import IndexRecord, PlatformImage
from buildkit.models.results import Built, Preflighted
from buildkit.models.settings import (
    Setting,
    platform_setting,
    settings_warning,
    submodules_setting,
    target_setting,
)
from buildkit.options import BuildOptions
from buildkit.runs.reproduce import check_reproducible
from buildkit.stages import pipeline
from buildkit.stages.build import explain_failure, failure_hint, installed
from buildkit.stages.build.preflight import run_preflight, source_reachable
from buildkit.stages.context import Context, Inputs, platform_inputs, platform_paths
from buildkit.text import ui
from buildkit.text.progress import Progress
from buildkit.world import buildx
from buildkit.world.http import Http
from buildkit.world.registry import Registry


def build_command(paths: Paths, opts: BuildOptions) -> None:
    if opts.dry_run:
        _dry_run(paths, opts)
        return
    ctx = _context(paths, opts)
    run = _Run(paths, opts, ctx)
    run.resolve()  # when needed: the one lock of every platform
    assert ctx.inputs is not None
    platforms = ctx.lock.platforms()
    settings = build_settings(ctx.inputs.pins, paths, opts)
    ui.print_settings(settings, settings_warning(settings))  # the inputs loaded, nothing long yet
    engines = run.preflight(platforms)  # every platform on its builder, before the long stages
    with ui.err.status("checking that BuildKit can fetch vLLM's source (a vLLM overlay)...", spinner="dots"):
        source_reachable(ctx.lock, ctx.inputs.pins.git_url_rewrites)
    if len(platforms) == 1:
        ctx.options = own = replace(opts, builder=opts.builder_for(platforms[0]))
        _Run(paths, own, ctx).rest(engines[platforms[0]])
        return
    made = []
    for platform in platforms:
        own = replace(opts, builder=opts.builder_for(platform))
        each = _context(paths.for_platform(platform), own)
        each.inputs = platform_inputs(ctx.inputs, platform)
        ui.err.rule(ui.safe(f"{platform}: {each.lock.build.tag} in {each.paths.build_dir}"), style="dim")
        made.append(_Run(each.paths, own, each).rest(engines[platform]))
    index_record(paths, opts, ctx.inputs, engines[platforms[0]], made)


def _context(paths: Paths, opts: BuildOptions) -> Context[BuildOptions]:
    return Context(
        paths,
        opts,
        on_note=ui.stage_note,
        on_say=lambda text: ui.err.print(ui.safe(text)),
        watch=lambda plan: _view(plan, opts.view_mode),
    )


def index_record(paths: Paths, opts: BuildOptions, inputs: Inputs, engine: Preflighted, made: list[Built]) -> None:
    """After every platform built: the image index of them all under the plain tag (pushed), and the record of
    the whole (build/index.json), written whether or not there is an index."""
    plain = inputs.lock.build.tag + ("-smoke" if opts.smoke else "")
    where = paths.index_record(opts.smoke)
    images = [
        PlatformImage(
            platform=b.plan.platform,
            tag=b.plan.tag,
            digest=b.record.image.digest,
            config_digest=b.record.image.config_digest,
            record=str(paths.for_platform(b.plan.platform).build_record(opts.smoke).resolve()),
        )
        for b in made
    ]
    digest: str | None = None
    if opts.push:
        missing = [i.platform for i in images if not i.digest]
        if missing:
            raise BuildFailed(f"no pushed digest for {', '.join(missing)} in the build record: no index assembled")
        with ui.err.status(f"assembling the image index {plain}...", spinner="dots"):
            digest = buildx.create_index(
                engine.builder.name, plain, [f"{i.tag}@{i.digest}" for i in images], where.with_suffix(".metadata")
            )
        how = f"`docker buildx imagetools create` of the {len(images)} platform images, pushed as {plain}"
    else:
        how = (
            "not assembled: --load gives one image per platform, each under its own tag (an image index needs a "
            "registry: --push)"
        )
    record = IndexRecord(
        lock_sha256=inputs.lock_sha256,
        smoke=opts.smoke,
        tag=plain,
        index_digest=digest,
        index=how,
        platforms=images,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    write_atomic(where, record.to_json())
    if opts.json_out:
        sys.stdout.write(record.to_json())
    ui.err.print(f"record: {ui.safe(str(where))}")
    for image in images:
        ui.err.print(f"  {ui.safe(image.platform)}: {ui.safe(image.tag)} {ui.safe(image.digest or '?')}")
    if digest:
        ui.err.print(f"[green]index[/] {ui.safe(plain)}@{digest}")
    else:
        ui.err.print(f"[dim]note[/]: {ui.safe(how)}")


def build_settings(pins: Pins, paths: Paths, opts: BuildOptions) -> list[Setting]:
    """Platform, target and submodules as this build takes them, each with where it came from."""
    name = str(paths.pins)
    return [
        platform_setting(pins, name),
        target_setting(pins, name, opts.smoke),
        submodules_setting(opts.prepare.submodules, opts.prepare.submodules_from),
    ]


def _dry_run(paths: Paths, opts: BuildOptions) -> None:
    each = platform_paths(paths)  # one platform's paths per platform of build.platforms
    for one in each:
        todo, inputs = pipeline.status(one, opts)
        if one is each[0]:
            # Once the pins and patches have loaded: a refused input stays the only thing said.
            whole = inputs.pins if inputs and len(each) == 1 else load_pins(paths.pins)
            settings = build_settings(whole, paths, opts)
            ui.print_settings(settings, settings_warning(settings))
            ui.err.print("[bold]plan[/] (dry run: nothing is changed)")
        if one.platform:
            ui.err.print(f"[bold]{one.platform}[/] (in {ui.safe(str(one.build_dir))})")
        for stage in todo:
            detail = stage.detail + (", nothing to do" if stage.current else "")
            ui.err.print(f"  - {stage.stage}: {ui.safe(detail)}")
        if inputs is None:
            ui.err.print("  - build: the buildx command needs the locked values: run `buildkit resolve` first")
            return
        plan = plan_for_lock(inputs.lock, one, smoke=opts.smoke, **opts.plan_options(provenance=opts.attestations))
        _say_rebuild(said_before_build(one, inputs.lock, opts.smoke), indent="  - ")
        if installed.in_three(plan, vllm_layers(inputs.lock).has_overlay, opts.check_reproducible):
            ui.err.print(
                "  - build: the commands below, a pushed build with a vLLM overlay: the install's stage probed, pushed "
                "by digest unless an earlier build pushed the same, then the target FROM that image"
            )
            sys.stdout.write(shell_command(installed.probe_plan(plan)) + "\n")
            sys.stdout.write(shell_command(installed.push_plan(plan)) + "\n")
            plan = installed.final_plan(plan, installed.image_of(plan, "sha256:<the digest the push names>"))
        else:
            ui.err.print("  - build: the command below")
        sys.stdout.write(shell_command(plan) + "\n")
    if len(each) > 1:
        index = "an image index of them all under the plain tag (docker buildx imagetools create)"
        ui.err.print(
            f"then: {index}, and {paths.index_record(opts.smoke)}"
            if opts.push
            else f"then: {paths.index_record(opts.smoke)} (no index: that needs --push)"
        )


class _Run:
    """One `buildkit build`: the registry's stages before buildx, each shown as it runs, then buildx."""

    def __init__(self, paths: Paths, opts: BuildOptions, ctx: Context[BuildOptions]) -> None:
        self.paths, self.opts, self.ctx = paths, opts, ctx
        self.render = opts.render  # with the smoke build's base pinned, once the lock names the platform

    def resolve(self) -> None:
        resolving = self.ctx.using(self.opts.resolve)
        with ui.err.status("checking the lock (resolving the pins if it is missing or stale)...", spinner="dots"):
            pipeline.run_stage("resolve", resolving)
        self.ctx.inputs = resolving.inputs
        if self.ctx.made.resolve.written:
            ui.err.print(f"[green]wrote[/] {ui.safe(str(self.paths.lock))}")
        if self.opts.smoke and not self.opts.render.syntax:
            ui.err.print(
                "[dim]note[/]: smoke build without a `# syntax=` line: the builder's own frontend, no internet"
            )

    def preflight(self, platforms: list[str]) -> dict[str, Preflighted]:
        """The engine checked for every platform, each on its builder (as soon as the lock names them and the tag:
        before the long stages)."""
        unknown = [p for p, _ in self.opts.platform_builders if p not in platforms]
        if unknown:
            raise OptionError(
                f"{unknown[0]} is not a platform of this lock ({', '.join(platforms)})", param_hint="--platform-builder"
            )
        by_builder: dict[str | None, list[str]] = {}
        for platform in platforms:
            by_builder.setdefault(self.opts.builder_for(platform), []).append(platform)
        engines = {}
        for builder, theirs in by_builder.items():
            engine = self._preflight(builder, ",".join(theirs))
            engines.update(dict.fromkeys(theirs, engine))
        return engines

    def _preflight(self, builder: str | None, platforms: str) -> Preflighted:
        lock, opts = self.ctx.lock, self.opts
        tag = lock.build.tag + ("-smoke" if opts.smoke else "")
        checks = run_preflight(builder, platforms, opts.min_free, opts.push, tag, opts.emulate, opts.smoke)
        if checks.failed:
            ui.print_checks(checks.checks)
            first = checks.failed[0]
            raise EngineNotReady(f"preflight: {first.name}: {first.detail}", hint=first.fix or None)
        if opts.check_reproducible and opts.rebuild_builder:
            # The rebuild's builder is checked now, not after the first build has run.
            rebuild_checks = run_preflight(
                opts.rebuild_builder, platforms, opts.min_free, False, tag, opts.emulate, opts.smoke
            )
            if rebuild_checks.failed:
                ui.print_checks(rebuild_checks.checks)
                first = rebuild_checks.failed[0]
                raise EngineNotReady(
                    f"preflight of the rebuild builder {opts.rebuild_builder}: {first.name}: {first.detail}",
                    hint=first.fix or None,
                )
        for check in checks.checks:
            if check.name == "platform" and "emulated" in check.detail:
                ui.warn(check.detail)  # an order of magnitude slower: said before it starts
        provenance, note = checks.provenance(opts.push)
        if not opts.attestations:
            provenance, note = False, "not attached: --no-attestations (buildx's attestation entries left out)"
        if not provenance:
            ui.err.print(f"[yellow]note[/]: provenance attestation {ui.safe(note)}")
        return Preflighted(checks.builder_facts(), provenance, note)

    def rest(self, engine: Preflighted) -> Built:
        """One platform after resolve and preflight: prepare and render (work already done is left as it is),
        buildx, and the reproducibility check when asked."""
        self.ctx.made.preflight = engine
        if self.render.smoke_base:
            pinned = pin_smoke_base(self.render.smoke_base, self.ctx.lock.build.platform)
            self.render = replace(self.render, smoke_base=pinned)
        for stage in pipeline.before_build():
            if stage.name != "resolve":
                self.stage(stage)
        _say_rebuild(said_before_build(self.paths, self.ctx.lock, self.opts.smoke, self.render.smoke_base))
        built = self.build()
        if self.opts.check_reproducible:
            _check_reproducible(
                self.ctx.inputs, built.plan, built.record, self.paths, self.opts, self.opts.view_mode, built.stamp
            )
        return built

    def stage(self, stage: pipeline.Entry) -> None:
        shown = {"prepare": self._prepare, "render": self._render}
        if stage.name in shown:
            shown[stage.name]()
        else:  # a stage with nothing of its own to show, with the options build holds for it
            with ui.err.status(f"{stage.name}...", spinner="dots"):
                pipeline.run_entry(stage, self.ctx.using(pipeline.options_for(stage, self.opts)))

    def _prepare(self) -> None:
        with ui.err.status("preparing NeMo-RL sources...", spinner="dots"):
            pipeline.run_stage("prepare", self.ctx.using(self.opts.prepare))
        ui.print_prepare(self.ctx.made.prepare, self.paths.prepare_record, self.opts.prepare.submodules_from)

    def _render(self) -> None:
        pipeline.run_stage("render", self.ctx.using(self.render))
        ui.print_drift(self.ctx.made.render.record.drift)
        ui.err.print(f"[green]rendered[/] {ui.safe(str(self.paths.dockerfile(self.opts.smoke)))}")

    def build(self) -> Built:
        """The build stage (buildx, shown as opts.progress says), then what came of it."""
        pipeline.run_stage("build", self.ctx)
        built = self.ctx.made.build
        record, plan = built.record, built.plan
        ui.err.print(f"record: {ui.safe(str(self.paths.build_record(self.opts.smoke)))}")
        if self.opts.json_out:
            sys.stdout.write(record.to_json())
        _cache_notes(record)
        _stop_unless_built(record, self.ctx.lock, built.log_path)
        ui.err.print(
            f"[green]built[/] {ui.safe(plan.tag)} in {record.seconds:.1f}s: "
            f"{record.instructions_cached}/{record.instructions_total} Dockerfile steps cached; "
            f"digest {ui.safe(record.image.digest or '?')}"
        )
        return built


def _say_rebuild(lines: list[str], indent: str = "") -> None:
    """What runs again against the last build, before buildx starts (models/rebuild.py)."""
    prefix = f"{indent}rebuild: "
    for number, line in enumerate(lines):
        ui.err.print(ui.safe((prefix if number == 0 else " " * len(prefix)) + line))


def _cache_notes(record: BuildRecord) -> None:
    for problem in record.cache.problems if record.cache else []:
        if problem.startswith("importing cache manifest from ") and problem.endswith(": not found"):
            ref = problem.removeprefix("importing cache manifest from ").split(": ", 1)[0]
            ui.err.print(f"[yellow]note[/]: build cache {ui.safe(ref)} has nothing yet; this build fills it")
        else:
            ui.warn(f"build cache not used: {problem} (the build went on without it)")


def _stop_unless_built(record: BuildRecord, lock, log_path: Path) -> None:
    """An interrupted or failed build ends the command (exit 130 or 5) with the failed step and its last lines."""
    if record.outcome == "interrupted":
        raise Interrupted(f"{record.error}: buildx cancelled the build; the record says so")
    if record.outcome != "failed":
        return
    if record.failed_step:
        ui.err.print(f"[red]failed[/]: {ui.safe(record.failed_step)}")
        if record.failed_output:
            ui.err.print(f"  the last {len(record.failed_output)} line(s) of its output:")
        for text in record.failed_output:
            ui.err.print(f"  | {ui.safe(text)}")
    message, hint = explain_failure(record.error, lock) or (
        f"the build failed{' at ' + record.failed_step if record.failed_step else ''}: "
        f"{record.error or f'buildx exit code {record.exit_code}'}",
        failure_hint(record.failed_step, record.error, log_path),
    )
    raise BuildFailed(message, hint=hint)


def _check_reproducible(inputs, plan: BuildPlan, record, paths: Paths, opts: BuildOptions, mode: str, stamp: str):
    log_path = paths.build_log(stamp, opts.smoke, rebuild=True).resolve()
    ui.err.print(
        "reproducibility: rebuilding with no cache from a second clone"
        + (f" on builder {ui.safe(opts.rebuild_builder)}" if opts.rebuild_builder else "")
        + f"; full log: {ui.safe(str(log_path))}"
    )
    view = _view(plan, mode)
    status = ui.err.status("preparing a second clone of NeMo-RL in a fresh cache directory...", spinner="dots")
    status.start()

    entered = []

    def prepared(second) -> None:
        status.stop()
        view.__enter__()
        entered.append(view)

    try:
        record = check_reproducible(
            inputs,
            plan,
            record,
            paths.build_record(opts.smoke),
            rebuild_builder=opts.rebuild_builder,
            submodules=opts.prepare.submodules,
            log_path=log_path,
            on_prepared=prepared,
            on_line=view.update,
        )
    finally:
        status.stop()
        for started in entered:
            started.__exit__(None, None, None)
    check = record.reproducibility
    assert check is not None
    for line in check.summary:
        ui.err.print(f"  {ui.safe(line)}", highlight=False)
    if not check.identical:
        raise CheckFailed(
            "not reproducible: the rebuild from a clean cache differs (details in the record and the report)",
            hint=f"the two images are kept as OCI layouts in {paths.repro_dir(opts.smoke)}",
        )
    ui.err.print(
        f"[green]reproducible[/]: rebuilt from a clean cache, identical digest {ui.safe(check.manifest_digest or '?')}"
    )


def _view(plan: BuildPlan, mode: str) -> LiveView | PlainView | QuietView | RawView:
    return {"tty": LiveView, "quiet": QuietView, "rawjson": RawView}.get(mode, PlainView)(plan)


class QuietView:
    """`quiet`, as buildx: nothing while the build runs (the outcome and any error are still said after it)."""

    def __init__(self, plan: BuildPlan | None = None) -> None:
        pass

    def __enter__(self) -> QuietView:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, line: str, progress: Progress) -> None:
        pass


class RawView(QuietView):
    """`rawjson`, as buildx: BuildKit's status lines as they come, for tools that read them."""

    def update(self, line: str, progress: Progress) -> None:
        ui.err.file.write(ui.without_secrets(line if line.endswith("\n") else line + "\n"))


class PlainView:
    """One line per event, for CI logs: each step's start once and its end once (BuildKit sends a vertex again when
    it reuses it: "load build definition" starts twice), and its output."""

    def __init__(self, plan: BuildPlan | None = None) -> None:
        self.seen: dict[str, tuple[bool, bool, int]] = {}

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, line: str, progress: Progress) -> None:
        if not line.startswith("{"):
            if line.strip():
                ui.err.print(ui.safe(line.rstrip()), highlight=False)
            return
        for step in progress.steps.values():
            started, completed, logged = self.seen.get(step.digest, (False, False, 0))
            if step.started and not started:
                ui.err.print(f"=> {ui.safe(step.name)}")
            new = step.log_count - logged
            if new > 0:
                for text in list(step.logs)[-min(new, len(step.logs)) :]:
                    ui.err.print(f"   | {ui.safe(text)}")
            if step.completed and not completed:
                state = "ERROR " + step.error if step.error else ("CACHED" if step.cached else "DONE")
                ui.err.print(f"   {ui.safe(state)}: {ui.safe(step.name)}")
            # Once said, a start or an end stays said: a vertex BuildKit restarts is not announced again.
            self.seen[step.digest] = (started or bool(step.started), completed or bool(step.completed), step.log_count)


class LiveView:
    """A live rich view: counts, elapsed time, running steps and their last log lines."""

    def __init__(self, plan: BuildPlan) -> None:
        self.plan = plan
        self.started = time.monotonic()
        self.progress = Progress()
        self.live = Live(
            self._render(), console=ui.err, refresh_per_second=4, transient=False, get_renderable=self._render
        )

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def update(self, line: str, progress: Progress) -> None:
        self.progress = progress

    def _render(self) -> Group:
        p = self.progress
        elapsed = time.monotonic() - self.started
        clock = f"{int(elapsed) // 60}m{int(elapsed) % 60:02d}s"
        head = Text.from_markup(
            f"[bold]{ui.safe(self.plan.tag)}[/] target {ui.safe(self.plan.target)} - {clock} - "
            f"{p.done}/{p.total} steps done, {p.cached} cached, {len(p.running())} running"
        )
        parts: list = [head]
        for step in p.running()[:3]:
            parts.append(Text(f"> {step.name}", style="cyan", overflow="ellipsis", no_wrap=True))
            for text in list(step.logs)[-5:]:
                parts.append(Text(f"    {text}", style="dim", overflow="ellipsis", no_wrap=True))
        return Group(*parts)


def pin_smoke_base(ref: str, platform: str) -> str:
    """The smoke build's stand-in base image, pinned by digest like the real one."""
    try:
        image_ref(ref)
    except ValueError as exc:
        raise InputError(f"--smoke-base: {exc}") from None
    return Registry(Http()).resolve(ref, platform).pinned
