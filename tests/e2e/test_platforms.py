"""Issue 30, points 1-2: one pins file and one lock for H100 (linux/amd64) and GB200 (linux/arm64).

`build.platforms` maps each platform to its GPUs; resolve reads, per platform and beside each other, the wheel for
that arch (of the one wheel commit), the base image's manifest for that platform, and the checks on them. The
GB200 wheel is vLLM 0.14.0's real aarch64 wheel from PyPI (tests/support/realwheels.py) under the per-commit index's
aarch64 name; the stand-in registry serves a two-platform index (tests/support/fake_upstreams.py FakeRegistry)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.models.pins import dump_build, pins_from_text
from buildkit.stages.build.preflight import platform_checks
from buildkit.world.buildx import BuilderInfo
from tests.support.fake_upstreams import (
    BASE_REPO,
    BASE_TAG,
    NEMO_RL_SHA,
    NEMO_RL_UV_LOCK_HEADER,
    VLLM_SHA,
    WHEEL_ARM,
    WHEEL_X86,
    RealFile,
    WheelFile,
    cudart_for,
    minimal_elf,
    pins_text,
    two_platforms,
)
from tests.support.nemo_repo import use_remote
from tests.support.paths import REPORT_FIXTURES
from tests.support.realwheels import VLLM_0_14_0, VLLM_0_14_0_AARCH64, real_wheel

FA3 = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
REPORT_LOCK = REPORT_FIXTURES / "pins.lock"


def test_the_single_platform_form_keeps_its_hash_and_the_two_forms_never_mix(tmp_path):
    single = pins_text("127.0.0.1:5000/buildkit/stand-in-base:1")
    pins = pins_from_text(single, tmp_path / "pins.yaml")
    assert "platforms" not in dump_build(pins.build)
    assert pins.build.targets() == [("linux/amd64", "9.0")]
    multi = pins_from_text(two_platforms(single), tmp_path / "pins.yaml")
    assert multi.build.targets() == [("linux/amd64", "9.0"), ("linux/arm64", "10.0")]
    assert (multi.build.platform, multi.build.cuda_arch_list, multi.wheel.arch) == ("linux/amd64", "9.0", "x86_64")
    gb200 = multi.for_platform("linux/arm64")
    assert (gb200.build.platform, gb200.build.cuda_arch_list, gb200.wheel.arch) == ("linux/arm64", "10.0", "aarch64")
    assert gb200.build.platforms is None and gb200.build.tag == multi.build.tag
    assert "platform" not in dump_build(multi.build) and "cuda_arch_list" not in dump_build(multi.build)
    for bad, said in (
        (
            two_platforms(single).replace("  platforms:", "  platform: linux/amd64\n  platforms:"),
            "build.platforms replaces build.platform",
        ),
        (two_platforms(single).replace("wheel:\n", "wheel:\n  arch: aarch64\n"), "wheel.arch follows build.platforms"),
        (two_platforms(single).replace("linux/arm64: {", "linux/riscv64: {"), "expected linux/amd64 or linux/arm64"),
    ):
        with pytest.raises(InputError) as caught:
            pins_from_text(bad, tmp_path / "pins.yaml")
        assert said in caught.value.message


@pytest.mark.e2e
def test_one_lock_holds_h100_and_gb200(project, upstreams):
    """One resolve: the real x86_64 wheel and the amd64 manifest (H100) as the lock's own facts, the real aarch64 wheel
    and the arm64 manifest of the same index (GB200) beside them, each with its own GPU table: FlashAttention 3 has
    no kernel for GB200 (shown, not stopped: build.gpu_required names _C and _moe_C). NeMo-RL's uv.lock is served
    without its torch tables (the aarch64 torch is on download.pytorch.org, out of reach here): the ABI is not
    checked, and each platform says so. `resolve --check` holds the lock to the pins; the dry run plans one build
    per platform and the report compares them."""
    root, cli = project
    # Both of vLLM 0.14.0's real wheels from PyPI, under the per-commit index's names.
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"] = RealFile(
        real_wheel(VLLM_0_14_0_AARCH64), VLLM_0_14_0_AARCH64.sha256
    )
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"] = RealFile(real_wheel(VLLM_0_14_0), VLLM_0_14_0.sha256)
    upstreams.github.files[("NVIDIA-NeMo/RL", NEMO_RL_SHA, "uv.lock")] = NEMO_RL_UV_LOCK_HEADER.encode()
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    result = cli("resolve", "--json", timeout=600)
    assert result.code == 0, result.output[-3000:]
    lock = json.loads(result.stdout)
    assert (lock["wheel"]["filename"], lock["base_image"]["platform"]) == (WHEEL_X86, "linux/amd64")
    assert lock["gpu"]["gpus"] == ["sm_90"]
    gb200 = lock["other_platforms"]["linux/arm64"]
    assert (gb200["wheel"]["filename"], gb200["wheel"]["arch"]) == (WHEEL_ARM, "aarch64")
    assert gb200["wheel"]["sha256"] == VLLM_0_14_0_AARCH64.sha256
    registry = upstreams.registry
    assert gb200["base_image"]["manifest_digest"] == registry.platform_digest(BASE_REPO, BASE_TAG, "linux/arm64")
    assert lock["base_image"]["manifest_digest"] == registry.platform_digest(BASE_REPO, BASE_TAG, "linux/amd64")
    assert gb200["base_image"]["index_digest"] == lock["base_image"]["index_digest"]
    assert gb200["gpu"]["gpus"] == ["sm_100"]
    assert {r["library"]: r["loads"]["sm_100"] for r in gb200["gpu"]["libraries"]}[FA3] == "none"
    assert gb200["cuda"]["outcome"] == "match"
    # its seven shared objects and the 47 Python files precompiled mode copies out of the wheel, by sha256
    files = gb200["vllm_files"]
    assert len([f for f in files if f.endswith(".so")]) == 7 and len([f for f in files if f.endswith(".py")]) == 47
    assert "linux/arm64: " in result.stderr  # the GB200 checks' notes, said with the platform
    assert f"wheel linux/arm64: downloading {WHEEL_ARM}" in result.stderr  # its download, said with its platform
    check = cli("resolve", "--check")
    assert check.code == 0, check.output
    assert "  linux/arm64   wheel aarch64, 427.3 MiB; GPUs 10.0" in check.stdout  # a row pair per more platform

    # One build plan per platform, each with its own tag and folder (the builds: tests/e2e/test_platform_smoke.py).
    dry = cli("build", "--dry-run")
    assert dry.code == 0, dry.output
    plans = [dict(zip(words, words[1:], strict=False)) for words in map(shlex.split, dry.stdout.splitlines())]
    assert [(p["--platform"], p["--tag"]) for p in plans] == [
        ("linux/amd64", "nemo-rl:v0.5.0-spec-decode-amd64"),
        ("linux/arm64", "nemo-rl:v0.5.0-spec-decode-arm64"),
    ]
    assert [Path(p["--file"]).parent.name for p in plans] == ["linux-amd64", "linux-arm64"]
    assert "linux/arm64 (in " in dry.stderr and "(no index: that needs --push)" in dry.stderr
    # The report compares them from the lock, before anything is built: FlashAttention 3 has no GB200 kernel.
    report = cli("report", "--format", "json")
    assert report.code == 0, report.output
    compared = json.loads(report.stdout)
    differs = {d["fact"]: d["values"] for d in compared["differences"]}
    assert differs[FA3] == {"linux/amd64": "sm_90: SASS", "linux/arm64": "sm_100: none"}  # H100 loads it, GB200 not
    assert differs["target GPUs"] == {"linux/amd64": "sm_90", "linux/arm64": "sm_100"}
    assert set(compared["platforms"]) == {"linux/amd64", "linux/arm64"} and compared["index"] is None
    markdown = cli("report")
    assert "## What differs between the platforms" in markdown.stdout and "\n# linux/arm64\n" in markdown.stdout
    one = cli("verify", "nemo-rl:x")
    assert one.code == 2 and "IMAGE names one platform's" in one.stderr, one.output


@pytest.mark.e2e
def test_a_decoy_x86_64_wheel_under_the_aarch64_name_is_refused(project, upstreams):
    """The two-platform pins, and the index serving x86-64 shared objects (the stand-in's minimal ELF, EM_X86_64)
    under the aarch64 wheel's name: the name agrees with linux/arm64, the bytes do not. Refused (exit 4), the
    library and both machines named, no lock."""
    root, cli = project
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    result = cli("resolve", timeout=300)
    assert result.code == 4, result.output[-3000:]
    line = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert line == (
        f"error: wheel {WHEEL_ARM}: vllm/_C.abi3.so is an ELF file for x86_64, not aarch64: it would not "
        "load on the pinned platform"
    )
    assert not (root / "pins.lock").exists()


@pytest.mark.e2e
def test_a_wheel_commit_without_the_gb200_wheel_is_passed_over_and_said(project, upstreams):
    """One wheel commit serves both platforms: the index listing no aarch64 wheel for it stops resolve (exit 4),
    the aarch64 wheel named, no lock."""
    root, cli = project
    upstreams.wheels.listings[VLLM_SHA]["default"].remove(WHEEL_ARM)
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    result = cli("resolve")
    assert result.code == 4, result.output
    assert "has a vllm wheel for linux x86_64 and aarch64" in result.stderr
    assert "the merge base's: no vllm wheel for linux aarch64" in result.stderr
    assert not (root / "pins.lock").exists()


def test_doctor_says_the_platforms_and_checks_each_on_the_builder(project, tmp_path):
    """doctor on pins with build.platforms: the setting names both, from build.platforms; the builder is checked
    for each (what `docker buildx inspect` lists for a docker-container builder on an amd64 host without emulation:
    linux/amd64 and its variants, buildx's words)."""
    root, cli = project
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    # buildx records its selected builder per engine address in DOCKER_CONFIG: another address in the real one would
    # unselect the engine's builder for every later test, so the config is this test's own.
    doctor = cli(
        "doctor",
        "--json",
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock", "DOCKER_CONFIG": str(tmp_path / "docker-config")},
    )
    settings = {s["name"]: (s["value"], s["source"]) for s in json.loads(doctor.stdout)["settings"]}
    assert settings["platform"] == ("linux/amd64,linux/arm64", "pins.yaml build.platforms")
    host = BuilderInfo(
        "buildkit-engine",
        "docker-container",
        platforms=["linux/amd64", "linux/amd64/v2", "linux/amd64/v3", "linux/386"],
    )
    checks = platform_checks(host, settings["platform"][0])
    assert [(c.ok, c.detail.split(" (")[0]) for c in checks] == [
        (True, "linux/amd64 supported"),
        (False, "linux/arm64 not offered"),
    ]
    assert "emulation (binfmt)" in checks[1].fix


def test_a_lock_whose_build_names_other_platforms_than_its_facts_is_stale_not_a_crash(tmp_path):
    """A lock edited so its build.platforms lacks a platform its other_platforms still holds: one problem line
    (found by review: it was an internal error)."""
    from buildkit.models.lock import PlatformFacts, consistency_problems, read_lock

    lock = read_lock(REPORT_LOCK)
    pins = pins_from_text(two_platforms(pins_text("127.0.0.1:5000/buildkit/stand-in-base:1")), tmp_path / "p.yaml")
    arm = PlatformFacts(wheel=lock.wheel, base_image=lock.base_image, cuda=lock.cuda)
    edited = lock.model_copy(update={"other_platforms": {"linux/arm64": arm}})  # build still single-platform
    problems = consistency_problems(pins, edited, [])
    assert "build.platforms: the lock's build names linux/amd64, its facts linux/amd64, linux/arm64" in problems


@pytest.mark.e2e
def test_bump_of_a_two_platform_lock_renders_each_platform(project, remote, upstreams):
    """bump on pins with build.platforms: one resolve of both, one prepared tree, and each platform's Dockerfile
    (its own wheel) written with the rest, in its own folder."""
    root, _ = project
    arm = upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"]
    assert isinstance(arm, WheelFile)
    arm.library = minimal_elf(cudart_for("default"), 183)  # EM_AARCH64: the aarch64 stand-in holds aarch64 code
    (root / "pins.yaml").write_text(two_platforms((root / "pins.yaml").read_text()))
    root, cli = use_remote(project, remote)
    later = remote.move_to_later_shape()
    result = cli("bump", "--nemo-rl", "main", "--allow-drift", timeout=300)
    assert result.code == 0, result.output[-3000:]
    lock = json.loads((root / "pins.lock").read_text())
    assert lock["nemo_rl"]["commit"] == later and list(lock["other_platforms"]) == ["linux/arm64"]
    for folder, arch in (("linux-amd64", "x86_64"), ("linux-arm64", "aarch64")):
        dockerfile = (root / "build" / folder / "Dockerfile").read_text()
        assert f"manylinux_2_31_{arch}.whl" in dockerfile
        rendered = json.loads((root / "build" / folder / "render.json").read_text())
        assert rendered["nemo_rl_commit"] == later
