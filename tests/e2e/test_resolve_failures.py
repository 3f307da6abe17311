"""Every failure of `buildkit resolve` ends with one clear message, a documented exit code, no traceback, and the
old lock byte-for-byte as it was."""

from __future__ import annotations

import time

import pytest

from tests.support.failures import OLD_LOCK, assert_failed, assert_untouched
from tests.support.fake_upstreams import BASE_REPO, BASE_TAG, DROP, VLLM_PR, VLLM_SHA, WHEEL_ARM, Fault
from tests.support.gitserver import free_port


@pytest.fixture
def old_lock(project):
    root, _ = project
    (root / "pins.lock").write_bytes(OLD_LOCK)
    return root / "pins.lock"


def test_rate_limit_stops_at_once_and_names_reset_and_token(project, upstreams, old_lock):
    root, cli = project
    reset = int(time.time()) + 1800
    upstreams.github.rate_limited_until = reset
    result = cli("resolve")
    reset_text = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(reset))
    assert_failed(result, 3, "rate limit", reset_text, "GITHUB_TOKEN")
    paths = [p for _, p, _ in upstreams.github.log]
    assert len(paths) == len(set(paths)), "a rate-limited request must not be retried"
    assert_untouched(old_lock)


def test_rate_limit_with_token_says_the_token_is_used_up(project, upstreams, old_lock):
    root, cli = project
    upstreams.github.rate_limited_until = int(time.time()) + 60
    result = cli("resolve", env={"GITHUB_TOKEN": "ghp_abc123SECRET"})
    assert_failed(result, 3, "rate limit", "GITHUB_TOKEN is used up")
    assert "ghp_abc123SECRET" not in result.output
    assert_untouched(old_lock)


def test_5xx_is_retried_with_backoff(project, upstreams):
    root, cli = project
    upstreams.github.faults.append(Fault("/repos/NVIDIA-NeMo/RL/commits/", 503, count=2))
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    assert sum(p.startswith("/repos/NVIDIA-NeMo/RL/commits/") for _, p, _ in upstreams.github.log) == 3


def test_5xx_that_persists_fails_after_bounded_retries(project, upstreams, old_lock):
    root, cli = project
    upstreams.registry.faults.append(Fault("/v2/", 502, count=99))
    result = cli("resolve")
    assert_failed(result, 3, "HTTP 502", "3 attempts", "--offline")
    assert sum(p.startswith("/v2/") for _, p, _ in upstreams.registry.log) == 3
    assert_untouched(old_lock)


def test_dropped_connection_is_retried(project, upstreams):
    root, cli = project
    upstreams.wheels.faults.append(Fault(f"/{VLLM_SHA}/vllm/metadata.json", DROP, count=1))
    result = cli("resolve", "--json")
    assert result.code == 0, result.output


def test_connection_dropped_every_time(project, upstreams, old_lock):
    root, cli = project
    upstreams.wheels.faults.append(Fault("/", DROP, count=99))
    result = cli("resolve")
    assert_failed(result, 3, "connection dropped", "--offline")
    assert_untouched(old_lock)


def test_timeout_on_every_request(project, upstreams, old_lock):
    root, cli = project
    upstreams.github.hang_seconds = 60
    upstreams.github.faults.append(Fault("/repos/vllm-project/vllm/pulls/", "hang", count=99))
    started = time.monotonic()
    result = cli("resolve", env={"BUILDKIT_HTTP_TIMEOUT": "0.3"})
    assert_failed(result, 3, "no answer within 0.3s")
    # The failure's scale: a request that waited out the hang would take its 60 s (each attempt).
    assert time.monotonic() - started < 30
    assert_untouched(old_lock)


def test_unreachable_network_suggests_offline(project, old_lock):
    root, cli = project
    dead = f"http://127.0.0.1:{free_port()}"
    result = cli("resolve", env={"BUILDKIT_GITHUB_API": dead, "BUILDKIT_WHEEL_INDEX": dead})
    assert_failed(result, 3, "connection refused", "--offline")
    assert_untouched(old_lock)


def test_missing_wheel_names_the_url_and_what_the_index_lists(project, upstreams, old_lock):
    root, cli = project
    upstreams.wheels.listings[VLLM_SHA]["default"] = [WHEEL_ARM]
    result = cli("resolve")
    assert_failed(result, 4, "no vllm wheel for linux x86_64", WHEEL_ARM, "16217")
    assert_untouched(old_lock)


def test_commit_without_any_wheel_index(project, upstreams, old_lock):
    root, cli = project
    upstreams.wheels.listings.clear()
    result = cli("resolve")
    assert_failed(result, 4, "no wheel index for this commit", f"{upstreams.wheels.url}/{VLLM_SHA}/vllm/metadata.json")
    assert_untouched(old_lock)


def test_wheel_listed_but_gone(project, upstreams, old_lock):
    root, cli = project
    upstreams.wheels.files.clear()
    result = cli("resolve")
    assert_failed(result, 4, "the index lists the wheel, but it is missing", "%2Bg4a5299c93")
    assert_untouched(old_lock)


def test_wheel_of_another_commit_is_refused(project, upstreams, old_lock):
    root, cli = project
    upstreams.wheels.listings[VLLM_SHA]["default"] = [
        "vllm-0.14.0rc2.dev155+g0123456789-cp38-abi3-manylinux_2_31_x86_64.whl"
    ]
    result = cli("resolve")
    assert_failed(result, 4, "does not name commit g4a5299c93")
    assert_untouched(old_lock)


def test_two_fitting_wheels_are_ambiguous_not_first_wins(project, upstreams, old_lock):
    root, cli = project
    upstreams.wheels.add(VLLM_SHA, "vllm-0.14.0rc2.dev156+g4a5299c93-cp38-abi3-manylinux_2_28_x86_64.whl")
    result = cli("resolve")
    assert_failed(result, 4, "several vllm wheels fit", "manylinux_2_28_x86_64", "manylinux_2_31_x86_64")
    assert_untouched(old_lock)


def test_an_open_pr_whose_head_is_not_the_pinned_ref_is_an_error(project, upstreams, old_lock):
    root, cli = project
    head = "c" * 40
    upstreams.github.add_commit("vllm-project/vllm", head, "wip", "2026-01-02T00:00:00Z")
    upstreams.github.add_pull(
        "vllm-project/vllm",
        VLLM_PR,
        "feat: spec decode with draft models",
        None,
        None,
        head=(head, "draft", "vllm-project/vllm"),
    )
    result = cli("resolve")
    assert_failed(
        result,
        4,
        f"resolves to {VLLM_SHA}, but PR #{VLLM_PR} is open; its head is now {head}",
        "drop vllm.ref to build what the PR is now",
    )
    assert_untouched(old_lock)


def test_pr_merge_commit_must_equal_the_pinned_commit(project, upstreams, old_lock):
    root, cli = project
    other = "b" * 40
    upstreams.github.add_commit("vllm-project/vllm", other, "something else", "2026-01-01T00:00:00Z")
    upstreams.github.add_pull("vllm-project/vllm", VLLM_PR, "feat", other, "2026-01-01T00:00:00Z")
    result = cli("resolve")
    assert_failed(result, 4, f"PR #{VLLM_PR} was merged as {other}", VLLM_SHA)
    assert_untouched(old_lock)


def test_unknown_commit(project, old_lock):
    root, cli = project
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace('ref: "946862e7"', 'ref: "0000000"'))
    result = cli("resolve")
    assert_failed(result, 4, "NVIDIA-NeMo/RL ref '0000000'", "not found")
    assert_untouched(old_lock)


def test_base_image_tag_not_found(project, upstreams, old_lock):
    root, cli = project
    del upstreams.registry.tags[(BASE_REPO, BASE_TAG)]
    result = cli("resolve")
    assert_failed(result, 4, f"{BASE_TAG} not found in registry")
    assert_untouched(old_lock)


def test_base_image_without_the_build_platform(project, upstreams, old_lock):
    root, cli = project
    upstreams.registry.add_image(BASE_REPO, BASE_TAG, platforms=("linux/arm64", "linux/ppc64le"))
    result = cli("resolve")
    assert_failed(result, 4, "has no linux/amd64 image", "linux/arm64")
    assert_untouched(old_lock)


def test_base_image_with_two_manifests_for_the_build_platform(project, upstreams, old_lock):
    """Never the first by position: an index listing two linux/amd64 images is an error naming both."""
    import json

    root, cli = project
    upstreams.registry.add_image(BASE_REPO, BASE_TAG, platforms=("linux/amd64", "linux/arm64"))
    media_type, body = upstreams.registry.blobs[upstreams.registry.tags[(BASE_REPO, BASE_TAG)]]
    index = json.loads(body)
    amd64 = next(m for m in index["manifests"] if m["platform"]["architecture"] == "amd64")
    index["manifests"].append({**amd64, "digest": "sha256:" + "b" * 64})
    upstreams.registry.tags[(BASE_REPO, BASE_TAG)] = upstreams.registry._put(media_type, index)
    result = cli("resolve")
    assert_failed(result, 4, "has 2 linux/amd64 images", amd64["digest"], "will not pick one by position")
    assert_untouched(old_lock)


def test_registry_refusing_anonymous_tokens(project, upstreams, old_lock):
    root, cli = project
    upstreams.registry.anonymous_allowed = False
    result = cli("resolve")
    assert_failed(result, 3, "anonymous token refused")
    assert_untouched(old_lock)


def test_invalid_existing_lock_is_reported_not_overwritten_by_check(project, old_lock):
    root, cli = project
    result = cli("resolve", "--check")
    assert_failed(result, 2, "invalid lock")
    assert_untouched(old_lock)


def test_a_real_lock_survives_a_failed_resolve(project, upstreams):
    root, cli = project
    assert cli("resolve").code == 0
    before = (root / "pins.lock").read_bytes()
    # The pins change (a rewrite would be due), then the wheel index breaks.
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("tag: nemo-rl:", "tag: nemo-rl-next:"))
    upstreams.wheels.faults.append(Fault("/", 500, count=99))
    result = cli("resolve")
    assert_failed(result, 3, "HTTP 500")
    assert (root / "pins.lock").read_bytes() == before
