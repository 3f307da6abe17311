"""Throughput of resolve's wheel download (download, sha256 and cache write in one pass) against a plain download.

A loopback HTTP server in its own process serves the real vLLM 0.14.0 wheel from PyPI (472 MiB;
tests/support/realwheels.py fetches it once into $BUILDKIT_TEST_ARTIFACTS and checks PyPI's sha256), or with --mib N
that many MiB of random bytes. The baseline, measured in the same run against the same server, is a plain download of
the same bytes with requests (`iter_content` in 1 MiB chunks, thrown away, as `curl -o /dev/null` would). buildkit's
figure is resolve's own path, `download.fetch_by_get` into an empty cache dir: one GET (its headers the existence
check), the bytes streamed through buildkit.world.http, hashed, written to `<cache>/wheels/.../<name>.part`, fsync'd,
renamed, the record written; for the real wheel the sha256 is checked against PyPI's. The runs alternate; each figure is
the median.

Two more figures say what the ratio can be: sha256 of the same bytes in memory (no download can be hashed faster
than this CPU hashes), and the same comparison over a link paced to --link MiB/s (default 119, 1 Gbit/s), as a
real download from wheels.vllm.ai is.

    python bench/wheel_hash.py [--mib N] [--repeat 5] [--link 119]

Goal (issue 10): buildkit's throughput >= 0.9 x the plain download's.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from buildkit.stages.resolve import download  # noqa: E402
from buildkit.stages.resolve.wheels import FoundWheel  # noqa: E402
from buildkit.world.http import Http  # noqa: E402

NAME = "vllm-0.14.0rc2.dev156+g4a5299c93-cp38-abi3-manylinux_2_31_x86_64.whl"
ETAG = '"bench"'


def wheel_bytes(path: str | None, size: int) -> memoryview:
    if path is None:
        return memoryview(os.urandom(size))
    with open(path, "rb") as handle:
        return memoryview(handle.read())


def serve(path: str | None, size: int, ready) -> None:
    """The wheel server (its own process, so it does not share the client's interpreter lock)."""
    data = wheel_bytes(path, size)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def _head(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.send_header("ETag", ETAG)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()

        def do_HEAD(self) -> None:
            self._head()

        def do_GET(self) -> None:
            self._head()
            rate = float(self.path.partition("?rate=")[2] or 0) * (1 << 20)  # bytes per second; 0: as fast as it can
            started = time.perf_counter()
            for start in range(0, size, 1 << 20):
                self.wfile.write(data[start : start + (1 << 20)])
                if rate:
                    time.sleep(max(0.0, started + (start + (1 << 20)) / rate - time.perf_counter()))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ready.send(server.server_address[1])
    server.serve_forever()


def alternate(fns, url: str, size: int, tmp: Path, repeat: int) -> dict[str, float]:
    """The median seconds of each function, runs alternating."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            cache = tmp / "cache"
            started = time.perf_counter()
            fn(url, size, cache)
            samples[name].append(time.perf_counter() - started)
            # Untimed: the next run writes into pages this one frees (on a VM, memory the guest has never
            # touched is slow to write the first time, whatever writes it).
            shutil.rmtree(cache, ignore_errors=True)
    return {name: statistics.median(times) for name, times in samples.items()}


def sha256_only(path: str | None, size: int) -> float:
    data = wheel_bytes(path, size)
    digest = hashlib.sha256()
    started = time.perf_counter()
    for start in range(0, size, 1 << 20):
        digest.update(data[start : start + (1 << 20)])
    return time.perf_counter() - started


def plain(url: str, size: int, _: Path) -> None:
    got = 0
    with requests.get(url, stream=True, headers={"Accept-Encoding": "identity"}) as answer:
        for chunk in answer.iter_content(chunk_size=1 << 20):
            got += len(chunk)
    assert got == size


EXPECTED: dict[str, str] = {}  # the sha256 the bytes must hash to, when known (the real wheel: PyPI's)


def buildkit(url: str, size: int, cache: Path) -> None:
    chosen = FoundWheel(
        index="http://127.0.0.1",
        variant="default",
        arch="x86_64",
        filename=NAME,
        version="0",
        url=url,
        size=None,
        etag=None,
        last_modified=None,
        index_sha256=None,
        listed_in="",
        verified_by="GET",
    )
    hashed = download.fetch_by_get(Http(), cache, chosen)
    assert hashed.size == size and not hashed.reused
    assert hashed.sha256 == EXPECTED.get("sha256", hashed.sha256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=0, help="serve this many MiB of random bytes, not the real wheel")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--link", type=float, default=119.0, help="MiB/s of the paced link (0: skip it)")
    args = parser.parse_args()
    path = None
    if args.mib:
        size, what = args.mib << 20, f"{args.mib} MiB of random bytes"
    else:
        from tests.support.realwheels import VLLM_0_14_0, real_wheel

        path = str(real_wheel(VLLM_0_14_0))
        size, what = VLLM_0_14_0.size, f"the real {VLLM_0_14_0.filename} ({VLLM_0_14_0.size / 2**20:.1f} MiB)"
        EXPECTED["sha256"] = VLLM_0_14_0.sha256
    mib = size / 2**20

    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(path, size, theirs), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ours.recv()}/{NAME.replace('+', '%2B')}"
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1"
    fns = {"plain": plain, "buildkit": buildkit}
    try:
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
            plain(url, size, Path(tmp))  # warm-up
            loopback = alternate(fns, url, size, Path(tmp), args.repeat)
            paced = alternate(fns, f"{url}?rate={args.link}", size, Path(tmp), args.repeat) if args.link else None
    finally:
        server.terminate()
    hashing = statistics.median(sha256_only(path, size) for _ in range(args.repeat))

    print(f"{what} from a loopback server, median of {args.repeat} alternating runs")
    for title, seconds in (("loopback, as fast as it goes", loopback), (f"paced to {args.link:g} MiB/s", paced)):
        if seconds is None:
            continue
        print(title)
        for name, label in (
            ("plain", "requests iter_content to /dev/null (baseline)"),
            ("buildkit", "buildkit download + sha256 + cache write"),
        ):
            print(f"  {label:46} {seconds[name]:6.3f} s  {mib / seconds[name]:7.1f} MiB/s")
        print(f"  throughput ratio buildkit/plain: {seconds['plain'] / seconds['buildkit']:.2f}  (goal: >= 0.9)")
    print(
        f"sha256 alone, in memory: {hashing:.3f} s, {mib / hashing:.1f} MiB/s; the best loopback ratio a "
        f"download that hashes can reach here: {loopback['plain'] / hashing:.2f}"
    )


if __name__ == "__main__":
    main()
