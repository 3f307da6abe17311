"""Time of reading a base image's layers for its glibc and libstdc++ (resolve/baselibs.py: the registry streams each
layer, image/layerfiles.py walks its tar), against the least any reader can do with the same bytes: decompress them
and walk the tar headers, from memory, in the same run.

The layers: a bulk layer as a CUDA image has them (vLLM 0.14.0's real shared objects, a few hundred MB of
binaries, gzipped), above the distribution's layer with Ubuntu 24.04's real libc6, libstdc++6 and libgcc (the
libraries are in the bottom layer, so every layer is read, as in NVIDIA's CUDA images). Served by the loopback
registry over HTTP, with its token flow.

    python bench/base_layers.py [MB]     # MB of binaries in the bulk layer (default 300)

The figure to take away is the rate: a base of N GB takes about N * 1000 / rate seconds, once per pinned base (the
answer is cached by its manifest digest; warm, reading the cache takes milliseconds).
"""

from __future__ import annotations

import gzip
import io
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildkit.stages.resolve import baselibs  # noqa: E402
from buildkit.world.http import Http  # noqa: E402
from buildkit.world.registry import Registry  # noqa: E402
from tests.support.fake_upstreams import BASE_REPO, FakeRegistry  # noqa: E402
from tests.support.realdebs import MERGED_USR, NOBLE, file, layer, package_entries, symlink  # noqa: E402
from tests.support.realwheels import VLLM_0_14_0, real_wheel  # noqa: E402


def bulk_layer(megabytes: int) -> tuple[str, bytes]:
    entries, total = [], 0
    with zipfile.ZipFile(real_wheel(VLLM_0_14_0)) as wheel:
        for info in sorted(wheel.infolist(), key=lambda i: i.file_size):
            if total >= megabytes << 20:
                break
            if info.filename.endswith(".so"):
                data = wheel.read(info)[: (megabytes << 20) - total]
                entries.append(file(f"usr/local/lib/python3.12/site-packages/{info.filename}", data))
                total += len(data)
    return layer(entries)


def walk(layers: list[tuple[str, bytes]]) -> float:
    start = time.perf_counter()
    for _media_type, body in layers:
        with tarfile.open(fileobj=gzip.GzipFile(fileobj=io.BytesIO(body)), mode="r|") as tar:
            for _member in tar:
                pass
    return time.perf_counter() - start


def main() -> None:
    megabytes = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    layers = [layer([symlink(n, t) for n, t in MERGED_USR] + package_entries(NOBLE)), bulk_layer(megabytes)]
    size = sum(len(body) for _m, body in layers)
    registry = FakeRegistry().start()
    try:
        registry.add_image(BASE_REPO, "bench", platforms=("linux/amd64",), layers=layers)
        client = Registry(Http())
        fact = client.resolve(f"{registry.netloc}/{BASE_REPO}:bench", "linux/amd64")
        baseline = walk(layers)
        with tempfile.TemporaryDirectory() as cache:
            start = time.perf_counter()
            found = baselibs.read(client, fact, Path(cache))
            cold = time.perf_counter() - start
            start = time.perf_counter()
            baselibs.read(client, fact, Path(cache))
            warm = time.perf_counter() - start
    finally:
        registry.stop()
    assert not isinstance(baselibs.system(found), str)
    print(f"layers: {size / 1e6:.0f} MB compressed ({len(layers)}), libraries in the bottom one")
    print(f"baseline (gunzip + tar headers, from memory): {baseline:.2f} s, {size / 1e6 / baseline:.0f} MB/s")
    print(
        f"resolve's read (HTTP, checked, scanned):      {cold:.2f} s, {size / 1e6 / cold:.0f} MB/s, "
        f"{cold / baseline:.2f} x the baseline"
    )
    print(f"warm (the cache):                              {warm * 1000:.1f} ms")


if __name__ == "__main__":
    main()
