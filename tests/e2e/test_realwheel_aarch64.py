"""vLLM 0.14.0's real aarch64 wheel from PyPI (GB200, issue 30), read with buildkit's own readers: the scan of the
wheel's shared objects (buildkit/gpu/scan.py), their ELF machine (buildkit/gpu/elfsections.py) and their fatbins
(buildkit/gpu/fatbin.py), judged for the pinned GPUs (buildkit/gpu/coverage.py).

The bytes are PyPI's `vllm-0.14.0-cp38-abi3-manylinux_2_31_aarch64.whl` (https://pypi.org/project/vllm/0.14.0/
#files; tests/support/realwheels.py fetches it once into a cache outside the repository and checks PyPI's sha256). Every
expected value below is what these readers found in those bytes (2026-11-26), and agrees with issue 30's text: the
same seven shared objects as the x86_64 wheel; `_C` with sm_87 where x86_64's has sm_70 and sm_75; FlashAttention 3
sm_90a only, so none on GB200 (compute capability 10.0) while on H100 (9.0) it loads by SASS.
"""

from __future__ import annotations

import json
import zipfile
from typing import BinaryIO, cast

import pytest

from buildkit.errors import UpstreamMismatch
from buildkit.gpu.coverage import verdict
from buildkit.gpu.elfsections import MACHINES, ElfFile, machine_name
from buildkit.gpu.fatbin import Kernel
from buildkit.gpu.scan import DEFAULT_REQUIRED, check_required, is_shared_object, kernel_table, wheel_kernels
from buildkit.models.pins import ARCH_OF_PLATFORM, Build
from tests.support.fake_upstreams import (
    BASE_REPO,
    BASE_TAG,
    NEMO_RL_SHA,
    NEMO_RL_UV_LOCK_HEADER,
    VLLM_SHA,
    WHEEL_ARM,
    WHEEL_X86,
    RealFile,
)
from tests.support.realwheels import VLLM_0_14_0, VLLM_0_14_0_AARCH64, real_wheel, shared_libraries

pytestmark = pytest.mark.e2e  # real PyPI wheels, seconds of reading

FA3 = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
FA2 = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
# The seven shared objects, in the scan's (name) order; the x86_64 wheel holds the same seven.
LIBRARIES = [
    "vllm/_C.abi3.so",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_flashmla_extension_C.abi3.so",
    "vllm/_moe_C.abi3.so",
    "vllm/cumem_allocator.abi3.so",
    FA2,
    FA3,
]
EM_AARCH64 = 183  # the ELF gABI's e_machine for AArch64 (elf.h: EM_AARCH64)


@pytest.fixture(scope="module")
def arm(shared_dir) -> dict[str, list[Kernel] | None]:
    """Each shared object of the aarch64 wheel and its kernels, scanned as resolve scans it for linux/arm64 (the
    machine check on: a member for another machine would stop the scan), once per run."""
    arch = ARCH_OF_PLATFORM["linux/arm64"]
    return {name: kernels for name, kernels, _s in shared_libraries(VLLM_0_14_0_AARCH64, arch, shared_dir)}


@pytest.fixture(scope="module")
def x86(shared_dir) -> dict[str, list[Kernel] | None]:
    arch = ARCH_OF_PLATFORM["linux/amd64"]
    return {name: kernels for name, kernels, _s in shared_libraries(VLLM_0_14_0, arch, shared_dir)}


def _sass_ptx(rows, name: str) -> tuple[list[str], list[str]]:
    row = next(r for r in rows if r.library == name)
    return row.sass, row.ptx


def test_the_aarch64_wheel_holds_seven_shared_objects_each_an_aarch64_elf(arm, x86):
    assert list(arm) == LIBRARIES and list(x86) == LIBRARIES
    assert MACHINES["aarch64"] == EM_AARCH64 and ARCH_OF_PLATFORM["linux/arm64"] == "aarch64"
    # Each member's own e_machine, read by ElfFile from the zip stream (forward only: header, then the tail).
    with zipfile.ZipFile(real_wheel(VLLM_0_14_0_AARCH64)) as archive:
        infos = sorted((i for i in archive.infolist() if is_shared_object(i.filename)), key=lambda i: i.filename)
        machines = {}
        for info in infos:
            with archive.open(info) as member:
                machines[info.filename] = ElfFile(cast(BinaryIO, member), info.file_size).machine
    assert machines == dict.fromkeys(LIBRARIES, EM_AARCH64)
    assert machine_name(EM_AARCH64) == "aarch64"


def test_the_scan_for_x86_64_refuses_the_aarch64_wheel_naming_its_first_library():
    wheel = real_wheel(VLLM_0_14_0_AARCH64)
    with pytest.raises(UpstreamMismatch) as raised:
        list(wheel_kernels(wheel, arch=ARCH_OF_PLATFORM["linux/amd64"]))
    assert raised.value.exit_code == 4
    assert str(raised.value) == (
        f"wheel {VLLM_0_14_0_AARCH64.filename}: vllm/_C.abi3.so is an ELF file for aarch64, not x86_64: it would not "
        "load on the pinned platform"
    )
    assert raised.value.hint == "pin the wheel built for the platform's arch (wheel.arch follows build.platform)"


def test_the_aarch64_wheels_kernels(arm):
    rows = kernel_table(iter(arm.items()), "10.0", list(DEFAULT_REQUIRED))
    assert [r.library for r in rows] == [n for n in LIBRARIES if n != "vllm/cumem_allocator.abi3.so"]  # no GPU code
    assert arm["vllm/cumem_allocator.abi3.so"] == []
    # _C: sm_87 (Jetson Orin) where the x86_64 wheel has sm_70 and sm_75; the same PTX.
    assert _sass_ptx(rows, "vllm/_C.abi3.so") == (
        ["sm_52", "sm_80", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120", "sm_120a"],
        ["compute_52", "compute_80", "compute_89", "compute_90"],
    )
    assert _sass_ptx(rows, "vllm/_moe_C.abi3.so") == (
        ["sm_80", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120"],
        ["compute_80"],
    )
    assert _sass_ptx(rows, FA3) == (["sm_90a"], [])
    assert _sass_ptx(rows, FA2) == (["sm_80"], ["compute_80"])
    assert _sass_ptx(rows, "vllm/_flashmla_C.abi3.so") == (["sm_90a", "sm_100f"], [])
    assert _sass_ptx(rows, "vllm/_flashmla_extension_C.abi3.so") == (["sm_90a", "sm_100f"], [])
    # How many fatbins (translation units, roughly) and entries each holds: fewer than x86_64's 107/352 for _C.
    shape = {n: (len({k.container for k in ks}), len(ks)) for n, ks in arm.items() if ks}
    assert shape == {
        "vllm/_C.abi3.so": (100, 279),
        "vllm/_flashmla_C.abi3.so": (9, 18),
        "vllm/_flashmla_extension_C.abi3.so": (2, 4),
        "vllm/_moe_C.abi3.so": (26, 70),
        FA2: (60, 120),
        FA3: (222, 222),
    }


def test_fa3_has_no_kernel_on_gb200_and_loads_by_sass_on_h100(arm, x86):
    """resolve's kernel table (scan.kernel_table, the lock's gpu.libraries) for each platform's GPUs: GB200 is
    compute capability 10.0, H100 9.0. FlashAttention 3 is shown with no kernel on GB200; only build.gpu_required
    libraries stop resolve (scan.check_required)."""
    gb200 = {r.library: r for r in kernel_table(iter(arm.items()), "10.0", list(DEFAULT_REQUIRED))}
    h100 = {r.library: r for r in kernel_table(iter(x86.items()), "9.0", list(DEFAULT_REQUIRED))}
    assert gb200[FA3].loads == {"sm_100": "none"} and not gb200[FA3].required
    assert h100[FA3].loads == {"sm_90": "SASS"}
    assert verdict(x86[FA3] or [], (9, 0)).used == ("sm_90a",)  # arch-specific SASS: 9.0 only
    assert verdict(arm[FA3] or [], (10, 0)).used == ()
    check_required(list(gb200.values()), "wheel")  # the default gpu_required (_C, _moe_C) have kernels on GB200
    check_required(list(h100.values()), "wheel")
    # The rest on GB200: _C and _moe_C by SASS, FlashAttention 2 by PTX-JIT, FlashMLA by its sm_100f SASS.
    assert gb200["vllm/_C.abi3.so"].loads == {"sm_100": "SASS (47 of 100 modules SASS, 22 PTX-JIT, 31 none)"}
    assert gb200["vllm/_moe_C.abi3.so"].loads == {"sm_100": "SASS (6 of 26 modules SASS, 15 PTX-JIT, 5 none)"}
    assert gb200[FA2].loads == {"sm_100": "PTX-JIT (0 of 60 modules SASS, 60 PTX-JIT, 0 none)"}
    assert h100[FA2].loads == {"sm_90": "PTX-JIT (0 of 60 modules SASS, 60 PTX-JIT, 0 none)"}
    assert gb200["vllm/_flashmla_C.abi3.so"].loads == {"sm_100": "SASS"}
    # Required, FlashAttention 3 stops a GB200 lock, and not an H100 one.
    more = [*DEFAULT_REQUIRED, FA3]
    with pytest.raises(
        UpstreamMismatch,
        match=r"^wheel: vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so has no kernel for "
        r"sm_100 \(build.cuda_arch_list\); it has sm_90a$",
    ):
        check_required(kernel_table(iter(arm.items()), "10.0", more), "wheel")
    check_required(kernel_table(iter(x86.items()), "9.0", more), "wheel")


def test_resolves_gpu_check_for_a_single_platform_arm64_pin(arm):
    """What resolve's GPU step (gpu/check.wheel_check) does today with `build.platform: linux/arm64` and
    `wheel.arch: aarch64` pinned: the machine check follows the platform, the table is GB200's, the lock gets it."""
    from buildkit.gpu.check import wheel_check

    build = Build.model_validate({"cuda_arch_list": "10.0", "tag": "nemo-rl:gb200", "platform": "linux/arm64"})
    hashes: dict[str, str] = {}
    gpu, notes = wheel_check(real_wheel(VLLM_0_14_0_AARCH64), VLLM_0_14_0_AARCH64.filename, build, hashes=hashes)
    assert gpu.gpus == ["sm_100"] and sorted(h for h in hashes if h.endswith(".so")) == LIBRARIES
    assert {r.library: r.loads for r in gpu.libraries}[FA3] == {"sm_100": "none"}
    assert gpu.abi is None and notes == [
        "ABI not checked: no torch was given to check vLLM's symbols against",
        "ABI glibc/libstdc++ not checked: the base image's glibc and libstdc++ were not given",
    ]
    # The same bytes pinned for linux/amd64 are refused before any kernel is read.
    amd = Build.model_validate({"cuda_arch_list": "9.0", "tag": "nemo-rl:h100"})
    with pytest.raises(UpstreamMismatch, match=r"vllm/_C.abi3.so is an ELF file for aarch64, not x86_64") as raised:
        wheel_check(real_wheel(VLLM_0_14_0_AARCH64), VLLM_0_14_0_AARCH64.filename, amd)
    assert raised.value.exit_code == 4


# --- today's resolve, single-platform form (issue 30's groundwork: what one lock per platform does now) ----------


def _pin_arm64(root) -> None:
    """pins.yaml for GB200 in today's single-platform form: build.platform, wheel.arch and the GPUs changed."""
    pins = root / "pins.yaml"
    text = pins.read_text()
    for old, new in (
        ("arch: x86_64", "arch: aarch64"),
        ("platform: linux/amd64", "platform: linux/arm64"),
        ('cuda_arch_list: "9.0"', 'cuda_arch_list: "10.0"'),
    ):
        assert old in text, old
        text = text.replace(old, new)
    pins.write_text(text)


def test_resolve_locks_the_real_aarch64_wheel_for_a_linux_arm64_pin(project, upstreams):
    """The real aarch64 bytes under the per-commit index's aarch64 name (as tests/e2e/test_resolve_realwheel.py serves
    the x86_64 ones under its x86_64 name). NeMo-RL's uv.lock is served without its torch tables: the aarch64 torch it
    installs (+cu129, download.pytorch.org) cannot be fetched here, and resolve would stop on it (exit 3)."""
    root, cli = project
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"] = RealFile(
        real_wheel(VLLM_0_14_0_AARCH64), VLLM_0_14_0_AARCH64.sha256
    )
    upstreams.github.files[("NVIDIA-NeMo/RL", NEMO_RL_SHA, "uv.lock")] = NEMO_RL_UV_LOCK_HEADER.encode()
    _pin_arm64(root)
    result = cli("resolve", "--json", timeout=600)
    assert result.code == 0, result.output[-3000:]
    lock = json.loads(result.stdout)
    wheel, base = lock["wheel"], lock["base_image"]
    assert (wheel["filename"], wheel["arch"], wheel["sha256"]) == (WHEEL_ARM, "aarch64", VLLM_0_14_0_AARCH64.sha256)
    assert wheel["size"] == 448_040_411 and wheel["cuda_source"] == "vllm/_C.abi3.so needs libcudart.so.12"
    # The base image's arm64 manifest of the two-platform index, and its config's CUDA_VERSION.
    assert base["platform"] == "linux/arm64" and base["cuda_version"] == "12.9.0.043"
    assert base["manifest_digest"] == upstreams.registry.platform_digest(BASE_REPO, BASE_TAG, "linux/arm64")
    assert base["manifest_digest"] != upstreams.registry.platform_digest(BASE_REPO, BASE_TAG, "linux/amd64")
    gpu = lock["gpu"]
    assert gpu["gpus"] == ["sm_100"]
    assert {r["library"]: r["loads"]["sm_100"] for r in gpu["libraries"]}[FA3] == "none"  # shown, not stopped
    assert sorted(f for f in lock["vllm_files"] if f.endswith(".so")) == LIBRARIES
    assert {f.split("/")[1] for f in lock["vllm_files"] if f.endswith(".py")} == {"vllm_flash_attn", "third_party"}
    assert gpu["not_checked"] == {
        "abi": f"NeMo-RL's uv.lock at {NEMO_RL_SHA[:12]} lists no torch",
        "glibc": "the base image holds no readable libc.so.6 in the loader's directories",  # the stand-in's layers
    }


def test_resolve_refuses_the_aarch64_bytes_under_an_x86_64_name(project, upstreams):
    """The amd64 pins, and the index serving the aarch64 bytes under the x86_64 name: the name agrees, the ELF
    machine of the bytes does not; refused (exit 4), the first library named, no lock."""
    root, cli = project
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"] = RealFile(
        real_wheel(VLLM_0_14_0_AARCH64), VLLM_0_14_0_AARCH64.sha256
    )
    result = cli("resolve", timeout=600)
    assert result.code == 4, result.output[-3000:]
    line = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert line == (
        f"error: wheel {WHEEL_X86}: vllm/_C.abi3.so is an ELF file for aarch64, not x86_64: it would not "
        "load on the pinned platform"
    )
    assert not (root / "pins.lock").exists()
