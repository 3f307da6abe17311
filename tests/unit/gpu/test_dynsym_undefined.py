"""gpu.dynsym (issue 40): a library's undefined dynamic symbols are the ones `nm -D --undefined-only` lists, also
when it exports none. GNU ld writes such a library's GNU hash table with 1 as its first hashed index whatever comes
before it, and the reader took that for the symbol count: 0 undefined symbols in torch's libtorch_global_deps.so,
where nm lists 4 weak ones. Compared here with binutils' nm on libraries gcc builds and on torch's own."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from buildkit.budget import WHEEL, Budget
from buildkit.gpu.dynsym import DynamicSymbols, read_symbols
from buildkit.gpu.scan import spooled
from tests.support.realwheels import TORCH_2_9_1, real_wheel

needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("nm") is None, reason="gcc and binutils' nm are not installed"
)

# Nothing exported (-fvisibility=hidden): what it references is all its dynamic symbol table holds.
HIDDEN = """
#include <stdio.h>
extern void plugin_hook(void) __attribute__((weak));
extern int plugin_flag __attribute__((weak));
__attribute__((visibility("hidden"))) int run(void) {
    if (plugin_hook) plugin_hook();
    puts("run");
    return &plugin_flag ? plugin_flag : 0;
}
"""
EXPORTED = HIDDEN + '\n__attribute__((visibility("default"))) int exported(void) { return run(); }\n'


def nm(path: Path, which: str) -> set[tuple[str, bool]]:
    """(name@version, weak) of each dynamic symbol `nm -D --<which>-only` lists."""
    out = subprocess.run(
        ["nm", "-D", f"--{which}-only", str(path)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return {(line.split()[-1], line.split()[-2] in "wvWV") for line in out.splitlines() if line.strip()}


def ours(symbols: list) -> set[tuple[str, bool]]:
    return {(s.name + (f"@{s.version}" if s.version else ""), s.weak) for s in symbols}


def read(path: Path) -> DynamicSymbols:
    with path.open("rb") as f:
        return read_symbols(f, path.stat().st_size)


def library(tmp_path: Path, source: str, *flags: str) -> Path:
    (tmp_path / "lib.c").write_text(source)
    out = tmp_path / f"lib{len(list(tmp_path.glob('*.so')))}.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-fvisibility=hidden", *flags, "-o", str(out), str(tmp_path / "lib.c")],
        check=True,
        timeout=60,
    )
    return out


def without_section_headers(path: Path) -> Path:
    """The library as sstrip leaves its header: no section header table (e_shoff, e_shnum, e_shstrndx zero)."""
    raw = bytearray(path.read_bytes())
    struct.pack_into("<Q", raw, 0x28, 0)
    struct.pack_into("<HH", raw, 0x3C, 0, 0)
    stripped = path.with_suffix(".sstripped.so")
    stripped.write_bytes(bytes(raw))
    return stripped


@needs_gcc
@pytest.mark.parametrize("hash_style", ["gnu", "sysv", "both"])
def test_a_library_that_exports_nothing_has_the_undefined_symbols_nm_lists(tmp_path, hash_style):
    lib = library(tmp_path, HIDDEN, f"-Wl,--hash-style={hash_style}")
    expected = nm(lib, "undefined")
    assert ("plugin_hook", True) in expected and ("plugin_flag", True) in expected
    assert any(name.startswith("puts@") and not weak for name, weak in expected)  # puts@GLIBC_2.2.5, strong
    assert nm(lib, "defined") == set()
    symbols = read(lib)
    assert ours(symbols.undefined) == expected and symbols.defined == []
    # Without section headers (sstrip), where nm sees no symbols at all: the table ends where .dynstr begins.
    assert ours(read(without_section_headers(lib)).undefined) == expected


@needs_gcc
def test_a_library_that_exports_a_symbol_reads_as_nm_reads_it(tmp_path):
    lib = library(tmp_path, EXPORTED)
    symbols = read(lib)
    assert ours(symbols.undefined) == nm(lib, "undefined")
    assert ours(symbols.defined) == nm(lib, "defined") == {("exported", False)}


@needs_gcc
@pytest.mark.e2e  # a real PyPI wheel
def test_torchs_libtorch_global_deps_has_the_4_weak_undefined_symbols_nm_lists(tmp_path):
    """torch 2.9.1's libtorch_global_deps.so exports nothing; nm -D lists 4 weak undefined symbols (the C
    runtime's __cxa_finalize, __gmon_start__ and the transactional-memory pair). Read as buildkit reads it."""
    name = "torch/lib/libtorch_global_deps.so"
    wheel = real_wheel(TORCH_2_9_1)
    for _name, spool, size, _digest in spooled(wheel, lambda n: n == name, Budget("torch", WHEEL)):
        symbols = read_symbols(spool, size)
        spool.seek(0)
        (tmp_path / "lib.so").write_bytes(spool.read())
    expected = nm(tmp_path / "lib.so", "undefined")
    assert len(expected) == 4 and all(weak for _name, weak in expected)
    assert ours(symbols.undefined) == expected and symbols.defined == []
