"""Issue 29: the base image's layers are untrusted archives, read at resolve under one Budget (buildkit/budget.py,
LAYERS): decompression bombs, layers of thousands of captured files, and an interrupt are each stopped promptly,
with one clear error, and nothing cached after them. The layers are real gzip and zstd tars served by the loopback
registry and read through resolve's code (baselibs.read over world/registry.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zlib
from types import SimpleNamespace

import pytest
import zstandard

from buildkit import budget
from buildkit.budget import Budget, LimitExceeded, Limits
from buildkit.errors import Interrupted, UpstreamMalformed
from buildkit.image.layerfiles import MAX_PARSED, LayerBlob, find
from buildkit.stages.resolve import Resolver, baselibs
from buildkit.world.http import Http
from buildkit.world.registry import Registry
from tests.support.fake_upstreams import BASE_REPO, FakeRegistry
from tests.support.realdebs import GZIP_LAYER, file, layer, symlink, ubuntu_layers

ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
LIBC = "usr/lib/x86_64-linux-gnu/libc.so.6"


def bomb_tar(inflated: int, compress) -> bytes:
    """A tar of one file of `inflated` zero bytes, compressed chunk by chunk (never held inflated)."""
    info = tarfile.TarInfo("opt/zeros")
    info.size = inflated
    out = [compress.compress(info.tobuf(tarfile.PAX_FORMAT))]
    zeros = bytes(1 << 20)
    for _ in range(inflated >> 20):
        out.append(compress.compress(zeros))
    out.append(compress.compress(bytes(1024)))  # end-of-archive blocks
    return b"".join(out) + compress.flush()


def gzip_bomb(inflated: int) -> bytes:
    return bomb_tar(inflated, zlib.compressobj(9, zlib.DEFLATED, 31))  # 31: a gzip header


def zstd_bomb(inflated: int) -> bytes:
    return bomb_tar(inflated, zstandard.ZstdCompressor(level=3).compressobj())


def served(*layers: tuple[str, bytes]):
    """The loopback registry with an image of `layers` (bottom first); (registry, client, fact)."""
    registry = FakeRegistry().start()
    registry.add_image(BASE_REPO, "bomb", platforms=("linux/amd64",), layers=list(layers))
    client = Registry(Http())
    return registry, client, client.resolve(f"{registry.netloc}/{BASE_REPO}:bomb", "linux/amd64")


@pytest.mark.parametrize(("media_type", "make"), [(GZIP_LAYER, gzip_bomb), (ZSTD_LAYER, zstd_bomb)])
def test_a_decompression_bomb_is_refused_by_its_ratio_within_seconds_and_nothing_is_cached(media_type, make, tmp_path):
    """The default limits: a layer that inflates past RATIO_FLOOR at more than LAYERS.ratio bytes per compressed
    byte is refused there, whatever its size (1 GiB here; the same layer of 32 GiB stops at the same point)."""
    body = make(1 << 30)
    assert len(body) < (1 << 30) // 500  # a real bomb: over 500:1
    registry, client, fact = served((media_type, body))
    try:
        with pytest.raises(LimitExceeded) as raised:
            baselibs.read(client, fact, tmp_path)
    finally:
        registry.stop()
    assert raised.value.exit_code == 3 and isinstance(raised.value, UpstreamMalformed)
    assert f"ratio over {budget.LAYERS.ratio}:1 (a decompression bomb): refused" in raised.value.message
    # Measured in bytes, not time: refused just past RATIO_FLOOR (64 MiB), not after the 1 GiB the layer holds.
    inflated = re.search(r"([0-9.]+) MiB decompressed from", raised.value.message)
    assert inflated and float(inflated[1]) * (1 << 20) < 2 * budget.RATIO_FLOOR, raised.value.message
    assert raised.value.message.startswith(f"base image {fact.pinned}: ")
    assert not baselibs.cache_path(tmp_path, fact.manifest_digest).exists()


def test_a_small_layer_under_a_large_one_is_not_taken_for_a_bomb(monkeypatch, tmp_path):
    """The ratio is of the whole read: inflated bytes against the compressed bytes of every layer read so far. (It
    was against the current layer's alone: once a large layer had been read, the first kilobytes of the next, the
    distribution's layer here, crossed 100:1 and a real multi-layer CUDA base was refused as a bomb.) The floor is
    lowered so that 6 MiB of incompressible bytes stand for a CUDA image's gigabytes."""
    monkeypatch.setattr(budget, "RATIO_FLOOR", 1 << 20)
    bulk = layer([file("usr/local/cuda/lib64/libbulk.so", random.Random(0).randbytes(6 << 20))])
    registry, client, fact = served(*ubuntu_layers("noble"), bulk)  # bottom first: the bulk is read first
    try:
        found = baselibs.read(client, fact, tmp_path)
    finally:
        registry.stop()
    assert baselibs.system(found).versions["GLIBC"] == (2, 39)  # type: ignore[union-attr]
    monkeypatch.setattr(budget, "LAYERS", Limits(**{**vars(budget.LAYERS), "ratio": 1}))
    registry, client, fact = served(*ubuntu_layers("noble"), bulk)
    try:  # and the ratio still binds: the distribution's layer compresses about 3:1
        with pytest.raises(LimitExceeded, match="a ratio over 1:1"):
            baselibs.read(client, fact, tmp_path / "again")
    finally:
        registry.stop()


def test_inflated_bytes_entries_kept_memory_and_time_are_each_limits_of_the_whole_read(monkeypatch, tmp_path):
    """LAYERS is looked up at each read, so a test lowers one limit at a time; each is one clear LimitExceeded."""
    real = ubuntu_layers("noble")
    cases = {
        "inflated": (Limits(**{**vars(budget.LAYERS), "inflated": 4 << 20}), "more than 4.0 MiB decompressed"),
        "entries": (Limits(**{**vars(budget.LAYERS), "entries": 50}), "more than 50 entries"),
        "kept": (Limits(**{**vars(budget.LAYERS), "kept": 2000}), "more than 2,000 bytes to keep in memory"),
        "seconds": (Limits(**{**vars(budget.LAYERS), "seconds": 0.0}), "more than 0 s to read"),
    }
    registry, client, fact = served(*real)
    try:
        for name, (limits, said) in cases.items():
            monkeypatch.setattr(budget, "LAYERS", limits)
            with pytest.raises(LimitExceeded, match=said):
                baselibs.read(client, fact, tmp_path)
            assert not baselibs.cache_path(tmp_path, fact.manifest_digest).exists(), name
        monkeypatch.undo()
        assert baselibs.system(baselibs.read(client, fact, tmp_path)).versions["GLIBC"] == (2, 39)  # type: ignore[union-attr]
    finally:
        registry.stop()


def test_the_deadline_names_the_variable_that_moves_it(monkeypatch):
    monkeypatch.setenv("BUILDKIT_BASE_DEADLINE", "0.000001")
    reading = Budget("base image x", budget.LAYERS)
    time.sleep(0.01)
    with pytest.raises(LimitExceeded) as raised:
        reading.tick()
    assert raised.value.hint == "on a slow link, raise BUILDKIT_BASE_DEADLINE=<seconds>"
    monkeypatch.setenv("BUILDKIT_BASE_DEADLINE", "soon")
    with pytest.raises(Exception, match="BUILDKIT_BASE_DEADLINE='soon': expected a positive number") as bad:
        Budget("base image x", budget.LAYERS)
    assert bad.value.exit_code == 2  # type: ignore[attr-defined]


def test_a_limit_crossed_is_never_not_checked_but_a_dropped_connection_is(monkeypatch, tmp_path):
    """base_system turns an unreachable registry into "not checked" (the lock is still good), never a bomb."""
    resolver = SimpleNamespace(
        wheel_bytes="download", cache_dir=tmp_path, registry=None, on_progress=None, git=SimpleNamespace(notes=[])
    )
    fact = SimpleNamespace(manifest_digest="sha256:" + "4" * 64)

    def bomb(*args, **kwargs):
        Budget("base image x", Limits(inflated=1, ratio=1, entries=1, kept=1, seconds=1)).inflate(2)

    monkeypatch.setattr(baselibs, "read", bomb)
    with pytest.raises(LimitExceeded, match="more than 1 bytes decompressed"):
        Resolver.base_system(resolver, fact)  # type: ignore[arg-type]


def test_a_slow_reader_is_not_taken_for_a_stalled_network(monkeypatch, tmp_path):
    """The stall timer measures the network, not the time the reader takes with a chunk it holds (before, a layer
    slow to decompress made the timer shut the socket, and the read failed as a dropped connection)."""
    monkeypatch.setenv("BUILDKIT_HTTP_STALL", "0.3")
    body = os.urandom(3 << 20)  # three chunks of the registry's 1 MiB
    registry, client, fact = served((GZIP_LAYER, body))
    try:
        ref = client.layers(fact)[0]
        got = b""
        with client.layer(fact, ref) as chunks:
            for chunk in chunks:
                time.sleep(0.6)  # twice the stall timeout, for every chunk
                got += chunk
    finally:
        registry.stop()
    assert got == body


# -- point 2: captured files ------------------------------------------------------------------------------------


def blob(entries, opened: list[int] | None = None) -> LayerBlob:
    media_type, data = layer(entries)

    def open_():
        if opened is not None:
            opened.append(1)
        return _chunks(data)

    return LayerBlob("sha256:" + hashlib.sha256(data).hexdigest(), len(data), media_type, open_)


class _chunks:
    def __init__(self, data: bytes):
        self.data = data

    def __enter__(self):
        return [self.data[i : i + 65536] for i in range(0, len(self.data), 65536)]

    def __exit__(self, *exc):
        return False


def test_thousands_of_captured_files_outside_the_loaders_directories_are_not_parsed():
    """6,000 libc.so.6 copies (a conda env each, say) cost no parsing: only the copy in a loader directory is read;
    one elsewhere is read only when a symlink leads a wanted path there (its layer streamed again, for it alone)."""
    copies = [file(f"opt/env{i}/lib/libc.so.6", b"GLIBC_2.99" * 100) for i in range(6000)]
    parsed: list[str] = []

    def read(name: str, data: bytes) -> bytes:
        parsed.append(name)
        return data[:10]

    many = blob([*copies, file(LIBC, b"GLIBC_2.39")])
    found = find([many], [LIBC], baselibs.CAPTURE, read, "base image", 1 << 20)
    assert found.found[LIBC] == (LIBC, 0, b"GLIBC_2.39") and parsed == [LIBC]
    parsed.clear()
    opened: list[int] = []
    linked = blob([*copies, symlink(LIBC, "/opt/env17/lib/libc.so.6")], opened)
    found = find([linked], [LIBC], baselibs.CAPTURE, read, "base image", 1 << 20)
    assert found.found[LIBC] == ("opt/env17/lib/libc.so.6", 0, b"GLIBC_2.99")
    assert parsed == ["opt/env17/lib/libc.so.6"] and opened == [1, 1]


def test_what_read_makes_of_captured_files_counts_against_the_kept_budget():
    """Each parsed copy's version nodes are held to the end of the read: they count, and so does the number of
    copies parsed (a layer that writes the same path again and again)."""

    def nodes(name: str, data: bytes) -> list[str]:
        return [f"GLIBC_{i}" + "x" * 50 for i in range(4096)]  # the most _version_nodes keeps of one file

    dirs = [f"{d}/libc.so.6" for d in baselibs.directories("linux/amd64")]
    spread = blob([file(path, b"") for path in dirs])
    small = Budget("base image", Limits(inflated=1 << 30, ratio=100, entries=1000, kept=1 << 20, seconds=60))
    with pytest.raises(LimitExceeded, match="more than 1.0 MiB to keep in memory"):
        find([spread], dirs, baselibs.CAPTURE, nodes, "base image", 1 << 20, budget=small)
    again = blob([file(LIBC, b"") for _ in range(MAX_PARSED + 1)])
    with pytest.raises(LimitExceeded, match=f"more than {MAX_PARSED} files to read"):
        find([again], [LIBC], baselibs.CAPTURE, lambda name, data: [], "base image", 1 << 20)


# -- point 3: an interrupt ---------------------------------------------------------------------------------------


def test_cancel_stops_a_read_waiting_on_a_slow_registry_at_once_and_nothing_is_cached(tmp_path):
    """The cancel event resolve sets on Ctrl-C reaches the read wherever it waits: in the network read too."""
    registry, client, fact = served(layer([file("opt/big", os.urandom(4 << 20)), file(LIBC, b"x")]))
    slow(registry, per_chunk=2.0)  # the layer's first MiB (the read's first chunk) takes 32 s
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    begun = time.monotonic()
    try:
        with pytest.raises(Interrupted):
            baselibs.read(client, fact, tmp_path, cancel=cancel)
    finally:
        registry.stop()
    # The failure's scale: a cancel seen only between the read's 1 MiB chunks would wait for the first MiB, 32 s.
    assert time.monotonic() - begun < 16
    assert not baselibs.cache_path(tmp_path, fact.manifest_digest).exists()


def slow(registry: FakeRegistry, per_chunk: float = 0.2) -> None:
    """Layers served 64 KiB at a time, `per_chunk` seconds apart (a slow link; at 0.2 s, 4 MiB take 13 s)."""
    handle = registry.handle

    def answer(method, path, headers):
        status, head, body = handle(method, path, headers)
        if "/blobs/" not in path or status != 200:
            return status, head, body
        assert isinstance(body, bytes)  # the registry answers a blob whole
        if len(body) < (1 << 20):
            return status, head, body

        def trickle():
            for i in range(0, len(body), 65536):
                time.sleep(per_chunk)
                yield body[i : i + 65536]

        return status, {**head, "Content-Length": str(len(body))}, trickle()

    registry.handle = answer  # type: ignore[method-assign]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_during_the_base_read_ends_resolve_at_once_with_130_and_no_cache(project, upstreams, sig):
    from tests.support.projects import use_base

    root, cli = project
    big = layer([file("opt/big", os.urandom(8 << 20)), file(LIBC, b"x")])
    use_base(root, upstreams, "slow", cuda_version="12.9.0.043", layers=[big])
    slow(upstreams.registry, per_chunk=0.5)  # 64 s for the layer
    blob_path = "/blobs/sha256:" + hashlib.sha256(big[1]).hexdigest()
    process = subprocess.Popen(
        [sys.executable, "-m", "buildkit.cli", "resolve"],
        cwd=root,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.endswith(blob_path) for _m, p, _h in list(upstreams.registry.log)):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        time.sleep(0.5)  # well inside the layer's 64 s
        os.kill(process.pid, sig)
        sent = time.monotonic()
        _out, err = process.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err[-3000:]
    # The failure's scale: a resolve that finished the layer's read first would end 64 s after it began.
    assert took < 30, (took, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err  # (typer ends a KeyboardInterrupt as exit 130)
    assert list((root / "cache" / "gpu-abi").glob("base-*")) == []
    assert not (root / "pins.lock").exists()


def test_gzip_module_and_zstd_bombs_are_what_they_claim():
    """The bombs above are real archives: a tar of one file of zeros, as gzip and zstd would decompress it."""
    small = 3 << 20
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(gzip_bomb(small)))) as tar:
        assert [(m.name, m.size) for m in tar.getmembers()] == [("opt/zeros", small)]
    raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(zstd_bomb(small))).read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        assert [(m.name, m.size) for m in tar.getmembers()] == [("opt/zeros", small)]
