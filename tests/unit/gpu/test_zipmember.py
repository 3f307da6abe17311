"""gpu.zipmember: a wheel member's bytes through ISA-L's inflate are zipfile's bytes, on the real vLLM wheel and on
every method and shape zipfile writes; and each damage zipfile's own reader refuses is refused too, through scan's
readers as one "not a readable wheel" (exit 3)."""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.gpu import zipmember
from buildkit.gpu.scan import wheel_kernels
from buildkit.gpu.zipmember import member_bytes
from tests.support.paths import GPU_FIXTURES
from tests.support.realwheels import VLLM_0_14_0, real_wheel

X86_SO = (GPU_FIXTURES / "libk_sm90.so").read_bytes()  # nvcc 13.0's output on the H100 machine (x86-64)


def read_all(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as archive, wheel.open("rb") as raw:
        chunks = list(member_bytes(raw, archive, archive.getinfo(name)))
    assert all(len(c) <= zipmember.CHUNK_BYTES for c in chunks)
    return b"".join(chunks)


def write_wheel(path: Path, members: list[tuple[str, bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data, method in members:
            z.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data, compress_type=method)
    return path


@pytest.mark.e2e  # a real PyPI wheel
def test_the_real_vllm_wheels_members_are_zipfiles_bytes():
    """Every member of vLLM 0.14.0's x86_64 wheel up to 8 MB (its Python files, _flashmla_C.abi3.so of 6 MB),
    byte for byte what zipfile reads."""
    wheel = real_wheel(VLLM_0_14_0)
    with zipfile.ZipFile(wheel) as archive, wheel.open("rb") as raw:
        infos = [i for i in archive.infolist() if i.file_size <= 8 << 20]
        assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}  # what PyPI's wheels use
        assert "vllm/_flashmla_C.abi3.so" in {i.filename for i in infos} and len(infos) > 1000
        for info in infos:
            ours = b"".join(member_bytes(raw, archive, info))
            assert ours == archive.read(info), info.filename


@pytest.mark.parametrize(
    "method",
    [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA],
    ids=["stored", "deflated", "bzip2", "lzma"],
)
def test_every_method_and_shape_zipfile_writes_reads_back(tmp_path, method):
    """Empty, one byte, a library, and 40 MiB of zeros (a deflate stream whose output outruns its input: ISA-L
    holds back what does not fit in one chunk, and it must all come out)."""
    shapes = {"x/empty.so": b"", "x/one.so": b"\x7f", "x/k.so": X86_SO, "x/zeros.so": bytes(40 << 20)}
    wheel = write_wheel(tmp_path / "w-1.0-py3-none-any.whl", [(n, d, method) for n, d in shapes.items()])
    for name, data in shapes.items():
        assert read_all(wheel, name) == data, name


def damaged(tmp_path: Path, edit, method=zipfile.ZIP_DEFLATED) -> Path:
    """A wheel of one library whose bytes (as a bytearray) and central entry offset `edit` changes."""
    wheel = write_wheel(tmp_path / "d-1.0-py3-none-any.whl", [("x/_C.so", X86_SO, method)])
    raw = bytearray(wheel.read_bytes())
    central = raw.index(b"PK\x01\x02")
    edit(raw, central)
    wheel.write_bytes(bytes(raw))
    return wheel


def _flip_data(raw: bytearray, _central: int) -> None:
    raw[30 + len("x/_C.so") + 100] ^= 0xFF  # a byte of the stored library


def _central_size(field: int, delta: int):
    def edit(raw: bytearray, central: int) -> None:
        at = central + field
        struct.pack_into("<I", raw, at, struct.unpack_from("<I", raw, at)[0] + delta)

    return edit


def _local_name(raw: bytearray, _central: int) -> None:
    raw[30 : 30 + 7] = b"x/_D.so"


def _local_magic(raw: bytearray, _central: int) -> None:
    raw[0:4] = b"PK\x07\x08"


def _local_extra(raw: bytearray, _central: int) -> None:
    struct.pack_into("<H", raw, 28, 0xFFFF)  # the local header's extra field: 64 KiB, past the central directory


def _encrypted(raw: bytearray, central: int) -> None:
    struct.pack_into("<H", raw, central + 8, struct.unpack_from("<H", raw, central + 8)[0] | 1)


@pytest.mark.parametrize(
    "edit,method,why",
    [
        (_flip_data, zipfile.ZIP_STORED, "Bad CRC-32 for file 'x/_C.so'"),
        (_central_size(24, -1), zipfile.ZIP_STORED, "more bytes than the"),  # uncompressed size one short
        (_central_size(24, +1), zipfile.ZIP_DEFLATED, r"bytes, not the [0-9,]+ it declares"),
        (_central_size(20, -50), zipfile.ZIP_DEFLATED, "end before the deflate stream does"),  # compressed cut
        (_local_extra, zipfile.ZIP_DEFLATED, "run into the central directory"),
        (_central_size(16, 1), zipfile.ZIP_DEFLATED, "Bad CRC-32"),
        (_local_name, zipfile.ZIP_DEFLATED, "file name in directory 'x/_C.so' and header 'x/_D.so' differ"),
        (_local_magic, zipfile.ZIP_DEFLATED, "bad magic number for its local header"),
        (_encrypted, zipfile.ZIP_DEFLATED, "is encrypted"),
    ],
    ids=["crc", "longer", "shorter", "cut", "past-the-end", "central-crc", "other-name", "magic", "encrypted"],
)
def test_what_zipfile_refuses_is_refused_as_one_unreadable_wheel(tmp_path, edit, method, why):
    wheel = damaged(tmp_path, edit, method)
    with pytest.raises(UpstreamMalformed, match=f"is not a readable wheel \\(zip\\): .*{why}"):
        list(wheel_kernels(wheel))


def test_a_broken_deflate_stream_is_one_refusal(tmp_path):
    def garble(raw: bytearray, _central: int) -> None:
        start = 30 + len("x/_C.so")
        raw[start : start + 64] = bytes(range(64))  # a stored block whose length and its complement disagree

    wheel = damaged(tmp_path, garble)
    with pytest.raises(UpstreamMalformed, match="is not a readable wheel"):
        list(wheel_kernels(wheel))


def test_an_inflater_that_stops_moving_is_refused_not_looped_on(tmp_path, monkeypatch):
    """The loop's guard: an inflater that neither takes in input nor gives out bytes (no real one does)."""

    class Stuck:
        eof, unconsumed_tail = False, b""

        def decompress(self, data: bytes, _max: int) -> bytes:
            self.unconsumed_tail = data
            return b""

    wheel = write_wheel(tmp_path / "s-1.0-py3-none-any.whl", [("x/_C.so", X86_SO, zipfile.ZIP_DEFLATED)])
    monkeypatch.setattr(zipmember.isal_zlib, "decompressobj", lambda _wbits: Stuck())
    with pytest.raises(zipfile.BadZipFile, match="stopped moving"):
        read_all(wheel, "x/_C.so")


def test_the_crc_is_zlibs():
    # isal's crc32 is the zip CRC-32 zlib computes (what the central directory holds).
    from isal import isal_zlib

    assert isal_zlib.crc32(X86_SO) == zlib.crc32(X86_SO)
