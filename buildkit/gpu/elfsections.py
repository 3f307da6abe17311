"""The sections of an ELF64 little-endian shared object, read with bounded reads from a seekable file.

The file may be a member of a zip, read through a decompressing stream: a seek backwards there decompresses again
from the start. So the reads are ordered: the ELF header, then the section header table (near the end) with a
window before it, which in every linker's layout holds the section names (.shstrtab) and usually the symbol
tables; then one rewind, and the sections asked for, in file order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

# Far above a real library's (vLLM's _C.abi3.so: 40 sections, a 450-byte .shstrtab).
MAX_SECTIONS = 4096
MAX_NAMES_BYTES = 1 << 20
TAIL_WINDOW = 4 << 20  # read with the section headers: .shstrtab, .symtab/.strtab lie there

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
# e_machine of the platforms buildkit builds for (the ELF gABI's registry), by the wheel arch that names them.
MACHINES = {"x86_64": 62, "aarch64": 183}
_SECTION = struct.Struct("<IIQQQQIIQQ")
SHT_NOBITS = 8


class GpuFileError(ValueError):
    """The bytes are not a file buildkit can read (says why, in one line)."""


def machine_name(machine: int) -> str:
    """`x86_64` for 62; `machine 40` for one buildkit does not build for (40 is 32-bit ARM)."""
    return next((arch for arch, number in MACHINES.items() if number == machine), f"machine {machine}")


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


class ElfFile:
    """A seekable ELF64 LE file of `size` bytes; `sections` lists its section headers."""

    def __init__(self, file: BinaryIO, size: int):
        self.file, self.size = file, size
        self._window: tuple[int, bytes] = (0, b"")
        header = self.read(0, _HEADER.size, "the ELF header")
        (
            ident,
            _type,
            self.machine,
            _version,
            _entry,
            _phoff,
            shoff,
            _flags,
            ehsize,
            _phentsize,
            _phnum,
            shentsize,
            shnum,
            shstrndx,
        ) = _HEADER.unpack(header)
        if ident[:4] != b"\x7fELF":
            raise GpuFileError("not an ELF file")
        if ident[4] != 2 or ident[5] != 1:
            raise GpuFileError("not a 64-bit little-endian ELF file")
        if shoff == 0 and shnum == 0:
            self.sections: list[Section] = []
            return
        if shentsize != _SECTION.size:
            raise GpuFileError(f"section header size {shentsize}, not {_SECTION.size}")
        if not 0 < shnum <= MAX_SECTIONS:  # 0 with shoff set: extended numbering, which no shared object needs
            raise GpuFileError(f"{shnum} section headers (buildkit reads 1 to {MAX_SECTIONS})")
        if shstrndx >= shnum:
            raise GpuFileError(f"the section names are in section {shstrndx}, past the {shnum} sections")
        table_len = shnum * shentsize
        if shoff < ehsize or shoff + table_len > size:
            raise GpuFileError(
                f"the section header table ({table_len:,} bytes at {shoff:,}) is not inside the file ({size:,} bytes)"
            )
        start = max(0, shoff - TAIL_WINDOW)
        self._window = (start, self.read(start, shoff + table_len - start, "the section header table"))
        raw = [_SECTION.unpack_from(self._window[1], shoff - start + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx]
        if names[1] == SHT_NOBITS or names[5] > MAX_NAMES_BYTES:
            raise GpuFileError(
                f"a section name table of {names[5]:,} bytes (buildkit reads at most {MAX_NAMES_BYTES:,})"
            )
        strtab = self.read(names[4], names[5], "the section name table")
        self.sections = []
        for name_at, kind, _sflags, _addr, offset, sect_size, link, _info, _align, entsize in raw:
            if kind != SHT_NOBITS and (offset > size or sect_size > size - offset):
                raise GpuFileError(
                    f"a section ({sect_size:,} bytes at {offset:,}) lies past the end of the file ({size:,} bytes)"
                )
            if name_at >= len(strtab):
                raise GpuFileError(f"a section name at {name_at:,}, past the name table ({len(strtab):,} bytes)")
            name = strtab[name_at : strtab.find(b"\0", name_at) if b"\0" in strtab[name_at:] else len(strtab)]
            self.sections.append(Section(name.decode("ascii", "replace")[:64], kind, offset, sect_size, link, entsize))
        self._check_overlaps(shoff, table_len)

    def _check_overlaps(self, shoff: int, table_len: int) -> None:
        """Sections with bytes in the file may not overlap each other, the ELF header or the section headers: a
        linker never writes that, and a forged file could make one read answer for two."""
        spans = [(0, _HEADER.size, "the ELF header"), (shoff, shoff + table_len, "the section header table")]
        spans += [
            (s.offset, s.offset + s.size, s.name or "a section")
            for s in self.sections
            if s.type not in (0, SHT_NOBITS) and s.size
        ]
        spans.sort()
        for (_s1, end1, what1), (start2, _e2, what2) in zip(spans, spans[1:], strict=False):
            if start2 < end1:
                raise GpuFileError(f"sections overlap: {what1} and {what2}")

    def section(self, name: str) -> Section | None:
        found = [s for s in self.sections if s.name == name]
        if len(found) > 1:
            raise GpuFileError(f"{len(found)} sections named {name}")
        return found[0] if found else None

    def read(self, offset: int, length: int, what: str) -> bytes:
        """`length` bytes at `offset`, which must lie inside the file; from the tail window when it holds them."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise GpuFileError(
                f"{what} ({length:,} bytes at {offset:,}) lies past the end of the file ({self.size:,} bytes)"
            )
        start, window = self._window
        if start <= offset and offset + length <= start + len(window):
            return window[offset - start : offset - start + length]
        self.file.seek(offset)
        data = self.file.read(length)
        if len(data) != length:
            raise GpuFileError(f"{what}: the file ended early")
        return data
