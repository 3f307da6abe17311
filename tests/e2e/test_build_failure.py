"""A failed or stopped build on the real engine says what happened (issue 21): the step that failed, with the last
lines of its own output, even while other steps ran beside it (BuildKit then cancels them, and they report
`context canceled` too); SIGTERM and SIGHUP leave an `interrupted` record as Ctrl-C does."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from buildkit.models.plan import BuildPlan
from buildkit.models.results import Builder
from buildkit.stages.build import execute, failure_hint
from tests.support.engine import STAND_IN_BASE
from tests.support.projects import interrupt_a_slow_smoke_build, smoke_project

PARALLEL_FAILURE = f"""\
FROM {STAND_IN_BASE} AS slow
RUN echo slow-started && sleep 20 && echo slow-finished > /slow
FROM {STAND_IN_BASE} AS broken
RUN echo compiling part one && echo "unable to find user root: no matching entries in passwd file" && sleep 3 \\
    && exit 7
FROM {STAND_IN_BASE}
COPY --from=slow /slow /slow
COPY --from=broken /etc/hostname /broken
"""


def test_the_failing_step_and_its_output_win_over_the_cancelled_ones(tmp_path, engine):
    (tmp_path / "Dockerfile").write_text(PARALLEL_FAILURE)
    plan = BuildPlan(
        dockerfile=tmp_path / "Dockerfile",
        tree=tmp_path,
        target="",
        platform="linux/amd64",
        tag="parallel-fail:1",
        build_args=(),
        metadata_file=tmp_path / "metadata.json",
        source_date_epoch=0,
        builder=engine,
        provenance=False,
        export=False,
        extra=("--no-cache",),
    )
    builder = Builder(engine, "remote", "unix:///run/buildkit", "v0.34.2", "v0.38.2", "20.10")
    record_path = tmp_path / "record.json"
    seen = []
    record = execute(
        plan,
        lock_sha256="0" * 64,
        smoke=True,
        builder=builder,
        provenance_note="",
        log_path=tmp_path / "b.log",
        record_path=record_path,
        on_line=lambda line, progress: seen.append(progress),
    )
    assert record.outcome == "failed"
    assert record.failed_step is not None and record.failed_step.startswith("[broken 2/2] RUN echo compiling")
    assert "exit code: 7" in (record.error or "") and "context canceled" not in (record.error or "")
    assert record.failed_output == [
        "compiling part one",
        "unable to find user root: no matching entries in passwd file",
    ]
    # The step beside it was running when BuildKit cancelled it (so the choice mattered).
    slow = next(s for s in seen[-1].steps.values() if s.name.startswith("[slow 2/2] RUN"))
    assert slow.started and list(slow.logs) == ["slow-started"] and slow.error, (slow, record.error)
    kept = json.loads(record_path.read_text())
    assert kept["failed_step"] == record.failed_step and kept["failed_output"] == record.failed_output


def test_hints_name_the_way_on():
    log = Path("build/logs/x.log")
    syntax = failure_hint(
        "resolve image config for docker-image://docker.io/docker/dockerfile:1.19",
        "failed to resolve source metadata for docker.io/docker/dockerfile:1.19: dial tcp: lookup registry-1.docker.io"
        " on 127.0.0.53:53: server misbehaving",
        log,
    )
    assert "--no-syntax" in syntax and str(log) in syntax
    offline = failure_hint(
        "[vllm-wheel 1/1] ADD --checksum=sha256:00 https://wheels.vllm.ai/x.whl /x.whl",
        'failed to load cache key: Get "https://wheels.vllm.ai/x.whl": dial tcp: lookup wheels.vllm.ai: no such host',
        log,
    )
    assert '"No internet"' in offline and "BUILDKIT_WHEEL_INDEX" in offline
    # A RUN's own failure quoting "docker/dockerfile" in its script is not a frontend pull.
    assert "--no-syntax" not in failure_hint(
        "[base 3/9] RUN echo docker/dockerfile",
        'process "/bin/sh -c echo docker/dockerfile" did not complete successfully: exit code: 1',
        log,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_record_the_build_as_interrupted(project, remote, engine, sig):
    root, cli = smoke_project(project, remote)
    (root / "build").mkdir(exist_ok=True)
    (root / "build" / "smoke-record.json").write_text("{}")  # a previous build's record must not survive
    code, rest = interrupt_a_slow_smoke_build(root, cli.env, engine, sig)
    assert code == 130, rest
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["outcome"] == "interrupted" and record["error"] == f"interrupted ({sig.name})"
    assert f"interrupted ({sig.name})" in Path(record["log"]).read_text()
    assert f"interrupted ({sig.name})" in rest
