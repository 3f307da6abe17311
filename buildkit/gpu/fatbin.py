"""The kernels a CUDA fat binary (the `.nv_fatbin` section of an ELF shared object) carries: for each entry, SASS
(a cubin for one real architecture, `sm_90`, `sm_90a`, `sm_100f`) or PTX (for a virtual one, `compute_80`), and
whether it is compressed. Only the entry headers are read: the payloads, compressed or not, are skipped.

NVIDIA does not document the layout; this is the one `cuobjdump` reads, as ZLUDA (zluda_dark_api) and
cuda-fatbin-decompression describe it and as nvcc 13.5 and vLLM 0.14.0's wheel were read here (2026-11-24):

  container: u32 magic 0xBA55ED50, u16 version, u16 header size (16), u64 size of the entries that follow
  entry:     u16 kind (1 PTX, 2 ELF cubin), u16 version, u32 header size, u64 payload size (padded),
             u32 compressed size, u32 -, u32 -, u32 architecture (90 for sm_90), ..., u64 flags at +40,
             u64 uncompressed size at +56
  flags:     0x2000 LZ4-compressed, 0x8000 zstd-compressed (nvcc 13's default for PTX), 0x100000 arch-specific
             (`a`), 0x200000 family-specific (`f`); an `a`/`f` SASS has the same architecture number as plain SASS.

Containers follow each other in the section, padded with zero bytes to 8.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from buildkit.gpu.elfsections import ElfFile, GpuFileError

SECTION = ".nv_fatbin"
MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
FLAG_LZ4, FLAG_ZSTD = 0x2000, 0x8000
FLAG_ARCH_SPECIFIC, FLAG_FAMILY = 0x100000, 0x200000
# Far above real ones: vLLM's _C.abi3.so has 107 containers and 352 entries, its _vllm_fa3_C 222 entries.
MAX_ENTRIES = 100_000
MAX_ENTRY_HEADER = 4096
MAX_PADDING = 4096  # zero bytes between two containers (alignment: 8)

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIIIIIQQQ")  # 64 bytes


@dataclass(frozen=True)
class Kernel:
    """One fatbin entry: `arch` is `sm_90a` for SASS, `compute_90a` for PTX, `kind8_90` for kinds not known."""

    arch: str
    kind: str  # "sass" | "ptx" | "other"
    compressed: bool
    container: int  # which fatbin (one per translation unit, roughly) in the library, from 0

    @property
    def number(self) -> int:
        return int(self.arch.rsplit("_", 1)[1].rstrip("af"))

    @property
    def suffix(self) -> str:
        tail = self.arch[-1]
        return tail if tail in "af" else ""


def kernels(elf: ElfFile) -> list[Kernel]:
    """Every entry of the file's `.nv_fatbin` section, in order; [] when it has none. GpuFileError when the
    section does not hold together."""
    section = elf.section(SECTION)
    if section is None or section.type == 8 or section.size == 0:
        return []
    out: list[Kernel] = []
    pos, end, container = section.offset, section.offset + section.size, 0
    while pos < end:
        if end - pos < _CONTAINER.size:
            tail = elf.read(pos, end - pos, "the end of the fatbin section")
            if tail.strip(b"\0"):
                raise GpuFileError(f"{end - pos} stray bytes at the end of the fatbin section")
            break
        head = elf.read(pos, _CONTAINER.size, "a fatbin header")
        magic, _version, header_size, body = _CONTAINER.unpack(head)
        if magic == 0:  # padding between containers
            pos = _skip_zeros(elf, pos, end)
            continue
        if magic != MAGIC:
            raise GpuFileError(
                f"no fatbin at offset {pos - section.offset:,} of the fatbin section "
                f"(magic {magic:#010x}, not {MAGIC:#x})"
            )
        if header_size < _CONTAINER.size or body > end - pos - header_size:
            raise GpuFileError(
                f"a fatbin of {body:,} bytes (header {header_size}) at offset "
                f"{pos - section.offset:,} does not fit in the fatbin section "
                f"({section.size:,} bytes)"
            )
        at, stop = pos + header_size, pos + header_size + body
        while at < stop:
            if stop - at < _ENTRY.size:
                raise GpuFileError(f"a fatbin entry header cut short ({stop - at} bytes left of fatbin {container})")
            fields = _ENTRY.unpack(elf.read(at, _ENTRY.size, "a fatbin entry header"))
            kind, _ver, entry_header, padded, _csize, _x, _y, arch = fields[:8]
            flags = fields[10]
            if not _ENTRY.size <= entry_header <= MAX_ENTRY_HEADER:
                raise GpuFileError(
                    f"a fatbin entry header of {entry_header:,} bytes (buildkit reads "
                    f"{_ENTRY.size} to {MAX_ENTRY_HEADER})"
                )
            if padded > stop - at - entry_header:
                raise GpuFileError(
                    f"a fatbin entry of {padded:,} bytes runs past its fatbin ({stop - at - entry_header:,} bytes left)"
                )
            if not 10 <= arch <= 9999:
                raise GpuFileError(f"a fatbin entry for architecture {arch}, not a CUDA one")
            out.append(_kernel(kind, arch, flags, container))
            if len(out) > MAX_ENTRIES:
                raise GpuFileError(f"more than {MAX_ENTRIES:,} fatbin entries")
            at += entry_header + padded
        pos, container = stop, container + 1
    return out


def _kernel(kind: int, arch: int, flags: int, container: int) -> Kernel:
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    compressed = bool(flags & (FLAG_LZ4 | FLAG_ZSTD))
    if kind == KIND_ELF:
        return Kernel(f"sm_{arch}{suffix}", "sass", compressed, container)
    if kind == KIND_PTX:
        return Kernel(f"compute_{arch}{suffix}", "ptx", compressed, container)
    return Kernel(f"kind{kind}_{arch}{suffix}", "other", compressed, container)


def _skip_zeros(elf: ElfFile, pos: int, end: int) -> int:
    """The offset of the first non-zero 8-byte word at or after pos (at most MAX_PADDING bytes on)."""
    chunk = elf.read(pos, min(MAX_PADDING, end - pos), "the padding between fatbins")
    stripped = chunk.lstrip(b"\0")
    if not stripped:
        if pos + len(chunk) == end:
            return end
        raise GpuFileError(f"more than {MAX_PADDING:,} zero bytes between two fatbins")
    skipped = (len(chunk) - len(stripped)) // 8 * 8
    if not skipped:  # a header of magic 0 with bytes after it: neither padding nor a fatbin (and no progress)
        raise GpuFileError("a fatbin header of magic 0 that is not padding")
    return pos + skipped
