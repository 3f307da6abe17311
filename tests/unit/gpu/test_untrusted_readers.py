"""Readers of untrusted binaries and archives stay bounded (issue 29): each case is a reproduced defect of the
adversarial run against the wheel, fat binary, ELF and uv.lock readers, now one clear error within a bound."""

from __future__ import annotations

import errno
import io
import os
import random
import signal
import struct
import subprocess
import tempfile
import tomllib
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from buildkit import budget
from buildkit.budget import Budget, LimitExceeded, Limits
from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch
from buildkit.gpu import fatbin
from buildkit.gpu.check import wheel_check
from buildkit.gpu.dynsym import read_symbols
from buildkit.gpu.elfsections import ElfFile
from buildkit.gpu.scan import wheel_kernels
from buildkit.gpu.torchlock import torch_of_uv_lock
from buildkit.models.pins import Build
from tests.support.fake_upstreams import NEMO_RL_UV_LOCK
from tests.support.paths import GPU_FIXTURES
from tests.support.realdebs import NOBLE, data_tar, deb

FIXTURES = GPU_FIXTURES
X86_SO = (FIXTURES / "libk_sm90.so").read_bytes()  # nvcc 13.0's output on the H100 machine (x86-64)


# The hang guard of the cases below: each failed by looping for ever, recursing or taking gigabytes, and the error
# each now raises is the proof; the guard only keeps a regression from hanging the suite. Its scale is a hang, never
# the machine's speed.
HANG = 60


@contextmanager
def within(seconds: float):
    """Fail the test (instead of hanging the suite) when the block runs longer than `seconds`."""

    def expired(_signum, _frame):
        raise AssertionError(f"did not finish within {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def elf_with_fatbin(section: bytes) -> bytes:
    """An ELF64 LE shared object whose only section besides the names is `.nv_fatbin` holding `section`."""
    names = b"\0.nv_fatbin\0.shstrtab\0"
    body = section + b"\0" * (-len(section) % 8)
    names_at, table_at = 64 + len(body), 64 + len(body) + len(names) + (-len(names) % 8)
    headers = b"\0" * 64 + struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, 64, len(section), 0, 0, 8, 0)
    headers += struct.pack("<IIQQQQIIQQ", 12, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + b"\0" * 9, 3, 62, 1, 0, 0, table_at, 0, 64, 56, 0, 64, 3, 2
    )
    return header + body + names + b"\0" * (-len(names) % 8) + headers


def test_a_fatbin_header_of_magic_zero_that_is_not_padding_is_refused_not_looped_on():
    # The reproduced hang: magic 0, then a version byte: the padding skip returned the same offset for ever.
    data = elf_with_fatbin(struct.pack("<IHHQ", 0, 1, 16, 0) + b"\0" * 16)
    with within(HANG), pytest.raises(UpstreamMalformed, match="a fatbin header of magic 0 that is not padding"):
        path = Path(tempfile.mkdtemp()) / "x-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("x/_C.so", data)
        list(wheel_kernels(path))


def test_padding_between_fatbins_still_reads():
    one = struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, 0)
    data = elf_with_fatbin(one + b"\0" * 24 + one)
    assert fatbin.kernels(ElfFile(io.BytesIO(data), len(data))) == []


def write_wheel(path: Path, members: list[tuple[str, bytes]], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members:
            z.writestr(name, data)
    return path


def test_a_member_that_inflates_a_thousandfold_is_refused_before_a_byte_is_inflated(tmp_path, monkeypatch):
    # 96 MiB of zeros stored in about 100 KB: the ratio a zip bomb needs, which no real wheel member has (vLLM
    # 0.14.0's wheel: 495 MB holding 1.2 GB of libraries, under 3:1).
    wheel = write_wheel(tmp_path / "bomb-1.0-py3-none-any.whl", [("bomb/_C.so", bytes(96 << 20))])
    # A temporary directory of this test's own: other workers write and remove files in the shared one meanwhile.
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    why = r"'bomb/_C.so': 96.0 MiB stored in [0-9,]+ bytes, a ratio over 100:1 \(a decompression bomb\)"
    with within(HANG), pytest.raises(LimitExceeded, match=why):
        list(wheel_kernels(wheel))
    assert os.listdir(spool) == []


def test_one_local_entry_named_many_times_is_refused(tmp_path):
    """The reproduced bomb: the same local entry named by many central-directory entries, inflated again each
    time (40 names: 10 GiB in 19 s). Forged here by pointing the second central entry at the first's bytes."""
    data = X86_SO
    wheel = write_wheel(tmp_path / "twice-1.0-py3-none-any.whl", [("x/_a.so", data), ("x/_b.so", data)])
    raw = bytearray(wheel.read_bytes())
    central = [i for i in range(len(raw)) if raw[i : i + 4] == b"PK\x01\x02"]
    assert len(central) == 2
    struct.pack_into("<I", raw, central[1] + 42, struct.unpack_from("<I", raw, central[0] + 42)[0])
    wheel.write_bytes(bytes(raw))
    with pytest.raises(LimitExceeded, match="the entries 'x/_a.so' and 'x/_b.so' overlap: not a wheel pip writes"):
        list(wheel_kernels(wheel))


def test_two_entries_of_one_name_are_refused(tmp_path):
    with pytest.warns(UserWarning, match="Duplicate name"):
        wheel = write_wheel(tmp_path / "dup-1.0-py3-none-any.whl", [("x/_C.so", X86_SO), ("x/_C.so", X86_SO)])
    with pytest.raises(LimitExceeded, match="two entries named 'x/_C.so'"):
        list(wheel_kernels(wheel))


def test_the_total_inflated_is_held_even_when_each_member_is_small(tmp_path, monkeypatch):
    small = Limits(inflated=2 * len(X86_SO), ratio=100, entries=100, kept=1 << 20, seconds=60)
    monkeypatch.setattr("buildkit.gpu.scan.WHEEL", small)
    wheel = write_wheel(tmp_path / "many-1.0-py3-none-any.whl", [(f"x/_{i}.so", X86_SO) for i in range(3)])
    with pytest.raises(LimitExceeded, match="to decompress"):
        list(wheel_kernels(wheel))


def test_the_budget_counts_time_entries_and_memory():
    now = [0.0]
    b = Budget("input", Limits(inflated=1 << 40, ratio=100, entries=2, kept=10, seconds=5), clock=lambda: now[0])
    b.entry(2)
    with pytest.raises(LimitExceeded, match="input: more than 2 entries: refused"):
        b.entry()
    with pytest.raises(LimitExceeded, match="more than 10 bytes to keep in memory"):
        b.keep(11)
    now[0] = 6
    with pytest.raises(LimitExceeded, match="more than 5 s to read") as raised:
        b.tick()
    assert raised.value.exit_code == 3 and "hostile" in (raised.value.hint or "")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_tmpdir_is_this_machines_problem_exit_2_with_the_disk_hint(tmp_path, monkeypatch):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(small))
        payload = random.Random(29).randbytes(3 << 20)  # incompressible: no ratio in the way
        wheel = write_wheel(tmp_path / "big-1.0-py3-none-any.whl", [("big/_C.so", payload)])
        with pytest.raises(InputError) as raised:
            list(wheel_kernels(wheel))
        assert raised.value.exit_code == 2
        assert f"cannot spool wheel big-1.0-py3-none-any.whl: big/_C.so to {small}" in str(raised.value)
        assert "the disk is full" in (raised.value.hint or "") and "$TMPDIR" in (raised.value.hint or "")
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_an_x86_64_library_in_an_aarch64_wheel_stops_resolve_for_arm64(tmp_path):
    # The reproduced case: a wheel named for aarch64 whose shared objects are x86-64 passed the GPU check.
    wheel = write_wheel(tmp_path / "vllm-0.14.0-cp38-abi3-manylinux_2_31_aarch64.whl", [("vllm/_C.abi3.so", X86_SO)])
    arm = Build.model_validate(
        {"cuda_arch_list": "10.0", "tag": "nemo-rl:t", "platform": "linux/arm64", "gpu_required": []}
    )
    with pytest.raises(UpstreamMismatch, match=r"vllm/_C.abi3.so is an ELF file for x86_64, not aarch64") as raised:
        wheel_check(wheel, wheel.name, arm)
    assert raised.value.exit_code == 4
    # The same bytes with AArch64's e_machine (183) pass the machine check for arm64, and fail it for amd64.
    aarch64 = bytearray(X86_SO)
    struct.pack_into("<H", aarch64, 18, 183)
    wheel = write_wheel(
        tmp_path / "vllm-0.14.0-cp38-abi3-manylinux_2_31_aarch64.whl", [("vllm/_C.abi3.so", bytes(aarch64))]
    )
    wheel_check(wheel, wheel.name, arm)
    amd = Build.model_validate({"cuda_arch_list": "9.0", "tag": "nemo-rl:t", "gpu_required": []})
    with pytest.raises(UpstreamMismatch, match="is an ELF file for aarch64, not x86_64"):
        wheel_check(wheel, wheel.name, amd)


def test_gnu_unique_symbols_count_as_definitions_in_ubuntus_real_libstdcxx():
    """libstdc++ defines its locale facets' ids as STB_GNU_UNIQUE (`nm -D` lists them as `u`), like torch's
    libtorch_cuda.so defines about 2,000 symbols: a module needing one is not unresolved."""
    tar = data_tar(deb(NOBLE[1]))
    member = next(m for m in tar.getmembers() if m.isreg() and m.name.endswith("libstdc++.so.6.0.33"))
    source = tar.extractfile(member)
    assert source is not None
    data = source.read()
    names = {s.name for s in read_symbols(io.BytesIO(data), len(data)).defined}
    assert "_ZNSt10moneypunctIcLb0EE2idE" in names  # `u` in nm -D: GNU_UNIQUE
    assert "_ZNSt6locale7classicEv" in names  # an ordinary global, as before


def quadratic_keys(n: int) -> str:
    return NEMO_RL_UV_LOCK + '\n[[package]]\nname = "torch"\n' + ".".join(["a"] * n) + " = 1\n"


def test_a_tiny_uv_lock_of_dotted_keys_is_refused_at_once():
    # 30 KB of `a.a.a...` took 915 MB in Python's TOML parser; 80 KB ended in MemoryError (exit 70).
    with (
        within(HANG),
        pytest.raises(UpstreamMalformed, match="torch's table: a line of more than 8 dots outside strings"),
    ):
        torch_of_uv_lock(quadratic_keys(40_000).encode(), "uv.lock", "x86_64")


def test_a_deeply_nested_uv_lock_is_refused_not_a_recursion_error():
    text = NEMO_RL_UV_LOCK + '\n[[package]]\nname = "torch"\nx = ' + "[" * 5000 + "]" * 5000 + "\n"
    with within(HANG), pytest.raises(UpstreamMalformed, match="nested more than 16 deep"):
        torch_of_uv_lock(text.encode(), "uv.lock", "x86_64")


def test_only_torchs_tables_are_parsed_so_hostile_others_cost_nothing(monkeypatch):
    other = '\n[[package]]\nname = "numpy"\n' + ".".join(["a"] * 40_000) + " = 1\n"
    parsed: list[str] = []
    parse = tomllib.loads

    # Watched, not timed: the parser never sees numpy's table, whose 40,000 dots would cost it gigabytes.
    def watched(text: str) -> dict:
        assert "numpy" not in text and "a.a.a" not in text, "numpy's table reached the TOML parser"
        parsed.append(text)
        return parse(text)

    monkeypatch.setattr(tomllib, "loads", watched)
    torch = torch_of_uv_lock((NEMO_RL_UV_LOCK + other).encode(), "uv.lock", "x86_64")
    assert torch is not None and torch.version == "2.9.0+cu129"
    assert any("torch" in text for text in parsed)


def test_too_many_packages_is_refused(monkeypatch):
    monkeypatch.setattr(
        "buildkit.gpu.torchlock.UV_LOCK", Limits(inflated=1 << 26, ratio=1, entries=3, kept=1 << 20, seconds=30)
    )
    text = NEMO_RL_UV_LOCK + '\n[[package]]\nname = "a"\n' * 2
    with pytest.raises(LimitExceeded, match="more than 3 entries"):
        torch_of_uv_lock(text.encode(), "uv.lock", "x86_64")


def test_enospc_is_the_write_hint():
    from buildkit.files import write_hint

    assert write_hint(OSError(errno.ENOSPC, "No space left on device")) == "the disk is full: free some space"


def test_limits_sit_above_real_sizes():
    # vLLM 0.14.0: _C.abi3.so 468 MB inflated, 1.2 GB of libraries in all (shared/notes/upstream-facts.md).
    assert budget.WHEEL.inflated > 10 * 1_200_000_000 and budget.WHEEL.ratio >= 30
    assert budget.UV_LOCK.kept >= 1 << 20 and budget.UV_LOCK.entries >= 10 * 1000
