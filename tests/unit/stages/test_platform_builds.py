"""Issue 30, points 3-4, without the engine: each platform of a lock of build.platforms runs from a folder and an
image tag of its own (and the whole lock's hash), the builder says where each platform runs (native or QEMU),
an emulated platform needs --emulate, the later commands take --platform, and the report compares the platforms.
The builds themselves, on the engine, are tests/e2e/test_platform_smoke.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.models.gpufacts import GpuCheck, LibraryKernels
from buildkit.models.lock import LOCK_VERSION, PlatformFacts, lock_sha256, platform_lock, read_lock
from buildkit.models.lock.platforms import platform_rows
from buildkit.models.paths import Paths
from buildkit.models.pins import pins_from_text
from buildkit.stages.build.preflight import platform_checks
from buildkit.stages.context import Inputs, each_platform, platform_inputs, platform_tag
from buildkit.stages.report import demoted
from buildkit.world.buildx import parse_inspect
from tests.support.fake_upstreams import pins_text, two_platforms
from tests.support.projects import GOLDEN

FA3 = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
REPORT_LOCK = GOLDEN / "pins.lock"  # a real smoke build's lock (tests/fixtures/report)

# `docker buildx inspect buildkit-engine` on this machine's engine (buildx v0.38.2, BuildKit v0.34.2, a remote
# builder), 2026-11-27: linux/arm64 and the other emulated platforms come after the host's own, once
# scripts/engine-up.sh has registered qemu-user-static through binfmt_misc.
INSPECT = """Name:          buildkit-engine
Driver:        remote
Last Activity: 2026-11-27 02:23:10 +0000 UTC

Nodes:
Name:             buildkit-engine0
Endpoint:         unix:///run/buildkit/buildkitd.sock
Status:           running
BuildKit version: v0.34.2
Platforms:        linux/amd64, linux/amd64/v2, linux/amd64/v3, linux/amd64/v4, linux/arm64, linux/386
Labels:
 org.mobyproject.buildkit.worker.executor:         oci
 org.mobyproject.buildkit.worker.hostname:         vm
"""
# The same builder with a node appended on an arm64 machine (`docker buildx create --append`): buildx prints one
# block per node, each opened by its Name line.
APPENDED = (
    INSPECT
    + """
Name:             buildkit-engine1
Endpoint:         ssh://gb200-login
Status:           running
BuildKit version: v0.34.2
Platforms:        linux/arm64, linux/arm/v7, linux/arm/v6
"""
)


def two_platform_lock(tmp_path: Path):
    """The report fixture's lock (a real smoke build's) with a linux/arm64 platform beside it, and its pins."""
    lock = read_lock(REPORT_LOCK)
    pins = pins_from_text(two_platforms(pins_text("127.0.0.1:5000/buildkit/stand-in-base:1")), tmp_path / "p.yaml")
    arm_wheel = lock.wheel.model_copy(
        update={"filename": lock.wheel.filename.replace("x86_64", "aarch64"), "arch": "aarch64"}
    )
    arm = PlatformFacts(wheel=arm_wheel, base_image=lock.base_image, cuda=lock.cuda)
    build = lock.build.model_copy(update={"platforms": pins.build.platforms})
    both = lock.model_copy(
        update={"other_platforms": {"linux/arm64": arm}, "build": build, "lock_version": LOCK_VERSION}
    )
    both._as_read = None  # a lock of its own, not the fixture's bytes (to_json gives these facts)
    return both, pins


def test_each_platform_has_a_folder_and_the_lock_and_resolve_record_stay_at_the_top():
    paths = Paths.of(Path("/p/pins-gb200.yaml"), cache_dir=Path("/c"))
    arm = paths.for_platform("linux/arm64")
    assert arm.build_dir == Path("/p/build-pins-gb200/linux-arm64") and arm.platform == "linux/arm64"
    assert arm.build_record(False) == Path("/p/build-pins-gb200/linux-arm64/record.json")
    assert arm.dockerfile(True) == Path("/p/build-pins-gb200/linux-arm64/smoke/Dockerfile")
    assert arm.lock == paths.lock and arm.resolve_record == paths.resolve_record == Path(
        "/p/build-pins-gb200/resolve.json"
    )
    assert arm.index_record(False) == paths.index_record(False) == Path("/p/build-pins-gb200/index.json")
    assert arm.tree("a" * 40) == paths.tree("a" * 40)  # one prepared NeMo-RL tree for every platform
    assert arm.for_platform("linux/amd64").build_dir == Path("/p/build-pins-gb200/linux-amd64")


def test_a_platforms_inputs_carry_its_facts_its_tag_and_the_whole_locks_hash(tmp_path):
    lock, pins = two_platform_lock(tmp_path)
    inputs = Inputs(Paths.of(tmp_path / "p.yaml"), pins, [], lock)
    arm = platform_inputs(inputs, "linux/arm64")
    assert arm.lock.build.platform == "linux/arm64" and arm.lock.build.cuda_arch_list == "10.0"
    assert arm.lock.wheel.arch == "aarch64" and arm.lock.other_platforms is None
    assert arm.lock.build.tag == "nemo-rl:v0.5.0-spec-decode-arm64"
    assert arm.pins.wheel.arch == "aarch64" and arm.paths.build_dir.name == "linux-arm64"
    # Records and labels of each platform's build name the lock file they came from.
    assert arm.lock_sha256 == lock_sha256(lock) == lock_sha256(arm.lock) == inputs.lock_sha256
    assert lock_sha256(platform_lock(lock, "linux/amd64")) == lock_sha256(lock)
    assert platform_inputs(inputs, "linux/amd64").lock.build.tag == "nemo-rl:v0.5.0-spec-decode-amd64"
    with pytest.raises(InputError) as caught:
        platform_inputs(inputs, "linux/riscv64")
    assert caught.value.message == "--platform linux/riscv64: the lock holds linux/amd64, linux/arm64"
    with pytest.raises(InputError) as caught:
        platform_tag("nemo-rl:" + "t" * 125, "linux/arm64")  # a tag is at most 128 characters
    assert "build.tag" in caught.value.message


def test_later_commands_run_once_per_platform_and_one_thing_options_need_platform(tmp_path):
    lock, pins = two_platform_lock(tmp_path)
    (tmp_path / "p.lock").write_text(lock.to_json())
    paths = Paths.of(tmp_path / "p.yaml")
    assert [p.platform for p in each_platform(paths, None)] == ["linux/amd64", "linux/arm64"]
    assert [p.platform for p in each_platform(paths, "linux/arm64", **{"IMAGE": "x:1"})] == ["linux/arm64"]
    with pytest.raises(InputError) as caught:
        each_platform(paths, None, **{"IMAGE": "x:1"})
    assert caught.value.message.startswith("IMAGE names one platform's, and ")
    assert caught.value.hint == "pass --platform with one of them, e.g. --platform linux/arm64"
    with pytest.raises(InputError):
        each_platform(paths, "linux/s390x")
    single = Paths.of(tmp_path / "one.yaml")
    (tmp_path / "one.lock").write_text(read_lock(REPORT_LOCK).to_json())
    assert each_platform(single, None, **{"IMAGE": "x:1"}) == [single]  # one platform: as it always was


def test_the_builder_says_where_each_platform_runs_and_emulation_needs_asking():
    one = parse_inspect(INSPECT)
    assert [n.name for n in one.nodes] == ["buildkit-engine0"] and one.name == "buildkit-engine"
    assert one.where("linux/amd64") == ("buildkit-engine0", True)
    assert one.where("linux/arm64") == ("buildkit-engine0", False)  # after the host's own: QEMU
    assert one.where("linux/s390x") is None
    appended = parse_inspect(APPENDED)
    assert appended.where("linux/arm64") == ("buildkit-engine1", True)  # the appended arm64 node, natively
    assert appended.platforms == [*one.platforms, "linux/arm/v7", "linux/arm/v6"]  # every node's, once each

    (refused,) = platform_checks(one, "linux/arm64", emulate=False)
    assert refused.ok is False and refused.detail.startswith(
        "linux/arm64 runs only under emulation (emulated with QEMU on node buildkit-engine0, 4-10x slower"
    )
    assert "pass --emulate" in refused.fix and "docker buildx create --append --name buildkit-engine" in refused.fix
    allowed = platform_checks(one, "linux/amd64,linux/arm64", emulate=True)
    assert [c.ok for c in allowed] == [True, True]
    assert "native on node buildkit-engine0" in allowed[0].detail and "as --emulate allows" in allowed[1].detail
    (said,) = platform_checks(one, "linux/arm64")  # doctor: where it runs, not judged
    assert said.ok is True and "`buildkit build` needs --emulate for it" in said.detail
    (native,) = platform_checks(appended, "linux/arm64", emulate=False)
    assert native.ok is True and "native on node buildkit-engine1" in native.detail


def test_the_platforms_are_compared_fact_by_fact(tmp_path):
    lock, _ = two_platform_lock(tmp_path)

    def gpu(target: str, fa3: str) -> GpuCheck:
        # FlashAttention 3 as resolve found it in vLLM 0.14.0's real wheels (tests/e2e/test_realwheel_aarch64.py):
        # sm_90a SASS only, so it loads on H100 and has no kernel for GB200.
        libs = [LibraryKernels(library=FA3, required=False, sass=["sm_90a"], ptx=[], loads={target: fa3})]
        return GpuCheck(source="wheel", gpus=[target], libraries=libs)

    arm = lock.other_platforms["linux/arm64"].model_copy(update={"gpu": gpu("sm_100", "none")})
    lock = lock.model_copy(update={"gpu": gpu("sm_90", "SASS"), "other_platforms": {"linux/arm64": arm}})
    rows = {r.fact: r for r in platform_rows(lock)}
    assert rows["vLLM wheel"].differs and rows["vLLM wheel"].values["linux/arm64"].endswith("_aarch64.whl")
    assert rows[FA3].values == {"linux/amd64": "sm_90: SASS", "linux/arm64": "sm_100: none"}
    assert rows["target GPUs"].values == {"linux/amd64": "sm_90", "linux/arm64": "sm_100"}
    assert not rows["CUDA (base image / wheel)"].differs


def test_a_platforms_report_goes_one_heading_level_down_and_its_code_stays():
    text = "# Title\n\nline\n\n## Part\n\n```\n# not a heading\n```\n\n````md\n```\n# inside\n````\n### Deep\n"
    assert demoted(text) == (
        "## Title\n\nline\n\n### Part\n\n```\n# not a heading\n```\n\n````md\n```\n# inside\n````\n#### Deep\n"
    )


def test_inspect_json_is_not_needed_for_one_node():
    # A builder inspected before nodes were parsed (or a fake): its platforms, the first the node's own.
    from buildkit.world.buildx import BuilderInfo

    info = BuilderInfo("b", "docker-container", platforms=["linux/amd64", "linux/arm64"])
    assert info.where("linux/arm64") == ("b", False) and info.where("linux/amd64") == ("b", True)
    assert json.dumps(info.where("linux/amd64")) == '["b", true]'
