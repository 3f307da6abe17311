"""The fatbin reader and the kernel check (issue 23, points 1, 5 and 6).

The device cases are the kernels nvcc 13.0 built on an H100 machine (scripts/gpu_proof.py, 2026-11-24), with what
cuobjdump listed there and what loading each one on that H100 did (tests/fixtures/gpu/observed.json): the checker's
verdict must equal it. The wheel cases read vLLM 0.14.0's real PyPI wheel.
"""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.gpu import elfsections, fatbin
from buildkit.gpu.coverage import gpus, runs, verdict
from buildkit.gpu.elfsections import ElfFile, GpuFileError
from buildkit.gpu.fatbin import Kernel, kernels
from buildkit.gpu.scan import DEFAULT_REQUIRED, check_required, kernel_table, wheel_kernels
from tests.support.paths import GPU_FIXTURES, REPORT_FIXTURES
from tests.support.realwheels import VLLM_0_14_0, shared_libraries

FIXTURES = GPU_FIXTURES
OBSERVED = json.loads((FIXTURES / "observed.json").read_text())
H100 = (9, 0)


def read(path_or_bytes) -> list[Kernel]:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else Path(path_or_bytes).read_bytes()
    return kernels(ElfFile(io.BytesIO(data), len(data)))


def as_cuobjdump(found: list[Kernel]) -> tuple[dict, dict]:
    """The reader's lists named as cuobjdump names them (a family cubin: sm_100, its PTX: sm_100f)."""
    sass = Counter(k.arch.removesuffix("f") for k in found if k.kind == "sass")
    ptx = Counter("sm_" + k.arch.removeprefix("compute_") for k in found if k.kind == "ptx")
    return dict(sass), dict(ptx)


@pytest.mark.parametrize("case", sorted(OBSERVED["cases"]))
def test_device_kernel_lists_and_verdict_equal_the_h100(case):
    seen = OBSERVED["cases"][case]
    found = read(FIXTURES / f"libk_{case}.so")
    assert as_cuobjdump(found) == (seen["cuobjdump_sass"], seen["cuobjdump_ptx"])
    assert OBSERVED["compute_capability"] == list(H100)
    assert verdict(found, H100).load == seen["observed"]


def test_device_cases_cover_the_issue():
    observed = {c: OBSERVED["cases"][c]["observed"] for c in ("sm80", "sm80_ptx80", "sm90a", "sm100")}
    assert observed == {"sm80": "none", "sm80_ptx80": "PTX-JIT", "sm90a": "SASS", "sm100": "none"}
    assert OBSERVED["cases"]["sm80_ptx80"]["rc_without_jit"] == 223  # cudaErrorJitCompilationDisabled
    assert OBSERVED["cases"]["sm80"]["rc_with_jit"] == 209  # cudaErrorNoKernelImageForDevice


def test_arch_specific_and_family_rules():
    def k(arch: str) -> Kernel:
        return Kernel(arch, "ptx" if arch.startswith("compute") else "sass", False, 0)

    assert runs(k("sm_90a"), (9, 0)) and not runs(k("sm_90a"), (10, 0))
    assert runs(k("sm_100f"), (10, 3)) and not runs(k("sm_100f"), (12, 0)) and not runs(k("sm_103f"), (10, 0))
    assert runs(k("sm_100a"), (10, 0)) and not runs(k("sm_100a"), (10, 3))
    assert runs(k("sm_80"), (8, 6)) and not runs(k("sm_86"), (8, 0)) and not runs(k("sm_80"), (9, 0))
    assert runs(k("compute_80"), (12, 0)) and not runs(k("compute_90"), (8, 9))
    assert runs(k("compute_100f"), (10, 3)) and not runs(k("compute_100f"), (12, 0))
    assert not runs(k("compute_90a"), (10, 0))
    assert gpus("9.0 9.0a;10.0f+PTX 12.0") == [(9, 0), (10, 0), (12, 0)]


@pytest.fixture(scope="module")
def vllm_libraries(shared_dir):
    """Each shared object of vLLM's x86-64 wheel and its kernels, read by gpu.scan once per run."""
    return [(name, kernels) for name, kernels, _s in shared_libraries(VLLM_0_14_0, "x86_64", shared_dir)]


@pytest.mark.e2e  # real PyPI wheels
def test_vllm_wheel_kernels(vllm_libraries):
    rows = {r.library: r for r in kernel_table(iter(vllm_libraries), "9.0 10.0", list(DEFAULT_REQUIRED))}
    c = rows["vllm/_C.abi3.so"]
    assert c.required and c.sass == [
        "sm_52",
        "sm_70",
        "sm_75",
        "sm_80",
        "sm_89",
        "sm_90",
        "sm_90a",
        "sm_100",
        "sm_100a",
        "sm_120",
        "sm_120a",
    ]
    assert c.ptx == ["compute_52", "compute_80", "compute_89", "compute_90"]
    assert c.loads["sm_90"].startswith("SASS (59 of 107 modules")
    fa2 = rows["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"]
    assert (fa2.sass, fa2.ptx, fa2.required) == (["sm_80"], ["compute_80"], False)
    assert fa2.loads["sm_90"].startswith("PTX-JIT")  # on an H100 FlashAttention 2 runs by JIT
    fa3 = rows["vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]
    assert (fa3.sass, fa3.ptx, fa3.loads) == (["sm_90a"], [], {"sm_90": "SASS", "sm_100": "none"})
    assert rows["vllm/_flashmla_C.abi3.so"].sass == ["sm_90a", "sm_100f"]
    assert rows["vllm/_moe_C.abi3.so"].ptx == ["compute_80"]
    assert "vllm/cumem_allocator.abi3.so" not in rows  # no GPU code, not required
    compressed = [k for name, ks in vllm_libraries if name == "vllm/_C.abi3.so" for k in ks if k.compressed]
    assert len(compressed) == 45  # 30 PTX + 15 cubins, LZ4 (flag 0x2000): listed like the others
    check_required(list(rows.values()), "wheel")  # passes


@pytest.mark.e2e  # real PyPI wheels
def test_required_library_without_kernel_stops(vllm_libraries):
    rows = kernel_table(iter(vllm_libraries), "6.0", list(DEFAULT_REQUIRED))
    with pytest.raises(UpstreamMismatch, match=r"vllm/_moe_C.abi3.so has no kernel for sm_60 .*it has sm_70, sm_75"):
        check_required(rows, "wheel")
    more = [*DEFAULT_REQUIRED, "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]
    rows = kernel_table(iter(vllm_libraries), "9.0 10.0", more)
    with pytest.raises(UpstreamMismatch, match=r"_vllm_fa3_C.abi3.so has no kernel for sm_100 .*it has sm_90a$"):
        check_required(rows, "wheel")
    rows = kernel_table(iter(vllm_libraries), "9.0", ["vllm/_nope.so"])
    assert rows[-1].library == "vllm/_nope.so" and rows[-1].loads == {"sm_90": "missing (no such library)"}
    with pytest.raises(
        UpstreamMismatch,
        match=r"^wheel: the required library vllm/_nope.so \(build.gpu_required\) is "
        r"not in it, so it has no kernel for sm_90$",
    ):
        check_required(rows, "wheel")  # like a library without kernels: vLLM would not start


# --- hostile input (point 6): forged ELF files and fatbins --------------------------------------------------


def elf(
    sections: list[tuple[str, int, bytes]],
    *,
    shnum: int | None = None,
    shoff: int | None = None,
    overrides: dict[str, tuple[int, int]] | None = None,
) -> bytes:
    """An ELF64 LE file: header, the sections' bytes, .shstrtab, the section header table. overrides: name ->
    (offset, size) written in its header instead of the real ones."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in sections) + b".shstrtab\0"
    body, headers, at, name_at = bytearray(), [b"\0" * 64], 64, 1
    for name, kind, data in [*sections, (".shstrtab", 3, names)]:
        offset, size = (overrides or {}).get(name, (at, len(data)))
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, offset, size, 0, 0, 8, 0))
        body += data + b"\0" * (-len(data) % 8)
        at = 64 + len(body)
        name_at += len(name) + 1
    table_at = 64 + len(body) if shoff is None else shoff
    count = len(headers) if shnum is None else shnum
    header = struct.pack(
        "<16sHHIQQQIHHHHHH",
        b"\x7fELF\x02\x01\x01" + b"\0" * 9,
        3,
        62,
        1,
        0,
        0,
        table_at,
        0,
        64,
        56,
        0,
        64,
        count,
        len(headers) - 1,
    )
    return header + bytes(body) + b"".join(headers)


def fatbin_bytes(entries: list[tuple[int, int, int, int]]) -> bytes:
    """A fatbin container of (kind, arch, flags, payload size) entries."""
    body = b"".join(
        struct.pack("<HHIQIIIIIIQQQ", kind, 0x101, 64, size, 0, 0, 0x10008, arch, 0, 0, flags, 0, 0) + b"\0" * size
        for kind, arch, flags, size in entries
    )
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body


def test_forged_elf_reads():
    section = fatbin_bytes([(2, 90, 0x100011, 8), (1, 80, 0x2011, 8)])
    data = elf([(".text", 1, b"\x90" * 16), (".nv_fatbin", 1, section)])
    assert [(k.arch, k.compressed) for k in read(data)] == [("sm_90a", False), ("compute_80", True)]


class CountingFile(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.bytes_read = 0

    def read(self, n: int | None = -1) -> bytes:
        assert n is not None and n >= 0, "every read is bounded"
        out = super().read(n)
        self.bytes_read += len(out)
        return out


HOSTILE = {
    "not ELF": (b"MZ" + b"\0" * 100, "not an ELF file"),
    "32-bit": (b"\x7fELF\x01\x01" + b"\0" * 100, "not a 64-bit"),
    "absurd section count": (elf([], shnum=65535), "65535 section headers"),
    "section table past the end": (elf([], shoff=1 << 40), "section header table"),
    "section past the end": (
        elf([(".nv_fatbin", 1, b"")], overrides={".nv_fatbin": (64, 1 << 62)}),
        "lies past the end",
    ),
    "huge name table": (elf([], overrides={".shstrtab": (64, 1 << 40)}), "section name table of"),
    "overlapping sections": (
        elf([(".a", 1, b"x" * 32), (".nv_fatbin", 1, b"y" * 32)], overrides={".nv_fatbin": (80, 32)}),
        "sections overlap: .a and .nv_fatbin",
    ),
    "section over the ELF header": (
        elf([(".nv_fatbin", 1, b"y" * 32)], overrides={".nv_fatbin": (0, 32)}),
        "sections overlap: .nv_fatbin and the ELF header",
    ),
    "bad fatbin magic": (elf([(".nv_fatbin", 1, b"\x01\x02\x03\x04" + b"\0" * 12)]), "no fatbin at offset 0"),
    "huge fatbin": (
        elf([(".nv_fatbin", 1, struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, 1 << 60))]),
        "does not fit in the fatbin section",
    ),
    "huge entry": (
        elf(
            [
                (
                    ".nv_fatbin",
                    1,
                    fatbin_bytes([(2, 90, 0, 0)])[:24]
                    + struct.pack("<Q", 1 << 60)
                    + fatbin_bytes([(2, 90, 0, 0)])[32:],
                )
            ]
        ),
        "runs past its fatbin",
    ),
    "entry header too large": (
        elf(
            [
                (
                    ".nv_fatbin",
                    1,
                    fatbin_bytes([(2, 90, 0, 0)]).replace(
                        struct.pack("<HHI", 2, 0x101, 64), struct.pack("<HHI", 2, 0x101, 1 << 30)
                    ),
                )
            ]
        ),
        "entry header of",
    ),
    "not a CUDA architecture": (
        elf([(".nv_fatbin", 1, fatbin_bytes([(2, 0xFFFFFFF, 0, 0)]))]),
        "architecture 268435455",
    ),
    "cut-short entry": (elf([(".nv_fatbin", 1, fatbin_bytes([(2, 90, 0, 0)])[:40])]), "does not fit"),
    "endless padding": (
        elf([(".nv_fatbin", 1, b"\0" * 8192 + fatbin_bytes([(2, 90, 0, 0)]))]),
        "zero bytes between two fatbins",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_elf_is_one_clear_error(case):
    data, message = HOSTILE[case]
    handle = CountingFile(data)
    with pytest.raises(GpuFileError, match=message) as caught:
        kernels(ElfFile(handle, len(data)))
    assert "\n" not in str(caught.value)
    assert handle.bytes_read <= 2 * len(data)  # bounded by the file, whatever sizes it claims


def test_absurd_entry_count(monkeypatch):
    monkeypatch.setattr(fatbin, "MAX_ENTRIES", 10)
    data = elf([(".nv_fatbin", 1, fatbin_bytes([(2, 90, 0, 0)] * 11))])
    with pytest.raises(GpuFileError, match="more than 10 fatbin entries"):
        read(data)


def test_truncated_and_mutated_files_never_crash():
    real = (FIXTURES / "libk_sm89_sm100a.so").read_bytes()
    for cut in range(0, len(real), 257):
        with pytest.raises(GpuFileError):
            read(real[:cut])
    rng = random.Random(23)
    for _ in range(400):
        data = bytearray(real)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            data[at] = rng.randrange(256)
        try:
            read(bytes(data))
        except GpuFileError as exc:
            assert "\n" not in str(exc)


def test_a_malformed_library_in_a_wheel_is_upstream_malformed(tmp_path):
    wheel = tmp_path / "bad-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("bad/_C.so", HOSTILE["huge fatbin"][0])
    with pytest.raises(UpstreamMalformed, match="bad/_C.so is not a shared object buildkit can read: a fatbin of"):
        list(wheel_kernels(wheel))


def test_limits_stay_far_above_real_files():
    assert elfsections.MAX_SECTIONS >= 40 * 50 and fatbin.MAX_ENTRIES >= 352 * 100


@pytest.mark.e2e  # real PyPI wheels
def test_the_report_shows_the_table(vllm_libraries):
    from buildkit.models.gpufacts import GpuCheck
    from buildkit.models.lock import read_lock
    from buildkit.stages.report import facts, render_markdown

    rows = kernel_table(iter(vllm_libraries), "9.0", list(DEFAULT_REQUIRED))
    gpu = GpuCheck(source=VLLM_0_14_0.filename, gpus=["sm_90"], libraries=rows)
    lock = read_lock(REPORT_FIXTURES / "pins.lock").model_copy(update={"gpu": gpu})
    lock._as_read = None  # the fixture is a v3 lock, kept as read; serialize it as resolve writes a current one
    text = render_markdown(facts(lock, None, None, None, {}, None))
    assert "### GPU compatibility (vllm-0.14.0-cp38-abi3-manylinux\\_2\\_31\\_x86\\_64.whl)" in text
    fa2 = "| `vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so` | no | sm\\_80 | compute\\_80 | PTX-JIT (0 of 60 modules"
    assert fa2 in text
    assert "| `vllm/_C.abi3.so` | yes |" in text
    assert json.loads(lock.to_json())["gpu"]["libraries"][0]["library"] == "vllm/_C.abi3.so"
