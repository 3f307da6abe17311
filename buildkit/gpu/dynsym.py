"""The dynamic symbols of an ELF64 little-endian shared object: what it defines and what it needs, with their
symbol versions, read through the program headers and the dynamic section alone (both at the start of the file,
like the tables they point to: a member of a zip is read without decompressing the rest of it).

Path: PT_DYNAMIC -> DT_SYMTAB, DT_STRTAB/DT_STRSZ, DT_GNU_HASH or DT_HASH (the symbol count), DT_VERSYM,
DT_VERNEED/DT_VERNEEDNUM, DT_VERDEF/DT_VERDEFNUM; addresses map to file offsets through the PT_LOAD holding them.
A GNU hash table that hashes no symbol does not give the count: then the section headers' .dynsym does.
Every count and size is checked against the file and a fixed limit before it is read (see elfsections.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from buildkit.gpu.elfsections import MAX_SECTIONS, GpuFileError

MAX_PROGRAM_HEADERS = 256
MAX_DYNAMIC_BYTES = 64 * 1024
MAX_SYMBOLS = 4_000_000  # libtorch_cpu.so (torch 2.9.0) has about 190,000
MAX_STRINGS = 512 << 20
MAX_VERSIONS = 10_000

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_DYN = struct.Struct("<qQ")
_SYM = struct.Struct("<IBBHQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ, DT_SYMENT = 0, 1, 4, 5, 6, 10, 11
DT_GNU_HASH, DT_VERSYM, DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = (
    0x6FFFFEF5,
    0x6FFFFFF0,
    0x6FFFFFFC,
    0x6FFFFFFD,
    0x6FFFFFFE,
    0x6FFFFFFF,
)
DT_RELA, DT_REL, DT_JMPREL, SHT_DYNSYM = 7, 17, 23, 11
# The tables the dynamic section names: one of them ends the symbol table when nothing else says where it ends.
_TABLES = (DT_HASH, DT_STRTAB, DT_RELA, DT_REL, DT_JMPREL, DT_GNU_HASH, DT_VERSYM, DT_VERDEF, DT_VERNEED)
STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE, SHN_UNDEF = 1, 2, 10, 0
# GNU_UNIQUE: a global the loader keeps one copy of (C++ inline statics, template members); torch 2.9's
# libtorch_cuda.so defines about 2,000 symbols that way (`nm` lists them as `u`). They are definitions like any.
_BINDS = (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE)
VER_FLG_BASE = 1  # the version definition that names the file itself (libc.so.6), not a version


@dataclass(frozen=True)
class Symbol:
    name: str
    version: str | None  # GLIBC_2.34, GLIBCXX_3.4.30; None: unversioned
    library: str | None  # for an undefined versioned symbol: the file its version comes from (libc.so.6)
    weak: bool


@dataclass(frozen=True)
class DynamicSymbols:
    needed: list[str]
    defined: list[Symbol]
    undefined: list[Symbol]
    version_defs: list[str]  # the versions it defines (libc.so.6: GLIBC_2.2.5 ... GLIBC_2.39)
    machine: int = 0  # e_machine: 62 x86-64, 183 AArch64 (elfsections.MACHINES)


class Seekable(Protocol):
    """What the reader needs of a file: a zip member's stream, a spooled file, or one counting its reads."""

    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def read(self, n: int = -1, /) -> bytes: ...


class _Reader:
    def __init__(self, file: Seekable, size: int):
        self.file, self.size = file, size

    def read(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise GpuFileError(
                f"{what} ({length:,} bytes at {offset:,}) lies past the end of the file ({self.size:,} bytes)"
            )
        self.file.seek(offset)
        data = self.file.read(length)
        if len(data) != length:
            raise GpuFileError(f"{what}: the file ended early")
        return data


def read_symbols(file: Seekable, size: int) -> DynamicSymbols:
    r = _Reader(file, size)
    header = r.read(0, _HEADER.size, "the ELF header")
    fields = _HEADER.unpack(header)  # e_ident, e_type, e_machine, e_version, e_entry, e_phoff, ...
    ident, machine, phoff, phentsize, phnum = fields[0], fields[2], fields[5], fields[9], fields[10]
    if ident[:4] != b"\x7fELF":
        raise GpuFileError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise GpuFileError("not a 64-bit little-endian ELF file")
    if phentsize != _PHDR.size or not 0 < phnum <= MAX_PROGRAM_HEADERS:
        raise GpuFileError(
            f"{phnum} program headers of {phentsize} bytes (buildkit reads 1 to {MAX_PROGRAM_HEADERS} of {_PHDR.size})"
        )
    table = r.read(phoff, phnum * phentsize, "the program headers")
    loads, dynamic = [], []
    for i in range(phnum):
        p_type, _f, offset, vaddr, _pa, filesz, _m, _a = _PHDR.unpack_from(table, i * phentsize)
        if p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic.append((offset, filesz))
    if not dynamic:
        return DynamicSymbols([], [], [], [], machine)
    if len(dynamic) > 1:
        raise GpuFileError(f"{len(dynamic)} PT_DYNAMIC segments")
    offset, filesz = dynamic[0]
    if filesz > MAX_DYNAMIC_BYTES:
        raise GpuFileError(f"a dynamic section of {filesz:,} bytes (buildkit reads at most {MAX_DYNAMIC_BYTES:,})")
    tags: dict[int, int] = {}
    needed_at: list[int] = []
    for tag, value in _DYN.iter_unpack(r.read(offset, filesz - filesz % _DYN.size, "the dynamic section")):
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed_at.append(value)
        else:
            tags.setdefault(tag, value)

    def where(addr: int, length: int, what: str) -> int:
        for seg_vaddr, seg_offset, seg_filesz in loads:
            if seg_vaddr <= addr and addr + length <= seg_vaddr + seg_filesz:
                return seg_offset + (addr - seg_vaddr)
        raise GpuFileError(f"{what} at address {addr:#x} ({length:,} bytes) is in no loaded segment")

    if DT_STRTAB not in tags or DT_SYMTAB not in tags or DT_STRSZ not in tags:
        raise GpuFileError("a dynamic section without a symbol or string table")
    strsz = tags[DT_STRSZ]
    if strsz > MAX_STRINGS:
        raise GpuFileError(f"a dynamic string table of {strsz:,} bytes (buildkit reads at most {MAX_STRINGS:,})")
    if tags.get(DT_SYMENT, _SYM.size) != _SYM.size:
        raise GpuFileError(f"symbols of {tags[DT_SYMENT]} bytes, not {_SYM.size}")
    count = _symbol_count(r, tags, where, fields)
    symtab = r.read(
        where(tags[DT_SYMTAB], count * _SYM.size, "the symbol table"), count * _SYM.size, "the symbol table"
    )
    strings = r.read(where(tags[DT_STRTAB], strsz, "the string table"), strsz, "the string table")

    # One str per offset: symbols that share a name (or a forged file's thousands pointing at one long string)
    # share its object, so memory stays within the string table's size.
    made: dict[int, str] = {}

    def string(at: int, what: str) -> str:
        if at in made:
            return made[at]
        if at >= strsz:
            raise GpuFileError(f"{what} at {at:,}, past the string table ({strsz:,} bytes)")
        end = strings.find(b"\0", at)
        if end < 0:
            raise GpuFileError(f"{what} at {at:,} does not end")
        made[at] = strings[at:end].decode("utf-8", "replace")
        return made[at]

    versym = None
    if DT_VERSYM in tags:
        versym = r.read(where(tags[DT_VERSYM], 2 * count, "the symbol versions"), 2 * count, "the symbol versions")
    names: dict[int, tuple[str, str | None]] = {}  # version index -> (name, file it is needed from)
    version_defs: list[str] = []
    if DT_VERDEF in tags:
        for index, name in _verdefs(
            r, where(tags[DT_VERDEF], 20, "the version definitions"), tags.get(DT_VERDEFNUM, 0), string
        ):
            names[index] = (name, None)
            version_defs.append(name)
    if DT_VERNEED in tags:
        for index, name, library in _verneeds(
            r, where(tags[DT_VERNEED], 16, "the version needs"), tags.get(DT_VERNEEDNUM, 0), string
        ):
            names[index] = (name, library)
    defined: list[Symbol] = []
    undefined: list[Symbol] = []
    for i in range(1, count):
        st_name, st_info, _other, shndx, _value, _size = _SYM.unpack_from(symtab, i * _SYM.size)
        bind = st_info >> 4
        if bind not in _BINDS or not st_name:  # globals and weak ones; locals are no one's business
            continue
        version = library = None
        if versym is not None:
            index = struct.unpack_from("<H", versym, 2 * i)[0] & 0x7FFF
            if index > 1:
                if index not in names:
                    raise GpuFileError(f"symbol {i} has version {index}, which the file does not define")
                version, library = names[index]
        symbol = Symbol(string(st_name, "a symbol name"), version, library, bind == STB_WEAK)
        (undefined if shndx == SHN_UNDEF else defined).append(symbol)
    needed = [string(n, "a needed library") for n in needed_at]
    return DynamicSymbols(needed, defined, undefined, version_defs, machine)


def _symbol_count(r: _Reader, tags: dict[int, int], where, header: tuple) -> int:
    if DT_HASH in tags:
        nchain = struct.unpack("<II", r.read(where(tags[DT_HASH], 8, "the hash table"), 8, "the hash table"))[1]
        count = nchain
    elif DT_GNU_HASH in tags:
        at = where(tags[DT_GNU_HASH], 16, "the GNU hash table")
        nbuckets, symoffset, bloom, _shift = struct.unpack("<IIII", r.read(at, 16, "the GNU hash table"))
        if nbuckets > MAX_SYMBOLS or bloom > MAX_SYMBOLS:
            raise GpuFileError(f"a GNU hash table of {nbuckets:,} buckets (buildkit reads at most {MAX_SYMBOLS:,})")
        buckets_at = at + 16 + 8 * bloom
        buckets = struct.unpack(f"<{nbuckets}I", r.read(buckets_at, 4 * nbuckets, "the GNU hash buckets"))
        last = max(buckets, default=0)
        if last < symoffset:  # no symbol hashed: the table does not say how many there are
            count = _unhashed_count(r, tags, header, symoffset)
        else:
            chain_at = buckets_at + 4 * nbuckets
            index = last
            while True:  # the last chain ends with its low bit set
                if index - symoffset > MAX_SYMBOLS:
                    raise GpuFileError(f"a GNU hash chain longer than {MAX_SYMBOLS:,}")
                step = r.read(chain_at + 4 * (index - symoffset), 4, "the GNU hash chain")
                if struct.unpack("<I", step)[0] & 1:
                    break
                index += 1
            count = index + 1
    else:
        raise GpuFileError("a dynamic section without a hash table (the symbol count is unknown)")
    if count > MAX_SYMBOLS:
        raise GpuFileError(f"{count:,} dynamic symbols (buildkit reads at most {MAX_SYMBOLS:,})")
    return count


def _unhashed_count(r: _Reader, tags: dict[int, int], header: tuple, floor: int) -> int:
    """The symbol count of a file whose GNU hash table hashes none (it exports nothing): GNU ld writes such a table
    with 1 as its first hashed index, whatever comes before it (torch 2.9.1's libtorch_global_deps.so: 5 symbols,
    the 4 weak undefined ones `nm -D` lists among them). From the section headers' .dynsym, as nm reads it; without
    them (sstrip), the symbols up to the next table the dynamic section names (linkers lay .dynstr right after)."""
    symtab = tags[DT_SYMTAB]
    shoff, shentsize, shnum = header[6], header[11], header[12]
    if shoff and shentsize == _SHDR.size and 0 < shnum <= MAX_SECTIONS:
        table = r.read(shoff, shnum * shentsize, "the section header table")
        for i in range(shnum):
            _name, kind, _flags, addr, _offset, size, *_rest = _SHDR.unpack_from(table, i * shentsize)
            if kind == SHT_DYNSYM and addr == symtab:
                return max(floor, size // _SYM.size)
    above = [value for tag, value in tags.items() if tag in _TABLES and value > symtab]
    return max(floor, (min(above) - symtab) // _SYM.size) if above else floor


def _verdefs(r: _Reader, at: int, count: int, string):
    if count > MAX_VERSIONS:
        raise GpuFileError(f"{count:,} version definitions (buildkit reads at most {MAX_VERSIONS:,})")
    for _ in range(count):
        _v, flags, ndx, cnt, _hash, aux, nxt = struct.unpack("<HHHHIII", r.read(at, 20, "a version definition"))
        if cnt and not flags & VER_FLG_BASE:
            name_at = struct.unpack("<II", r.read(at + aux, 8, "a version definition's name"))[0]
            yield ndx, string(name_at, "a version name")
        if not nxt:
            break
        at += nxt


def _verneeds(r: _Reader, at: int, count: int, string):
    if count > MAX_VERSIONS:
        raise GpuFileError(f"{count:,} version needs (buildkit reads at most {MAX_VERSIONS:,})")
    for _ in range(count):
        _v, cnt, file_at, aux, nxt = struct.unpack("<HHIII", r.read(at, 16, "a version need"))
        if cnt > MAX_VERSIONS:
            raise GpuFileError(f"{cnt:,} versions needed from one library")
        library = string(file_at, "a needed library")
        a = at + aux
        for _ in range(cnt):
            _hash, _flags, other, name_at, anext = struct.unpack("<IHHII", r.read(a, 16, "a version need's entry"))
            yield other, string(name_at, "a version name"), library
            if not anext:
                break
            a += anext
        if not nxt:
            break
        at += nxt
