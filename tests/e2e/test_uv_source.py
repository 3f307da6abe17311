"""NeMo-RL's second way to pin a vLLM fork (issue 42, point 4): its pyproject.toml names the fork as a uv git source
and sets precompiled mode through uv; its uv.lock pins the fork's commit (tests/support/nemo_repo.py
`move_to_uv_source`, shaped as NeMo-RL's super-v3.5-posttraining branch writes them). resolve reads both at the pinned
NeMo-RL commit and holds the pins to them, render points uv's build at the checked wheel, and the smoke target builds.
The world is real git: NeMo-RL and vLLM's repositories on `git daemon`."""

from __future__ import annotations

import json

from tests.support.fake_upstreams import VLLM_SHA
from tests.support.nemo_repo import point_pins_at, use_remote
from tests.support.projects import smoke_builds_and_verifies
from tests.support.vllmfork import BRANCH, pin_fork, wheel_name


def later_pins(root) -> None:
    """The later upstream shape: its declared patch removed (upstream does what it did)."""
    text = (root / "pins.yaml").read_text()
    start, end = text.index("  patches:\n"), text.index("\nvllm:")
    (root / "pins.yaml").write_text(text[:start] + "  patches: []\n" + text[end:])


def uv_project(project, remote, fork, wheel_commit: str | None = None):
    commit = remote.move_to_uv_source(fork.fork, BRANCH, fork.head, fork.base)
    root = project[0]
    later_pins(root)
    pin_fork(root, fork, VLLM_SHA)
    pinned = wheel_commit or fork.base
    text = (root / "pins.yaml").read_text().replace('"946862e7"', f'"{commit}"')  # NeMo-RL at that commit
    (root / "pins.yaml").write_text(text.replace("wheel:\n", f"wheel:\n  commit: {pinned}\n", 1))
    return commit


def test_resolve_locks_what_nemo_rls_uv_source_pins_and_renders_uvs_build_with_the_checked_wheel(project, remote, fork):
    commit = uv_project(project, remote, fork)
    root, cli = use_remote(project, remote)
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["vllm_install"] == {
        "mode": "uv-source",
        "repo": fork.fork,
        "ref": BRANCH,
        "commit": fork.head,
        "locked": f"{fork.fork}?branch={BRANCH}#{fork.head}",
        "wheel_commit": fork.base,
        "precompiled": True,
        "source": f"pyproject.toml and uv.lock of {remote.url} at {commit}",
    }
    assert (lock["vllm"]["commit"], lock["vllm_wheel"]["commit"]) == (fork.head, fork.base)
    assert lock["vllm_compare"]["changed"] == {"vllm/config.py": "modified", "vllm/draft.py": "added"}  # the proof
    rendered = cli("render", "--json")
    assert rendered.code == 0, rendered.output
    text = (root / "build" / "Dockerfile").read_text()
    sync = text.index("RUN --mount=type=bind,from=vllm-wheel,target=/opt/vllm-wheel --mount=type=ssh")
    assert text.rindex(f"ENV VLLM_PRECOMPILED_WHEEL_LOCATION=/opt/vllm-wheel/{wheel_name(fork.base)}\n", 0, sync) > 0
    assert "UV_LINK_MODE=hardlink uv sync --frozen --extra vllm --no-install-project" in text[sync:]
    assert "ARG BUILD_CUSTOM_VLLM_REF\n" in text and "vllm-overlay" not in text  # the script stays off; no overlay
    summary = {t["name"]: t["summary"] for t in json.loads(rendered.stdout)["transformations"]}
    assert summary["custom_vllm"].endswith(f"uv builds vLLM {fork.head} from NeMo-RL's git source with that wheel")
    dry = cli("build", "--dry-run")
    assert dry.code == 0, dry.output
    assert "BUILD_CUSTOM_VLLM" not in dry.stdout and f"NEMO_RL_COMMIT={commit}" in dry.stdout


def test_pins_that_name_another_vllm_than_nemo_rls_uv_lock_stop_resolve_naming_what_to_pin(project, remote, fork):
    older = fork.head
    fork.move({"vllm/draft.py": "y = 3\n"})  # the branch moved on; NeMo-RL's uv.lock still pins the older commit
    commit = remote.move_to_uv_source(fork.fork, BRANCH, older, fork.base)
    root, cli = project
    later_pins(root)
    pin_fork(root, fork, VLLM_SHA)
    point_pins_at(root, remote, commit)
    result = cli("resolve")
    assert result.code == 4, result.output
    assert (
        f"error: NeMo-RL at {commit[:12]} builds vLLM with uv from {fork.fork} at {older[:12]} (uv.lock) with the "
        f"wheel of {fork.base[:12]} (pyproject.toml); the pins give {fork.fork} at {fork.head[:12]}"
    ) in result.stderr
    assert f"    ref: {older}" in result.stderr and f"    commit: {fork.base}" in result.stderr
    assert not (root / "pins.lock").exists()


def test_the_uv_source_smoke_build_runs(project, remote, fork, engine):
    commit = uv_project(project, remote, fork)
    smoke_builds_and_verifies(project, remote, commit, fork.head)
