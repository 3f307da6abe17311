"""`buildkit build` and `buildkit doctor`."""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from buildkit import __version__, ui
from buildkit.build import BuildPlan, BuildRecord, ImageFacts, argv, plan_for_lock, read_metadata, run, shell_command
from buildkit.errors import BuildkitError, CheckFailed, InputError
from buildkit.lock import consistency_problems, default_lock_path, lock_sha256, read_lock, utc_now, write_atomic
from buildkit.patches import patch_facts
from buildkit.pins import load_pins
from buildkit.progress import Progress

SMOKE_BASE = "127.0.0.1:5000/buildkit/stand-in-base:1"


class BuildFailed(BuildkitError):
    exit_code = 6


@dataclass
class BuildOptions:
    builder: str | None
    push: bool
    sbom: bool
    cache_from: list[str]
    cache_to: list[str]
    progress: str  # "auto" | "live" | "plain"
    dry_run: bool
    smoke: bool
    smoke_base: str
    min_free_gb: float | None
    submodules: bool
    syntax: bool
    extra: list[str]


def doctor_command(builder: str | None, min_free_gb: float, push: bool, tag: str, platform: str) -> None:
    from buildkit.preflight import run_preflight

    result = run_preflight(builder, platform, min_free_gb, push, tag)
    _print_checks(result.checks)
    if result.failed:
        raise CheckFailed(f"{len(result.failed)} check(s) failed", hint=result.failed[0].fix or None)


def _print_checks(checks) -> None:
    table = Table(show_header=True, title="preflight", title_justify="left")
    for column in ("check", "result", "detail", "what to do"):
        table.add_column(column, overflow="fold")
    marks = {True: "[green]ok[/]", False: "[red]FAIL[/]", None: "[yellow]n/a[/]"}
    for check in checks:
        table.add_row(escape(check.name), marks[check.ok], escape(check.detail), escape(check.fix))
    ui.err.print(table)


def build_command(
    pins_path: Path, lock_path: Path | None, build_dir: Path | None, cache_dir: Path | None, opts: BuildOptions
) -> None:
    from buildkit.buildx import validate_builder_name
    from buildkit.cache import default_cache_dir, prepared_tree
    from buildkit.render import render_dockerfile

    if opts.builder:
        validate_builder_name(opts.builder)
    pins = load_pins(pins_path)
    patches = patch_facts(pins, pins_path.parent)
    lock_path = lock_path or default_lock_path(pins_path)
    build_dir = build_dir or pins_path.parent / "build"
    cache_dir = cache_dir or default_cache_dir()
    plan_lines: list[str] = []

    # 1. The lock: resolve when it is missing or stale.
    lock = None
    if lock_path.exists():
        lock = read_lock(lock_path)
        problems = consistency_problems(pins, lock, patches)
        if problems:
            plan_lines.append(f"resolve: {lock_path} is stale ({problems[0]}), would write it anew")
            lock = None
        else:
            plan_lines.append(f"resolve: {lock_path} is current, nothing to do")
    else:
        plan_lines.append(f"resolve: no {lock_path}, would resolve the pins and write it")
    if lock is None:
        if opts.dry_run:
            _print_plan(plan_lines + ["the buildx command needs the locked values: run `buildkit resolve` first"])
            return
        from buildkit.resolve import Resolver

        with ui.err.status("resolving pins...", spinner="dots"):
            lock = Resolver(pins, patches=patches).resolve()
        write_atomic(lock_path, lock.to_json())
        ui.err.print(f"[green]wrote[/] {escape(str(lock_path))}")

    # 2. Sources and 3. the Dockerfile.
    tree = prepared_tree(cache_dir, lock.nemo_rl.commit)
    out_dir = build_dir / "smoke" if opts.smoke else build_dir
    dockerfile = out_dir / "Dockerfile"
    tag = lock.build.tag + "-smoke" if opts.smoke else lock.build.tag
    smoke_pinned = None
    if opts.smoke:
        smoke_pinned = _pin_smoke_base(opts.smoke_base, lock.build.platform, resolve=not opts.dry_run)
    plan_lines.append(f"prepare: NeMo-RL {lock.nemo_rl.commit} into {tree} (fetch if missing, reset, patch)")
    plan_lines.append(f"render: {dockerfile}" + (f" with the smoke target on {smoke_pinned}" if opts.smoke else ""))

    builder_info = None
    provenance, provenance_note = True, "attached (mode=max)"
    if not opts.dry_run:
        from buildkit.preflight import run_preflight

        min_free = opts.min_free_gb if opts.min_free_gb is not None else (1.0 if opts.smoke else 100.0)
        checks = run_preflight(opts.builder, lock.build.platform, min_free, opts.push, tag)
        if checks.failed:
            _print_checks(checks.checks)
            first = checks.failed[0]
            from buildkit.buildx import EngineNotReady

            raise EngineNotReady(f"preflight: {first.name}: {first.detail}", hint=first.fix or None)
        builder_info = checks.builder
        provenance, provenance_note = _provenance(builder_info, checks.engine, opts.push)
        if not provenance:
            ui.err.print(f"[yellow]note[/]: provenance attestation {escape(provenance_note)}")

    plan = plan_for_lock(
        lock,
        dockerfile.resolve(),
        tree.resolve(),
        (out_dir / "metadata.json").resolve(),
        target="smoke" if opts.smoke else None,
        tag=tag,
        builder=opts.builder,
        provenance=provenance,
        sbom=opts.sbom,
        cache_from=tuple(opts.cache_from),
        cache_to=tuple(opts.cache_to),
        push=opts.push,
        extra=tuple(opts.extra),
    )
    if opts.dry_run:
        _print_plan(plan_lines + ["build: the command below"])
        sys.stdout.write(shell_command(plan) + "\n")
        return

    from buildkit.commands.render import Inputs, run_prepare

    record = run_prepare(Inputs(pins, lock, pins_path.parent, build_dir), cache_dir, opts.submodules)
    if Path(record.tree) != tree:
        raise InputError(f"prepared tree {record.tree} is not where the plan expects it ({tree})")
    write_atomic(dockerfile, render_dockerfile(lock, syntax=opts.syntax, smoke_base=smoke_pinned))
    ui.err.print(f"[green]rendered[/] {escape(str(dockerfile))}")

    _run_and_record(plan, lock_sha256(lock), opts, builder_info, checks, build_dir, provenance_note)


def _pin_smoke_base(ref: str, platform: str, resolve: bool) -> str:
    from buildkit.grammar import image_ref

    try:
        image_ref(ref)
    except ValueError as exc:
        raise InputError(f"--smoke-base: {exc}") from None
    if not resolve:
        return ref
    from buildkit.http import Http
    from buildkit.resolve.registry import Registry

    return Registry(Http()).resolve(ref, platform).pinned


def _print_plan(lines: list[str]) -> None:
    ui.err.print("[bold]plan[/] (dry run: nothing is changed)")
    for line in lines:
        ui.err.print(f"  - {escape(line)}")


def _provenance(builder, engine, push: bool) -> tuple[bool, str]:
    """Attach a provenance attestation (mode=max) where the result can hold it; otherwise say why not."""
    if not builder.attestations:
        return False, f"not attached: the {builder.driver} driver cannot attach attestations"
    if not push and engine is not None and not engine.containerd_store():
        return False, (
            "not attached: --load into Docker's classic image store cannot hold attestations (use --push, or the "
            "containerd image store)"
        )
    return True, "attached (mode=max)"


def _run_and_record(
    plan, lock_hash, opts: BuildOptions, builder_info, checks, build_dir: Path, provenance_note: str
) -> None:
    from buildkit.engine import Engine

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log_path = (build_dir / "logs" / f"build-{stamp}{'-smoke' if opts.smoke else ''}.log").resolve()
    plan.metadata_file.unlink(missing_ok=True)  # never report a previous build's digests
    started = utc_now()
    mode = opts.progress
    if mode == "auto":
        mode = "live" if sys.stderr.isatty() else "plain"
    view = LiveView(plan) if mode == "live" else PlainView()
    ui.err.print(f"building {escape(plan.tag)} (target {escape(plan.target)}); full log: {escape(str(log_path))}")
    with view:
        result = run(plan, log_path, view.update)
    metadata = read_metadata(plan.metadata_file)
    image = ImageFacts(
        tag=plan.tag,
        digest=metadata.get("containerimage.digest"),
        config_digest=metadata.get("containerimage.config.digest"),
    )
    if result.exit_code == 0 and not plan.push:
        info = Engine().image(plan.tag)
        if info:
            image = image.model_copy(
                update={"id": info.id, "size": info.size, "layers": info.layers, "labels": info.labels}
            )
    outcome = "interrupted" if result.interrupted else ("succeeded" if result.exit_code == 0 else "failed")
    error = None
    if outcome == "failed":
        failed = result.progress.failed()
        error = (
            failed[0].error
            if failed
            else next((line for line in reversed(result.progress.plain) if "ERROR" in line), None)
        )
    record = BuildRecord(
        buildkit_version=__version__,
        lock_sha256=lock_hash,
        smoke=opts.smoke,
        host=socket.gethostname(),
        command=shell_command(plan),
        argv=argv(plan),
        source_date_epoch=plan.source_date_epoch,
        builder=builder_info.name,
        driver=builder_info.driver,
        endpoint=builder_info.endpoint,
        buildx_version=checks.buildx_version,
        buildkit_daemon_version=builder_info.buildkit_version,
        docker_version=checks.engine_version,
        provenance=provenance_note,
        metadata_provenance="buildx.build.provenance" in metadata,
        started=started,
        ended=utc_now(),
        seconds=round(result.seconds, 3),
        outcome=outcome,
        exit_code=result.exit_code,
        error=error,
        image=image,
        steps_total=result.progress.total,
        steps_cached=result.progress.cached,
        log=str(log_path),
        metadata_file=str(plan.metadata_file),
    )
    record_path = build_dir / ("smoke-record.json" if opts.smoke else "record.json")
    write_atomic(record_path, record.to_json())
    ui.err.print(f"record: {escape(str(record_path))}")
    if outcome == "interrupted":
        ui.err.print("[yellow]interrupted[/]: buildx cancelled the build; the record says so")
        raise SystemExit(130)
    if outcome == "failed":
        raise BuildFailed(
            f"the build failed ({error or f'buildx exit code {result.exit_code}'})", hint=f"full log: {log_path}"
        )
    ui.err.print(
        f"[green]built[/] {escape(plan.tag)} in {result.seconds:.1f}s: "
        f"{result.progress.cached}/{result.progress.total} steps cached; digest {escape(image.digest or '?')}"
    )


class PlainView:
    """One line per event, for CI logs: steps as they start and finish, and their output."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[bool, bool, int]] = {}

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, line: str, progress: Progress) -> None:
        if not line.startswith("{"):
            if line.strip():
                ui.err.print(escape(line.rstrip()), highlight=False)
            return
        for step in progress.steps.values():
            started, completed, logged = self.seen.get(step.digest, (False, False, 0))
            if step.started and not started:
                ui.err.print(f"=> {escape(step.name)}")
            new = step.log_count - logged
            if new > 0:
                for text in list(step.logs)[-min(new, len(step.logs)) :]:
                    ui.err.print(f"   | {escape(text)}")
            if step.completed and not completed:
                state = "ERROR " + step.error if step.error else ("CACHED" if step.cached else "DONE")
                ui.err.print(f"   {escape(state)}: {escape(step.name)}")
            self.seen[step.digest] = (bool(step.started), bool(step.completed), step.log_count)


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
            f"[bold]{escape(self.plan.tag)}[/] target {escape(self.plan.target)} - {clock} - "
            f"{p.done}/{p.total} steps done, {p.cached} cached, {len(p.running())} running"
        )
        parts: list = [head]
        for step in p.running()[:3]:
            parts.append(Text(f"> {step.name}", style="cyan", overflow="ellipsis", no_wrap=True))
            for text in list(step.logs)[-5:]:
                parts.append(Text(f"    {text}", style="dim", overflow="ellipsis", no_wrap=True))
        return Group(*parts)
