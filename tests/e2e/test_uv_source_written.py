"""vllm.install: uv-source on a NeMo-RL commit that installs vLLM with build-custom-vllm.sh (issue 42, point 4's
writing half): resolve locks what prepare will write, prepare writes NeMo-RL's release-branch mode into the tree
(pyproject.toml from the lock, uv.lock by real uv, which fetches the fork with git), render points uv's build at the
checked wheel, and the smoke target builds it. The world is real git: NeMo-RL and vLLM's repositories, the fork read
through file:// (uv fetches git sources over https://, ssh:// or file:// only)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import tomllib

from buildkit.models.lock import read_lock
from buildkit.stages.prepare import prepare as prepare_tree
from buildkit.world.uv import find_uv
from tests.support.fake_upstreams import VLLM_SHA, dist_info_metadata
from tests.support.nemo_repo import point_pins_at, script_mode_files, use_remote
from tests.support.projects import smoke_builds_and_verifies
from tests.support.vllmfork import pin_fork, wheel_name


def written_project(project, remote, fork, upstreams, tmp_path):
    """NeMo-RL at a script-mode commit, pins asking for the fork's head as uv-source, its merge base's wheel listed
    with core metadata that needs nothing from an index (uv locks it with no network here)."""
    key = f"/{fork.base}/{wheel_name(fork.base)}"
    name, raw = dist_info_metadata(wheel_name(fork.base), None)
    bare = b"\n".join(line for line in raw.split(b"\n") if not line.startswith((b"Requires-Dist", b"Provides-Extra")))
    upstreams.wheels.files[key] = dataclasses.replace(upstreams.wheels.files[key], metadata=((name, bare),))
    commit = remote.move_to_later_shape(script_mode_files(tmp_path / "scratch"))
    root = project[0]
    text = (root / "pins.yaml").read_text()
    start, end = text.index("  patches:\n"), text.index("\nvllm:")
    (root / "pins.yaml").write_text(text[:start] + "  patches: []\n" + text[end:])  # the later shape: no patch
    pin_fork(root, fork, VLLM_SHA)
    url = (fork.daemon.root / fork.names[1]).as_uri()
    text = (root / "pins.yaml").read_text().replace(f"repo: {fork.fork}\n", f"repo: {url}\n  install: uv-source\n")
    (root / "pins.yaml").write_text(text.replace('"946862e7"', f'"{commit}"'))
    return commit, url


def test_prepare_writes_nemo_rls_uv_source_mode_with_real_uv_and_render_builds_it(
    project, remote, fork, upstreams, tmp_path, monkeypatch
):
    commit, url = written_project(project, remote, fork, upstreams, tmp_path)
    root, cli = use_remote(project, remote)
    monkeypatch.setenv("UV_CACHE_DIR", cli.env["UV_CACHE_DIR"])  # the uv runs below and the CLI's: not this machine's
    lock = json.loads((root / "pins.lock").read_text())
    install = lock["vllm_install"]
    assert (install["written"], install["commit"], install["wheel_commit"]) == (True, fork.head, fork.base)
    assert install["locked"] == f"{url}?rev={fork.head}#{fork.head}"
    assert install["version"] == wheel_name(fork.base).split("-")[1] and install["requires_dist"] == []

    prepared = cli("prepare", "--json")
    assert prepared.code == 0, prepared.output
    record = json.loads((root / "build" / "prepare.json").read_text())
    written = record["uv_source"]
    assert written["uv"] == find_uv().version and written["locked"] == install["locked"]  # what uv wrote
    tree = root.parent / "tree-copy"
    shutil.copytree(record["tree"], tree, symlinks=True)
    pyproject = tomllib.loads((tree / "pyproject.toml").read_text())
    uv = pyproject["tool"]["uv"]
    assert uv["sources"]["vllm"] == {"git": url, "rev": fork.head, "extra": "vllm"}
    assert uv["extra-build-variables"]["vllm"] == {
        "VLLM_USE_PRECOMPILED": "1",
        "VLLM_PRECOMPILED_WHEEL_COMMIT": fork.base,
        "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VLLM": install["version"],
        "SETUPTOOLS_SCM_PRETEND_VERSION": install["version"],
    }
    assert pyproject["project"]["optional-dependencies"]["vllm"] == ["vllm"]  # main's URL requirement dropped
    assert uv["dependency-metadata"] == [{"name": "vllm", "version": install["version"], "requires-dist": []}]
    # uv's own check: the uv.lock prepare left is the one uv writes for that pyproject.toml.
    argv = [find_uv().path, "lock", "--locked", "--no-progress", "--project", str(tree)]
    checked = subprocess.run(argv, capture_output=True, text=True, cwd=tree, timeout=300)
    assert checked.returncode == 0, checked.stderr
    assert f'source = {{ git = "{install["locked"]}" }}' in (tree / "uv.lock").read_text()

    steps: list[str] = []  # what the prepare command's spinner shows while uv locks
    prepare_tree(read_lock(root / "pins.lock"), "-", root, root / "cache-2", [], submodules=False, on_step=steps.append)
    assert [s for s in steps if s.startswith("uv lock: Resolved 2 packages in ")], steps

    again = cli("prepare", "--json")  # uv's answer of now: written again, the same bytes
    assert again.code == 0, again.output
    assert json.loads((root / "build" / "prepare.json").read_text())["uv_source"] == written

    # The report's by-hand steps, followed: the diff applied to a fresh clone and `uv lock` give the same files.
    reported, markdown = cli("report", "--format", "json"), cli("report")
    assert reported.code == 0 and markdown.code == 0, reported.output + markdown.output
    report = json.loads(reported.stdout)
    assert report["uv_source"] == written
    assert "`pyproject.toml`, `uv.lock` (vllm.install: uv-source)" in markdown.stdout
    assert f"uv lock --project nemo-rl  # uv {written['uv']}" in markdown.stdout
    hand = root.parent / "by-hand"
    subprocess.run(["git", "clone", "-q", remote.url, str(hand)], check=True)
    subprocess.run(["git", "-C", str(hand), "checkout", "-q", "--detach", commit], check=True)
    subprocess.run(["git", "-C", str(hand), "apply"], input=written["diff"], text=True, check=True)
    subprocess.run([find_uv().path, "lock", "-q", "--project", str(hand)], check=True, timeout=300)
    assert hashlib.sha256((hand / "pyproject.toml").read_bytes()).hexdigest() == written["pyproject_after"]
    assert hashlib.sha256((hand / "uv.lock").read_bytes()).hexdigest() == written["uv_lock_after"]

    rendered = cli("render", "--json")
    assert rendered.code == 0, rendered.output
    drift = json.loads((root / "build" / "render.json").read_text())["drift"]
    assert [d for d in drift if "uv" in d.split()] == []  # uv 0.11.28 wrote uv.lock, the uv upstream installs
    assert [d for d in drift if "CUDA" in d] == drift  # (the later shape builds on CUDA 13.2, the pins on 12.9)
    text = (root / "build" / "Dockerfile").read_text()
    assert "RUN --mount=type=bind,from=vllm-wheel,target=/opt/vllm-wheel --mount=type=ssh" in text
    assert "vllm-overlay" not in text
    dry = cli("build", "--dry-run")
    assert dry.code == 0, dry.output
    assert "BUILD_CUSTOM_VLLM" not in dry.stdout
    assert "and write vLLM's uv-source mode (uv lock)" in dry.output  # the plan says prepare writes it


def test_uv_source_asks_for_a_repository_uv_can_fetch_and_script_refuses_a_uv_source_commit(project, remote, fork):
    root, cli = project
    pin_fork(root, fork, VLLM_SHA)
    point_pins_at(root, remote)
    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text.replace(f"repo: {fork.fork}\n", f"repo: {fork.fork}\n  install: uv-source\n"))
    refused = cli("resolve")
    assert refused.code == 2, refused.output
    assert "vllm.install: uv-source writes vllm.repo as a uv git source" in refused.stderr
    commit = remote.move_to_uv_source(fork.fork, "draft-tp", fork.head, fork.base)
    text = text.replace(f"repo: {fork.fork}\n", f"repo: {fork.fork}\n  install: script\n")
    (root / "pins.yaml").write_text(text.replace(f'"{remote.commit}"', f'"{commit}"'))
    script = cli("resolve")
    assert script.code == 4, script.output
    assert f"NeMo-RL at {commit[:12]} builds vLLM with uv from the git source" in script.stderr


def test_the_written_uv_source_smoke_build_runs(project, remote, fork, upstreams, tmp_path, engine):
    commit, _url = written_project(project, remote, fork, upstreams, tmp_path)
    smoke_builds_and_verifies(project, remote, commit, fork.head)
