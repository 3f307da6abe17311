"""Reproducibility: the prepared tree is a function of the commit, and (on the engine) one lock gives one image,
checked by `buildkit build --check-reproducible`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.nemo_repo import use_remote
from tests.support.projects import smoke_project
from tests.support.trees import listing


def test_prepared_tree_is_the_same_bytes_from_any_cache_dir_umask_and_history(project, remote, tmp_path):
    root, cli = use_remote(project, remote)
    first = cli("prepare", "--json")
    assert first.code == 0, first.output
    tree_a = Path(json.loads(first.stdout)["tree"])

    # A second cache directory that held another commit first, prepared later and with another umask.
    other_cache = {"BUILDKIT_CACHE_DIR": str(tmp_path / "cache-b")}
    newer = remote.new_commit("docs/later.md", "later\n", "a later commit")
    pinned = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(pinned.replace(f'"{remote.commit}"', f'"{newer}"'))
    assert cli("resolve").code == 0
    assert cli("prepare", env=other_cache).code == 0
    text = (root / "pins.yaml").read_text().replace(f'"{newer}"', f'"{remote.commit}"')
    (root / "pins.yaml").write_text(text)
    assert cli("resolve").code == 0
    old_umask = os.umask(0o002)
    try:
        second = cli("prepare", "--json", env=other_cache)
    finally:
        os.umask(old_umask)
    assert second.code == 0, second.output
    tree_b = Path(json.loads(second.stdout)["tree"])
    assert tree_a != tree_b

    a, b = listing(tree_a), listing(tree_b)
    assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())
    assert [path for path in a if a[path] != b[path]] == []
    assert not any(name.startswith((".git/logs", ".git/FETCH_HEAD")) for name in a)
    assert len([name for name in a if name.startswith(".git/objects/pack/") and name.endswith(".pack")]) == 1
    # git still sees a clean tree (but for the declared patch) and its full history at that commit.
    from tests.support.gitserver import git

    assert git("status", "--porcelain", cwd=tree_b) == "M tools/build-custom-vllm.sh"
    assert git("rev-parse", "HEAD", cwd=tree_b) == remote.commit
    git("fsck", "--no-dangling", cwd=tree_b)


def _smoke_project(project, remote):

    return smoke_project(project, remote)


def test_two_smoke_builds_from_two_clones_at_two_times_with_the_cache_pruned_give_one_digest(
    project,
    remote,
    engine,
    tmp_path,
):
    """As the issue measured it: one lock, the build cache pruned in between, a second BUILDKIT_CACHE_DIR (so a
    second clone at another path), later in time. Same image manifest and config digest."""
    import subprocess
    import time

    root, cli = _smoke_project(project, remote)
    records = []
    for n, cache in enumerate(("cache", "cache-second")):
        if n:
            subprocess.run(["docker", "buildx", "prune", "-af", "--builder", engine], check=True, capture_output=True)
            time.sleep(1.1)  # another second on the clock: nothing may depend on it
        result = cli(
            "build", "--smoke", "--progress", "plain", env={"BUILDKIT_CACHE_DIR": str(tmp_path / cache)}, timeout=600
        )
        assert result.code == 0, result.output
        records.append(json.loads((root / "build" / "smoke-record.json").read_text()))
    first, second = records
    assert first["image"]["digest"] and first["image"]["config_digest"]
    assert second["steps_cached"] < second["steps_total"] // 2, "the second build really ran (cache pruned)"
    assert (second["image"]["digest"], second["image"]["config_digest"]) == (
        first["image"]["digest"],
        first["image"]["config_digest"],
    )
    assert "rewrite-timestamp=true" in " ".join(first["argv"])


def test_check_reproducible_on_the_smoke_build(project, remote, engine):
    root, cli = _smoke_project(project, remote)
    result = cli("build", "--smoke", "--check-reproducible", "--progress", "plain", timeout=900)
    assert result.code == 0, result.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    check = record["reproducibility"]
    assert check["identical"] and check["rebuild"]["no_cache"] and check["rebuild"]["second_clone"]
    assert check["manifest_digest"].startswith("sha256:") and check["layouts_kept"] == []
    assert f"identical digest {check['manifest_digest']}" in result.stderr
    assert not any((root / "build" / "smoke" / "repro").iterdir()), "the layouts of identical images are deleted"
    report = cli("report")
    assert report.code == 0, report.output
    section = report.stdout.split("## Reproducibility", 1)[1].split("\n## ", 1)[0]
    assert "**identical**" in section and check["manifest_digest"] in section
    assert "Still unpinned: nothing. Every input of the" in report.stdout  # the verdict block says it (issue 21)


def test_check_reproducible_rebuilds_on_a_second_builder(project, remote, engine, engine_b):
    """The rebuild on another buildkitd that has nothing cached (a second machine): still one digest."""
    from tests.support.engine import empty_builder

    root, cli = _smoke_project(project, remote)
    empty_builder(engine_b)
    result = cli(
        "build", "--smoke", "--check-reproducible", "--rebuild-builder", engine_b, "--progress", "plain", timeout=900
    )
    assert result.code == 0, result.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    check = record["reproducibility"]
    assert record["builder"] == engine and check["rebuild"]["builder"] == engine_b
    assert check["identical"] and check["rebuild"]["no_cache"] and check["rebuild"]["second_clone"]
    assert check["manifest_digest"] == record["image"]["digest"] or record["image"]["digest"] is None
    assert f"on builder {engine_b}" in result.stderr and f"identical digest {check['manifest_digest']}" in result.stderr


def test_rebuild_builder_must_name_a_builder_that_exists(project, remote, engine):
    root, cli = _smoke_project(project, remote)
    result = cli("build", "--smoke", "--check-reproducible", "--rebuild-builder", "no-such-builder", timeout=600)
    assert result.code == 5, result.output  # the engine is not ready: checked before the first build runs
    assert "preflight of the rebuild builder no-such-builder" in result.stderr and "Traceback" not in result.output
    assert not (root / "build" / "smoke-record.json").exists()


def test_a_step_that_writes_the_date_is_caught_and_the_file_named(tmp_path, engine):
    """The rebuild and comparison of `--check-reproducible`, on a Dockerfile with a deliberately
    non-deterministic step."""
    from buildkit.models.plan import BuildPlan
    from buildkit.runs.reproduce import first_layout, rebuild_and_compare
    from buildkit.stages.build import prepare_layouts, run_buildx
    from tests.support.engine import STAND_IN_BASE

    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(
        # The date, and a random id: two builds within one second would otherwise write the same date.
        f"FROM {STAND_IN_BASE} AS smoke\n"
        "RUN echo steady > /steady && date > /stamp && cat /proc/sys/kernel/random/uuid >> /stamp\n"
    )
    repro = tmp_path / "repro"
    prepare_layouts(repro)
    plan = BuildPlan(
        dockerfile=context / "Dockerfile",
        tree=context,
        target="smoke",
        platform="linux/amd64",
        tag="repro:test",
        build_args=(),
        metadata_file=tmp_path / "metadata.json",
        source_date_epoch=1770316331,
        builder=engine,
        provenance=False,
        export=False,
        oci_layout=first_layout(repro),
    )
    first = run_buildx(plan, tmp_path / "first.log", lambda line, progress: None)
    assert first.exit_code == 0, (tmp_path / "first.log").read_text()[-2000:]
    check = rebuild_and_compare(plan, context, repro, tmp_path / "second.log", engine, lambda line, progress: None)
    assert not check.identical
    [stamp] = [f for f in check.comparison.files if f.path == "/stamp"]
    assert stamp.change == "changed" and "content" in stamp.fields
    assert not any(f.path == "/steady" for f in check.comparison.files)
    assert any("/stamp" in line for line in check.summary), check.summary
    assert check.layouts_kept and all(Path(p).is_dir() for p in check.layouts_kept)


def test_a_wheel_whose_bytes_changed_upstream_fails_the_build_with_both_digests(
    project,
    remote,
    upstreams,
    engine,
):
    import random

    # Bytes no earlier build can have cached under the locked sha256 (BuildKit keys the download by checksum).
    from tests.support.fake_upstreams import VLLM_SHA, WHEEL_X86

    seed = random.randrange(1, 2**31)
    wheel = upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"]
    wheel.seed = seed
    root, cli = _smoke_project(project, remote)  # resolves: downloads and hashes these bytes
    locked = json.loads((root / "pins.lock").read_text())["wheel"]["sha256"]
    assert locked == wheel.sha256()

    wheel.seed = seed + 1  # upstream replaces the bytes; size and ETag stay
    result = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert result.code == 6, result.output
    [message] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "the vLLM wheel changed upstream" in message
    assert f"now has sha256:{wheel.sha256()}" in message and f"the lock expects sha256:{locked}" in message
    assert "buildkit resolve --check --deep" in result.stderr
    assert json.loads((root / "build" / "smoke-record.json").read_text())["outcome"] == "failed"


def test_drift_stops_the_build_unless_allowed(project, remote, engine):
    from tests.support.nemo_repo import SHAPE

    later = SHAPE.read_text().replace("25.05-cuda12.9-devel", "26.05-cuda13.2-devel")
    moved = remote.new_commit("docker/Dockerfile", later, "upstream builds on CUDA 13.2")
    # The pins keep the CUDA 12.9 base (the smoke target builds on the stand-in, never on it).

    root, cli = use_remote(project, remote)
    text = (root / "pins.yaml").read_text().replace(f'"{remote.commit}"', f'"{moved}"')
    (root / "pins.yaml").write_text(text)
    assert cli("resolve").code == 0

    refused = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert refused.code == 1, refused.output
    assert "the pins drift from upstream docker/Dockerfile" in refused.stderr and "CUDA 13.2" in refused.stderr
    assert "--allow-drift" in refused.stderr
    assert (
        not (root / "build" / "smoke" / "Dockerfile").exists() and not (root / "build" / "smoke-record.json").exists()
    )

    allowed = cli("build", "--smoke", "--allow-drift", "--progress", "plain", timeout=600)
    assert allowed.code == 0, allowed.output
    assert "drift: upstream builds on CUDA 13.2" in allowed.stderr
    rendered = json.loads((root / "build" / "smoke" / "render.json").read_text())
    assert len(rendered["drift"]) == 1 and rendered["drift"][0].startswith("upstream builds on CUDA 13.2")
    report = cli("report")
    assert "upstream builds on CUDA 13.2" in report.stdout


def test_both_of_buildkits_digest_mismatch_messages_are_named(project, remote):
    """BuildKit words a checksum failure two ways (source/http/source.go); another checksum is left alone."""
    from buildkit.models.lock import read_lock
    from buildkit.stages.build import explain_failure

    root, _ = use_remote(project, remote)
    lock = read_lock(root / "pins.lock")
    locked, other = f"sha256:{lock.wheel.sha256}", "sha256:" + "ab" * 32
    for error in (
        f"failed to compute cache key: digest mismatch {other}: {locked}",
        f"digest mismatch for https://example.invalid/w.whl: {other} (expected: {locked})",
    ):
        explained = explain_failure(error, lock)
        assert explained is not None
        message, hint = explained
        assert f"now has {other}, the lock expects {locked}" in message and "--deep" in hint
    assert explain_failure(f"digest mismatch {other}: sha256:{'cd' * 32}", lock) is None
    assert explain_failure("exit code 1", lock) is None


def test_the_check_deletes_only_what_it_left_in_the_repro_dir(tmp_path):
    from buildkit.errors import InputError
    from buildkit.stages.build import prepare_layouts

    repro = tmp_path / "repro"
    (repro / "first" / "blobs").mkdir(parents=True)
    (repro / "second.metadata.json").write_text("{}")
    prepare_layouts(repro)
    assert repro.is_dir() and not any(repro.iterdir())
    (repro / "notes.txt").write_text("mine\n")
    try:
        prepare_layouts(repro)
        raise AssertionError("a file buildkit did not write was deleted")
    except InputError as exc:
        assert "notes.txt" in exc.message
    assert (repro / "notes.txt").read_text() == "mine\n"
