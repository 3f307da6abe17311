"""What every stage starts from: the pins and a lock that agrees with them (`Inputs`, `load_inputs`), and the
`Context` the pipeline's stages run from. Stages import this module, never the registry (pipeline.py), which imports
the stages. (The newest build record, which verify, attest, export and report start from, is
models/records/build.py's `latest_build`.)"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from buildkit.dockerfile.patches import patch_facts
from buildkit.errors import BuildkitError, CheckFailed, InputError
from buildkit.files import write_atomic
from buildkit.models.grammar import image_tag
from buildkit.models.lock import (
    STALE,
    Lock,
    PatchFact,
    consistency_problems,
    content_warning,
    lock_sha256,
    platform_lock,
    read_lock,
)
from buildkit.models.paths import Paths
from buildkit.models.pins import Pins, load_pins
from buildkit.models.records.prepare import PrepareRecord
from buildkit.models.records.verify import VerifyRecord
from buildkit.models.results import Attested, Built, Exported, Preflighted, Rendered, Reported
from buildkit.text.progress import Progress

OnNote = Callable[[str], None]
Opts = TypeVar("Opts")  # a stage's options (buildkit/options.py)
Other = TypeVar("Other")


class Inputs(NamedTuple):
    """What every stage after resolve starts from: the pins, the declared patches and a lock that agrees."""

    paths: Paths
    pins: Pins
    patches: list[PatchFact]
    lock: Lock

    @property
    def lock_sha256(self) -> str:
        return lock_sha256(self.lock)


def load_pins_and_patches(paths: Paths) -> tuple[Pins, list[PatchFact]]:
    pins = load_pins(paths.pins)
    return pins, patch_facts(pins, paths.project_dir)


def lock_state(paths: Paths, pins: Pins, patches: list[PatchFact]) -> tuple[Lock | None, list[str]]:
    """The lock and what makes it unusable for these pins: (None, [why]) when there is none."""
    if not paths.lock.exists():
        return None, [f"no lock at {paths.lock}"]
    lock = read_lock(paths.lock)
    return lock, consistency_problems(pins, lock, patches)


def load_inputs(paths: Paths, on_note: OnNote | None = None, *, whole: bool = False) -> Inputs:
    """Pins and a lock that agree with them: later stages trust only a lock that is current. `on_note` hears the
    warning for a lock whose wheel is not content-addressed.

    A version-1 or version-2 lock is stale for `resolve --check` and `build` (which resolve it again), but the
    stages that describe what was built from it (render, verify, report) still read it (version 1 as a lock whose
    wheel is not content-addressed; both with their CUDA "not checked"): its hash is the one its records and image
    labels carry.

    For one platform's paths (Paths.for_platform), that platform's inputs (platform_inputs); a lock of several
    platforms is refused with the top paths unless `whole` (what describes them all: the report's comparison)."""
    pins, patches = load_pins_and_patches(paths)
    lock = read_lock(paths.lock)  # a missing or unreadable lock says so plainly
    problems = [p for p in consistency_problems(pins, lock, patches) if p not in STALE.values()]
    if problems:
        raise not_matching(paths, problems)
    warn_content(lock, on_note)
    inputs = Inputs(paths, pins, patches, lock)
    if paths.platform is not None:
        return platform_inputs(inputs, paths.platform)
    if not whole:
        one_platform(lock)
    return inputs


def not_matching(paths: Paths, problems: list[str]) -> CheckFailed:
    """A lock that does not match the pins, each problem on a line of its own."""
    return CheckFailed(
        f"{paths.lock} does not match the pins:" + "".join(f"\n  - {p}" for p in problems),
        hint="run `buildkit resolve`",
    )


def one_platform(lock: Lock) -> None:
    """A stage given the whole of a multi-platform lock (rather than one platform's paths, `platform_paths`) is a
    caller's mistake: refused before anything is fetched or made."""
    if lock.other_platforms:
        raise InputError(
            f"the lock holds {len(lock.platforms())} platforms ({', '.join(lock.platforms())}, build.platforms): "
            "this step runs once per platform",
            hint="pass --platform with one of them",
        )


def platform_tag(tag: str, platform: str) -> str:
    """`nemo-rl:grpo` -> `nemo-rl:grpo-arm64`: each platform's image of a multi-platform build has a tag of its own
    (Docker's image store keeps one image per tag, and a Slurm user must not take one for the other); the plain tag
    names the image index a push assembles."""
    tagged = f"{tag}-{platform.rsplit('/', 1)[-1]}"
    try:
        return image_tag(tagged)
    except ValueError as exc:
        raise InputError(f"build.tag {tag!r} with the platform's suffix: {exc}") from None


def platform_inputs(inputs: Inputs, platform: str) -> Inputs:
    """One platform of a multi-platform lock as the single-platform inputs its stages run from: that platform's
    facts and pins (its GPUs, its wheel), its own build folder and image tag, and the whole lock's hash."""
    lock = inputs.lock
    if platform not in lock.platforms():
        raise InputError(
            f"--platform {platform}: the lock holds {', '.join(lock.platforms())}",
            hint="pass one of them, or add it to build.platforms and run `buildkit resolve`",
        )
    view = platform_lock(lock, platform)
    build = view.build.model_copy(update={"tag": platform_tag(view.build.tag, platform)})
    view = view.model_copy(update={"build": build})
    paths = inputs.paths if inputs.paths.platform == platform else inputs.paths.for_platform(platform)
    return Inputs(paths, inputs.pins.for_platform(platform), inputs.patches, view)


def platform_contexts(ctx: Context[Opts]) -> list[Context[Opts]]:
    """One context per platform of the lock in ctx (ctx itself for one platform): each with that platform's paths
    and inputs and a copy of what was made so far; writes held in ctx stay held there (the same list)."""
    if ctx.inputs is None or not ctx.lock.other_platforms:
        return [ctx]
    inputs = ctx.inputs
    return [
        replace(
            ctx,
            paths=ctx.paths.for_platform(p),
            inputs=platform_inputs(inputs, p),
            made=copy.copy(ctx.made),
            held=ctx.held,
        )
        for p in ctx.lock.platforms()
    ]


def each_platform(paths: Paths, only: str | None, **one_thing: object) -> list[Paths]:
    """The paths a later command (render, verify, export, attest, report) runs from, one per platform (only
    `only`'s when given). An argument that names one thing (IMAGE, --record, -o FILE; `one_thing` maps its name to
    its value) names one platform's, so with several it needs --platform."""
    each = platform_paths(paths, only)
    given = [name for name, value in one_thing.items() if value is not None]
    if len(each) > 1 and given:
        raise InputError(
            f"{given[0]} names one platform's, and {paths.lock} holds {', '.join(str(p.platform) for p in each)}",
            hint=f"pass --platform with one of them, e.g. --platform {each[-1].platform}",
        )
    return each


def platform_paths(paths: Paths, only: str | None = None) -> list[Paths]:
    """The paths each platform's stages run from: [paths] for a single-platform lock, one folder per platform for
    a lock of build.platforms (only `only`'s, when given). A lock that cannot be read is left to the stage, which
    says why."""
    try:
        lock = read_lock(paths.lock)
    except BuildkitError:
        return [paths]
    platforms = lock.platforms()
    if only is not None and only not in platforms:
        raise InputError(f"--platform {only}: {paths.lock} holds {', '.join(platforms)}", hint="pass one of them")
    if not lock.other_platforms:
        return [paths]
    return [paths.for_platform(p) for p in platforms if only in (None, p)]


def warn_content(lock: Lock, on_note: OnNote | None) -> None:
    """Tell `on_note` when the lock's wheel is not content-addressed."""
    warning = content_warning(lock)
    if warning and on_note:
        on_note(warning)


class Watch(Protocol):
    """How the CLI shows a long stage's output while it runs (the build: buildx's lines and BuildKit's progress)."""

    def __enter__(self) -> Watch: ...

    def __exit__(self, *exc: object) -> None: ...

    def update(self, line: str, progress: Progress) -> None: ...


class StageStatus(NamedTuple):
    """Whether a stage's outputs are current for the inputs, and why (or what it would do)."""

    stage: str
    current: bool
    detail: str


class Resolved(NamedTuple):
    """What resolve did: the inputs that are current now (None: `--offline` found no lock), whether it wrote the
    lock, and, for `buildkit resolve`, the lock it found and upstream's answer; `disagrees`: `--check`'s finding
    (where upstream no longer agrees with the lock, in words), None when it agrees."""

    inputs: Inputs | None
    written: bool = False
    old: Lock | None = None
    fresh: Lock | None = None
    disagrees: str | None = None


class Made:
    """What the stages made, each under its stage's name and type: set by the stage's `run`, read by the command that
    ran it and by the stages after it. What no stage has made yet is not there (AttributeError): reading it is a
    caller's mistake, as is running a stage before the one it needs."""

    resolve: Resolved
    preflight: Preflighted  # set by the build command, which checks the engine before the long stages
    prepare: PrepareRecord
    render: Rendered
    build: Built
    verify: tuple[VerifyRecord, Path]  # the record, and where it was written
    attest: Attested
    export: Exported  # the .sqsh, and its record and where it was written (none when a published one was kept)
    report: Reported


@dataclass
class Context(Generic[Opts]):
    """What a stage runs from: the paths and inputs, the stage's own options (`options`, one of buildkit/options.py's
    classes: `Context[PrepareOptions]` for prepare), what earlier stages made (`made`, typed by stage: `Made`), and
    the files they wrote. A stage writes through `write`: at once (each file atomically), or, with `hold` (bump, the
    reproducibility check), into `held`, which the caller writes all together or drops. A command that runs several
    stages gives each its options with `using`, which shares what was made and held.

    The stage tells the CLI what it does through `note` (a warning), `say` (a line of what it found or does), `step`
    (what a long stage does now, for a spinner), `on_progress` (a download's events) and `watch` (a view of its
    output as it comes); the CLI decides how to show it."""

    paths: Paths
    options: Opts
    inputs: Inputs | None = None
    on_note: OnNote | None = None
    on_say: OnNote | None = None
    on_step: OnNote | None = None
    on_progress: Callable[[Any], None] | None = None  # resolve's download events (stages/resolve/download.py)
    watch: Callable[[Any], Watch] | None = None  # the view of a long stage's output, given what it runs (a plan)
    hold: bool = False
    made: Made = field(default_factory=Made)
    held: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def lock(self) -> Lock:
        assert self.inputs is not None, "a stage after resolve runs with the inputs loaded"
        return self.inputs.lock

    def using(self, options: Other) -> Context[Other]:
        """This context with another stage's options: the same paths, inputs, hooks, made and held."""
        return replace(self, options=options)  # type: ignore[return-value,arg-type]

    def note(self, text: str) -> None:
        if self.on_note:
            self.on_note(text)

    def say(self, text: str) -> None:
        if self.on_say:
            self.on_say(text)

    def step(self, text: str) -> None:
        if self.on_step:
            self.on_step(text)

    def write(self, path: Path, text: str) -> None:
        if self.hold:
            self.held.append((path, text))
        else:
            write_atomic(path, text)
