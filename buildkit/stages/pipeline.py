"""The pipeline: the registry of stages, in order, with what each reads and writes.

Each entry names the module (buildkit/stages/<module>) that runs the stage from one `Context`
(stages/context.py): `run(ctx)` does the stage's work and leaves its result in `ctx.made[name]`; `current(ctx)`, where
the files on disk can tell that the work is already done, says so (a `StageStatus`). Every stage runs from here
(`run_stage`): `build` runs the stages marked `before_build` in order (resolve, then prepare, the GPU check and
render) and then the build stage (buildx); `build --dry-run` asks each of them `current`; `bump` runs resolve, prepare
and render with their writes held until every step succeeded; `build --check-reproducible` runs prepare again in a
fresh cache; the commands of the later stages (verify, attest, export, report) each run theirs, with the command's
options on the context (`ctx.options`, which the stage takes as the class it declares); `buildkit --help` lists the
registry. Adding a stage is one module with `run` (and `current`) and one entry here (CONTRIBUTING.md, "Adding a
stage").

The CLI imports this module for its --help (STAGES): the stage modules are imported when a stage runs, and the
context only inside the functions that need it (importing them costs several times typer's start-up,
bench/cold_start.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, NamedTuple

from buildkit.errors import InputError
from buildkit.models.paths import Paths

if TYPE_CHECKING:
    from types import ModuleType

    from buildkit.stages.context import Context, Inputs, StageStatus


class Stage(NamedTuple):
    name: str
    reads: str
    writes: str
    module: str  # buildkit.stages.<module>: run(ctx), and current(ctx) where files tell whether it is done
    before_build: bool = False  # `build` runs it before buildx


STAGES: tuple[Stage, ...] = (
    Stage("resolve", "pins.yaml, patches, upstream", "pins.lock", "resolve", True),
    Stage("prepare", "pins.lock", "NeMo-RL tree (cache), build/prepare.json", "prepare", True),
    Stage("render", "pins.lock, prepare.json", "build/Dockerfile, build/render.json", "render", True),
    Stage("build", "Dockerfile, prepared tree", "image, build/record.json, build/logs/", "build"),
    Stage("verify", "image, pins.lock, prepare.json", "build/verify.json", "verify"),
    Stage("attest", "pins.lock, the records", "build/provenance.intoto.json", "attest"),
    Stage("export", "image, build record", "build/<image>.sqsh, build/squashfs.json", "export"),
    # On stdout, as scripts read it (`--format json | jq`); it is a view of the records, not a record of its own.
    Stage("report", "pins.lock, the records", "stdout, or -o FILE (markdown or JSON)", "report"),
)


def stage(name: str) -> Stage:
    return next(s for s in STAGES if s.name == name)


def before_build() -> list[Stage]:
    """The stages `build` runs, in order, before buildx."""
    return [s for s in STAGES if s.before_build]


def module_of(entry: Stage) -> ModuleType:
    return importlib.import_module(f"buildkit.stages.{entry.module}")


def run_stage(name: str, ctx: Context) -> None:
    module_of(stage(name)).run(ctx)


def status(paths: Paths, smoke: bool = False, submodules: bool = True) -> tuple[list[StageStatus], Inputs | None]:
    """What `build` would have to (re)do before running buildx, each stage with the reason, and the inputs when the
    lock is current (`build --dry-run`); reads only files. A stage with no `current` (it leaves no file) is not
    listed; after a stale lock, every later stage waits for resolve."""
    from buildkit.stages.context import Context, StageStatus

    ctx = Context(paths, smoke=smoke, submodules=submodules)
    out: list[StageStatus] = []
    for entry in before_build():
        current = getattr(module_of(entry), "current", None)
        if current is None:
            continue
        waits = out and ctx.inputs is None
        out.append(StageStatus(entry.name, False, "after resolve") if waits else current(ctx))
    return out, ctx.inputs


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
