"""A zip's size, read from its end records and held to the read's budget before any parser sees its central
directory.

zipfile.ZipFile builds a ZipInfo for every central-directory entry before its caller can count them: a wheel of
1,000,000 entries cost 494 MB and 17 s before the entry limit refused it (issue 40). `sized` reads what zipfile
will read, found as zipfile finds it: the end of central directory record (the last signature within 64 KiB + 22
bytes of the end) and, when its locator is there, zip64's record. The entry count goes to the budget, the
directory's size to MAX_DIRECTORY_BYTES, and its place must be exactly where the end records begin (no data before
the zip or between the two, which no wheel pip writes has). zipfile reads entries until the directory's size is
used up, whatever the count says, so the entries are then counted by hopping over their 46-byte headers (nothing
kept): more than the end record says is refused on the first one past it.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from buildkit.budget import Budget, LimitExceeded
from buildkit.errors import UpstreamMalformed

# torch 2.9.1's wheel (x86_64): 12,232 entries in a 1.1 MiB directory. 100,000 (budget.WHEEL) of 600-byte names fit.
MAX_DIRECTORY_BYTES = 64 << 20
_EOCD = struct.Struct("<4sHHHHIIH")  # APPNOTE 4.3.16, 22 bytes
_LOCATOR = struct.Struct("<4sIQI")  # zip64 end of central directory locator (4.3.15), 20 bytes
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")  # zip64 end of central directory record (4.3.14), 56 bytes
_CENTRAL = struct.Struct("<4s24xHHH12x")  # a central directory header (4.3.12): 46 bytes, then 3 lengths' bytes
_TAIL = (1 << 16) + _EOCD.size  # how far back zipfile looks for the end record (a comment is at most 64 KiB)


@dataclass(frozen=True)
class Directory:
    entries: int
    offset: int  # where the central directory starts in the file
    size: int  # its bytes


@contextmanager
def open_zip(path: Path, what: str, budget: Budget) -> Iterator[tuple[zipfile.ZipFile, BinaryIO]]:
    """(zipfile's view of the zip at `path`, the file it reads) once `sized` held it to `budget`: one file, so what
    was sized is what zipfile parses."""
    with path.open("rb") as raw:
        sized(raw, what, budget)
        raw.seek(0)
        with zipfile.ZipFile(raw) as archive:
            yield archive, raw


def sized(file: BinaryIO, what: str, budget: Budget) -> Directory:
    """The zip's central directory from its end records, held to `budget` (its entries: budget.entry) and to
    MAX_DIRECTORY_BYTES, its place checked and its entries counted. A value past a limit is LimitExceeded, one
    that does not fit the file UpstreamMalformed (both exit 3); nothing but the end records and the entries'
    fixed headers is read."""
    end_at, entries, size, offset = _end_records(file, what)
    budget.entry(entries)
    if size > MAX_DIRECTORY_BYTES:
        raise LimitExceeded(
            f"{what}: its zip directory is {size:,} bytes, more than buildkit reads ({MAX_DIRECTORY_BYTES:,})"
        )
    if offset + size != end_at:
        where = "past" if offset + size > end_at else "short of"
        raise _malformed(
            what, f"its directory ({size:,} bytes at {offset:,}) ends {where} its end record at {end_at:,}"
        )
    _count(file, offset, size, entries, what)
    return Directory(entries, offset, size)


def _end_records(file: BinaryIO, what: str) -> tuple[int, int, int, int]:
    """(where the end records start, entries, directory size, directory offset), as zipfile's _EndRecData takes
    them: the last 22 bytes when they are an end record without a comment, else the last signature in the tail."""
    length = file.seek(0, 2)
    start = max(0, length - _TAIL)
    file.seek(start)
    tail = file.read(length - start)
    at = len(tail) - _EOCD.size
    if at < 0 or tail[at : at + 4] != b"PK\x05\x06" or tail[-2:] != b"\0\0":
        at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise _malformed(what, "no end of central directory record (not a zip, or cut short)")
    eocd_at = start + at
    _sig, _disk, _dir_disk, _here, entries, size, offset, _comment = _EOCD.unpack_from(tail, at)
    if eocd_at < _LOCATOR.size:
        return eocd_at, entries, size, offset
    file.seek(eocd_at - _LOCATOR.size)
    sig, disk, record_at, disks = _LOCATOR.unpack(file.read(_LOCATOR.size))
    if sig != b"PK\x06\x07":
        return eocd_at, entries, size, offset
    # zipfile reads the zip64 record just before the locator, wherever the locator says it is: they must agree.
    end_at = eocd_at - _LOCATOR.size - _EOCD64.size
    if disk != 0 or disks > 1 or record_at != end_at:
        raise _malformed(what, f"its zip64 locator names disk {disk} of {disks} at {record_at:,}, not {end_at:,}")
    file.seek(end_at)
    record = _EOCD64.unpack(file.read(_EOCD64.size))
    if record[0] != b"PK\x06\x06":
        raise _malformed(what, "a zip64 locator without its end of central directory record")
    return end_at, record[7], record[8], record[9]


def _count(file: BinaryIO, offset: int, size: int, entries: int, what: str) -> None:
    """Hop over the directory's entries as zipfile will (a 46-byte header, then the name, extra field and comment
    it gives the lengths of) until its size is used up: there must be exactly `entries` of them. At most
    entries + 1 headers are read, through the file's buffer."""
    at = hops = 0
    while at < size:
        if hops == entries:
            raise _malformed(what, f"its zip directory holds more entries than the {entries:,} its end record says")
        file.seek(offset + at)
        header = file.read(_CENTRAL.size)
        if len(header) < _CENTRAL.size or header[:4] != b"PK\x01\x02":
            raise _malformed(what, f"entry {hops + 1:,} of its zip directory is not a central directory header")
        _sig, name, extra, comment = _CENTRAL.unpack(header)
        at += _CENTRAL.size + name + extra + comment
        hops += 1
    if at != size or hops != entries:
        raise _malformed(what, f"its zip directory holds {hops:,} entries in {at:,} bytes, not {entries:,} in {size:,}")


def _malformed(what: str, why: str) -> UpstreamMalformed:
    return UpstreamMalformed(f"{what} is not a readable wheel (zip): {why}")
