"""What a build will run again, said before buildx starts (buildkit/models/rebuild.py): the lock and the build
record of the recorded smoke build (tests/fixtures/report/, made by a real resolve and a real smoke build), with one
input moved at a time as the next lock would move it."""

from __future__ import annotations

import shutil

from buildkit.models.lock import lock_sha256, read_lock
from buildkit.models.paths import Paths
from buildkit.models.rebuild import inputs_of, rebuild_plan, said_before_build
from buildkit.models.records.build import BuildRecord
from tests.support.paths import REPORT_FIXTURES

LOCK = read_lock(REPORT_FIXTURES / "pins.lock")
RECORDED = BuildRecord.model_validate_json((REPORT_FIXTURES / "build" / "smoke-record.json").read_text())
NOW = inputs_of(LOCK)
HASH = lock_sha256(LOCK)


def last(**moved) -> BuildRecord:
    """The recorded build as if it had been built from a lock whose inputs differ from this one's by `moved`."""
    return RECORDED.model_copy(update={"lock_sha256": "0" * 64, "inputs": NOW.model_copy(update=moved)})


def test_without_a_record_every_step_runs():
    assert rebuild_plan(NOW, HASH, None, "build/record.json") == [
        "no earlier build recorded in build/record.json: every step runs that BuildKit's cache does not hold"
    ]


def test_the_same_lock_reuses_every_step_the_cache_holds():
    same = rebuild_plan(NOW, HASH, RECORDED.model_copy(update={"lock_sha256": HASH}), "x")
    assert same == [f"the lock is the one the last build (succeeded, {RECORDED.ended[:19]}) used: every step "
                    "BuildKit's cache still holds is reused"]  # fmt: skip


def test_a_moved_source_names_the_install_run_and_the_pr_head():
    old_head = "1" * 40
    pr = NOW.model_copy(update={"pr": 24322, "pr_head": LOCK.vllm.commit})
    lines = rebuild_plan(pr, HASH, last(vllm_commit=old_head, pr=24322, pr_head=old_head), "x")
    assert lines[1:] == [
        f"  vLLM's source moved: 111111111111 -> {LOCK.vllm.commit[:12]} (PR #24322's head moved)",
        "  runs again: the vLLM install RUN (it clones the source) and every step after it",
    ]
    assert lines[0].startswith("against the last build (succeeded, ")


def test_the_first_moved_input_in_the_dockerfiles_order_decides():
    lines = rebuild_plan(NOW, HASH, last(vllm_commit="1" * 40, wheel_commit="2" * 40, base_image="other@sha256:0"), "x")
    assert [line.split(":")[0] for line in lines[1:]] == [
        "  the base image moved",
        "  the wheel commit moved",
        "  vLLM's source moved",
        "  runs again",
    ]
    assert lines[-1] == "  runs again: every step (the base image is the first)"
    smoke = rebuild_plan(NOW, HASH, last(cuda_arch_list="9.0 10.0"), "x", smoke=True)
    assert smoke[1:] == [
        "  build.cuda_arch_list moved: 9.0 10.0 -> 9.0",
        "  runs again: the smoke target's RUN, which reads every input through its ARGs and ENVs (no vLLM is "
        "installed)",
    ]


def test_an_older_record_is_compared_by_its_image_labels():
    """The recorded smoke record was written before buildkit kept the inputs: its image's labels name the commits."""
    assert RECORDED.inputs is None
    moved = LOCK.model_copy(update={"vllm": LOCK.vllm.model_copy(update={"commit": "3" * 40})})
    lines = rebuild_plan(inputs_of(moved), "f" * 64, RECORDED, "x")
    assert lines[1:] == [
        f"  vLLM's source moved: {LOCK.vllm.commit[:12]} -> 333333333333",
        "  runs again: the vLLM install RUN (it clones the source) and every step after it",
    ]
    pushed = RECORDED.model_copy(update={"image": RECORDED.image.model_copy(update={"labels": {}})})
    assert "which steps run again is not known here" in rebuild_plan(NOW, "f" * 64, pushed, "x")[0]


def test_a_broken_record_is_said_and_the_build_goes_on(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(REPORT_FIXTURES / "build", project / "build")
    paths = Paths.of(project / "pins.yaml")
    paths.build_record(True).write_text("{")
    (line,) = said_before_build(paths, LOCK, smoke=True)
    assert line.startswith(f"{paths.build_record(True)}: not a valid record") and line.endswith("is not known")
    assert said_before_build(paths, LOCK, smoke=False)[0].startswith("no earlier build recorded in")


def test_with_an_overlay_a_moved_head_runs_the_overlay_alone_and_a_new_merge_base_the_install():
    """An open PR's head laid over the install of its merge base (models/overlay.py): a push moves only the source;
    a force-push onto newer main moves the merge base, so the install runs again, said as the PR's."""
    head, moved_head, base = "a" * 40, "b" * 40, LOCK.vllm_wheel.commit
    now = NOW.model_copy(
        update={"pr": 31886, "pr_head": moved_head, "vllm_commit": moved_head, "vllm_install": base, "vllm_overlay": 3}
    )
    pushed = rebuild_plan(now, HASH, last(pr=31886, pr_head=head, vllm_commit=head, vllm_install=base), "x")
    assert pushed[1:] == [
        "  vLLM's source moved: aaaaaaaaaaaa -> bbbbbbbbbbbb (PR #31886's head moved)",
        "  runs again: only the vLLM overlay (3 path(s) of the source laid over the install: its fetch, copy and "
        "removals); every layer up to the vLLM install is reused",
    ]
    older_base = "9" * 40
    forced = rebuild_plan(
        now,
        HASH,
        last(pr=31886, pr_head=head, vllm_commit=head, vllm_install=older_base, wheel_commit=older_base),
        "x",
    )
    assert forced[1:] == [
        f"  the wheel commit moved: 999999999999 -> {base[:12]} (PR #31886's merge base with main moved: a rebase, "
        "or a force-push onto newer main)",
        f"  the vLLM the install RUN installs moved: 999999999999 -> {base[:12]} (PR #31886's merge base with main "
        "moved: a rebase, or a force-push onto newer main)",
        "  vLLM's source moved: aaaaaaaaaaaa -> bbbbbbbbbbbb (PR #31886's head moved)",
        "  runs again: the wheel stage, the vLLM install RUN and every step after it",
    ]
