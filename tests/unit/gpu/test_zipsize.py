"""gpu.zipsize (issue 40): a zip's end records are held to the wheel's budget before zipfile parses its central
directory. A genuine zip of 1,000,000 entries (zipfile took 494 MB and 17 s before the entry limit refused it) is
refused by every reader that opens a wheel before zipfile is called, in a few megabytes; and each lie an end record
can tell (a count, a size, an offset, a zip64 locator) is one refusal naming the wheel, exit 3."""

from __future__ import annotations

import struct
import sys
import tracemalloc
import zipfile
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

import pytest

from buildkit.budget import WHEEL, Budget, LimitExceeded
from buildkit.errors import UpstreamMalformed
from buildkit.gpu.scan import wheel_kernels, wheel_python_hashes
from buildkit.gpu.torchreq import requires_torch
from buildkit.gpu.zipsize import MAX_DIRECTORY_BYTES, Directory, sized
from buildkit.stages.resolve import cuda
from tests.support.realwheels import TORCH_2_9_1, real_wheel

LOCAL = struct.Struct("<4sHHHHHIIIHH")  # APPNOTE 4.3.7
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # 4.3.12
EOCD = struct.Struct("<4sHHHHIIH")  # 4.3.16
EOCD64 = struct.Struct("<4sQHHIIQQQQ")  # 4.3.14
LOCATOR = struct.Struct("<4sIQI")  # 4.3.15
NAME = b"e/0000000"
MILLION = 1_000_000

# Every reader in buildkit that opens a wheel's zip.
READERS: dict[str, Callable[[Path], object]] = {
    "scan.spooled": lambda wheel: list(wheel_kernels(wheel)),
    "scan.wheel_python_hashes": lambda wheel: wheel_python_hashes(wheel, {}),
    "torchreq.requires_torch": lambda wheel: requires_torch(wheel, wheel.name),
    "resolve.cuda": lambda wheel: cuda._needed(wheel.name, wheel),
}


def _digits(place: int, count: int) -> bytes:
    """The decimal digit at 10**place of 0, 1, ... count - 1, one byte each."""
    run = b"".join(bytes([48 + d]) * 10**place for d in range(10))
    return (run * (count // len(run) + 1))[:count]


def hand_zip(path: Path, count: int) -> tuple[int, int]:
    """A genuine zip body of `count` empty stored entries named e/0000000, e/0000001 ...: their local headers, then
    the central directory, written column by column (zipfile takes minutes for a million). Returns the directory's
    (offset, size); the end records are the caller's (`ending`)."""
    local = LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0x21, 0, 0, 0, len(NAME), 0) + NAME
    central = CENTRAL.pack(b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, 0, 0, 0, len(NAME), 0, 0, 0, 0, 0, 0) + NAME
    locals_, centrals = bytearray(local * count), bytearray(central * count)
    for place in range(7):
        column = _digits(place, count)
        locals_[len(local) - 1 - place :: len(local)] = column
        centrals[len(central) - 1 - place :: len(central)] = column
    offsets = array("I", range(0, len(local) * count, len(local)))
    if sys.byteorder == "big":
        offsets.byteswap()
    raw = offsets.tobytes()
    for byte in range(4):  # each entry's local header offset, the central header's last field
        centrals[CENTRAL.size - 4 + byte :: len(central)] = raw[byte::4]
    with path.open("wb") as out:
        out.write(locals_)
        out.write(centrals)
    return len(locals_), len(centrals)


def zip64_end(entries: int, size: int, offset: int, record_at: int) -> bytes:
    """zip64's end record and locator, then the classic end record saying "see zip64", as zipfile writes them."""
    return (
        EOCD64.pack(b"PK\x06\x06", EOCD64.size - 12, 45, 45, 0, 0, entries, entries, size, offset)
        + LOCATOR.pack(b"PK\x06\x07", 0, record_at, 1)
        + EOCD.pack(b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    )


def plain_end(entries: int, size: int, offset: int) -> bytes:
    return EOCD.pack(b"PK\x05\x06", 0, 0, entries, entries, size, offset, 0)


def ending(path: Path, body: int, records: bytes) -> Path:
    """`path`'s zip body (its first `body` bytes) with `records` as its end."""
    with path.open("r+b") as f:
        f.truncate(body)
        f.seek(body)
        f.write(records)
    return path


@pytest.fixture(scope="module")
def million(tmp_path_factory) -> tuple[Path, int, int]:
    """The 1,000,000-entry zip body (94 MB) and its directory's (offset, size); each test writes its own end."""
    path = tmp_path_factory.mktemp("million") / "million-1.0-py3-none-any.whl"
    offset, size = hand_zip(path, MILLION)
    return path, offset, size


def refused_before_zipfile(monkeypatch, read: Callable[[], object], match: str) -> UpstreamMalformed:
    """The refusal `read` ends in: one line, exit 3, raised before zipfile parsed a central directory, with less
    than 50 MB of Python memory at its peak (the million-entry directory alone is 55 MB; zipfile took 494 MB)."""

    def parse(_archive):
        raise AssertionError("zipfile parsed the central directory")

    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", parse)
    tracemalloc.start()
    try:
        with pytest.raises(UpstreamMalformed, match=match) as refused:
            read()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, f"{peak:,} bytes at the peak"
    assert refused.value.exit_code == 3 and "\n" not in str(refused.value)
    return refused.value


class Counting:
    """A file that counts the bytes read from it."""

    def __init__(self, file: BinaryIO):
        self.file, self.read_bytes = file, 0

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def read(self, n: int = -1) -> bytes:
        data = self.file.read(n)
        self.read_bytes += len(data)
        return data


def test_the_hand_written_zip_is_one_zipfile_reads(tmp_path):
    """The builder's zips, classic and zip64, are what zipfile reads, and sized() sees the directory it sees."""
    for records in ("plain", "zip64"):
        path = tmp_path / f"{records}.whl"
        offset, size = hand_zip(path, 12)
        end = plain_end(12, size, offset) if records == "plain" else zip64_end(12, size, offset, offset + size)
        ending(path, offset + size, end)
        with zipfile.ZipFile(path) as archive:
            assert [i.filename for i in archive.infolist()] == [f"e/{n:07d}" for n in range(12)]
            assert archive.start_dir == offset and archive.testzip() is None
        with path.open("rb") as f:
            assert sized(f, "wheel x", Budget("wheel x", WHEEL)) == Directory(12, offset, size)


@pytest.mark.parametrize("reader", READERS)
def test_a_million_entries_are_refused_before_zipfile_is_called(million, monkeypatch, reader):
    """The genuine zip64 zip of 1,000,000 entries: every reader refuses it on its end records."""
    path, offset, size = million
    wheel = ending(path, offset + size, zip64_end(MILLION, size, offset, offset + size))
    refused = refused_before_zipfile(monkeypatch, lambda: READERS[reader](wheel), "more than 100,000 entries")
    assert isinstance(refused, LimitExceeded)
    assert str(refused) == f"wheel {wheel.name}: more than 100,000 entries: refused"


def test_the_refusal_reads_the_end_records_only(million):
    path, offset, size = million
    ending(path, offset + size, zip64_end(MILLION, size, offset, offset + size))
    with path.open("rb") as f:
        counting = Counting(f)
        with pytest.raises(LimitExceeded):
            sized(cast(BinaryIO, counting), "wheel x", Budget("wheel x", WHEEL))
    assert counting.read_bytes <= (1 << 16) + 22 + LOCATOR.size + EOCD64.size  # the tail zipfile searches, and zip64's


def test_a_directory_holding_more_than_its_count_is_refused_on_the_first_one_past(million, monkeypatch):
    """The lie zipfile believes: it reads entries until the directory's size is used up, whatever the count says.
    An end record saying 1 entry over the million-entry directory (55 MB, under the size limit)."""
    path, offset, size = million
    assert size < MAX_DIRECTORY_BYTES
    wheel = ending(path, offset + size, plain_end(1, size, offset))
    refused_before_zipfile(
        monkeypatch, lambda: list(wheel_kernels(wheel)), "holds more entries than the 1 its end record says"
    )


def small_zip(tmp_path: Path, count: int = 3) -> tuple[Path, int, int]:
    path = tmp_path / "small-1.0-py3-none-any.whl"
    offset, size = hand_zip(path, count)
    return path, offset, size


@pytest.mark.parametrize(
    "lie, match",
    [
        (lambda o, s: zip64_end(2**64 - 1, s, o, o + s), "more than 100,000 entries: refused"),
        (lambda o, s: zip64_end(MILLION, s, o, o + s), "more than 100,000 entries: refused"),
        (lambda o, s: zip64_end(3, 2**63, o, o + s), "its zip directory is 9,223,372,036,854,775,808 bytes"),
        (lambda o, s: plain_end(3, 0xFFFFFFF0, o), "its zip directory is 4,294,967,280 bytes"),
        (lambda o, s: plain_end(3, s, 0xFFFF0000), "ends past its end record"),
        (lambda o, s: zip64_end(3, s, 2**63, o + s), "ends past its end record"),
        (lambda o, s: zip64_end(3, s, o, 0), "its zip64 locator names disk 0 of 1 at 0, not"),
        (lambda o, s: plain_end(3, s + 46, o - 46), "entry 1 of its zip directory is not a central directory header"),
        (lambda o, s: plain_end(2, s, o), "holds more entries than the 2 its end record says"),
        (lambda o, s: plain_end(4, s, o), "holds 3 entries in [0-9]+ bytes, not 4 in"),
        (lambda o, s: plain_end(3, s, o)[:-4], "no end of central directory record"),  # cut short
    ],
    ids=[
        "zip64-count-2^64",
        "zip64-count-million",
        "zip64-size-2^63",
        "size-4GiB",
        "offset-past-the-file",
        "zip64-offset-past-the-file",
        "zip64-locator-elsewhere",
        "directory-starts-in-an-entry",
        "count-short",
        "count-long",
        "truncated",
    ],
)
def test_each_lie_of_the_end_records_is_one_refusal(tmp_path, monkeypatch, lie, match):
    path, offset, size = small_zip(tmp_path)
    wheel = ending(path, offset + size, lie(offset, size))
    for reader in READERS.values():
        refused_before_zipfile(monkeypatch, lambda: reader(wheel), match)  # noqa: B023 (called at once)


@pytest.mark.parametrize(
    "cut", [lambda raw: raw[: len(raw) // 2], lambda raw: raw[:10], lambda raw: b""], ids=["half", "10-bytes", "empty"]
)
def test_a_truncated_wheel_is_one_refusal(tmp_path, monkeypatch, cut):
    path, offset, size = small_zip(tmp_path)
    ending(path, offset + size, plain_end(3, size, offset))
    path.write_bytes(cut(path.read_bytes()))
    refused_before_zipfile(
        monkeypatch, lambda: list(wheel_kernels(path)), f"wheel {path.name} is not a readable wheel \\(zip\\): no end"
    )


def test_bytes_before_the_zip_are_refused(tmp_path, monkeypatch):
    """zipfile reads a zip behind a prefix (a self-extractor's); no wheel pip writes has one."""
    path, offset, size = small_zip(tmp_path)
    ending(path, offset + size, plain_end(3, size, offset))
    path.write_bytes(b"#!/bin/sh\n" + path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        assert len(archive.infolist()) == 3
    refused_before_zipfile(monkeypatch, lambda: list(wheel_kernels(path)), "ends short of its end record")


def flagged_utf8(path: Path) -> Path:
    """A real zip (zipfile's) of one library whose name, in both headers, is flagged UTF-8 (general purpose bit
    11) but holds the bytes ff fe, which are not UTF-8."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("x/_A.so", (2026, 1, 1, 0, 0, 0)), b"\x7fELF" + bytes(60))
    raw = bytearray(path.read_bytes())
    for signature, flags, name in ((b"PK\x03\x04", 6, 30), (b"PK\x01\x02", 8, 46)):
        at = raw.index(signature)
        struct.pack_into("<H", raw, at + flags, struct.unpack_from("<H", raw, at + flags)[0] | 0x800)
        raw[at + name + 2 : at + name + 4] = b"\xff\xfe"
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("reader", READERS)
def test_a_name_flagged_utf8_that_is_not_is_exit_3_naming_the_wheel(tmp_path, reader):
    wheel = flagged_utf8(tmp_path / "flagged-1.0-py3-none-any.whl")
    with pytest.raises(UnicodeDecodeError):
        zipfile.ZipFile(wheel)  # what escaped as an internal error (exit 70)
    with pytest.raises(UpstreamMalformed) as refused:
        READERS[reader](wheel)
    assert str(refused.value).startswith(
        f"wheel {wheel.name} is not a readable wheel (zip): an entry's name is flagged UTF-8 but is not ("
    )
    assert refused.value.exit_code == 3 and "\n" not in str(refused.value)


@pytest.mark.e2e  # a real PyPI wheel
def test_the_real_torch_wheel_is_sized_as_zipfile_reads_it():
    """torch 2.9.1's wheel (900 MB): the end records give the directory zipfile parses, every entry counted."""
    wheel = real_wheel(TORCH_2_9_1)
    with wheel.open("rb") as f:
        counting = Counting(f)
        directory = sized(cast(BinaryIO, counting), "wheel torch", Budget("wheel torch", WHEEL))
    with zipfile.ZipFile(wheel) as archive:
        assert directory == Directory(len(archive.infolist()), archive.start_dir, directory.size)
    assert directory.entries == 12_232 and directory.offset + directory.size + EOCD.size == wheel.stat().st_size
    assert counting.read_bytes < 2 * directory.size  # the tail, and each entry's 46-byte header through the buffer
