"""The report as a checked artifact (issue 41, point 3): every row of its tables and every figure it states,
re-derived here from the records and from the files they name (each sha256 recomputed from the bytes, each count
recounted), never read back from buildkit's own models.

The cases:

- the reference build: the reference pins resolved, prepared and rendered against the stand-in upstreams
  (tests/support/fake_upstreams.py) and the NeMo-RL-shaped repository (tests/support/nemo_repo.py); nothing is built,
  since a build needs the engine, and the report says so;
- an open PR: the same, with vLLM pinned to an open PR of a fork (PR #31886's shape, as tests/e2e/test_vllm_source.py
  stands it up), built with the wheel of its merge base;
- two platforms (linux/amd64 for H100, linux/arm64 for GB200), resolved and rendered the same way: the first screen
  is the verdict matrix, each column that platform's verdict, each platform's report below checked as one report;
- a smoke build: the records only a build on the engine writes (the build record, verify's, the export's, and the
  render and prepare records of that build) are the ones recorded from a real smoke build in tests/fixtures/report/
  (its README says how);
- the five-minute tour (README): resolve alone, whose stand-in wheel gives the ABI check 0 symbols to look up.

A build of two platforms is not among them here: a real one needs the engine, so tests/e2e/test_platform_smoke.py
holds the report after its two-platform push (built, verified, exported, attested) to the same checks.
The last tests hold the checks themselves to account: each of a list of false statements, put into the recorded
smoke build's true report, is caught.

The files the records name are recomputed where they exist: the lock, the rendered Dockerfile, upstream's Dockerfile
at the locked commit (from the served repository), the patch and the file it changed (before, from the repository;
after, from the prepared tree or the patch applied again), the wheel's bytes (from the stand-in index), the base
image's index, manifest and config (from the stand-in registry). What only the recorded build saw (its image's
digests, the squashfs file, the recording's wheel and base image) is taken from the records and said so below.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.fake_upstreams import VLLM_SHA, WHEEL_ARM, cudart_for, minimal_elf, two_platforms
from tests.support.paths import REPO_ROOT, REPORT_FIXTURES
from tests.support.projects import golden_project
from tests.support.reporttruth import (
    EM_AARCH64,
    FIRST_SCREEN,
    Files,
    Platform,
    check_first_screen,
    check_one,
    check_several,
    plain,
    platform_facts,
    recorded_files,
    rendered,
    report,
    section,
    table,
    upstream_files,
)

# An open PR of a fork, as tests/e2e/test_vllm_source.py stands it up: main moves on past the reference commit, the
# fork branches at it and changes one Python file (so the wheel of the merge base, VLLM_SHA, carries its kernels).
UPSTREAM, FORK, OPEN_PR = "vllm-project/vllm", "stormchasingg/vllm", 31886
MAIN_1, MAIN_2, HEAD_1, HEAD_2 = "1" * 40, "2" * 40, "a" * 40, "b" * 40
PYTHON_PATH = "vllm/v1/worker/gpu_model_runner.py"


def test_the_reference_builds_report_is_true(project, remote, upstreams):
    """The reference pins, resolved, prepared and rendered; nothing built (a build needs the engine)."""
    root, cli, lock = rendered(project, remote)
    p = Platform("linux/amd64", root / "build", lock).load()
    text = report(cli)
    check_first_screen(text)
    check_one(text, p, upstream_files(upstreams, remote, root, lock, p.build_dir), root)
    assert "**Nothing has been built yet**" in text


def fork_history(upstreams) -> None:
    gh, date = upstreams.github, "2026-02-01T00:00:00Z"
    gh.fork_of[FORK] = UPSTREAM
    gh.add_commit(UPSTREAM, MAIN_1, "[Core] main moves on", date, files=["vllm/engine/arg_utils.py"])
    gh.add_commit(UPSTREAM, MAIN_2, "[Kernel] main moves on", date, branch="main", files=["csrc/cache_kernels.cu"])
    gh.add_commit(FORK, HEAD_1, "draft model TP", date, parents=[VLLM_SHA], files=[PYTHON_PATH])
    gh.add_commit(FORK, HEAD_2, "draft model TP: more", date, branch="draft-tp", files=[PYTHON_PATH])
    title = "[Feature][Bugfix] Support draft model tp any of speculative decode"
    gh.add_pull(UPSTREAM, OPEN_PR, title, None, None, head=(HEAD_2, "draft-tp", FORK))


def test_an_open_prs_report_is_true(project, remote, upstreams):
    """vLLM at the head of an open PR of a fork, its kernels from the wheel of the merge base: the report names the
    wheel's commit where it speaks of the wheel, and recounts the paths that differ."""
    root, _ = project
    fork_history(upstreams)
    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text.replace(f'ref: "{VLLM_SHA}"\n  pr: 24322', f"pr: {OPEN_PR}"))
    root, cli, lock = rendered(project, remote)
    assert (lock["vllm"]["commit"], lock["vllm_wheel"]["commit"]) == (HEAD_2, VLLM_SHA)
    p = Platform("linux/amd64", root / "build", lock).load()
    text = report(cli)
    check_first_screen(text)
    check_one(text, p, upstream_files(upstreams, remote, root, lock, p.build_dir), root)
    # The paths that differ between the source and the wheel's commit: the fork's two commits change one file.
    changed = {path for sha in (HEAD_1, HEAD_2) for path in upstreams.github.changed[sha]}
    assert f"paths that differ from the source: {len(changed)} (GitHub compare)" in plain(text)
    smoke = report(cli, "--format", "json")
    assert json.loads(smoke)["commits"]["vllm_wheel"]["commit"] == VLLM_SHA


def test_a_smoke_builds_report_is_true(cli, tmp_path, remote):
    """The records of a real smoke build (tests/fixtures/report/: build record, verify, export, render, prepare)."""
    root = golden_project(tmp_path)
    lock = json.loads((root / "pins.lock").read_text())
    p = Platform("linux/amd64", root / "build", lock).load()
    text = report(cli, "--pins", str(root / "pins.yaml"))
    check_first_screen(text)
    files = recorded_files(remote, root, lock, tmp_path, p.build_dir)
    check_one(text, p, files, root)
    assert set(files.recorded_only.values()) >= {
        "the recorded build's wheel (its index stood in on that machine)",
        "the build record's image digest",
        "the export record (the .sqsh is not kept with the records)",
        "the recorded render's Dockerfile (not kept with the records)",
    }


def test_two_platforms_report_is_true(project, remote, upstreams):
    """One lock for linux/amd64 and linux/arm64, resolved and rendered: the first screen is the verdict matrix."""
    root, _ = project
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"].library = minimal_elf(cudart_for("default"), EM_AARCH64)
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    root, cli, lock = rendered(project, remote)
    platforms = [
        Platform(name, root / "build" / name.replace("/", "-"), platform_facts(lock, name)).load()
        for name in ("linux/amd64", "linux/arm64")
    ]
    files = {p.name: upstream_files(upstreams, remote, root, lock, p.build_dir) for p in platforms}
    check_several(report(cli), platforms, files, root)


def test_the_five_minute_tours_report_is_true(project, upstreams):
    """The tour's steps (README): resolve against the stand-ins, then report. Its wheel's stand-in libraries hold no
    undefined symbol, so the ABI check looked up none (`gpu.abi.checked: 0`): nothing judged is not a pass."""
    root, cli = project
    assert cli("resolve").code == 0
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["gpu"]["abi"]["checked"] == 0 and lock["gpu"]["abi"]["against"][0].startswith("torch ")
    p = Platform("linux/amd64", root / "build", lock).load()
    text = report(cli)
    check_first_screen(text)
    files = Files(lock_bytes=(root / "pins.lock").read_bytes())
    files.patches = {x["file"]: (root / x["file"]).read_bytes() for x in lock["patches"]}
    files.wheels = {path.rsplit("/", 1)[1]: wheel.data() for path, wheel in upstreams.wheels.files.items()}
    files.registry = {digest: body for digest, (_media, body) in upstreams.registry.blobs.items()}
    files.commits = {sha for shas in upstreams.github.commits.values() for sha in shas}
    check_one(text, p, files, root)
    verdict = {row[0]: row[1] for row in table(section(text, "Verdict"), "| Check |")}
    assert verdict["ABI"] == "could not check"
    assert "0 undefined symbols looked up in torch" in plain(text) and "nothing was judged" in plain(text)


# Each a statement of the recorded smoke build's report, and what a report that says something not so would say.
FALSEHOODS = {
    "the image's layers counted another way": ("| Layers | 6 layers, 1 empty |", "| Layers | 6 |"),
    "the Dockerfile named as another file": ("`build/smoke/Dockerfile` as render", "`build/Dockerfile` as render"),
    "a result": ("| driver | not applicable |", "| driver | not run yet |"),
    "a count": ("Checks: 10 pass,", "Checks: 11 pass,"),
    "the frontend left out by a flag": (
        "a smoke build renders its Dockerfile without it",
        "render ran with --no-syntax",
    ),
    "a release's needs": ("build's preflight asks 1 GB free", "about 100 GB free"),
    "the wheel": ("with the precompiled wheel of", "with the wheel for vLLM"),
    "a sha256": ("Patch sha256 `3", "Patch sha256 `4"),
    "a layer's size": ("| 12.9 KiB |", "| 12.8 KiB |"),
    "the script's length": ("The script (8 commands)", "The script (9 commands)"),
    "a verify check's kind": ("| sglang is not importable | not applicable |", "| sglang is not importable | pass |"),
}


def test_the_checks_catch_a_report_that_says_what_is_not_so(cli, tmp_path, remote):
    """The checks above fail on a report that says one thing that is not so: the recorded smoke build's report,
    true as it is (test_a_smoke_builds_report_is_true), with one statement changed at a time."""
    root = golden_project(tmp_path)
    lock = json.loads((root / "pins.lock").read_text())
    p = Platform("linux/amd64", root / "build", lock).load()
    text = report(cli, "--pins", str(root / "pins.yaml"))
    files = recorded_files(remote, root, lock, tmp_path, p.build_dir)
    check_one(text, p, files, root)
    for what, (was, now) in FALSEHOODS.items():
        assert was in text, what
        with pytest.raises((AssertionError, StopIteration)):
            check_one(text.replace(was, now, 1), p, files, root)
            raise ValueError(f"not caught: {what}")


def test_the_docs_say_how_long_the_golden_report_is_and_where_its_verdict_ends():
    """docs/reference/verify-and-report.md states the golden smoke report's length and its first screen's: both as
    the golden is, and the verdict within the first screen."""
    golden = (REPORT_FIXTURES / "expected.md").read_text().splitlines()
    page = " ".join((REPO_ROOT / "docs" / "reference" / "verify-and-report.md").read_text().split())
    stated = re.search(
        r"is (\d+) lines, of which the verdict, with what the build left out, is the first (\d+)\.", page
    )
    assert stated is not None
    after = next(i for i, line in enumerate(golden) if line.startswith("## ") and line != "## Verdict")
    verdict_end = max(i for i in range(after) if golden[i].strip()) + 1
    assert (int(stated[1]), int(stated[2])) == (len(golden), verdict_end)
    assert verdict_end <= FIRST_SCREEN
