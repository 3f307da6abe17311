"""The pipeline is a registry (buildkit/stages/pipeline.py): every command that walks the stages walks STAGES, and a
new stage is one module and one entry. A lock resolved against the stand-in upstreams (conftest), or the recorded
pins of a real smoke build (tests/fixtures/report/)."""

from __future__ import annotations

import json
import shutil
import types
from typing import Any

from buildkit import cli
from buildkit.models.paths import Paths
from buildkit.stages import pipeline
from buildkit.stages.context import Context, StageStatus
from tests.support.options import build_options
from tests.support.paths import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "report"


def recorded_project(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(FIXTURES, project, ignore=shutil.ignore_patterns("expected.*", "README.md", "*.py", "__pycache__"))
    return Paths.of(project / "pins.yaml", cache_dir=tmp_path / "cache")


def test_every_stage_is_a_module_and_help_lists_them_in_order():
    names = [stage.name for stage in pipeline.STAGES.values()]
    assert names == list(pipeline.STAGES) and names[:4] == ["resolve", "prepare", "render", "build"]
    for stage in pipeline.before_build():
        assert callable(stage.load().run), f"{stage.name} runs from a context"
    shown = cli._help()
    assert [name for name in names if f"  {name:8} " in shown] == names
    assert shown.index("  resolve ") < shown.index("  prepare ") < shown.index("  report ")


def test_dry_run_status_walks_the_registry_and_a_new_stage_is_one_entry(project, upstreams, monkeypatch):
    root, run = project
    resolved = run("resolve", "--no-wheel-download")
    assert resolved.code == 0, resolved.output
    for name, value in upstreams.env().items():  # the endpoints the lock was resolved from
        monkeypatch.setenv(name, value)
    paths = Paths.of(root / "pins.yaml", cache_dir=root / "cache")
    smoke = build_options(smoke=True, submodules=False)
    todo, inputs = pipeline.status(paths, smoke)
    assert inputs is not None and [s.stage for s in todo] == ["resolve", "prepare", "render"]
    assert todo[0].current and not todo[1].current and "would fetch NeMo-RL" in todo[1].detail

    seen = []
    check: Any = types.ModuleType("buildkit.stages.fakecheck")  # a stage module made here: attributes set below
    check.current = lambda ctx: StageStatus("fakecheck", False, f"would check {ctx.lock.build.tag}")
    check.run = lambda ctx: seen.append(ctx.lock.build.tag)
    entry = pipeline.Entry("fakecheck", "pins.lock", "nothing", lambda: check, True)  # type: ignore[arg-type]
    entries = list(pipeline.STAGES.values())
    monkeypatch.setattr(pipeline, "STAGES", pipeline._entries(*entries[:2], entry, *entries[2:]))
    todo, inputs = pipeline.status(paths, smoke)
    assert [s.stage for s in todo] == ["resolve", "prepare", "fakecheck", "render"]
    assert inputs is not None
    assert todo[2].detail == f"would check {inputs.lock.build.tag}"
    assert pipeline.options_for(entry, smoke) is smoke  # a stage build holds no options of: build's own
    pipeline.run_entry(entry, Context(paths, smoke, inputs))
    assert seen == [inputs.lock.build.tag]
    assert "fakecheck" in [s.name for s in pipeline.before_build()]


def test_a_stale_lock_makes_every_later_stage_wait_for_resolve(tmp_path):
    paths = recorded_project(tmp_path)
    paths.lock.unlink()
    todo, inputs = pipeline.status(paths, build_options())
    assert inputs is None
    want = f"no lock at {paths.lock}: would resolve the pins and write the lock"
    assert todo[0] == StageStatus("resolve", False, want)
    assert [(s.stage, s.detail) for s in todo[1:]] == [("prepare", "after resolve"), ("render", "after resolve")]


def test_held_writes_wait_for_the_caller(tmp_path):
    ctx = Context(Paths.of(tmp_path / "pins.yaml"), None, hold=True)
    ctx.write(tmp_path / "a.txt", "a\n")
    assert ctx.held == [(tmp_path / "a.txt", "a\n")] and not (tmp_path / "a.txt").exists()
    ctx.hold = False
    ctx.write(tmp_path / "b.txt", "b\n")
    assert (tmp_path / "b.txt").read_text() == "b\n"


def test_every_stage_runs_from_a_context_of_its_own_options():
    """Each registry entry's module has run(ctx: Context[O]), O the stage's own options class, the one run_stage's
    overload for its name takes (so mypy holds a caller to it); build holds the options of the stages it runs."""
    import inspect
    import typing

    from buildkit import options
    from buildkit.options import BuildOptions

    overloads = {}
    for each in typing.get_overloads(pipeline.run_stage):
        hints = typing.get_type_hints(each, vars(pipeline) | vars(options) | {"Context": Context})
        (name,) = typing.get_args(hints["name"])
        overloads[name] = typing.get_args(hints["ctx"])[0]
    assert list(overloads) == list(pipeline.STAGES)
    for stage in pipeline.STAGES.values():
        module = stage.load()
        assert list(inspect.signature(module.run).parameters) == ["ctx"], f"{stage.name}: run(ctx)"
        hints = typing.get_type_hints(module.run, vars(module) | vars(options))
        assert typing.get_args(hints["ctx"]) == (overloads[stage.name],), stage.name
    for stage in pipeline.before_build():
        held = pipeline.options_for(stage, build_options())
        assert type(held) is overloads[stage.name] and not isinstance(held, BuildOptions), stage.name


def test_report_runs_from_the_registry_and_writes_where_its_options_say(tmp_path):
    from buildkit.options import ReportOptions

    paths = recorded_project(tmp_path)
    output = tmp_path / "report.md"
    notes: list[str] = []
    opts = ReportOptions.parse(record=None, output=output, fmt="markdown", results=None)
    ctx = Context(paths, opts, on_note=notes.append)
    pipeline.run_stage("report", ctx)
    made = ctx.made.report
    assert made.record == "build/smoke-record.json" and output.read_text() == made.text
    assert made.text.startswith("# ") and "sha256:8aa2e3a9bb27" in made.text
    to_stdout = Context(paths, ReportOptions.parse(record=None, output=None, fmt="json", results=None))
    pipeline.run_stage("report", to_stdout)
    recorded = json.loads(paths.build_record(True).read_text())
    assert json.loads(to_stdout.made.report.text)["image"]["digest"] == recorded["image"]["digest"]
