"""A mutation fuzz of the readers of untrusted binaries and text (issue 29, point 2): the fat binary and ELF section
reader, the dynamic-symbol reader and the uv.lock reader, each fed mutations of real files for a fixed time with a
fixed seed. Every input must end in a result or the reader's one clear error, each within a bound: never another
exception, never a hang. The base image's layer-tar reader has its own fuzz (tests/unit/image/test_fuzz_layers.py).

The corpus is real: the kernels nvcc 13.0 built on the H100 machine (tests/fixtures/gpu), Ubuntu 24.04's own
libc.so.6 and libstdc++.so.6 (tests/support/realdebs.py), and NeMo-RL 946862e7's uv.lock tables
(tests/support/fake_upstreams.py).
"""

from __future__ import annotations

import io
import random
import signal
import struct
import time
from collections.abc import Callable

import pytest

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.gpu.dynsym import read_symbols
from buildkit.gpu.elfsections import ElfFile, GpuFileError
from buildkit.gpu.fatbin import kernels
from buildkit.gpu.torchlock import torch_of_uv_lock
from tests.support.fake_upstreams import NEMO_RL_UV_LOCK
from tests.support.paths import GPU_FIXTURES
from tests.support.realdebs import NOBLE, data_tar, deb

SEED = 29
SECONDS = 4.0  # per reader: a few thousand inputs each
PER_INPUT = 30.0  # the most one input may take: the failure is a hang (one takes milliseconds)
FIXTURES = GPU_FIXTURES
INTERESTING = (0, 1, 7, 8, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 32, (1 << 63) - 1, (1 << 64) - 1)


def ubuntu_libraries() -> list[bytes]:
    out = []
    for package, suffix in ((NOBLE[0], "/libc.so.6"), (NOBLE[1], "libstdc++.so.6.0.33")):
        tar = data_tar(deb(package))
        member = next(m for m in tar.getmembers() if m.isreg() and m.name.endswith(suffix))
        source = tar.extractfile(member)
        assert source is not None
        out.append(source.read())
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four of: a random byte, an interesting integer at an aligned offset (counts, sizes, offsets), a cut,
    a copied span."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(4)
        if kind == 0 and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif kind == 1 and len(out) > 8:
            at = rng.randrange(0, len(out) - 8) // 4 * 4
            width = rng.choice((2, 4, 8))
            value = rng.choice(INTERESTING) & ((1 << (8 * width)) - 1)
            out[at : at + width] = value.to_bytes(width, "little")
        elif kind == 2 and out:
            del out[rng.randrange(len(out)) :]
        elif out:
            start = rng.randrange(len(out))
            span = out[start : start + rng.randint(1, 64)]
            at = rng.randrange(len(out))
            out[at : at + len(span)] = span
    return bytes(out)


def mutate_text(text: str, rng: random.Random) -> str:
    pieces = ("[", "]", "{", "}", ".", '"', "'", "=", "\n", "[[package]]\n", 'name = "torch"\n', "a.b.c", "#", "\\")
    out = list(text)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(out) + 1)
        choice = rng.randrange(3)
        if choice == 0:
            out[at:at] = list(rng.choice(pieces) * rng.choice((1, 1, 2, 50)))
        elif choice == 1 and out:
            del out[at : at + rng.randint(1, 20)]
        elif out:
            out[min(at, len(out) - 1)] = chr(rng.randrange(32, 127))
    return "".join(out)


def fuzz(
    corpus: list[bytes],
    mutator: Callable[[bytes, random.Random], bytes],
    read: Callable[[bytes], object],
    allowed: tuple[type[Exception], ...],
) -> int:
    """Feed mutations until SECONDS pass; each must return or raise one of `allowed` within PER_INPUT. Returns
    how many inputs ran."""
    rng = random.Random(SEED)
    started, count = time.monotonic(), 0

    def expired(_signum, _frame):
        raise AssertionError(f"an input took more than {PER_INPUT} s (seed {SEED}, input {count})")

    old = signal.signal(signal.SIGALRM, expired)
    try:
        while time.monotonic() - started < SECONDS:
            data = mutator(rng.choice(corpus), rng)
            signal.setitimer(signal.ITIMER_REAL, PER_INPUT)
            try:
                read(data)
            except allowed as exc:
                assert "\n" not in str(exc), f"a multi-line message: {exc!r}"
            except AssertionError:
                raise  # the time bound
            except Exception as exc:  # noqa: BLE001 -- the fuzz's whole point: anything else is a defect
                raise AssertionError(f"input {count} (seed {SEED}) raised {type(exc).__name__}: {exc}") from exc
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            count += 1
    finally:
        signal.signal(signal.SIGALRM, old)
    return count


def read_kernels(data: bytes) -> object:
    elf = ElfFile(io.BytesIO(data), len(data))
    return kernels(elf) if elf.sections else None


def read_dynamic(data: bytes) -> object:
    return read_symbols(io.BytesIO(data), len(data))


def test_the_fat_binary_and_elf_section_readers_end_every_mutation_in_a_result_or_one_error():
    corpus = [p.read_bytes() for p in sorted(FIXTURES.glob("*.so"))]
    assert fuzz(corpus, mutate, read_kernels, (GpuFileError,)) > 100


def test_the_dynamic_symbol_reader_ends_every_mutation_in_a_result_or_one_error():
    corpus = [p.read_bytes() for p in sorted(FIXTURES.glob("*.so"))] + ubuntu_libraries()
    assert fuzz(corpus, mutate, read_dynamic, (GpuFileError,)) > 100


def test_the_uv_lock_reader_ends_every_mutation_in_a_result_or_one_error():
    def read(data: bytes) -> object:
        return torch_of_uv_lock(data, "uv.lock", "x86_64")

    def mutator(data: bytes, rng: random.Random) -> bytes:
        return mutate_text(data.decode(), rng).encode() if rng.random() < 0.8 else mutate(data, rng)

    assert fuzz([NEMO_RL_UV_LOCK.encode()], mutator, read, (UpstreamMalformed, UpstreamMismatch)) > 100


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_mutators_change_their_input(seed):
    rng = random.Random(seed)
    data = struct.pack("<16Q", *range(16))
    assert any(mutate(data, rng) != data for _ in range(10))
