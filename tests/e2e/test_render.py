"""`buildkit prepare` and `buildkit render` against a NeMo-RL-shaped repository with a submodule, made in the test
and served by `git daemon`; the submodule's github.com URL reaches the daemon through a pins URL rewrite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import dockerfile
import pytest

from tests.support.gitserver import git
from tests.support.nemo_repo import LATER_SHAPE, PATCH, SHAPE, script_before_patch, use_remote
from tests.support.paths import REPO_ROOT
from tests.support.textdiff import fidelity


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
    assert "# uv sync --link-mode symlink --locked --extra sglang --no-install-project\n" in text
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
        cwd=remote.work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
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


def render_json(root: Path) -> dict:
    return json.loads((root / "build" / "render.json").read_text())


def test_render_follows_upstream_946862e7_shape_line_by_line(project, remote):
    root, cli = use_remote(project, remote)
    result = cli("render")
    assert result.code == 0, result.output
    record = render_json(root)
    rendered = (root / "build" / "Dockerfile").read_text()
    touched = fidelity(SHAPE.read_text(), rendered, record["transformations"])
    assert touched == {
        "syntax_directive": {"# syntax=docker/dockerfile:1"},
        "base_image_by_digest": {"ARG BASE_IMAGE=nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04"},
        "nemo_rl_source_ref": {"ARG NRL_GIT_REF=main"},
        "torch_cuda_arch_list": {'ENV TORCH_CUDA_ARCH_LIST="9.0 10.0"'},
        "custom_vllm": {'RUN --mount=type=ssh <<"EOF" bash -exu', "bash tools/build-custom-vllm.sh"},
        "drop_extras": {"uv sync --link-mode symlink --locked --extra sglang --no-install-project"},
        "nemo_rl_commit": {"ARG NEMO_RL_COMMIT", "ENV NEMO_RL_COMMIT=${NEMO_RL_COMMIT:-<unknown>}"},
    }
    names = [t["name"] for t in record["transformations"]]
    assert names == [
        "syntax_directive",
        "base_image_by_digest",
        "nemo_rl_source_ref",
        "wheel_stage",
        "source_date_epoch",
        "apt_log_cleanup",
        "torch_cuda_arch_list",
        "custom_vllm",
        "wheel_env",
        "drop_extras",
        "nemo_rl_commit",
        "vllm_overlay",
        "labels",
    ]
    assert "transformed (custom_vllm): RUN at line" in result.stderr
    assert record["drift"] == [] and record["upstream_base_image"].endswith("25.05-cuda12.9-devel-ubuntu24.04")
    # The declared patch carries the wheel: the script is called with the env var the patched script reads.
    assert 'VLLM_PRECOMPILED_WHEEL_LOCATION="${BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION}" \\\n' in rendered
    assert "\nARG BUILD_CUSTOM_VLLM\n# buildkit: repository, commit and precompiled wheel" in rendered
    # The wheel's commit and URL in the image's environment, set after the vLLM build's RUN (its inputs unchanged).
    lock = json.loads((root / "pins.lock").read_text())
    env = f"ENV VLLM_PRECOMPILED_WHEEL_COMMIT={lock['vllm_wheel']['commit']}\n"
    env += f"ENV VLLM_PRECOMPILED_WHEEL_LOCATION={lock['wheel']['url']}\n"
    assert env in rendered and rendered.index("bash tools/build-custom-vllm.sh") < rendered.index(env)
    # The same lock renders the same bytes.
    assert cli("render").code == 0
    assert (root / "build" / "Dockerfile").read_text() == rendered
    # What the target still fetches on build day is found in this commit's Dockerfile (the source ADD is pinned).
    assert [item.split(" (Dockerfile line")[0] for item in record["unpinned"]] == [
        "apt packages (jq, git) at whatever versions `apt-get update` finds",
        "an installer script from `https://astral.sh/uv/0.9.7/install.sh` run by a shell, unchecked",
        "Python from `uv python install`, by version, no checksum",
        "`git fetch --unshallow` from the clone's remote on build day, not a build input BuildKit sees",
        "`uv run` without --locked or --frozen may re-resolve uv.lock",
    ]
    # The report says which upstream sync render dropped, from the render record.
    report = cli("report").stdout.replace("\\", "")
    assert (
        "(transformation `drop_extras`): dropped sglang at line 60 ('uv sync --link-mode symlink --locked "
        "--extra sglang --no-install-project'): commented out." in report
    )


def later_pins(root: Path) -> None:
    """Pins for the later upstream: its declared patch removed (upstream does what it did)."""
    text = (root / "pins.yaml").read_text()
    start = text.index("  patches:\n")
    end = text.index("\nvllm:")
    (root / "pins.yaml").write_text(text[:start] + "  patches: []\n" + text[end:])


def test_render_follows_upstream_7ea279ab_shape_line_by_line(project, remote):
    later = remote.move_to_later_shape()
    later_pins(project[0])
    root, cli = use_remote(project, remote, ref=later)
    result = cli("render", "--json")
    assert result.code == 0, result.output
    summary = json.loads(result.stdout)
    rendered = (root / "build" / "Dockerfile").read_text()
    touched = fidelity(LATER_SHAPE.read_text(), rendered, summary["transformations"])
    assert touched == {
        "syntax_directive": {"# syntax=docker/dockerfile:1"},
        "base_image_by_digest": {"ARG BASE_IMAGE=nvcr.io/nvidia/cuda-dl-base:26.05-cuda13.2-devel-ubuntu24.04"},
        "nemo_rl_source_ref": {"ARG NRL_GIT_REF=main"},
        "torch_cuda_arch_list": {'ENV TORCH_CUDA_ARCH_LIST="9.0 10.0"'},
        # Upstream's own build args carry the locked vLLM; its call of the script stays as it is.
        "custom_vllm": {
            "RUN --mount=type=ssh \\",
            "ARG BUILD_CUSTOM_VLLM_URL",
            "ARG BUILD_CUSTOM_VLLM_REF",
            "ARG BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION",
        },
        "drop_extras": {"UV_LINK_MODE=hardlink uv sync --frozen --extra sglang --no-install-project"},
        "nemo_rl_commit": {"ARG NEMO_RL_COMMIT", "ENV NEMO_RL_COMMIT=${NEMO_RL_COMMIT:-<unknown>}"},
    }
    lock = json.loads((root / "pins.lock").read_text())
    assert f"ARG BUILD_CUSTOM_VLLM_REF={lock['vllm']['commit']}" in rendered
    # A sync alone in an `if` block leaves a `true` there, so bash still reads the script.
    assert (
        "    # UV_LINK_MODE=hardlink uv sync --frozen --extra sglang --no-install-project\n    true\nfi\n" in rendered
    )
    # Every upstream stage is there, the wheel stage after nemo-rl.
    stages = [c.value[-1] for c in dockerfile.parse_string(rendered) if c.cmd == "FROM"]
    upstream_stages = [c.value[-1] for c in dockerfile.parse_string(LATER_SHAPE.read_text()) if c.cmd == "FROM"]
    assert stages == [upstream_stages[0], "vllm-wheel", *upstream_stages[1:]]
    # Upstream builds on CUDA 13.2, the pins name a CUDA 12.9 base: a drift finding (build stops without
    # --allow-drift), not a silent mismatch.
    assert summary["drift"] == [
        "upstream builds on CUDA 13.2 (its ARG BASE_IMAGE default "
        "'nvcr.io/nvidia/cuda-dl-base:26.05-cuda13.2-devel-ubuntu24.04') but the pinned base image "
        f"'{lock['base_image']['ref']}' is CUDA 12.9.0.043 (its config's CUDA_VERSION)"
    ]
    assert cli("render", "--strict").code == 1
    again = cli("render", "--json")
    assert again.code == 0 and (root / "build" / "Dockerfile").read_text() == rendered


def test_a_transformation_that_finds_nothing_is_an_error_naming_it(project, remote):
    moved = remote.new_commit(
        "docker/Dockerfile", SHAPE.read_text().replace('ENV TORCH_CUDA_ARCH_LIST="9.0 10.0"\n', ""), "no arch list"
    )
    root, cli = use_remote(project, remote, ref=moved)
    result = cli("render")
    assert result.code == 4, result.output
    assert "transformation torch_cuda_arch_list: looked for `ENV TORCH_CUDA_ARCH_LIST=...`" in result.stderr
    assert not (root / "build" / "Dockerfile").exists()


def test_without_the_patch_nothing_passes_the_wheel_where_upstream_lacks_build_args(project, remote):
    """946862e7's shape with the patch removed: custom_vllm says so."""
    later_pins(project[0])
    root, cli = use_remote(project, remote)
    result = cli("render")
    assert result.code == 4, result.output
    assert "transformation custom_vllm" in result.stderr and "declare the patch" in result.stderr


def test_unknown_dropped_extra_is_an_error_naming_the_transformation(project, remote):
    root, cli = project
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("- name: sglang", "- name: trtllm"))
    root, cli = use_remote(project, remote)
    result = cli("render")
    assert result.code == 4, result.output
    assert "transformation drop_extras: looked for a `uv sync ... --extra trtllm`" in result.stderr
    assert "upstream syncs: automodel, mcore, sglang, vllm" in result.stderr


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
        [
            "docker",
            "buildx",
            "build",
            "--builder",
            engine,
            "--call=targets",
            "-f",
            summary["dockerfile"],
            "--build-context",
            f"nemo-rl={summary['prepared_tree']}",
            summary["prepared_tree"],
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    targets = [line.split()[0] for line in done.stdout.splitlines()[1:] if line.strip()]
    assert targets == ["nemo-rl", "vllm-wheel", "base", "hermetic", "release"]
    assert "release (default)" in done.stdout


def test_a_patch_upstream_made_unnecessary_is_reported_obsolete_with_the_reason(project, remote):
    """At the 7ea279ab shape build-custom-vllm.sh takes the wheel as its third argument: the declared patch, which
    made it read the wheel from the environment, is obsolete (not merely "does not apply")."""
    later = remote.move_to_later_shape()
    root, cli = use_remote(project, remote, ref=later)
    result = cli("render")
    assert result.code == 4, result.output
    assert "patches/build-custom-vllm-wheel-location.patch is obsolete at this upstream commit" in result.stderr
    assert (
        "the patch makes tools/build-custom-vllm.sh take VLLM_PRECOMPILED_WHEEL_LOCATION from the environment; "
        "upstream now takes it from argument 3 itself (line 26: 'VLLM_PRECOMPILED_WHEEL_LOCATION=\"$3\"')"
    ) in result.stderr
    assert "remove it from nemo_rl.patches" in result.stderr
    assert not (root / "build" / "Dockerfile").exists()


@pytest.mark.parametrize("date", ["0001-01-01T00:00:00+14:00", "not a time"])
def test_a_lock_date_with_no_utc_time_is_a_lock_error(tmp_path, date):
    """0001-01-01T00:00:00+14:00 is before year 1 in UTC: OverflowError (exit 70 in `build --dry-run`) until caught."""
    from buildkit.errors import InputError
    from buildkit.models.lock import read_lock
    from buildkit.models.plan import source_date_epoch

    lock = json.loads((REPO_ROOT / "tests/fixtures/report/pins.lock").read_text())
    lock["nemo_rl"]["date"] = date
    (tmp_path / "pins.lock").write_text(json.dumps(lock))
    try:
        loaded = read_lock(tmp_path / "pins.lock")
    except InputError as refused:  # the lock's own grammar may refuse it first: as clear, and exit 2 too
        assert refused.exit_code == 2
        return
    with pytest.raises(InputError, match="lock: nemo_rl.date .* is not an ISO 8601 time") as caught:
        source_date_epoch(loaded)
    assert caught.value.exit_code == 2
