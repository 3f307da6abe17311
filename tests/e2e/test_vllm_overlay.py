"""A moved PR head rebuilds one layer (issue 42): the install RUN installs the wheel's commit, and the source's paths
that differ from it are laid over the install last (buildkit/models/overlay.py). The world is real git
(tests/support/vllmfork.py): vLLM's main with the merge base (its wheel in the stand-in index) and a fork whose head
moves by a push; every SHA is a commit of them, and BuildKit fetches the fork's head itself."""

from __future__ import annotations

import json
import re
import subprocess

from tests.support.fake_upstreams import VLLM_SHA
from tests.support.nemo_repo import use_remote
from tests.support.projects import push_to_engine_registry, smoke_project
from tests.support.signing import PASSWORD, key_pair
from tests.support.vllmfork import BRANCH, pin_fork, vllm_fork, wheel_name

CHECKOUT = "/opt/nemo-rl/3rdparty/vllm"
OVERLAY_STEPS = ("vllm-source", "vllm-overlay", f"--from=vllm-overlay / {CHECKOUT}/", f"cd {CHECKOUT} && rm -f")


def test_resolve_lists_each_differing_path_and_render_lays_them_over_the_wheel_commits_install(project, remote, fork):
    root, cli = use_remote(project, remote)
    pin_fork(root, fork, VLLM_SHA)
    assert cli("resolve").code == 0
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["vllm_compare"]["changed"] == {"vllm/config.py": "modified", "vllm/draft.py": "added"}
    fork.move({"vllm/draft.py": "y = 3\n", "vllm/old.py": None, "vllm/spec/tp.py": "z = 4\n"})
    assert cli("resolve").code == 0
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["vllm"]["commit"] == fork.head and lock["vllm_wheel"]["commit"] == fork.base
    assert lock["vllm_compare"]["changed"] == {
        "vllm/config.py": "modified",
        "vllm/draft.py": "added",
        "vllm/old.py": "removed",
        "vllm/spec/tp.py": "added",
    }
    rendered = cli("render")
    assert rendered.code == 0, rendered.output
    text = (root / "build" / "Dockerfile").read_text()
    # The install RUN installs the merge base, from vLLM itself; the fork's head is fetched by BuildKit.
    assert f"ARG BUILD_CUSTOM_VLLM_REF={fork.base}\n" in text and f"ARG BUILD_CUSTOM_VLLM_URL={fork.upstream}\n" in text
    assert f"ADD --keep-git-dir=false {fork.fork}#{fork.head} /\n" in text
    assert (
        "COPY --parents --from=vllm-source \\\n    vllm/config.py \\\n    vllm/draft.py \\\n    vllm/spec/tp.py \\\n"
        "    /\n" in text
    )
    # The target stage's steps (the venv prefetch, the fingerprint) end the install's stage; the target is a stage of
    # its own after it, FROM it (or a pushed image of it), with the overlay's steps, then the labels (no step).
    installed = text[text.index(" AS release-vllm-installed\n") : text.index(" AS release\n")]
    release = text[text.index(" AS release\n") :]
    assert "generate_fingerprint.py" in installed and "vllm-overlay" not in installed
    assert "FROM ${VLLM_INSTALLED_IMAGE:-release-vllm-installed} AS release\n" in text
    overlay_at = release.index(f"COPY --link --from=vllm-overlay / {CHECKOUT}/")
    assert overlay_at < release.index("# buildkit: provenance labels.")
    assert "    vllm/old.py \\\n" in release and "    vllm/__pycache__/draft.*.pyc \\\n" in release
    summary = {t["name"]: t["summary"] for t in json.loads((root / "build" / "render.json").read_text())[
        "transformations"]}  # fmt: skip
    assert summary["vllm_overlay"].startswith(
        f"vLLM installed from {fork.base[:12]} (the wheel's commit), then 3 path(s) of the source {fork.head[:12]} "
        "laid over it and 1 removed"
    )


def test_a_move_that_touches_what_the_install_reads_installs_the_source_and_says_why(project, remote, fork):
    root, cli = use_remote(project, remote)
    pin_fork(root, fork, VLLM_SHA)
    fork.move({"requirements/common.txt": "numba == 0.61.2\n", "vllm/draft.py": "y = 3\n"})
    assert cli("resolve").code == 0
    rendered = cli("render")
    assert rendered.code == 0, rendered.output
    text = (root / "build" / "Dockerfile").read_text()
    assert f"ARG BUILD_CUSTOM_VLLM_REF={fork.head}\n" in text and "vllm-overlay" not in text
    summary = {t["name"]: t["summary"] for t in json.loads((root / "build" / "render.json").read_text())[
        "transformations"]}  # fmt: skip
    assert summary["vllm_overlay"] == (
        f"no overlay: vLLM installed from the source {fork.head[:12]} itself: requirements/common.txt differs, and "
        "the install reads it (setup.py's get_requirements reads them; build-custom-vllm.sh edits and installs them)"
    )


_INSTRUCTION = re.compile(r"\[[a-z0-9-]+ [0-9]+/[0-9]+\] ")  # "[smoke 3/9] RUN ...": BuildKit's name of a step


def _ran(record: dict) -> list[str]:
    """The steps BuildKit ran (not from its cache) that are Dockerfile instructions, by BuildKit's own names."""
    return [s["name"] for s in record["steps"] if not s["cached"] and _INSTRUCTION.match(s["name"])]


def _cat(tag: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", tag, "cat", path], capture_output=True, text=True
    )


def test_a_moved_head_rebuilds_only_the_overlay(project, remote, fork, engine):
    """Two smoke builds on the engine: the head moves by a push between them; BuildKit's own progress (the build
    record's steps) shows that only the overlay's steps ran the second time, and the image holds the new head's
    files."""
    pin_fork(project[0], fork, VLLM_SHA)
    root, cli = smoke_project(project, remote)
    first = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert first.code == 0, first.output
    tag = json.loads((root / "build" / "smoke-record.json").read_text())["image"]["tag"]
    assert _cat(tag, f"{CHECKOUT}/vllm/draft.py").stdout == "y = 2\n"

    old = fork.head
    fork.move({"vllm/draft.py": "y = 3\n", "vllm/spec/tp.py": "z = 4\n"})
    assert cli("resolve").code == 0
    planned = cli("build", "--smoke", "--dry-run")
    assert planned.code == 0, planned.output
    assert f"  vLLM's source moved: {old[:12]} -> {fork.head[:12]}\n" in planned.stderr
    assert "runs again: only the vLLM overlay (3 path(s) of the source laid over the install" in planned.stderr
    again = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert again.code == 0, again.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    ran = _ran(record)
    # BuildKit asks the wheel's HTTP source again on every build and resolves the base image's FROM: neither makes
    # a layer (the wheel's bytes are content-addressed and the same, so nothing after it runs for them).
    rebuilt = [name for name in ran if "] FROM " not in name and not name.startswith("[vllm-wheel ")]
    assert rebuilt and all(any(marker in name for marker in OVERLAY_STEPS) for name in rebuilt), ran
    assert any(f"COPY --link --from=vllm-overlay / {CHECKOUT}/" in name for name in rebuilt), ran
    assert _cat(tag, f"{CHECKOUT}/vllm/draft.py").stdout == "y = 3\n"
    assert _cat(tag, f"{CHECKOUT}/vllm/spec/tp.py").stdout == "z = 4\n"
    verified = cli("verify", "--json")
    assert verified.code == 0, verified.output
    report = cli("report")
    assert report.code == 0, report.output
    assert (
        f"- Layers: vLLM installed from {fork.base[:12]} (the wheel's commit), then 3 path(s) of the source "
        f"{fork.head[:12]} laid over it and 0 removed, as the last steps of the image (the vLLM overlay: a moved PR "
        "head rebuilds them alone); vllm.__version__, vllm/_version.py, the dist-info and the checkout's .git name "
        f"{fork.base[:12]}, the commit installed, not the source {fork.head[:12]}, whose files verify holds the "
        "package to\n"
    ) in report.stdout.replace("\\_", "_")  # the report escapes Markdown's emphasis


# PR #31886 as its thread shows it (https://github.com/vllm-project/vllm/pull/31886, read through the search tool
# 2026-11-26): open, by stormchasingg, "[Feature][Bugfix] Support draft model tp any of speculative decode"; Python.
OPEN_PR, UPSTREAM, FORK = 31886, "vllm-project/vllm", "stormchasingg/vllm"
DATE = "2026-02-01T00:00:00Z"


def _on_github(gh, fork) -> None:
    """The stand-in GitHub answers for the real repositories: each commit with its parents and changed paths, the
    head's tree, and the PR open on the fork's branch."""
    gh.fork_of[FORK] = UPSTREAM
    gh.add_commit(UPSTREAM, fork.base, "[Core] config", DATE, parents=[], files=fork.changed(fork.base))
    gh.add_commit(UPSTREAM, fork.tip, "[Kernel] faster", DATE, branch="main", files=fork.changed(fork.tip))
    gh.add_commit(FORK, fork.head, "draft model TP", DATE, branch=BRANCH, parents=[fork.base],
                  files=fork.changed(fork.head))  # fmt: skip
    gh.trees[fork.head] = fork.vllm_tree(fork.head)
    gh.add_pull(UPSTREAM, OPEN_PR, "[Feature][Bugfix] Support draft model tp any of speculative decode", None, None,
                head=(fork.head, BRANCH, FORK))  # fmt: skip


def test_a_moved_pr_head_is_said_before_the_next_build_and_rebuilds_the_overlay(project, remote, upstreams, engine,
                                                                             tmp_path):  # fmt: skip
    """An open PR on GitHub (the stand-in answers for real repositories, fetched through pins.yaml's
    git_url_rewrites, as a mirror is): a smoke build of its head, then the head moves by a push; the next build's plan
    names the move as the PR's and says that only the overlay runs again."""
    fork = vllm_fork(tmp_path, names=(f"{UPSTREAM}.git", f"{FORK}.git"))
    try:
        upstreams.wheels.add(fork.base, wheel_name(fork.base))
        _on_github(upstreams.github, fork)
        root = project[0]
        text = (root / "pins.yaml").read_text().replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', f"pr: {OPEN_PR}")
        (root / "pins.yaml").write_text(text)
        root, cli = smoke_project(project, remote)
        mirror = f"  - url: {fork.daemon.url}\n    instead_of: https://github.com/\n"  # beside NeMo-RL's own
        (root / "pins.yaml").write_text((root / "pins.yaml").read_text() + mirror)
        built = cli("build", "--smoke", "--progress", "plain", timeout=600)
        assert built.code == 0, built.output
        kept = json.loads((root / "build" / "smoke-record.json").read_text())["inputs"]
        assert (kept["pr"], kept["pr_head"], kept["vllm_commit"], kept["vllm_install"]) == (
            OPEN_PR, fork.head, fork.head, fork.base)  # fmt: skip
        dockerfile = (root / "build" / "smoke" / "Dockerfile").read_text()
        assert f"ADD --keep-git-dir=false {fork.daemon.url}{FORK}.git#{fork.head} /\n" in dockerfile

        old = fork.head
        moved = fork.move({"vllm/draft.py": "y = 3\n"})
        upstreams.github.add_commit(FORK, moved, "draft model TP: review", DATE, parents=[old],
                                    files=fork.changed(moved))  # fmt: skip
        upstreams.github.trees[moved] = fork.vllm_tree(moved)
        upstreams.github.pulls[(UPSTREAM, OPEN_PR)]["head"]["sha"] = moved
        assert cli("resolve").code == 0
        planned = cli("build", "--smoke", "--dry-run")
        assert planned.code == 0, planned.output
        assert f"  vLLM's source moved: {old[:12]} -> {moved[:12]} (PR #{OPEN_PR}'s head moved)\n" in planned.stderr
        assert "wheel commit moved" not in planned.stderr  # the merge base is the same: the same wheel
        assert "runs again: only the vLLM overlay (2 path(s)" in planned.stderr
        again = cli("build", "--smoke", "--progress", "plain", timeout=600)
        assert again.code == 0, again.output
        tag = json.loads((root / "build" / "smoke-record.json").read_text())["image"]["tag"]
        assert _cat(tag, f"{CHECKOUT}/vllm/draft.py").stdout == "y = 3\n"
    finally:
        fork.stop()


def test_a_fork_that_cannot_be_reached_stops_the_build_before_buildx(project, remote, fork, engine):
    """BuildKit fetches the source for the overlay after the install RUN: a fork gone after resolve stops the build
    before buildx starts (exit 3, one line naming it), with nothing built or recorded."""
    pin_fork(project[0], fork, VLLM_SHA)
    root, cli = smoke_project(project, remote)
    fork.stop()
    stopped = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert stopped.code == 3, stopped.output
    assert f"error: vLLM's source {fork.fork} cannot be reached (" in stopped.stderr
    assert f"fetches {fork.head[:12]} from it after the install RUN, so the build stops now instead" in stopped.stderr
    assert "Traceback" not in stopped.output
    assert not (root / "build" / "smoke-record.json").exists()


def _manifest(ref: str) -> dict:
    """The platform manifest a pushed reference (an index of one platform and its attestation) names."""
    host, rest = ref.split("/", 1)
    name, _, reference = rest.rpartition("@") if "@" in rest else rest.rpartition(":")
    accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"

    def get(what: str) -> dict:
        out = subprocess.run(["curl", "-fsS", "-H", f"Accept: {accept}", f"http://{host}/v2/{name}/manifests/{what}"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        return json.loads(out)

    top = get(reference)
    if "manifests" not in top:
        return top
    (entry,) = [m for m in top["manifests"] if m.get("platform", {}).get("architecture") == "amd64"]
    return get(entry["digest"])


def test_a_push_takes_the_install_from_its_own_pushed_image_and_a_moved_head_pushes_the_overlay_alone(
    project, remote, fork, engine, cosign, tmp_path
):
    """A pushed smoke build with an overlay pushes the install's stage by digest once, and the target starts FROM it,
    so BuildKit rewrites only the overlay's layers' timestamps; after a push to the fork the install image is reused
    (its probe digest is the recorded one), only the overlay's steps run, the image's lower layers are the install
    image's own blobs, and verify --provenance follows the install image's provenance to the base and the wheel."""
    pin_fork(project[0], fork, VLLM_SHA)
    root, cli = smoke_project(project, remote)
    repository = push_to_engine_registry(root, "overlay")
    first = cli("build", "--smoke", "--push", "--progress", "plain", timeout=600)
    assert first.code == 0, first.output
    assert f"the vLLM install's stage is pushed by digest to {repository}, once per install" in first.stderr
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    installed = record["installed"]
    assert installed["image"].startswith(f"{repository}@sha256:") and not installed["reused"]
    assert [c.split(" --target ")[1].split()[0] for c in installed["commands"]] == ["smoke-vllm-installed"] * 2
    assert f"VLLM_INSTALLED_IMAGE={installed['image']}" in record["argv"]

    fork.move({"vllm/draft.py": "y = 3\n"})
    assert cli("resolve").code == 0
    planned = cli("build", "--smoke", "--push", "--dry-run")
    assert planned.code == 0, planned.output
    probe, push, final = planned.stdout.splitlines()
    assert f"--output type=image,name={repository},push=false" in probe and "--target smoke-vllm-installed" in probe
    assert "push-by-digest=true" in push and "VLLM_INSTALLED_IMAGE=" in final and "--target smoke " in final
    again = cli("build", "--smoke", "--push", "--progress", "plain", timeout=600)
    assert again.code == 0, again.output
    assert f"the vLLM install is the one {installed['image']} holds" in again.stderr
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["installed"]["image"] == installed["image"] and record["installed"]["reused"]
    assert len(record["installed"]["commands"]) == 1  # the probe alone
    rebuilt = [name for name in _ran(record) if "] FROM " not in name and not name.startswith("[vllm-wheel ")]
    assert rebuilt and all(any(marker in name for marker in OVERLAY_STEPS) for name in rebuilt), rebuilt
    install_layers = [layer["digest"] for layer in _manifest(installed["image"])["layers"]]
    final_layers = [layer["digest"] for layer in _manifest(f"{repository}@{record['image']['digest']}")["layers"]]
    assert final_layers[: len(install_layers)] == install_layers and len(final_layers) > len(install_layers)

    key, public = key_pair(cosign, tmp_path / "keys")
    env = {"COSIGN_PASSWORD": PASSWORD, "BUILDKIT_COSIGN": cosign}
    attested = cli("attest", "--key", str(key), env=env, timeout=300)
    assert attested.code == 0, attested.output[-3000:]
    verified = cli("verify", "--provenance", "--key", str(public), "--json", env=env, timeout=300)
    results = {r["name"]: r for r in json.loads(verified.stdout)["results"]}
    assert verified.code == 0, "\n".join(
        f"{r['name']}: {r['reason']}" for r in results.values() if r["status"] != "pass"
    )
    assert results["BuildKit provenance: vLLM install image"]["status"] == "pass"
    assert installed["image"] in results["BuildKit provenance: vLLM install image"]["reason"]
    # enroot imports the pushed index as it is: the image's amd64 entry, buildx's attestation entry passed over.
    assert results["enroot import"]["status"] == "pass" and "passed over" in results["enroot import"]["reason"]
    report = cli("report")
    assert report.code == 0, report.output
    assert (
        f"- vLLM install image: `{installed['image']}`, pushed by an earlier build of the same install (the same probe "
        "digest) and not pushed again; the overlay's stage started FROM it"
    ) in report.stdout
