"""The ABI check (issue 23, point 2) on real PyPI wheels: vLLM 0.14.0's extension modules against torch 2.9.0
(PyPI's build stands in for the 2.9.0+cu129 that NeMo-RL 946862e7's uv.lock installs from the PyTorch index, which
this machine cannot reach: same version, same C++ symbols, another CUDA) and 2.8.0.

Expectations, and what the check found (2026-11-24): 2.9.0 links (0 of 915 looked-up symbols missing); 2.8.0 does
not: FlashAttention 2 and 3 (vllm_flash_attn/_vllm_fa2_C, _fa3_C) need c10::SymInt::maybe_as_int_slow_path() const
and c10::SymInt::sym_ne_slow_path(c10::SymInt const&) const, which libc10.so of 2.8.0 does not define.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from buildkit.errors import InputError, UpstreamMismatch
from buildkit.gpu import abi, dynsym
from buildkit.gpu.dynsym import read_symbols
from buildkit.gpu.elfsections import GpuFileError
from tests.support.realwheels import (
    TORCH_2_8_0,
    TORCH_2_9_0,
    VLLM_0_14_0,
    real_wheel,
    shared_libraries,
    shared_torch_symbols,
)

# Ubuntu 24.04 (the base image's OS): libc6 2.39 (GLIBC_2.39), libstdc++6 from GCC 14 (GLIBCXX_3.4.33,
# CXXABI_1.3.15), libgcc-s1 (GCC_14.0.0) -- packages.ubuntu.com, noble.
NOBLE = {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)}


@pytest.fixture(scope="module")
def vllm_modules(shared_dir):
    """vLLM's modules and their symbols, read by gpu.scan.wheel_libraries from the real wheel once per run."""
    return [(name, symbols) for name, _k, symbols in shared_libraries(VLLM_0_14_0, "x86_64", shared_dir)]


@pytest.mark.e2e  # real PyPI wheels
def test_vllm_0_14_0_links_against_torch_2_9_0(vllm_modules, shared_dir):
    """torch's names as abi.torch_defined read them from the real wheel, once for the whole run (the first test to
    ask reads, the others wait: realwheels.shared_torch_symbols), then from its cache."""
    cache = shared_torch_symbols(TORCH_2_9_0, shared_dir)
    torch = abi.torch_defined(real_wheel(TORCH_2_9_0), TORCH_2_9_0.sha256, cache)
    result = abi.check(vllm_modules, torch, NOBLE, [TORCH_2_9_0.filename])
    assert result.checked > 900 and result.unresolved == [] and result.unresolved_count == 0
    abi.stop_if_unresolved(result, "vllm")  # passes
    assert abi.cached_torch(cache, TORCH_2_9_0.sha256) == torch  # what the cache keeps is what was read


@pytest.mark.e2e  # real PyPI wheels
def test_vllm_0_14_0_does_not_link_against_torch_2_8_0(vllm_modules, shared_dir):
    cache = shared_torch_symbols(TORCH_2_8_0, shared_dir)
    torch = abi.torch_defined(real_wheel(TORCH_2_8_0), TORCH_2_8_0.sha256, cache)
    result = abi.check(vllm_modules, torch, NOBLE, [TORCH_2_8_0.filename])
    found = {(u.library, u.symbol, u.expected_in) for u in result.unresolved}
    assert found == {
        (f"vllm/vllm_flash_attn/_vllm_fa{n}_C.abi3.so", symbol, "libc10.so")
        for n in (2, 3)
        for symbol in (
            "c10::SymInt::maybe_as_int_slow_path() const",
            "c10::SymInt::sym_ne_slow_path(c10::SymInt const&) const",
        )
    }
    with pytest.raises(UpstreamMismatch) as stopped:
        abi.stop_if_unresolved(result, "vllm")
    assert stopped.value.message == (
        f"vllm: 4 undefined symbol(s) would not resolve against {TORCH_2_8_0.filename}: "
        "c10::SymInt::maybe_as_int_slow_path() const (should be in libc10.so; needed by _vllm_fa2_C.abi3.so, "
        "_vllm_fa3_C.abi3.so); c10::SymInt::sym_ne_slow_path(c10::SymInt const&) const (should be in libc10.so; "
        "needed by _vllm_fa2_C.abi3.so, _vllm_fa3_C.abi3.so)"
    )


@pytest.mark.e2e  # real PyPI wheels
def test_symbol_versions_held_to_the_base_image(vllm_modules):
    old = {"GLIBC": (2, 17), "GLIBCXX": (3, 4, 19), "CXXABI": (1, 3, 7), "GCC": (4, 8, 0)}  # CentOS 7's
    result = abi.check(vllm_modules, set(), old, ["centos7"])
    versions = {u.version for u in result.unresolved if u.version}
    assert "GLIBC_2.27" in versions or any(v.startswith("GLIBCXX_3.4.2") for v in versions)
    assert all(
        u.expected_in
        in (
            "libc.so.6",
            "libstdc++.so.6",
            "libgcc_s.so.1",
            "libm.so.6",
            "libdl.so.2",
            "libpthread.so.0",
            "ld-linux-x86-64.so.2",
            "librt.so.1",
        )
        for u in result.unresolved
        if u.version
    )


def test_provided_versions_of_a_real_libc():
    provided = abi.provided_versions(["GLIBC_2.2.5", "GLIBC_2.39", "GLIBC_2.4", "GLIBC_PRIVATE", "GLIBCXX_3.4.33"])
    assert provided == {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33)}


def test_torch_namespaces():
    assert abi.wants_torch("_ZNK3c106SymInt22maybe_as_int_slow_pathEv")
    assert abi.wants_torch("_ZN2at4_ops5empty4callEv") and not abi.wants_torch("PyLong_FromLong")
    assert abi.torch_library_for("_ZN3c104cuda20getCurrentCUDAStreamEa") == "libc10_cuda.so"
    assert abi.torch_library_for("_ZN2at4_ops3add4callEv") == "libtorch_cpu.so"


def _dyn_elf(tags: list[tuple[int, int]], extra: bytes = b"") -> bytes:
    """An ELF with one PT_LOAD over the whole file and a PT_DYNAMIC holding `tags`."""
    dyn_at = 64 + 2 * 56
    dynamic = b"".join(struct.pack("<qQ", t, v) for t, v in [*tags, (0, 0)])
    total = dyn_at + len(dynamic) + len(extra)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 3, 62, 1, 0, 64, 0, 0, 64, 56, 2, 64, 0, 0
    )
    phdrs = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 4096)
    phdrs += struct.pack("<IIQQQQQQ", 2, 6, dyn_at, dyn_at, 0, len(dynamic), len(dynamic), 8)
    return header + phdrs + dynamic + extra


@pytest.mark.parametrize(
    "tags,message",
    [
        ([(dynsym.DT_SYMTAB, 0), (dynsym.DT_STRTAB, 0), (dynsym.DT_STRSZ, 1 << 40)], "dynamic string table of"),
        ([(dynsym.DT_SYMTAB, 0), (dynsym.DT_STRTAB, 0), (dynsym.DT_STRSZ, 8)], "without a hash table"),
        (
            [(dynsym.DT_SYMTAB, 0), (dynsym.DT_STRTAB, 0), (dynsym.DT_STRSZ, 8), (dynsym.DT_HASH, 1 << 50)],
            "in no loaded segment",
        ),
        ([(dynsym.DT_STRTAB, 0)], "without a symbol or string table"),
    ],
)
def test_hostile_dynamic_sections(tags, message):
    data = _dyn_elf(tags)
    with pytest.raises(GpuFileError, match=message):
        read_symbols(io.BytesIO(data), len(data))


def test_absurd_symbol_count():
    hash_at = 64 + 2 * 56 + 16 * 5
    data = _dyn_elf(
        [(dynsym.DT_SYMTAB, 0), (dynsym.DT_STRTAB, 0), (dynsym.DT_STRSZ, 8), (dynsym.DT_HASH, hash_at)],
        struct.pack("<II", 1, 0xFFFFFFFF),
    )
    with pytest.raises(GpuFileError, match="dynamic symbols"):
        read_symbols(io.BytesIO(data), len(data))


def test_version_definitions_of_this_machines_libc():
    """The C library this test runs on (its path from /proc/self/maps): the versions it defines, GLIBC_2.2.5 on, and
    not the entry that names the file itself (VER_FLG_BASE: `libc.so.6`)."""
    import platform
    import re
    from pathlib import Path

    assert platform.libc_ver()[0] == "glibc", "buildkit's images and CI run on glibc"
    maps = Path("/proc/self/maps").read_text()
    found = re.search(r"(/\S*/libc\.so\.6)$", maps, re.MULTILINE)
    assert found is not None, "glibc is mapped"
    path = Path(found.group(1))
    with path.open("rb") as f:
        symbols = read_symbols(f, path.stat().st_size)
    assert "GLIBC_2.2.5" in symbols.version_defs and "libc.so.6" not in symbols.version_defs
    assert all(name.startswith("GLIBC_") for name in symbols.version_defs), symbols.version_defs
    assert abi.provided_versions(symbols.version_defs)["GLIBC"] >= (2, 17)


# Issue 29: what reaches c++filt, and the torch symbol cache read as hostile.
EVIL = "_ZN2at4evilEv\n_ZN2at4_ops3add4callEv"  # one name holding a newline: two lines to c++filt


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="binutils' c++filt is not installed")
def test_a_newline_in_a_symbol_name_never_shifts_the_demangled_names():
    names = ["_ZNK3c106SymInt22maybe_as_int_slow_pathEv", EVIL, "_ZN2at4_ops5empty4callEv", "f\x1b]0;x\x07"]
    assert abi.demangle(names) == [
        "c10::SymInt::maybe_as_int_slow_path() const",
        repr(EVIL),
        "at::_ops::empty::call()",
        repr(names[3]),
    ]
    undefined = [dynsym.Symbol(name=n, version=None, library=None, weak=False) for n in names[:3]]
    modules = [("vllm/_C.abi3.so", dynsym.DynamicSymbols(needed=[], defined=[], undefined=undefined, version_defs=[]))]
    found = abi.check(modules, torch={"_ZN2at4_ops3add4callEv"}, system={}, against=["torch 2.9.0"])
    with pytest.raises(UpstreamMismatch) as stopped:
        abi.stop_if_unresolved(found, "vllm")
    message = stopped.value.message
    assert "3 undefined symbol(s)" in message and "\n" not in message, message
    assert "c10::SymInt::maybe_as_int_slow_path() const (should be in libc10.so" in message
    assert f"{EVIL!r} (should be in libtorch_cpu.so" in message  # escaped, and named as itself
    assert "at::_ops::add::call()" not in message  # torch defines that one: never blamed


def _torch_like_wheel(tmp_path: Path) -> Path:
    """A wheel whose torch/lib holds this machine's real libc (a real dynamic symbol table, a few MB)."""
    maps = Path("/proc/self/maps").read_text()
    found = re.search(r"(/\S*/libc\.so\.6)$", maps, re.MULTILINE)
    assert found is not None, "glibc is mapped"
    libc = Path(found.group(1))
    wheel = tmp_path / "torch-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(libc, "torch/lib/libc10.so")
    return wheel


def _gzip_bomb(path: Path, inflated: int) -> None:
    """A gzip of `inflated` zero bytes, compressed a MiB at a time (a GiB of zeros is about 1 MB of gzip)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as out:
        for _ in range(inflated >> 20):
            out.write(deflate.compress(bytes(1 << 20)))
        out.write(deflate.flush())


def test_a_bad_torch_cache_entry_is_read_again_from_the_wheel(tmp_path):
    wheel, sha, cache = _torch_like_wheel(tmp_path), "ab" * 32, tmp_path / "cache"
    names = abi.torch_defined(wheel, sha, cache)
    assert "memcpy" in names and abi.cached_torch(cache, sha) == names
    path = abi.torch_cache(cache, sha)
    good = path.read_bytes()
    planted = tmp_path / "planted.gz"
    planted.write_bytes(gzip.compress(b"_ZN3c10planted", mtime=0))

    def plant(kind: str) -> None:
        path.unlink()
        if kind == "bomb":
            _gzip_bomb(path, 1 << 30)
        elif kind == "fifo":
            os.mkfifo(path)  # never waited on
        elif kind == "symlink":
            path.symlink_to(planted)  # never followed
        else:
            path.write_bytes(
                {
                    "garbage": b"\x00" * 100,
                    "truncated": good[: len(good) // 2],
                    "not utf-8": gzip.compress(b"\xff\xfe"),
                    "two members": good + good,
                }[kind]
            )

    for kind in ("bomb", "fifo", "symlink", "garbage", "truncated", "not utf-8", "two members"):
        plant(kind)
        assert abi.cached_torch(cache, sha) is None, kind
        tracemalloc.start()
        try:
            assert abi.torch_defined(wheel, sha, cache) == names, kind  # read again from the wheel
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 300 << 20, (kind, peak)  # the bomb inflates to 1 GiB: stopped at budget.CACHE's 256 MiB
        assert not path.is_symlink() and abi.cached_torch(cache, sha) == names, kind  # and cached again
    assert planted.read_bytes() == gzip.compress(b"_ZN3c10planted", mtime=0)  # replaced the link, not written through


def test_a_torch_cache_entry_that_is_a_directory_is_a_clear_error(tmp_path):
    wheel, sha, cache = _torch_like_wheel(tmp_path), "cd" * 32, tmp_path / "cache"
    abi.torch_cache(cache, sha).mkdir(parents=True)
    with pytest.raises(InputError) as refused:
        abi.torch_defined(wheel, sha, cache)
    assert str(abi.torch_cache(cache, sha)) in refused.value.message and refused.value.hint, refused.value.message
