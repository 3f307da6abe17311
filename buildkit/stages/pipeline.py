"""The pipeline: the registry of stages, in order, with what each reads and writes.

Each entry loads the package (buildkit/stages/<name>/) that runs the stage from one `Context` (stages/context.py): a
`Stage`, whose `run(ctx)` does the stage's work and leaves its result on the context (`ctx.made.<name>`, typed in
context.py's `Made`); a `Current` stage also has `current(ctx)`, which says whether the files on disk show its work
done (a `StageStatus`). Every stage runs from here (`run_stage`): `build` runs the stages marked `before_build` in
order (resolve, prepare, render) and then the build stage (buildx); `build --dry-run` asks each of them `current`;
`bump` runs resolve, prepare and render with their writes held until every step succeeded; `build
--check-reproducible` runs prepare again in a fresh cache (both in buildkit/runs/); the commands of the later stages
(verify, attest, export, report) each run theirs. A stage's options are its own class on the context
(`Context[PrepareOptions]`), and `run_stage` holds name and options together for mypy: a misspelled stage name or
another stage's options is a type error; `buildkit --help` lists the registry. Adding a stage is one package with
`run` (and `current`) and one entry here (CONTRIBUTING.md, "Adding a stage").

The CLI imports this module for its --help (STAGES): a stage's package is imported when the stage runs (its entry's
`load`), and the context only where a type needs it (importing them costs several times typer's start-up,
bench/cold_start.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Protocol, overload, runtime_checkable

from buildkit.models.paths import Paths

if TYPE_CHECKING:
    from buildkit.options import (
        AttestOptions,
        BuildOptions,
        ExportOptions,
        PrepareOptions,
        RenderOptions,
        ReportOptions,
        ResolveOptions,
        VerifyOptions,
    )
    from buildkit.stages.context import Context, Inputs, StageStatus


StageName = Literal["resolve", "prepare", "render", "build", "verify", "attest", "export", "report"]


class Stage(Protocol):
    """A stage's package: `run(ctx)` does the work and leaves the result on the context."""

    def run(self, ctx: Context[Any]) -> None: ...


@runtime_checkable
class Current(Stage, Protocol):
    """A stage whose files tell whether its work is done (`build --dry-run` lists it); one that leaves no file has no
    `current` and runs every time."""

    def current(self, ctx: Context[Any]) -> StageStatus: ...


class Entry(NamedTuple):
    name: StageName
    reads: str
    writes: str
    load: Callable[[], Stage]  # the stage's package, imported only when it runs (not for --help)
    before_build: bool = False  # `build` runs it before buildx


def _resolve() -> Current:
    from buildkit.stages import resolve

    return resolve


def _prepare() -> Current:
    from buildkit.stages import prepare

    return prepare


def _render() -> Current:
    from buildkit.stages import render

    return render


def _build() -> Stage:
    from buildkit.stages import build

    return build


def _verify() -> Stage:
    from buildkit.stages import verify

    return verify


def _attest() -> Stage:
    from buildkit.stages import attest

    return attest


def _export() -> Stage:
    from buildkit.stages import export

    return export


def _report() -> Stage:
    from buildkit.stages import report

    return report


def _entries(*entries: Entry) -> dict[StageName, Entry]:
    return {entry.name: entry for entry in entries}


STAGES: Final[dict[StageName, Entry]] = _entries(
    Entry("resolve", "pins.yaml, patches, upstream", "pins.lock", _resolve, True),
    Entry("prepare", "pins.lock", "NeMo-RL tree (cache), build/prepare.json", _prepare, True),
    Entry("render", "pins.lock, prepare.json", "build/Dockerfile, build/render.json", _render, True),
    Entry("build", "Dockerfile, prepared tree", "image, build/record.json, build/logs/", _build),
    Entry("verify", "image, pins.lock, prepare.json", "build/verify.json", _verify),
    Entry("attest", "pins.lock, the records", "build/provenance.intoto.json", _attest),
    Entry("export", "image, build record", "build/<image>.sqsh, build/squashfs.json", _export),
    # On stdout, as scripts read it (`--format json | jq`); it is a view of the records, not a record of its own.
    Entry("report", "pins.lock, the records", "stdout, or -o FILE (markdown or JSON)", _report),
)


def before_build() -> list[Entry]:
    """The stages `build` runs, in order, before buildx."""
    return [s for s in STAGES.values() if s.before_build]


def options_for(entry: Entry, build: BuildOptions) -> object:
    """The options `build` runs a stage before buildx with: its own, which BuildOptions holds under the stage's
    name (resolve, prepare, render)."""
    return getattr(build, entry.name, build)


# Each stage runs from a context holding its own options: any other is a type error where the stage is called.
@overload
def run_stage(name: Literal["resolve"], ctx: Context[ResolveOptions]) -> None: ...
@overload
def run_stage(name: Literal["prepare"], ctx: Context[PrepareOptions]) -> None: ...
@overload
def run_stage(name: Literal["render"], ctx: Context[RenderOptions]) -> None: ...
@overload
def run_stage(name: Literal["build"], ctx: Context[BuildOptions]) -> None: ...
@overload
def run_stage(name: Literal["verify"], ctx: Context[VerifyOptions]) -> None: ...
@overload
def run_stage(name: Literal["attest"], ctx: Context[AttestOptions]) -> None: ...
@overload
def run_stage(name: Literal["export"], ctx: Context[ExportOptions]) -> None: ...
@overload
def run_stage(name: Literal["report"], ctx: Context[ReportOptions]) -> None: ...
def run_stage(name: StageName, ctx: Context[Any]) -> None:
    run_entry(STAGES[name], ctx)


def run_entry(entry: Entry, ctx: Context[Any]) -> None:
    """A stage found by walking the registry (a caller that names none: its options are the caller's to match)."""
    entry.load().run(ctx)


def status(paths: Paths, build: BuildOptions) -> tuple[list[StageStatus], Inputs | None]:
    """What `build` would have to (re)do before running buildx, each stage with the reason, and the inputs when the
    lock is current (`build --dry-run`); reads only files. Each stage is asked with its options as `build` gives
    them (BuildOptions holds resolve's, prepare's and render's). A stage with no `current` (it leaves no file) is
    not listed; after a stale lock, every later stage waits for resolve."""
    from buildkit.stages.context import Context, StageStatus

    ctx = Context(paths, build)
    out: list[StageStatus] = []
    for entry in before_build():
        module = entry.load()
        if not isinstance(module, Current):
            continue
        waits = out and ctx.inputs is None
        own = ctx.using(options_for(entry, build))  # (resolve sets the inputs for the stages after it)
        out.append(StageStatus(entry.name, False, "after resolve") if waits else module.current(own))
        ctx.inputs = own.inputs
    return out, ctx.inputs
