"""The shared libraries an ELF file says it needs (its DT_NEEDED entries), read from a seekable file: never
loaded, never written anywhere.

ELF64 little-endian only (x86_64 and aarch64 Linux, what vLLM ships). The file comes from upstream, so every size,
count and offset in it is hostile: each is checked against the file's size and a fixed limit before anything is
read, and each read is bounded. Path: the header -> the program headers -> PT_DYNAMIC (its DT_NEEDED offsets,
DT_STRTAB, DT_STRSZ) -> the string table, whose address maps to a file offset through the PT_LOAD covering it.
"""

from __future__ import annotations

import re
import struct
from typing import IO

# Limits far above what a real library has (a dozen program headers, ~50 dynamic entries, ~20 needed libraries).
MAX_PROGRAM_HEADERS = 256
MAX_DYNAMIC_BYTES = 64 * 1024
MAX_NEEDED = 256
MAX_NAME = 255

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
_DYN = struct.Struct("<qQ")
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ = 0, 1, 5, 10
_NAME_RE = re.compile(rb"[A-Za-z0-9._+-]{1,255}")  # a library file name; fullmatch


class ElfError(ValueError):
    """The bytes are not an ELF64 little-endian file buildkit can read its needed libraries from (says why)."""


def needed(file: IO[bytes], size: int) -> list[str]:
    """The DT_NEEDED names of the ELF file `file` (`size` bytes long), in their order; [] when it has no dynamic
    section. ElfError when the bytes do not hold together."""
    loads, dynamic = _segments(file, size)
    if not dynamic:
        return []  # statically linked: it needs no library
    if len(dynamic) > 1:
        raise ElfError(f"{len(dynamic)} PT_DYNAMIC segments")
    offset, filesz = dynamic[0]
    if filesz > MAX_DYNAMIC_BYTES:
        raise ElfError(f"a dynamic section of {filesz:,} bytes (buildkit reads at most {MAX_DYNAMIC_BYTES:,})")
    entries = _read(file, size, offset, filesz - filesz % _DYN.size, "the dynamic section")
    names: list[int] = []
    strtab = strsz = None
    for tag, value in _DYN.iter_unpack(entries):
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            names.append(value)
            if len(names) > MAX_NEEDED:
                raise ElfError(f"more than {MAX_NEEDED} needed libraries")
        elif tag == DT_STRTAB:
            strtab = value
        elif tag == DT_STRSZ:
            strsz = value
    if not names:
        return []
    if strtab is None or strsz is None:
        raise ElfError("needed libraries but no string table (DT_STRTAB, DT_STRSZ)")
    start = _file_offset(loads, strtab, strsz)
    out = {}
    for name_offset in sorted(set(names)):  # in file order: a compressed stream seeks forward cheaply
        if name_offset >= strsz:
            raise ElfError(f"a needed library's name at {name_offset:,}, past the string table ({strsz:,} bytes)")
        raw = _read(file, size, start + name_offset, min(MAX_NAME + 1, strsz - name_offset), "a library name")
        name, nul, _ = raw.partition(b"\0")
        if not nul or not _NAME_RE.fullmatch(name):
            raise ElfError(f"a needed library's name is not a file name of at most {MAX_NAME} bytes: {name[:40]!r}")
        out[name_offset] = name.decode("ascii")
    return [out[n] for n in names]


def _segments(file: IO[bytes], size: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The ELF header checked, and the program headers it points to: the PT_LOAD segments (vaddr, offset, filesz)
    and the PT_DYNAMIC ones (offset, filesz)."""
    header = _read(file, size, 0, _HEADER.size, "the ELF header")
    ident, _type, _machine, _version, _entry, phoff, _shoff, _flags, _ehsize, phentsize, phnum = _HEADER.unpack(header)[
        :11
    ]
    if ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    if phentsize != _PROGRAM_HEADER.size:
        raise ElfError(f"program header size {phentsize}, not {_PROGRAM_HEADER.size}")
    if not 0 < phnum <= MAX_PROGRAM_HEADERS:
        raise ElfError(f"{phnum} program headers (buildkit reads 1 to {MAX_PROGRAM_HEADERS})")
    table = _read(file, size, phoff, phnum * phentsize, "the program headers")
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: list[tuple[int, int]] = []  # (offset, filesz)
    for i in range(phnum):
        p_type, _pflags, offset, vaddr, _paddr, filesz, _memsz, _align = _PROGRAM_HEADER.unpack_from(
            table, i * phentsize
        )
        if p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic.append((offset, filesz))
    return loads, dynamic


def _file_offset(loads: list[tuple[int, int, int]], vaddr: int, length: int) -> int:
    """The file offset of [vaddr, vaddr + length), which one PT_LOAD segment must hold in its file bytes."""
    for seg_vaddr, seg_offset, seg_filesz in loads:
        if seg_vaddr <= vaddr and vaddr + length <= seg_vaddr + seg_filesz:
            return seg_offset + (vaddr - seg_vaddr)
    raise ElfError(f"the string table at address {vaddr:#x} is in no loaded segment")


def _read(file: IO[bytes], size: int, offset: int, length: int, what: str) -> bytes:
    if offset < 0 or length < 0 or offset + length > size:
        raise ElfError(f"{what} ({length:,} bytes at {offset:,}) lies past the end of the file ({size:,} bytes)")
    file.seek(offset)
    data = file.read(length)
    if len(data) != length:
        raise ElfError(f"{what}: the file ended early")
    return data
