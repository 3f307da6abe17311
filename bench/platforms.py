"""What a second platform adds to `buildkit resolve` (issue 30): round trips on the critical path, requests, bytes
received and seconds, for the same pins resolved for linux/amd64 alone and for linux/amd64 + linux/arm64
(build.platforms), side by side and as ratios (two platforms / one).

Both resolve against the loopback GitHub / wheel index / registry of tests/support/fake_upstreams.py with the reference
pins, each run into an empty cache (both wheels downloaded and hashed, both platforms' base layers read every
time). The index lists the x86_64 and the aarch64 wheel of the one wheel commit (stand-ins of `--wheel-kib`, each
holding an ELF for its architecture); the base image is a two-platform index whose manifests each list one layer of
`--layer-kib` (random bytes, so gzip keeps its size). Depth is measured as bench/resolve_depth.py measures it:
latency L injected into every request of every upstream, depth = (t(L) - t(0)) / L. Requests and bytes are what the
stand-ins answered and sent (headers included), median over the runs at L.

    python bench/platforms.py [--latency 0.4] [--repeat 5] [--timeline]

Goal: depth ratio close to 1 (the second platform's requests run beside the first's: two platforms do not take
twice the round trips); bytes ratio about 2 (a second wheel and a second base). `--timeline` prints, for one
two-platform run at latency L, when each request arrived, in units of L: the chains one after another show there.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildkit.models.pins import Pins, load_pins  # noqa: E402
from buildkit.stages.resolve import Resolver  # noqa: E402
from buildkit.world.http import Http  # noqa: E402
from tests.support.fake_upstreams import (  # noqa: E402
    BASE_REPO,
    BASE_TAG,
    VLLM_SHA,
    WHEEL_ARM,
    Upstream,
    Upstreams,
    WheelFile,
    cudart_for,
    minimal_elf,
    pins_text,
    reference_upstreams,
    two_platforms,
)
from tests.support.realdebs import file, layer  # noqa: E402

EM_AARCH64 = 183  # elf.h


@dataclass
class Figures:
    """One configuration's runs: seconds at latency 0 and at L, and per run at L what the upstreams saw."""

    t0: list[float] = field(default_factory=list)
    tl: list[float] = field(default_factory=list)
    requests: list[dict[str, int]] = field(default_factory=list)  # upstream -> requests, per run
    sent: list[dict[str, int]] = field(default_factory=list)  # upstream -> bytes it sent, per run

    def depth(self, latency: float) -> float:
        return (statistics.median(self.tl) - statistics.median(self.t0)) / latency

    def median_requests(self, name: str | None = None) -> float:
        return statistics.median(sum(r.values()) if name is None else r[name] for r in self.requests)

    def median_sent(self, name: str | None = None) -> float:
        return statistics.median(sum(r.values()) if name is None else r[name] for r in self.sent)


def upstreams_of(up: Upstreams) -> dict[str, Upstream]:
    return {"GitHub": up.github, "wheel index": up.wheels, "registry": up.registry}


def one_run(up: Upstreams, pins: Pins, cache: Path) -> tuple[float, dict[str, int], dict[str, int]]:
    """A whole resolve into the empty `cache` (removed afterwards, untimed): seconds, and per upstream the requests
    it answered and the bytes it sent."""
    servers = upstreams_of(up)
    for server in servers.values():
        with server._lock:
            server.log.clear()
            server.sent = 0
    started = time.perf_counter()
    lock = Resolver(pins, Http(), cache).resolve()
    seconds = time.perf_counter() - started
    assert lock.wheel.content_addressed
    assert all(f.wheel.content_addressed for f in (lock.other_platforms or {}).values())
    requests = {name: len(server.log) for name, server in servers.items()}
    sent = {name: server.sent for name, server in servers.items()}
    shutil.rmtree(cache, ignore_errors=True)  # untimed: see bench/README.md (wheel_hash.py)
    return seconds, requests, sent


def timeline(up: Upstreams, pins: Pins, cache: Path, latency: float) -> list[str]:
    """One resolve at `latency`: each request as it arrived, in units of the latency since the start."""
    seen: list[tuple[float, str, str, str]] = []
    started = time.perf_counter()
    for name, server in upstreams_of(up).items():

        def record(
            method: str,
            path: str,
            headers: dict[str, str],
            name: str = name,
            original: Callable[..., Any] = server.record,
        ) -> None:
            seen.append((time.perf_counter() - started, name, method, path))
            original(method, path, headers)

        server.record = record  # type: ignore[method-assign]
    try:
        up.set_latency(latency)
        started = time.perf_counter()
        Resolver(pins, Http(), cache).resolve()
    finally:
        for server in upstreams_of(up).values():
            del server.record  # the class's again
        shutil.rmtree(cache, ignore_errors=True)
    return [f"{at / latency:6.2f} L  {name:12} {method:4} {path[:96]}" for at, name, method, path in sorted(seen)]


def ratio(two: float, one: float) -> str:
    return f"{two / one:.2f}" if one else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.4, help="seconds added to every request")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--wheel-kib", type=int, default=256, help="each stand-in wheel's size")
    parser.add_argument("--layer-kib", type=int, default=256, help="the base image's one layer, each platform's")
    parser.add_argument("--timeline", action="store_true", help="print one two-platform run's requests in time")
    args = parser.parse_args()

    up = reference_upstreams(wheel_size=args.wheel_kib << 10)
    # The stand-in index serves an x86-64 library under the aarch64 name (a decoy resolve refuses): an aarch64 one.
    arm = up.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"]
    assert isinstance(arm, WheelFile)
    arm.library = minimal_elf(cudart_for("default"), EM_AARCH64)
    blob = random.Random(0).randbytes(args.layer_kib << 10)
    up.registry.add_image(BASE_REPO, BASE_TAG, layers=[layer([file("opt/bench/blob.bin", blob)])])
    os.environ.update(up.env())
    configs = {"1 platform": Figures(), "2 platforms": Figures()}
    lines: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pins: dict[str, Pins] = {}
            for name, text in (
                ("1 platform", pins_text(up.base_image)),
                ("2 platforms", two_platforms(pins_text(up.base_image))),
            ):
                path = Path(tmp) / f"{name.replace(' ', '-')}.yaml"
                path.write_text(text)
                pins[name] = load_pins(path)
            cache = Path(tmp) / "cache"
            for run in range(args.repeat):  # the two configurations alternate, at each latency
                for latency in (0.0, args.latency):
                    up.set_latency(latency)
                    for name, figures in configs.items():
                        seconds, requests, sent = one_run(up, pins[name], cache / f"{name}-{run}-{latency}")
                        if latency:
                            figures.tl.append(seconds)
                            figures.requests.append(requests)
                            figures.sent.append(sent)
                        else:
                            figures.t0.append(seconds)
            if args.timeline:
                lines = timeline(up, pins["2 platforms"], cache / "timeline", args.latency)
    finally:
        up.stop()

    one, two = configs["1 platform"], configs["2 platforms"]
    print(
        f"latency injected per request: {args.latency * 1000:.0f} ms; median of {args.repeat} runs each, every run "
        f"from an empty cache; wheels {args.wheel_kib} KiB, base layer {args.layer_kib} KiB"
    )
    print(f"{'':24} {'1 platform':>12} {'2 platforms':>12} {'ratio 2/1':>10}")
    rows: list[tuple[str, float, float, str]] = [
        ("t(0), seconds", statistics.median(one.t0), statistics.median(two.t0), "{:12.3f}"),
        ("t(L), seconds", statistics.median(one.tl), statistics.median(two.tl), "{:12.3f}"),
        ("round trips (depth)", one.depth(args.latency), two.depth(args.latency), "{:12.2f}"),
        ("requests", one.median_requests(), two.median_requests(), "{:12.0f}"),
        *((f"  {name}", one.median_requests(name), two.median_requests(name), "{:12.0f}") for name in upstreams_of(up)),
        ("bytes received", one.median_sent(), two.median_sent(), "{:12,.0f}"),
        *((f"  {name}", one.median_sent(name), two.median_sent(name), "{:12,.0f}") for name in upstreams_of(up)),
    ]
    for label, a, b, shape in rows:
        print(f"{label:24} {shape.format(a)} {shape.format(b)} {ratio(b, a):>10}")
    depth = ratio(two.depth(args.latency), one.depth(args.latency))
    bytes_ratio = ratio(two.median_sent(), one.median_sent())
    print(
        f"depth ratio 2/1: {depth} (goal: close to 1, the second platform beside the first); "
        f"bytes ratio 2/1: {bytes_ratio} (goal: about 2)"
    )
    if lines:
        print(f"\none two-platform run at {args.latency * 1000:.0f} ms, each request as it arrived:")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
