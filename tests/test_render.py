"""`buildkit prepare` and `buildkit render` against a NeMo-RL-shaped repository with a submodule, made in the test
and served by `git daemon`; the submodule's github.com URL reaches the daemon through a pins URL rewrite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import dockerfile
import pytest

from tests.conftest import REPO_ROOT
from tests.gitserver import git
from tests.nemo_repo import PATCH, SHAPE, Remote, make_remote, script_before_patch


@pytest.fixture
def remote(tmp_path):
    made = make_remote(tmp_path)
    yield made
    made.daemon.stop()


def point_pins_at(root: Path, remote: Remote, ref: str | None = None) -> None:
    """The project's pins, with NeMo-RL from the served repository (and its submodule through a URL rewrite)."""
    text = (root / "pins.yaml").read_text()
    text = text.replace("https://github.com/NVIDIA-NeMo/RL.git", remote.url).replace(
        '"946862e7"', f'"{ref or remote.commit}"'
    )
    text += f"\ngit_url_rewrites:\n  - url: {remote.daemon.url}test/\n    instead_of: https://github.com/test/\n"
    (root / "pins.yaml").write_text(text)


def use_remote(project, remote: Remote, ref: str | None = None) -> tuple[Path, object]:
    root, cli = project
    point_pins_at(root, remote, ref)
    result = cli("resolve")
    assert result.code == 0, result.output
    return root, cli


def test_render_prepares_patches_records_and_writes_the_dockerfile(project, remote, tmp_path):
    root, cli = use_remote(project, remote)
    result = cli("render")
    assert result.code == 0, result.output
    assert f"fetched {remote.url} at {remote.commit}" in result.stderr
    assert "submodule 3rdparty/Megatron-LM-workspace/Megatron-LM" in result.stderr
    assert "applied patches/build-custom-vllm-wheel-location.patch to tools/build-custom-vllm.sh" in result.stderr
    assert "drift" not in result.stderr

    record = json.loads((root / "build" / "prepare.json").read_text())
    tree = Path(record["tree"])
    assert record["commit"] == remote.commit and not record["reused"]
    assert record["submodules"] == [
        {"path": "3rdparty/Megatron-LM-workspace/Megatron-LM", "commit": remote.submodule_commit}
    ]
    [patch] = record["patches"]
    assert patch["diff"] == PATCH.read_text() and "VLLM_PRECOMPILED_WHEEL_LOCATION" in patch["reason"]
    [target] = patch["targets"]
    assert target["path"] == "tools/build-custom-vllm.sh" and target["before"] != target["after"]
    script = (tree / "tools/build-custom-vllm.sh").read_text()
    assert "GIT_REF=${2:-4a5299c93ff97c26def537b92562df5ada530fea}" in script
    assert 'VLLM_PRECOMPILED_WHEEL_LOCATION="${VLLM_PRECOMPILED_WHEEL_LOCATION:-' in script
    assert git("rev-parse", "HEAD", cwd=tree) == remote.commit
    assert (tree / "3rdparty/Megatron-LM-workspace/Megatron-LM/megatron.py").exists()
    assert git("rev-parse", "--is-shallow-repository", cwd=tree) == "true"

    text = (root / "build" / "Dockerfile").read_text()
    lock = json.loads((root / "pins.lock").read_text())
    assert f"ARG BASE_IMAGE={lock['base_image']['pinned']}" in text and "@sha256:" in lock["base_image"]["pinned"]
    assert "\nuv sync --link-mode symlink --locked --extra sglang" not in text
    assert "# buildkit: dropped by pins (build.drop_extras): sgl-kernel build fetches DeepGEMM" in text
    assert f"ARG BUILD_CUSTOM_VLLM_REF={lock['vllm']['commit']}" in text
    # The wheel comes from a stage of its own, which BuildKit fetches and checks against the locked sha256.
    wheel = lock["wheel"]
    assert f"ARG BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION=/opt/vllm-wheel/{wheel['filename']}" in text
    assert f"\nADD --checksum=sha256:{wheel['sha256']} {wheel['url']} /{wheel['filename']}\n" in text
    assert "--mount=type=bind,from=vllm-wheel,target=/opt/vllm-wheel" in text
    assert 'ENV TORCH_CUDA_ARCH_LIST="9.0"' in text
    assert f"ENV NEMO_RL_COMMIT={remote.commit}" in text
    assert 'org.opencontainers.image.created="2026-02-05T18:32:11Z"' in text
    assert text.startswith("# syntax=docker/dockerfile:1.19\n")

    # BuildKit's own parser reads it, with upstream's four stages and every upstream step kept.
    commands = dockerfile.parse_string(text)
    stages = [c.value[-1] for c in commands if c.cmd == "FROM"]
    assert stages == ["nemo-rl", "vllm-wheel", "base", "hermetic", "release"]
    for extra in ("vllm", "mcore", "automodel"):
        assert f"\nuv sync --link-mode symlink --locked --extra {extra} --no-install-project" in text


def test_render_twice_gives_the_same_bytes_and_reuses_the_cache(project, remote):
    root, cli = use_remote(project, remote)
    assert cli("render").code == 0
    first = (root / "build" / "Dockerfile").read_bytes()
    second = cli("render", "--json")
    assert second.code == 0, second.output
    summary = json.loads(second.stdout)
    assert (root / "build" / "Dockerfile").read_bytes() == first
    assert summary["drift"] == [] and summary["dockerfile"].endswith("build/Dockerfile")
    record = json.loads((root / "build" / "prepare.json").read_text())
    assert record["reused"] and record["fetched"] == []


def test_cache_reset_to_pristine_before_patching(project, remote):
    root, cli = use_remote(project, remote)
    assert cli("prepare").code == 0
    tree = Path(json.loads((root / "build" / "prepare.json").read_text())["tree"])
    (tree / "stray.txt").write_text("left behind\n")
    (tree / "nemo_rl/__init__.py").write_text("tampered = True\n")
    result = cli("prepare")
    assert result.code == 0, result.output
    assert not (tree / "stray.txt").exists() and (tree / "nemo_rl/__init__.py").read_text() == ""
    # An ignored file would not show in a plain `git status`, but would still reach the image.
    (tree / ".git" / "info" / "exclude").write_text("*.pyc\n")
    (tree / "nemo_rl" / "stale.pyc").write_text("x")
    assert cli("prepare").code == 0
    assert not (tree / "nemo_rl" / "stale.pyc").exists()


def test_an_already_prepared_tree_is_left_untouched(project, remote):
    root, cli = use_remote(project, remote)
    assert cli("prepare").code == 0
    tree = Path(json.loads((root / "build" / "prepare.json").read_text())["tree"])
    index = (tree / ".git" / "index").stat().st_mtime_ns
    again = cli("prepare", "--json")
    assert again.code == 0, again.output
    assert json.loads(again.stdout)["reused"] and (tree / ".git" / "index").stat().st_mtime_ns == index


def test_patch_drift_stops_with_file_hunk_and_line(project, remote):
    script = script_before_patch().replace(
        "cc99baf14dacc2497d0c5ed84e076ef2c37f6a4d", "0123456789abcdef0123456789abcdef01234567"
    )
    moved = remote.new_commit("tools/build-custom-vllm.sh", script, "bump vllm pin")
    root, cli = use_remote(project, remote, ref=moved)
    result = cli("render")
    assert result.code == 4, result.output
    assert "patches/build-custom-vllm-wheel-location.patch no longer fits upstream" in result.stderr
    assert "file: tools/build-custom-vllm.sh" in result.stderr
    assert "hunk 1: @@ -21,11 +21,12 @@" in result.stderr
    assert "line 24:" in result.stderr
    assert "the patch expects: GIT_REF=${2:-cc99baf14dacc2497d0c5ed84e076ef2c37f6a4d}" in result.stderr
    assert "upstream has now:  GIT_REF=${2:-0123456789abcdef0123456789abcdef01234567}" in result.stderr
    assert not (root / "build" / "Dockerfile").exists()


def test_patch_already_upstream_is_not_a_silent_no_op(project, remote):
    applied = subprocess.run(
        ["patch", "-p1", "-o", "-", "tools/build-custom-vllm.sh", str(PATCH)],
        cwd=remote.work, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    moved = remote.new_commit("tools/build-custom-vllm.sh", applied, "upstream takes the change")
    root, cli = use_remote(project, remote, ref=moved)
    result = cli("render")
    assert result.code == 4 and "upstream already contains this change" in result.stderr, result.output


def test_patch_edited_after_resolve_makes_the_lock_stale(project, remote):
    root, cli = use_remote(project, remote)
    patch = root / "patches" / "build-custom-vllm-wheel-location.patch"
    patch.write_text(patch.read_text().replace("(spec decode with draft models)", "(edited)"))
    result = cli("render")
    assert result.code == 1 and "declared patches changed" in result.stderr, result.output
    offline = cli("resolve", "--offline")
    assert offline.code == 1 and "declared patches changed" in offline.stderr


def test_missing_patch_file_is_bad_input(project, remote):
    root, cli = use_remote(project, remote)
    (root / "patches" / "build-custom-vllm-wheel-location.patch").unlink()
    result = cli("render")
    assert result.code == 2 and "cannot read the patch declared in pins.yaml" in result.stderr


def test_no_submodules(project, remote):
    root, cli = use_remote(project, remote)
    result = cli("prepare", "--no-submodules", "--json")
    assert result.code == 0, result.output
    record = json.loads(result.stdout)
    assert record["submodules"] is None
    assert not (Path(record["tree"]) / "3rdparty/Megatron-LM-workspace/Megatron-LM/megatron.py").exists()


def test_diff_against_upstream_and_no_syntax(project, remote):
    root, cli = use_remote(project, remote)
    result = cli("render", "--diff", "--no-syntax", "-o", "out/Dockerfile")
    assert result.code == 0, result.output
    assert "--- upstream docker/Dockerfile" in result.stdout
    assert "-uv sync --link-mode symlink --locked --extra sglang --no-install-project" in result.stdout
    assert '+ENV TORCH_CUDA_ARCH_LIST="9.0"' in result.stdout
    assert "syntax=" not in (root / "out" / "Dockerfile").read_text()


def test_drift_against_a_later_upstream_layout(project, remote):
    later = (
        SHAPE.read_text()
        .replace(
            "ARG BUILD_CUSTOM_VLLM\n",
            "ARG BUILD_CUSTOM_VLLM\nARG BUILD_CUSTOM_VLLM_URL\nARG BUILD_CUSTOM_VLLM_REF\n"
            "ARG BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION\nARG SKIP_VLLM_BUILD\n",
        )
        .replace(
            "uv sync --link-mode symlink --locked --all-groups",
            "uv sync --link-mode symlink --locked --extra modelopt --no-install-project\n"
            "uv sync --link-mode symlink --locked --all-groups",
        )
        .replace("FROM scratch AS nemo-rl\n", "FROM scratch AS uv-cache-seed\nFROM scratch AS nemo-rl\n")
    )
    later += "COPY --from=nemo-rl tools/build-custom-flashinfer.sh ./tools/\n"
    moved = remote.new_commit("docker/Dockerfile", later, "later upstream Dockerfile")
    root, cli = use_remote(project, remote, ref=moved)
    result = cli("render")
    assert result.code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("drift: ")]
    assert warnings == [
        "drift: upstream has stage uv-cache-seed that the template does not know",
        "drift: upstream has ARG SKIP_VLLM_BUILD that the template does not know",
        "drift: upstream has uv sync extra modelopt that the template does not know",
        "drift: upstream has COPY --from=nemo-rl source tools/build-custom-flashinfer.sh"
        " that the template does not know",
    ]
    strict = cli("render", "--strict")
    assert strict.code == 1 and "has drifted from the template (4 difference(s))" in strict.stderr


def test_unknown_dropped_extra_is_refused_by_the_template(project, remote):
    root, cli = project
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("- name: sglang", "- name: trtllm"))
    root, cli = use_remote(project, remote)
    result = cli("render")
    assert result.code == 2 and "names 'trtllm', which this Dockerfile does not sync" in result.stderr


def test_render_without_a_lock(cli, tmp_path):
    (tmp_path / "pins.yaml").write_text((REPO_ROOT / "pins.yaml").read_text())
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / PATCH.name).write_text(PATCH.read_text())
    result = cli("render")
    assert result.code == 2 and "no lock yet" in result.stderr and "buildkit resolve" in result.stderr


def test_buildkit_itself_reads_the_rendered_dockerfile(project, remote, engine):
    """BuildKit's built-in Dockerfile frontend (no `# syntax=`, no internet) lists the rendered targets."""
    root, cli = use_remote(project, remote)
    result = cli("render", "--no-syntax", "--json")
    assert result.code == 0, result.output
    summary = json.loads(result.stdout)
    done = subprocess.run(
        ["docker", "buildx", "build", "--builder", engine, "--call=targets", "-f", summary["dockerfile"],
         "--build-context", f"nemo-rl={summary['prepared_tree']}", summary["prepared_tree"]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    targets = [line.split()[0] for line in done.stdout.splitlines()[1:] if line.strip()]
    assert targets == ["nemo-rl", "vllm-wheel", "base", "hermetic", "release"]
    assert "release (default)" in done.stdout
