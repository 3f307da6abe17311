"""A wheel member's bytes, inflated chunk by chunk and held to what the zip's central directory promises: its local
header, its size and its CRC-32, as zipfile holds them.

Deflate (the method of every real wheel: vLLM's, torch's) and stored members go through ISA-L's inflate
(python-isal), twice the speed of zlib's on vLLM's and torch's libraries (bench/gpu_check.py); any other method
zipfile reads (bzip2, lzma) goes through zipfile's own reader. Memory kept: one compressed read and one inflated
chunk at a time.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from typing import Any, BinaryIO
from zipfile import ZipFile, ZipInfo

from isal import isal_zlib

from buildkit.errors import excerpt

READ_BYTES = 1 << 20  # compressed bytes per read
CHUNK_BYTES = 4 << 20  # inflated bytes per chunk, at most
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # the local file header (APPNOTE 4.3.7), 30 bytes
_ENCRYPTED, _UTF8_NAME = 0x1, 0x800
# What ISA-L raises for a broken deflate stream: readable_wheel (scan.py) turns it into one refusal, as zlib's.
# (isal's stubs declare it an instance of Exception; it is a class.)
InflateError: type[Exception] = isal_zlib.error  # type: ignore[assignment]


def member_bytes(wheel: BinaryIO, archive: ZipFile, info: ZipInfo) -> Iterator[bytes]:
    """The member's bytes, `CHUNK_BYTES` at a time, read from `wheel` (the archive's file, opened apart). Raises
    zipfile.BadZipFile (or EOFError, RuntimeError, isal's error) as zipfile's reader would: a local header that is
    not the central directory's entry, more bytes than declared, a stream cut short, a wrong CRC-32."""
    if info.compress_type not in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        with archive.open(info) as member:
            while chunk := member.read(CHUNK_BYTES):
                yield chunk
        return
    wheel.seek(_data_offset(wheel, archive, info))
    inflater = isal_zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    size = crc = 0
    for chunk in _inflated(wheel, info.compress_size, inflater, _name(info)):
        size += len(chunk)
        if size > info.file_size:
            raise zipfile.BadZipFile(f"{_name(info)}: more bytes than the {info.file_size:,} it declares")
        crc = isal_zlib.crc32(chunk, crc)
        yield chunk
    if inflater is not None and not inflater.eof:
        raise EOFError(f"{_name(info)}: its compressed bytes end before the deflate stream does")
    if size != info.file_size:
        raise zipfile.BadZipFile(f"{_name(info)}: {size:,} bytes, not the {info.file_size:,} it declares")
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {_name(info)}")


def _inflated(wheel: BinaryIO, left: int, inflater: Any, name: str) -> Iterator[bytes]:
    """The bytes of `left` compressed ones, inflated (stored ones as they are). Each turn takes in input or gives
    out bytes, or the stream is refused: no loop on a stream that stopped moving."""
    while left and not (inflater and inflater.eof):
        data = wheel.read(min(READ_BYTES, left))
        if not data:
            raise EOFError(f"{name}: the wheel ends inside its compressed bytes")
        left -= len(data)
        if inflater is None:
            yield data
            continue
        while True:
            chunk = inflater.decompress(data, CHUNK_BYTES)
            taken, data = len(data) - len(inflater.unconsumed_tail), inflater.unconsumed_tail
            if chunk:
                yield chunk
            if inflater.eof or not (chunk or data):
                break  # the end of the stream, or all of this read taken in and given out: the next read
            if not (chunk or taken):
                raise zipfile.BadZipFile(f"{name}: the deflate stream stopped moving")


def _data_offset(wheel: BinaryIO, archive: ZipFile, info: ZipInfo) -> int:
    """Where the member's compressed bytes start, once its local header was checked as zipfile checks it; and they
    must end before the central directory."""
    wheel.seek(info.header_offset)
    header = wheel.read(_LOCAL.size)
    if len(header) != _LOCAL.size or header[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"{_name(info)}: bad magic number for its local header")
    name_length, extra_length = _LOCAL.unpack(header)[9:]
    name = wheel.read(name_length)
    if info.flag_bits & _ENCRYPTED:
        raise RuntimeError(f"{_name(info)} is encrypted")
    local = name.decode("utf-8" if info.flag_bits & _UTF8_NAME else "cp437", "replace")
    if local != info.orig_filename:
        raise zipfile.BadZipFile(f"file name in directory {_name(info)} and header {excerpt(local, 80)} differ")
    start = info.header_offset + _LOCAL.size + name_length + extra_length
    if start + info.compress_size > archive.start_dir:
        raise zipfile.BadZipFile(f"{_name(info)}: its compressed bytes run into the central directory")
    return start


def _name(info: ZipInfo) -> str:
    return excerpt(info.filename, 120)
