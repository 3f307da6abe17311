"""`docker buildx build` for the image: the plan from the lock (buildkit/models/plan.py: the argv, SOURCE_DATE_EPOCH),
the run with progress and a full log, and the record, whatever the outcome. The checks before it are preflight.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from buildkit import __version__
from buildkit.errors import BuildkitError, EngineNotReady, InputError
from buildkit.files import MAX_RECORD_BYTES, read_local, read_record, utc_now, write_atomic
from buildkit.models.lock import Lock
from buildkit.models.overlay import vllm_layers
from buildkit.models.plan import BuildPlan, argv, plan_for_lock, repository, shell_command
from buildkit.models.rebuild import inputs_of
from buildkit.models.records import header
from buildkit.models.records.build import (
    BuildInputs,
    BuildRecord,
    CacheUse,
    ImageFacts,
    InstalledImage,
    LayerFact,
    StepTime,
)
from buildkit.models.results import Builder, Built
from buildkit.options import BuildOptions
from buildkit.stages.build import installed
from buildkit.stages.context import Context, one_platform
from buildkit.text.progress import Progress, Step
from buildkit.text.sanitize import strip_controls
from buildkit.world import proc
from buildkit.world.engine import Engine
from buildkit.world.http import Http
from buildkit.world.registry import Registry

# BuildKit's words when an `ADD --checksum` source has other bytes (source/http/source.go), in its two forms:
# "digest mismatch for URL: GOT (expected: WANT)" and "digest mismatch GOT: WANT".
_DIGEST_MISMATCH_RE = re.compile(
    r"digest mismatch (?:for (?P<url>\S+): )?(?P<first>sha256:[0-9a-f]{64})(?::| \(expected:) "
    r"(?P<second>sha256:[0-9a-f]{64})"
)


# BuildKit's words when the network is not there (Go's net errors, as buildkitd reports them).
_NETWORK_RE = re.compile(
    r"dial tcp|no such host|network is unreachable|i/o timeout|connection refused|TLS handshake timeout|"
    r"server misbehaving|temporary failure in name resolution",
    re.IGNORECASE,
)
SYNTAX_IMAGE = "docker/dockerfile"


def failure_hint(step: str | None, error: str | None, log_path: Path) -> str:
    """The next step for a failed build, from the failing step and BuildKit's error."""
    step, error = step or "", error or ""
    full_log = f"the full log: {log_path}"
    frontend_step = step.startswith("resolve image config for") and SYNTAX_IMAGE in step
    if frontend_step or (not step and SYNTAX_IMAGE in error and "did not complete successfully" not in error):
        return (
            "the `# syntax=` frontend image could not be pulled (Docker Hub): build with --no-syntax to use the "
            f"builder's own Dockerfile frontend; {full_log}"
        )
    if _NETWORK_RE.search(error):
        return (
            'the builder could not reach the network: "No internet" (docs/how-to/no-internet.md) says which mirrors '
            "to set "
            f"(base_image, BUILDKIT_WHEEL_INDEX, git_url_rewrites); {full_log}"
        )
    return f"the failing step's last output is above; {full_log}" if step else f"read {full_log}"


def explain_failure(error: str | None, lock: Lock) -> tuple[str, str] | None:
    """(message, hint) for failures buildkit can name better than BuildKit's last line, else None."""
    # A RUN's failure quotes its whole script, which holds text from the pins: never read it as BuildKit's words.
    if not error or "did not complete successfully" in error:
        return None
    m = _DIGEST_MISMATCH_RE.search(error)
    if not m or not lock.wheel.sha256:
        return None
    locked = f"sha256:{lock.wheel.sha256}"
    digests = {m.group("first"), m.group("second")}
    if locked not in digests:
        return None  # another checksum than the wheel's
    (got,) = digests - {locked} or {locked}
    return (
        f"the vLLM wheel changed upstream: {m.group('url') or lock.wheel.url} now has {got}, the lock expects {locked}",
        "the build stopped before using it; check with `buildkit resolve --check --deep`, and only if the new bytes "
        "are trusted run `buildkit resolve` to lock them",
    )


MAX_STEPS_KEPT = 300
LINE_LIMIT = 1 << 20  # bytes of one line of buildx's output (a step's own output can be long)


def step_times(progress: Progress) -> list[StepTime]:
    """Every step that started and ended, in order of start: its first start (a step BuildKit restarts keeps its
    first) and its last end."""
    steps = [s for s in progress.steps.values() if (s.first_started or s.started) and s.completed]
    steps.sort(key=lambda s: s.first_started or s.started or "")
    return [
        StepTime(
            name=strip_controls(s.name)[:300],
            started=s.first_started or s.started or "",
            completed=s.completed or "",
            cached=s.cached,
            error=bool(s.error),
        )
        for s in steps[:MAX_STEPS_KEPT]
    ]


def layer_facts(history: list[dict]) -> list[LayerFact]:
    out = []
    for entry in reversed(history):  # the engine lists the newest first
        size, created_by = entry.get("Size"), entry.get("CreatedBy")
        if isinstance(size, int) and isinstance(created_by, str):
            out.append(LayerFact(size=size, created_by=strip_controls(created_by)[:2000]))
    return out


@dataclass
class RunResult:
    exit_code: int
    interrupted: bool
    progress: Progress
    seconds: float
    interrupted_by: str | None = None  # "Ctrl-C", "SIGTERM", "SIGHUP"

    @property
    def outcome(self) -> Literal["succeeded", "failed", "interrupted"]:
        return "interrupted" if self.interrupted else ("succeeded" if self.exit_code == 0 else "failed")


def run_buildx(
    plan: BuildPlan, log_path: Path, on_line: Callable[[str, Progress], None], append: bool = False
) -> RunResult:
    """Run buildx, feeding every output line to the progress model, the log file (after what it holds, with
    `append`) and `on_line`.

    buildx gets its own process group, so Ctrl-C reaches us first: the runner passes SIGINT on, lets buildx cancel
    the build cleanly, and the run is reported as interrupted.
    """
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("a" if append else "w", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write the build log {log_path}: {exc.strerror or exc}") from None
    progress = Progress()
    started = time.monotonic()
    interrupted: str | None = None

    def feed(line: str) -> None:
        for part in line.replace("\r\n", "\n").replace("\r", "\n").splitlines(keepends=True):  # universal newlines
            log.write(part)
            progress.feed(part)
            on_line(part, progress)

    with log:
        log.write(f"$ {shell_command(plan)}\n")
        try:
            code = proc.stream(
                argv(plan), feed, env={**os.environ, **plan.env()}, new_session=True, line_limit=LINE_LIMIT
            ).returncode
        except proc.Interrupted as stop:
            interrupted, code = stop.reason, stop.returncode  # Ctrl-C, or the signal the CLI turned into it
            log.write(f"buildkit: interrupted ({interrupted}); buildx was asked to cancel\n")
        except proc.NotStarted as exc:
            raise EngineNotReady(
                f"the docker CLI could not be run: {exc.strerror}", hint="install Docker (Debian: docker.io)"
            ) from None
    return RunResult(code, interrupted is not None, progress, time.monotonic() - started, interrupted)


def read_metadata(path: Path) -> dict:
    try:
        data = json.loads(read_local(path, "buildx's metadata file", MAX_RECORD_BYTES))
    except (OSError, ValueError, InputError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def provenance_choice(attestations: bool, driver: str, containerd_store: bool | None, push: bool) -> tuple[bool, str]:
    """Attach a provenance attestation (mode=max) where the result can hold it; otherwise say why not."""
    if not attestations:
        return False, f"not attached: the {driver} driver cannot attach attestations"
    if not push and containerd_store is False:
        return False, (
            "not attached: --load into Docker's classic image store cannot hold attestations (use --push, or the "
            "containerd image store)"
        )
    return True, "attached (mode=max)"


def execute(
    plan: BuildPlan,
    *,
    lock_sha256: str,
    smoke: bool,
    builder: Builder,
    provenance_note: str,
    log_path: Path,
    record_path: Path,
    on_line: Callable[[str, Progress], None],
    inputs: BuildInputs | None = None,
) -> BuildRecord:
    """Run the build and write its record, whatever the outcome (succeeded, failed, interrupted); `inputs`, what the
    steps read from the lock, go into it for the next build to compare with."""
    plan.metadata_file.unlink(missing_ok=True)  # never report a previous build's digests
    started = utc_now()
    result = run_buildx(plan, log_path, on_line)
    metadata = read_metadata(plan.metadata_file)
    image = image_facts(plan, metadata, loaded=result.exit_code == 0 and not plan.push)
    record = build_record(
        plan, result, metadata, image, lock_sha256, smoke, builder, provenance_note, started, log_path
    ).model_copy(update={"inputs": inputs})
    write_atomic(record_path, record.to_json())
    return record


def execute_in_three(
    plan: BuildPlan,
    *,
    previous: BuildRecord | None,
    say: Callable[[str], None],
    log_path: Path,
    record_path: Path,
    on_line: Callable[[str, Progress], None],
    inputs: BuildInputs,
    **recorded,
) -> BuildRecord:
    """A pushed build with a vLLM overlay (installed.py): the install's stage probed, pushed by digest unless an
    earlier build pushed the same, then the target FROM it; one log, one record of every run's steps."""
    plan.metadata_file.unlink(missing_ok=True)
    started = utc_now()
    runs: list[RunResult] = []
    commands: list[str] = []

    def run(step: BuildPlan) -> tuple[RunResult, dict]:
        step.metadata_file.unlink(missing_ok=True)
        runs.append(run_buildx(step, log_path, on_line, append=bool(runs)))
        if step.installed:
            commands.append(shell_command(step))
        return runs[-1], read_metadata(step.metadata_file)

    last = installed.probe_plan(plan)
    done, metadata = run(last)
    probe_digest, image = installed.digest_of(metadata), None
    if done.outcome == "succeeded" and probe_digest:
        image = installed.reusable(plan, previous, probe_digest)
        if image:
            say(f"the vLLM install is the one {image} holds (an earlier build pushed it): not pushed again")
        else:
            last = installed.push_plan(plan)
            say(f"the vLLM install's stage is pushed by digest to {repository(plan.tag)}, once per install")
            done, metadata = run(last)
            digest = installed.digest_of(metadata)
            image = installed.image_of(plan, digest) if done.outcome == "succeeded" and digest else None
    if image:
        last = installed.final_plan(plan, image)
        done, metadata = run(last)
    record = _record_of_runs(plan, last, runs, metadata, started=started, log_path=log_path, **recorded)
    found = (
        InstalledImage(image=image, probe_digest=probe_digest, reused=not commands[1:], commands=commands)
        if image and probe_digest
        else None
    )
    record = record.model_copy(update={"inputs": inputs, "installed": found})
    write_atomic(record_path, record.to_json())
    return record


def _record_of_runs(plan: BuildPlan, last: BuildPlan, runs: list[RunResult], metadata: dict, **recorded) -> BuildRecord:
    """The record of a build in several buildx runs: the outcome, image and command of the last run, the steps and
    the time of them all. A last run that is not the final one's and succeeded named no digest to build on."""
    done = runs[-1]
    unnamed = done.outcome == "succeeded" and last.installed is not None
    result = replace(done, seconds=sum(r.seconds for r in runs), exit_code=1 if unnamed else done.exit_code)
    shown = image_facts(last, metadata, loaded=False) if last.installed is None else ImageFacts(tag=plan.tag)
    record = build_record(last, result, metadata, shown, **recorded)
    instructions: dict[str, bool] = {}  # a step any run ran is not from the cache
    for r in runs:
        for name, cached in r.progress.instructions().items():
            instructions[name] = instructions.get(name, True) and cached
    return record.model_copy(
        update={
            "error": f"buildx named no digest of the vLLM install's image in {last.metadata_file}"
            if unnamed
            else record.error,
            "steps": [s for r in runs for s in step_times(r.progress)][:MAX_STEPS_KEPT],
            "steps_total": sum(r.progress.total for r in runs),
            "steps_cached": sum(r.progress.cached for r in runs),
            "instructions_total": len(instructions),
            "instructions_cached": sum(instructions.values()),
        }
    )


def _pushed_config(plan: BuildPlan, digest: str) -> str | None:
    """The platform config of what was pushed as an index (a push with attestations: buildx then records no single
    config digest), read back by the index's own digest, so attest can hold the served image to it; None when the
    registry cannot be read now (attest then refuses and says why)."""
    try:
        return Registry(Http()).resolve(f"{plan.tag}@{digest}", plan.platform).config_digest
    except BuildkitError:
        return None


def image_facts(plan: BuildPlan, metadata: dict, loaded: bool) -> ImageFacts:
    """The image as buildx's metadata file names it and, when it was loaded, as the engine holds it."""
    image = ImageFacts(
        tag=plan.tag,
        digest=metadata.get("containerimage.digest"),
        config_digest=metadata.get("containerimage.config.digest"),
    )
    if plan.push and image.digest and image.config_digest is None:
        image = image.model_copy(update={"config_digest": _pushed_config(plan, image.digest)})
    if not loaded:
        return image
    engine = Engine()
    info = engine.image(plan.tag)
    if not info:
        return image
    return image.model_copy(
        update={
            "id": info.id,
            "size": info.size,
            "layers": info.layers,
            "labels": info.labels,
            "history": layer_facts(engine.history(info.id)),
        }
    )


def failure(result: RunResult) -> tuple[str | None, Step | None]:
    """Why the build did not succeed (None when it did), and the step whose failure stopped it."""
    if result.outcome == "interrupted":
        return f"interrupted ({result.interrupted_by or 'Ctrl-C'})", None
    if result.outcome != "failed":
        return None, None
    cause = result.progress.cause()
    error = cause.error if cause else next((line for line in reversed(result.progress.plain) if "ERROR" in line), None)
    return error, cause


def build_record(
    plan: BuildPlan,
    result: RunResult,
    metadata: dict,
    image: ImageFacts,
    lock_sha256: str,
    smoke: bool,
    builder: Builder,
    provenance_note: str,
    started: str,
    log_path: Path,
) -> BuildRecord:
    error, cause = failure(result)
    instructions = result.progress.instructions()
    return BuildRecord(
        buildkit_version=__version__,
        lock_sha256=lock_sha256,
        smoke=smoke,
        host=socket.gethostname(),
        command=shell_command(plan),
        argv=argv(plan),
        source_date_epoch=plan.source_date_epoch,
        builder=builder.name,
        driver=builder.driver,
        endpoint=builder.endpoint,
        buildx_version=builder.buildx_version,
        buildkit_daemon_version=builder.buildkit_version,
        docker_version=builder.docker_version,
        provenance=provenance_note,
        metadata_provenance="buildx.build.provenance" in metadata,
        started=started,
        ended=utc_now(),
        seconds=round(result.seconds, 3),
        outcome=result.outcome,
        exit_code=result.exit_code,
        error=error,
        failed_step=cause.name if cause else None,
        failed_output=[strip_controls(line)[:500] for line in cause.logs] if cause else [],
        steps=step_times(result.progress),
        image=image,
        steps_total=result.progress.total,
        steps_cached=result.progress.cached,
        instructions_total=len(instructions),
        instructions_cached=sum(instructions.values()),
        cache=(
            CacheUse(
                cache_from=list(plan.cache_from),
                cache_to=list(plan.cache_to),
                problems=[problem[:500] for problem in result.progress.cache_problems()],
            )
            if plan.cache_from or plan.cache_to
            else None
        ),
        compression=plan.compression,
        force_compression=plan.force_compression,
        log=str(log_path),
        metadata_file=str(plan.metadata_file),
        header=header("build", image.digest or image.id, lock_sha256, smoke, (image.config_digest, image.id)),
    )


def run(ctx: Context[BuildOptions]) -> None:
    """buildx on the rendered Dockerfile as the options say (BuildOptions), on the builder the preflight checked
    (ctx.made.preflight): the record written and `Built` in ctx.made.build. What the build will do goes to
    ctx.note and ctx.say before it starts, buildx's output to ctx.watch's view. With check_reproducible, the image
    is also written as an OCI layout, for the rebuild to compare with."""
    opts, paths, inputs = ctx.options, ctx.paths, ctx.inputs
    engine = ctx.made.preflight
    assert inputs is not None, "after resolve"
    one_platform(inputs.lock)
    plan = plan_for_lock(inputs.lock, paths, smoke=opts.smoke, **opts.plan_options(engine.provenance))
    if opts.check_reproducible:
        prepare_layouts(paths.repro_dir(opts.smoke))
        plan = replace(plan, oci_layout=first_layout(paths.repro_dir(opts.smoke)).resolve())
    note = compression_note(plan)
    if note:
        ctx.note(note)
    if inputs.lock.build.cache and opts.shared_cache:
        ctx.say(f"shared build cache: {inputs.lock.build.cache.ref}:{plan.target}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log_path = paths.build_log(stamp, opts.smoke).resolve()
    ctx.say(f"building {plan.tag} (target {plan.target}); full log: {log_path}")
    record_path = paths.build_record(opts.smoke)
    read = inputs_of(inputs.lock, ctx.made.render.record.smoke_base)  # what the steps read from the lock
    recorded: dict[str, Any] = {
        "lock_sha256": inputs.lock_sha256,
        "smoke": opts.smoke,
        "builder": engine.builder,
        "provenance_note": engine.provenance_note,
    }
    with ctx.watch(plan) if ctx.watch else nullcontext() as view:
        on_line = view.update if view else lambda line, progress: None
        if installed.in_three(plan, vllm_layers(inputs.lock).has_overlay, opts.check_reproducible):
            record = execute_in_three(
                plan, previous=_previous(record_path), say=ctx.say, log_path=log_path, record_path=record_path,
                on_line=on_line, inputs=read, **recorded,
            )  # fmt: skip
        else:
            record = execute(plan, log_path=log_path, record_path=record_path, on_line=on_line, inputs=read, **recorded)
    ctx.made.build = Built(record, plan, log_path, stamp)


def _previous(path: Path) -> BuildRecord | None:
    """The last record of this target, if it can be read (an unreadable one only means nothing is reused)."""
    try:
        return read_record(path, BuildRecord)
    except InputError:
        return None


def compression_note(plan: BuildPlan) -> str | None:
    """What the layer compression means for this build, said before it starts."""
    if plan.compression == "gzip" and not plan.force_compression:
        return None
    if not plan.push:
        return (
            f"layer compression {plan.compression} applies to pushed images (--push); the image loaded into Docker "
            "keeps gzip layers"
        )
    if plan.force_compression:
        return (
            f"--force-compression: the base image's layers are re-compressed ({plan.compression}) too; nodes that "
            "already pulled the base image pull them again"
        )
    return (
        f"{plan.compression} layers for what this build adds; the base image's layers stay as its registry has them, "
        "so nodes that pulled the base keep sharing them (--force-compression re-compresses them as well)"
    )


def first_layout(repro_dir: Path) -> Path:
    return repro_dir / "first"


def prepare_layouts(repro_dir: Path) -> None:
    """An empty build/repro/: layouts of an earlier check must not be compared with this one's. Only what a check
    leaves there is deleted; anything else is the user's, and stops the check."""
    ours = {"first", "second", "second.metadata.json"}
    try:
        if repro_dir.is_symlink() or (repro_dir.exists() and not repro_dir.is_dir()):
            raise InputError(f"{repro_dir} is not a directory buildkit made", hint="move it away, then run again")
        if repro_dir.exists():
            others = sorted(p.name for p in repro_dir.iterdir() if p.name not in ours)
            if others:
                raise InputError(
                    f"{repro_dir} holds files buildkit did not put there ({', '.join(others[:3])})",
                    hint="move them away (or pick another --build-dir), then run again",
                )
            for name in ours:
                path = repro_dir / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
        repro_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot empty {repro_dir}: {exc.strerror or exc}") from None
