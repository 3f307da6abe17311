"""`buildkit bump` end to end: a NeMo-RL-shaped repository over `git daemon` moved from the 946862e7 shape to the
7ea279ab-like one, vLLM on the fake GitHub with its wheel index; the real CLI in a child process."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from tests.support.fake_upstreams import VLLM_PR, VLLM_SHA
from tests.support.nemo_repo import LATER_SHAPE, script_before_patch, use_remote
from tests.support.textdiff import changed_lines, fidelity

PATCH_FILE = "patches/build-custom-vllm-wheel-location.patch"
NOT_THE_PROJECT = {"cache", "served", "rl", "megatron"}  # the test's cache and upstream repositories


def project_state(root: Path) -> dict[str, str]:
    """Every file and directory of the project (not the cache or the served repositories), with its bytes' hash."""
    state = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in NOT_THE_PROJECT:
            continue
        state[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return state


def test_bump_to_the_later_upstream_shape(project, remote):
    root, cli = use_remote(project, remote)
    before = (root / "pins.yaml").read_text()
    later = remote.move_to_later_shape()

    result = cli("bump", "--nemo-rl", "main")
    # Written, but the next build would stop on drift (upstream moved to CUDA 13.2): the summary leads with it and
    # the exit code says so.
    assert result.code == 7, result.output
    assert result.stdout.startswith("# buildkit bump\n\n**`buildkit build` would stop on these pins**")
    assert "would stop on these pins: drift: upstream builds on CUDA 13.2" in result.stderr

    # pins.yaml: the ref moved to the full SHA, the obsolete patch went, every other byte (comments too) stayed.
    after = (root / "pins.yaml").read_text()
    removed, added = changed_lines(before, after)
    assert added == [
        f'  ref: "{later}"  # quoted: unquoted hex can read as a number in YAML',
        "  patches: []",
    ]
    assert removed[0] == f'  ref: "{remote.commit}"  # quoted: unquoted hex can read as a number in YAML'
    assert removed[1:] == before[before.index("  patches:\n") : before.index("\n\nvllm:")].splitlines()
    assert "# buildkit pins: the inputs of the NeMo-RL + custom vLLM image." in after

    # The summary, printed and written: commits, stages, the obsolete patch with its reason, wheel, CUDA, files.
    summary = (root / "build" / "bump.md").read_text()
    assert result.stdout == summary
    assert f"`{remote.commit[:12]}` 2026-02-05 docs: add release runs to front page readme for 0.5 (#1879)" in summary
    assert f"`{later[:12]}` 2026-08-22 build: CUDA 13.2 base, uv 0.11, --frozen syncs" in summary
    for stage in ("uv-cache-seed", "trtllm-ccache-seed", "custom-setup", "trtllm-ccache-export"):
        assert f"| `{stage}` | added |" in summary
    assert "| `hermetic` | changed | +55 −12 |" in summary
    assert "Unchanged stages: `nemo-rl`." in summary
    assert "| `BASE_IMAGE` | global | `nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04` |" in summary
    assert f"| `{PATCH_FILE}` | obsolete: removed from pins.yaml |" in summary
    assert "upstream now takes it from argument 3 itself (line 26:" in summary
    assert "- drift: upstream builds on CUDA 13.2" in summary
    # The new lock's CUDA facts: the base image's config, the wheel's libcudart, resolve's check.
    assert "- base image: CUDA\\_VERSION 12.9.0.043 (config sha256:" in summary
    assert "- check: match: " in summary
    assert "line 8, above nemo\\_rl.ref:" in summary  # the comment that names the old commit's subject
    # How far the pin moved: git's own count on the served repository (not GitHub: no compare link).
    count = subprocess.run(
        ["git", "rev-list", "--count", f"{remote.commit}..{later}"],
        cwd=remote.work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"- nemo_rl: {count} commit" in summary and "compare on GitHub" not in summary
    for written in ("pins.yaml", "pins.lock", "build/prepare.json", "build/Dockerfile", "build/render.json"):
        assert f"- `{written}`" in summary

    # The new Dockerfile follows the later upstream line by line, and the lock is current and agrees with upstream.
    record = json.loads((root / "build" / "render.json").read_text())
    fidelity(LATER_SHAPE.read_text(), (root / "build" / "Dockerfile").read_text(), record["transformations"])
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["nemo_rl"]["commit"] == later and lock["patches"] == []
    assert record["lock_sha256"] == hashlib.sha256((root / "pins.lock").read_bytes()).hexdigest()
    assert json.loads((root / "build" / "prepare.json").read_text())["commit"] == later
    check = cli("resolve", "--check")
    assert check.code == 0, check.output
    # build would redo nothing before buildx: the prepared tree and the rendered Dockerfile are this lock's.
    plan = cli("build", "--dry-run", "--allow-drift")
    assert "would render" not in plan.output and "would resolve" not in plan.output, plan.output


def test_a_conflicting_patch_fails_with_hunk_and_line_and_writes_nothing(project, remote):
    root, cli = use_remote(project, remote)
    script = script_before_patch().replace(
        "cc99baf14dacc2497d0c5ed84e076ef2c37f6a4d", "0123456789abcdef0123456789abcdef01234567"
    )
    remote.new_commit("tools/build-custom-vllm.sh", script, "bump the default vllm ref")
    state = project_state(root)

    result = cli("bump")  # no option: nemo_rl to main
    assert result.code == 4, result.output
    assert "no longer fits upstream" in result.stderr and "Traceback" not in result.output
    assert "**failed**:" in result.stdout and "Nothing was written" in result.stdout
    assert f"| `{PATCH_FILE}` | conflicts at hunk 1, line 24 |" in result.stdout
    assert "the patch expects `GIT_REF=${2:-cc99baf14dacc2497d0c5ed84e076ef2c37f6a4d}`" in result.stdout
    assert "upstream has `GIT_REF=${2:-0123456789abcdef0123456789abcdef01234567}`" in result.stdout
    assert project_state(root) == state


def test_dry_run_does_the_work_and_writes_nothing(project, remote):
    root, cli = use_remote(project, remote)
    later = remote.move_to_later_shape()
    state = project_state(root)
    result = cli("bump", "--dry-run", "--allow-drift")  # upstream moved to CUDA 13.2: accepted here
    assert result.code == 0, result.output
    assert "**dry run**: nothing was written." in result.stdout
    assert f'+  ref: "{later}"' in result.stdout and "| `custom-setup` | added |" in result.stdout
    assert "Nothing written. (dry run)" in result.stdout
    assert project_state(root) == state


def test_a_ref_that_does_not_exist_fails_in_resolve_and_writes_nothing(project, remote):
    root, cli = use_remote(project, remote)
    state = project_state(root)
    result = cli("bump", "--nemo-rl", "no-such-branch")
    assert result.code == 4, result.output
    assert "no branch, tag or commit matches 'no-such-branch'" in result.stderr
    assert "**failed**:" in result.stdout
    assert project_state(root) == state


def test_a_ref_outside_the_grammar_is_refused_before_git_sees_it(project, remote):
    root, cli = use_remote(project, remote)
    state = project_state(root)
    result = cli("bump", "--nemo-rl", "--upload-pack=touch /tmp/x")
    assert result.code == 2 and "--nemo-rl: expected a commit SHA" in result.stderr, result.output
    assert project_state(root) == state


def test_vllm_moves_to_the_newest_commit_with_a_wheel_and_the_pr_goes(project, remote, upstreams):
    root, cli = use_remote(project, remote)
    with_wheel, without = "b" * 40, "c" * 40
    upstreams.github.add_commit(
        "vllm-project/vllm", with_wheel, "[Core] a commit with a wheel (#30001)", "2026-03-01T10:00:00Z"
    )
    upstreams.github.add_commit(
        "vllm-project/vllm", without, "[CI] a commit without one (#30002)", "2026-03-02T10:00:00Z", branch="main"
    )
    upstreams.wheels.add(with_wheel, f"vllm-0.15.0rc1.dev12+g{with_wheel[:9]}-cp38-abi3-manylinux_2_31_x86_64.whl")
    before = (root / "pins.yaml").read_text()

    result = cli("bump", "--vllm", "--json")
    assert result.code == 0, result.output
    report = json.loads(result.stdout)
    assert [m["pin"] for m in report["moves"]] == ["nemo_rl", "vllm"]
    assert report["moves"][0]["old"] == report["moves"][0]["new"]  # nemo_rl stays without --nemo-rl
    assert report["moves"][1]["old"]["commit"] == VLLM_SHA and report["moves"][1]["new"]["commit"] == with_wheel
    assert [s["commit"]["commit"] for s in report["vllm_skipped"]] == [without]
    assert "no wheel index for this commit" in report["vllm_skipped"][0]["reason"]
    assert report["pull_request"] == {
        "number": VLLM_PR,
        "merge_commit": VLLM_SHA,
        "compare": "ahead",
        "by": "GitHub compare",
        "contained": True,
        "detail": "",
    }
    assert report["wheel"]["commit"] == with_wheel and report["wheel"]["filename"].endswith("x86_64.whl")
    assert [p["status"] for p in report["patches"]] == ["applies"]

    removed, added = changed_lines(before, (root / "pins.yaml").read_text())
    assert added == [f'  ref: "{with_wheel}"'] and removed == [f'  ref: "{VLLM_SHA}"', f"  pr: {VLLM_PR}"]
    summary = (root / "build" / "bump.md").read_text()
    assert f"`vllm.pr` #{VLLM_PR} is removed from pins.yaml" in summary
    assert f"`{VLLM_SHA[:12]}` is an ancestor (GitHub compare: ahead)" in summary
    # How far vLLM moved, by GitHub's compare API (ahead_by), with the compare page.
    compare = f"https://github.com/vllm-project/vllm/compare/{VLLM_SHA}...{with_wheel}"
    assert f"- vllm: 1 commit ([compare on GitHub]({compare})) from `{VLLM_SHA[:12]}`" in summary
    assert report["moves"][1]["commits"] == 1 and report["moves"][1]["compare_url"] == compare
    assert f"- `{without[:12]}` 2026-03-02 \\[CI\\] a commit without one" in summary
    assert cli("resolve", "--check").code == 0


def test_vllm_without_any_wheel_names_how_many_were_tried(project, remote, upstreams):
    root, cli = use_remote(project, remote)
    for n in range(3):
        upstreams.github.add_commit(
            "vllm-project/vllm", f"{n + 1}" * 40, f"commit {n}", "2026-03-01T10:00:00Z", branch="main"
        )
    upstreams.wheels.listings.pop(VLLM_SHA)  # not even the pinned commit's wheel is there now
    state = project_state(root)
    result = cli("bump", "--vllm")
    assert result.code == 4, result.output
    assert "none of the 4 newest commits on main" in result.stderr and "tried 4, at most 20" in result.stderr
    assert "Not found: none of the 4 commits tried has one." in result.stdout
    assert project_state(root) == state


def test_pins_already_at_the_branch_head_are_left_as_they_are(project, remote):
    root, cli = use_remote(project, remote)  # pinned at main's head already
    state = project_state(root)
    result = cli("bump")
    assert result.code == 0, result.output
    assert "**unchanged**" in result.stdout and "| nemo_rl | `main` |" in result.stdout
    assert "| `patches/build-custom-vllm-wheel-location.patch` | applies |" in result.stdout
    assert "nemo\\_rl did not move" in result.stdout or "nemo_rl did not move" in result.stdout
    assert project_state(root) == state


def test_following_the_advice_after_a_bump_to_a_cuda_13_upstream_passes_resolve(project, remote, upstreams):
    """Issue 32: after a bump to upstream's CUDA 13.2 base, the summary names every pins change the next command
    needs (the base image and the wheel variant with it), and the known checks' rows. The test then does exactly
    what it says, through the pins editor, and runs the next command: resolve on the stand-in upstreams passes."""
    from buildkit.models.pinsedit import PinsEditor
    from tests.support.fake_upstreams import BASE_REPO

    root, cli = use_remote(project, remote)
    remote.move_to_later_shape()
    result = cli("bump", "--nemo-rl", "main")
    assert result.code == 7, result.output
    summary = (root / "build" / "bump.md").read_text()
    upstream_default = "nvcr.io/nvidia/cuda-dl-base:26.05-cuda13.2-devel-ubuntu24.04"
    assert f"- `base_image`: an image of CUDA 13 (upstream's default: `{upstream_default}`)" in summary
    assert (
        "- `wheel.variant`: a variant built for CUDA 13, e.g. `cu130` (CUDA 13.0); the pinned variant "
        "`default` is CUDA 12" in summary
    )
    for known in (
        "CUDA",
        "torch",
        "kernels",
        "ABI",
        "glibc",
        "driver",
        "content address",
        "reproducibility",
        "provenance",
    ):
        assert f"\n| {known} | " in summary, known
    assert "| reproducibility | not checked | no image built from these pins yet: buildkit build |" in summary

    # The base image alone: resolve stops (the cu12 wheel on a CUDA 13 base), as the summary says it would.
    upstreams.registry.add_image(BASE_REPO, "cuda13.2", cuda_version="13.2.0")
    cuda13 = f"{upstreams.registry.netloc}/{BASE_REPO}:cuda13.2"
    pins = root / "pins.yaml"
    bumped = pins.read_text()
    editor = PinsEditor(bumped, "pins.yaml")
    editor.set_text(("base_image",), cuda13)
    pins.write_text(editor.text())
    half = cli("resolve")
    assert half.code == 4 and "CUDA mismatch" in half.stderr, half.output

    # Both changes, as advised: resolve passes, and nothing stops build on drift any more.
    editor = PinsEditor(bumped, "pins.yaml")
    editor.set_text(("base_image",), cuda13)
    editor.set_text(("wheel", "variant"), "cu130")
    pins.write_text(editor.text())
    resolved = cli("resolve")
    assert resolved.code == 0, resolved.output
    assert json.loads((root / "pins.lock").read_text())["cuda"]["outcome"] == "match"
    render = cli("render")
    assert render.code == 0 and json.loads((root / "build" / "render.json").read_text())["drift"] == [], render.output


def test_following_the_advice_after_a_bump_to_another_torch_passes(project, remote, upstreams):
    """Issue 32: upstream's uv.lock moved to torch 2.11.0+cu130 while the pinned wheel was built for torch 2.9
    (its METADATA). bump stops (resolve refuses it, exit 4), and its summary says what that means and names every
    change the next bump needs. The test does exactly that, through the pins editor: half of it still stops;
    all of it passes, and the new lock's torch matches."""
    from buildkit.models.pinsedit import PinsEditor
    from tests.support.fake_upstreams import BASE_REPO, LATER_UV_LOCK

    root, cli = use_remote(project, remote)
    remote.move_to_later_shape()
    remote.new_files({"uv.lock": LATER_UV_LOCK}, "deps: torch 2.11.0 (cu130)", date="2026-08-22T10:00:00+00:00")
    # vLLM's main moved on: a commit whose cu130 wheel requires torch 2.11.0 (NeMo-RL at 7ea279ab locks vLLM 0.25.1
    # with torch 2.11.0: upstream-facts.md). Wheels moved to manylinux_2_28 by then.
    newer = "d" * 40
    upstreams.github.add_commit(
        "vllm-project/vllm", newer, "[Build] torch 2.11 (#40001)", "2026-08-01T10:00:00Z", branch="main"
    )
    upstreams.wheels.add(
        newer,
        f"vllm-0.25.1.dev3+g{newer[:9]}.cu130-cp38-abi3-manylinux_2_28_x86_64.whl",
        variant="cu130",
        requires_torch="torch==2.11.0",
    )
    state = project_state(root)

    result = cli("bump", "--nemo-rl", "main")
    assert result.code == 4, result.output
    assert "torch mismatch" in result.stderr and "Traceback" not in result.output
    summary = result.stdout
    assert (
        "**failed**: torch mismatch: the vLLM wheel vllm-0.14.0rc2.dev156+g4a5299c93-cp38-abi3-manylinux\\_2\\_31"
        "\\_x86\\_64.whl was built for torch==2.9.1 (its METADATA), but NeMo-RL's uv.lock installs torch "
        "2.11.0+cu130: vLLM's compiled extensions link against torch's C++ ABI" in summary
    )
    advice = summary[summary.index("To resolve, change pins.yaml") :]
    assert (
        "- `wheel.variant`: `cu130`, the CUDA of torch 2.11.0+cu130 (the pinned variant `default` is CUDA 12)" in advice
    )
    assert "- `base_image`: an image of CUDA 13 (the pinned one is CUDA 12.9.0.043;" in advice
    assert (
        "- `vllm.ref`: a commit whose wheel requires torch 2.11: `buildkit bump --nemo-rl main --vllm-branch main`"
        in advice
    )
    assert project_state(root) == state  # nothing written

    # The pins changes without moving vLLM: the wheel (4a5299c93's cu130 one) still names torch 2.9.
    upstreams.registry.add_image(BASE_REPO, "cuda13.2", cuda_version="13.2.0")
    editor = PinsEditor((root / "pins.yaml").read_text(), "pins.yaml")
    editor.set_text(("base_image",), f"{upstreams.registry.netloc}/{BASE_REPO}:cuda13.2")
    editor.set_text(("wheel", "variant"), "cu130")
    (root / "pins.yaml").write_text(editor.text())
    half = cli("bump", "--nemo-rl", "main")
    assert half.code == 4 and "torch mismatch" in half.stderr, half.output

    # All of it: the command the summary names, on those pins. It passes; nothing stops build either.
    done = cli("bump", "--nemo-rl", "main", "--vllm-branch", "main")
    assert done.code == 0, done.output
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["vllm"]["commit"] == newer and lock["cuda"]["outcome"] == "match"
    assert lock["torch"]["outcome"] == "match" and lock["torch"]["uv_lock"] == "2.11.0+cu130"
    assert "requires torch==2.11.0; NeMo-RL's uv.lock installs torch 2.11.0+cu130" in done.stdout
    assert cli("resolve", "--check").code == 0
