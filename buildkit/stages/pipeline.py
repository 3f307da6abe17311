"""The pipeline, in order, and the artifact each stage reads and writes:

    resolve   pins.yaml + patch files + upstream  -> pins.lock
    prepare   pins.lock                            -> NeMo-RL tree in the cache + build/prepare.json
    render    pins.lock + build/prepare.json       -> build/Dockerfile + build/render.json
    build     Dockerfile + prepared tree           -> image + build/record.json (+ logs/, metadata.json)
    verify    image + pins.lock + prepare.json     -> build/verify.json
    report    pins.lock + the records              -> report.md / report.json

Commands ask this module for their inputs (`load_inputs`), for what is missing or stale (`status`), and run the
stages through it; every artifact is written atomically. Smoke builds keep their Dockerfile, render record and
metadata in build/smoke/ and their record in build/smoke-record.json, so a smoke build never overwrites a real one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from buildkit.errors import CheckFailed, InputError
from buildkit.world.cache import default_cache_dir, prepared_tree

# The CLI imports this module for its --help (STAGES): everything heavier is imported where it is used, and the
# small types are NamedTuples, which cost a fraction of a dataclass to create (bench/cold_start.py).
if TYPE_CHECKING:
    from collections.abc import Callable

    from buildkit.models.lock import Lock, PatchFact, WheelFact
    from buildkit.models.pins import Pins
    from buildkit.stages.build import BuildPlan, BuildRecord
    from buildkit.stages.prepare import PrepareRecord
    from buildkit.stages.render import RenderRecord
    from buildkit.stages.resolve import WheelBytes
    from buildkit.stages.resolve.download import OnProgress
    from buildkit.stages.resolve.record import ResolveRecord

    OnNote = Callable[[str], None]


class Stage(NamedTuple):
    name: str
    reads: str
    writes: str


STAGES: tuple[Stage, ...] = (
    Stage("resolve", "pins.yaml, patches, upstream", "pins.lock"),
    Stage("prepare", "pins.lock", "NeMo-RL tree (cache), build/prepare.json"),
    Stage("render", "pins.lock, prepare.json", "build/Dockerfile, build/render.json"),
    Stage("build", "Dockerfile, prepared tree", "image, build/record.json, build/logs/"),
    Stage("verify", "image, pins.lock, prepare.json", "build/verify.json"),
    Stage("report", "pins.lock, the records", "the report (markdown or JSON)"),
)


class Paths(NamedTuple):
    """Where every artifact lives; the defaults are computed here and nowhere else."""

    pins: Path
    lock: Path
    build_dir: Path
    cache_dir: Path

    @classmethod
    def of(
        cls, pins: Path, lock: Path | None = None, build_dir: Path | None = None, cache_dir: Path | None = None
    ) -> Paths:
        return cls(
            pins=pins,
            lock=lock or pins.with_name("pins.lock"),
            build_dir=build_dir or pins.parent / "build",
            cache_dir=cache_dir or default_cache_dir(),
        )

    @property
    def project_dir(self) -> Path:
        return self.pins.parent

    @property
    def resolve_record(self) -> Path:
        return self.build_dir / "resolve.json"

    @property
    def prepare_record(self) -> Path:
        return self.build_dir / "prepare.json"

    @property
    def verify_record(self) -> Path:
        return self.build_dir / "verify.json"

    @property
    def provenance_verify_record(self) -> Path:
        """`verify --provenance`'s record: a record of its own, so the in-image checks' stays beside it."""
        return self.build_dir / "provenance-verify.json"

    @property
    def logs(self) -> Path:
        return self.build_dir / "logs"

    def out_dir(self, smoke: bool) -> Path:
        return self.build_dir / "smoke" if smoke else self.build_dir

    def dockerfile(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "Dockerfile"

    def render_record(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "render.json"

    def metadata(self, smoke: bool) -> Path:
        return self.out_dir(smoke) / "metadata.json"

    def repro_dir(self, smoke: bool) -> Path:
        """OCI layouts of a reproducibility check (kept only when the two images differ)."""
        return self.out_dir(smoke) / "repro"

    def build_record(self, smoke: bool) -> Path:
        return self.build_dir / ("smoke-record.json" if smoke else "record.json")

    def tree(self, commit: str) -> Path:
        return prepared_tree(self.cache_dir, commit)


class Inputs(NamedTuple):
    """What every stage after resolve starts from: the pins, the declared patches and a lock that agrees."""

    paths: Paths
    pins: Pins
    patches: list[PatchFact]
    lock: Lock

    @property
    def lock_sha256(self) -> str:
        from buildkit.models.lock import lock_sha256

        return lock_sha256(self.lock)


def load_pins_and_patches(paths: Paths) -> tuple[Pins, list[PatchFact]]:
    from buildkit.dockerfile.patches import patch_facts
    from buildkit.models.pins import load_pins

    pins = load_pins(paths.pins)
    return pins, patch_facts(pins, paths.project_dir)


def lock_state(paths: Paths, pins: Pins, patches: list[PatchFact]) -> tuple[Lock | None, list[str]]:
    """The lock and what makes it unusable for these pins: (None, [why]) when there is none."""
    from buildkit.models.lock import consistency_problems, read_lock

    if not paths.lock.exists():
        return None, [f"no lock at {paths.lock}"]
    lock = read_lock(paths.lock)
    return lock, consistency_problems(pins, lock, patches)


def load_inputs(paths: Paths, on_note: OnNote | None = None) -> Inputs:
    """Pins and a lock that agree with them: later stages trust only a lock that is current. `on_note` hears the
    warning for a lock whose wheel is not content-addressed.

    A version-1 or version-2 lock is stale for `resolve --check` and `build` (which resolve it again), but the
    stages that describe what was built from it (render, verify, report) still read it (version 1 as a lock whose
    wheel is not content-addressed; both with their CUDA "not checked"): its hash is the one its records and image
    labels carry."""
    from buildkit.models.lock import STALE, consistency_problems, read_lock

    pins, patches = load_pins_and_patches(paths)
    lock = read_lock(paths.lock)  # a missing or unreadable lock says so plainly
    problems = [p for p in consistency_problems(pins, lock, patches) if p not in STALE.values()]
    if problems:
        raise CheckFailed(
            f"{paths.lock} does not match the pins:" + "".join(f"\n  - {p}" for p in problems),
            hint="run `buildkit resolve`",
        )
    _warn(lock, on_note)
    return Inputs(paths, pins, patches, lock)


def _warn(lock: Lock, on_note: OnNote | None) -> None:
    from buildkit.models.lock import content_warning

    warning = content_warning(lock)
    if warning and on_note:
        on_note(warning)


def resolve(
    paths: Paths,
    pins: Pins,
    patches: list[PatchFact],
    on_note: OnNote | None = None,
    *,
    wheel_bytes: WheelBytes = "download",
    on_progress: OnProgress | None = None,
    on_record: Callable[[ResolveRecord], None] | None = None,
) -> Lock:
    """Every pin turned into a verified fact (network); the caller decides whether to write it. `on_note` hears what
    the user should know first (e.g. that a token is withheld from an API named in pins.yaml). The wheel is
    downloaded and hashed once all lookups succeeded (`on_progress` hears about it); `wheel_bytes` "cache": hashed
    only if the cache already has it; "none": not at all."""
    from buildkit.stages.resolve import Resolver

    resolver = Resolver(
        pins, cache_dir=paths.cache_dir, patches=patches, wheel_bytes=wheel_bytes, on_progress=on_progress
    )
    for note in resolver.notes:
        if on_note:
            on_note(note)
    lock = resolver.resolve()
    for note in resolver.git.notes:
        if on_note:
            on_note(note)
    if on_record and resolver.record:
        on_record(resolver.record)
    return lock


def measure_wheel(paths: Paths, wheel: WheelFact, on_progress: OnProgress | None = None) -> str:
    """The sha256 of the wheel's bytes as upstream serves them now, downloaded afresh: not from the cache, into a
    temporary file that is removed (`resolve --check --deep`)."""
    from buildkit.stages.resolve.download import measure_afresh
    from buildkit.world.http import Http

    return measure_afresh(Http(), paths.cache_dir, wheel.url, wheel.filename, wheel.size, wheel.etag, on_progress)


def write_lock(paths: Paths, lock: Lock, record: ResolveRecord | None = None, *, rewrite: bool = True) -> None:
    """The lock (unless `rewrite` is False: it is current as it is), then the resolve record beside it, which says
    when its facts were read (build/resolve.json; the lock holds no times)."""
    from buildkit.files import write_atomic
    from buildkit.stages.resolve.record import write_record

    if rewrite:
        write_atomic(paths.lock, lock.to_json())
    if record is not None:
        write_record(paths.resolve_record, record)


def ensure_lock(
    paths: Paths, on_note: OnNote | None = None, on_progress: OnProgress | None = None
) -> tuple[Inputs, bool]:
    """A current lock, resolving and writing one when it is missing or stale (a version-1 lock is); (inputs, whether
    it was written). Without on_progress, the wheel download is told through on_note in a few lines."""
    pins, patches = load_pins_and_patches(paths)
    lock, problems = lock_state(paths, pins, patches)
    if lock is not None and not problems:
        _warn(lock, on_note)
        return Inputs(paths, pins, patches, lock), False
    if on_progress is None and on_note is not None:
        on_progress = _download_notes(on_note)
    records: list[ResolveRecord] = []
    fresh = resolve(paths, pins, patches, on_note, on_progress=on_progress, on_record=records.append)
    write_lock(paths, fresh, records[0] if records else None)
    from buildkit.models.lock import cuda_warning

    if on_note and (warning := cuda_warning(fresh)):
        on_note(warning)
    return Inputs(paths, pins, patches, fresh), True


def _download_notes(on_note: OnNote) -> OnProgress:
    """The wheel download as notes: where it starts or resumes, and its hash (for callers with no progress view)."""

    held: list[str] | None = []  # until every lookup succeeded: a refusal stays one clear line

    def say(line: str) -> None:
        held.append(line) if held is not None else on_note(line)

    def note(event) -> None:
        nonlocal held
        mib = f"{event.total / 2**20:.1f} MiB" if event.total is not None else "size unknown"
        if event.kind == "resolved":
            lines, held = held or [], None
            for line in lines:
                on_note(line)
        elif event.kind == "started":
            at = f", resuming at {event.resumed_at:,} bytes" if event.resumed_at else ""
            say(f"wheel: downloading {event.filename} ({mib}) to hash it{at}")
        elif event.kind == "cached":
            say(f"wheel: reused from cache, sha256 {event.sha256}")
        elif event.kind == "finished":
            say(f"wheel: downloaded, sha256 {event.sha256}")

    return note


class StageStatus(NamedTuple):
    stage: str
    current: bool
    detail: str


def status(paths: Paths, smoke: bool = False, submodules: bool = True) -> tuple[list[StageStatus], Inputs | None]:
    """What `build` would have to (re)do before running buildx, each stage with the reason, and the inputs when the
    lock is current (`build --dry-run`); reads only files."""
    from buildkit.files import read_record
    from buildkit.models.lock import lock_sha256
    from buildkit.stages.prepare import is_prepared
    from buildkit.stages.render import RenderRecord

    pins, patches = load_pins_and_patches(paths)
    lock, problems = lock_state(paths, pins, patches)
    if lock is None or problems:
        what = f"{paths.lock} is stale ({problems[0]})" if lock is not None else problems[0]
        return [
            StageStatus("resolve", False, f"{what}: would resolve the pins and write the lock"),
            StageStatus("prepare", False, "after resolve"),
            StageStatus("render", False, "after resolve"),
        ], None
    out = [StageStatus("resolve", True, f"{paths.lock} is current")]
    tree = paths.tree(lock.nemo_rl.commit)
    if is_prepared(tree, lock, paths.project_dir, submodules):
        out.append(StageStatus("prepare", True, f"{tree} is prepared for this lock"))
    else:
        out.append(StageStatus("prepare", False, f"would fetch NeMo-RL {lock.nemo_rl.commit} into {tree}, and patch"))
    rendered = read_record(paths.render_record(smoke), RenderRecord)
    dockerfile = paths.dockerfile(smoke)
    if rendered is not None and rendered.lock_sha256 == lock_sha256(lock) and rendered.matches(dockerfile):
        out.append(StageStatus("render", True, f"{dockerfile} was rendered from this lock"))
    else:
        out.append(StageStatus("render", False, f"would render {dockerfile}"))
    return out, Inputs(paths, pins, patches, lock)


def prepare(inputs: Inputs, submodules: bool = True) -> PrepareRecord:
    """NeMo-RL at the locked commit with the declared patches; writes build/prepare.json."""
    from buildkit.files import write_atomic
    from buildkit.stages.prepare import prepare as prepare_tree

    record = prepare_tree(
        inputs.lock,
        inputs.lock_sha256,
        inputs.paths.project_dir,
        inputs.paths.cache_dir,
        inputs.pins.git_url_rewrites,
        submodules=submodules,
    )
    write_atomic(inputs.paths.prepare_record, record.to_json())
    return record


def render(
    inputs: Inputs,
    prepared: PrepareRecord,
    *,
    syntax: bool,
    smoke_base: str | None = None,
    output: Path | None = None,
    refuse_drift: bool = False,
) -> tuple[str, RenderRecord]:
    """The Dockerfile (upstream's, transformed) and its record (upstream's hash, the diff, the transformations, the
    drift), both written atomically. A transformation that cannot find its target stops the stage (exit 4).
    With refuse_drift, drift findings stop the stage before anything is written."""
    from buildkit.files import write_atomic
    from buildkit.stages.render import render_stage

    smoke = smoke_base is not None
    dockerfile = output or inputs.paths.dockerfile(smoke)
    text, record = render_stage(inputs.lock, prepared, dockerfile, syntax=syntax, smoke_base=smoke_base)
    if refuse_drift and record.drift:
        raise CheckFailed(
            f"the pins drift from upstream docker/Dockerfile at {record.nemo_rl_commit[:12]} "
            f"({len(record.drift)} finding(s)):" + "".join(f"\n  - {finding}" for finding in record.drift),
            hint="fix the pins (e.g. base_image) for this upstream; to go on anyway: `buildkit build --allow-drift` "
            "(or `buildkit render` without --strict)",
        )
    write_atomic(dockerfile, text)
    write_atomic(dockerfile.with_name("render.json"), record.to_json())
    return text, record


def check_reproducible(
    inputs: Inputs,
    plan: BuildPlan,
    record: BuildRecord,
    record_path: Path,
    *,
    rebuild_builder: str | None,
    submodules: bool,
    log_path: Path,
    on_prepared,
    on_line,
) -> BuildRecord:
    """After a build that also wrote an OCI layout: prepare a second clone in a fresh cache directory, rebuild from
    it with no cache (on `rebuild_builder` if given), compare the two images, and rewrite the build record with the
    outcome (identical or not). A rebuild that fails raises BuildFailed and leaves the record as the build wrote it."""
    from dataclasses import replace

    from buildkit.files import write_atomic
    from buildkit.stages.prepare import prepare as prepare_tree
    from buildkit.stages.reproduce import rebuild_and_compare, second_cache_dir

    with second_cache_dir() as cache:
        second = prepare_tree(
            inputs.lock,
            inputs.lock_sha256,
            inputs.paths.project_dir,
            Path(cache),
            inputs.pins.git_url_rewrites,
            submodules=submodules,
        )
        on_prepared(second)
        check = rebuild_and_compare(
            replace(plan, builder=rebuild_builder or plan.builder),
            Path(second.tree),
            inputs.paths.repro_dir(record.smoke),
            log_path,
            rebuild_builder or record.builder,
            on_line,
        )
    updated = record.model_copy(update={"reproducibility": check})
    write_atomic(record_path, updated.to_json())
    return updated


def pin_smoke_base(ref: str, platform: str) -> str:
    """The smoke build's stand-in base image, pinned by digest like the real one."""
    from buildkit.models.grammar import image_ref
    from buildkit.world.http import Http
    from buildkit.world.registry import Registry

    try:
        image_ref(ref)
    except ValueError as exc:
        raise InputError(f"--smoke-base: {exc}") from None
    return Registry(Http()).resolve(ref, platform).pinned


def latest_build(paths: Paths) -> tuple[Path, BuildRecord] | None:
    """The newest build record, real or smoke (by end time), with its path; None when nothing was built.

    verify and report both pick the record this way, so they speak of the same build."""
    from buildkit.files import read_record
    from buildkit.stages.build import BuildRecord

    found = []
    for smoke in (False, True):
        path = paths.build_record(smoke)
        record = read_record(path, BuildRecord)
        if record is not None:
            found.append((record.ended, path, record))
    if not found:
        return None
    _, path, record = max(found, key=lambda item: item[0])
    return path, record


def latest_successful_build(paths: Paths, what: str, no_build_hint: str, failed_hint: str) -> tuple[Path, BuildRecord]:
    """The newest build record (as latest_build picks it), refused unless that build made an image: the one
    choice `verify` and `export` make when no image is named. `what` says what the image was wanted for."""
    latest = latest_build(paths)
    if latest is None:
        raise InputError("no image given and no build recorded", hint=no_build_hint)
    path, record = latest
    if record.outcome != "succeeded":
        raise InputError(f"the latest build ({path}) {record.outcome}; it made no image {what}", hint=failed_hint)
    return latest
