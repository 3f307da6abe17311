"""Round-trip depth of the whole `buildkit resolve`, wheel download included: extra wall time per unit of latency
injected into every request.

Starts the loopback GitHub / wheel index / registry servers from tests/support/fake_upstreams.py with the reference
pins, then times a full resolve, each run into an empty cache (so the wheel is downloaded and hashed every time), at
latency 0 and at latency L on every request. depth = (t(L) - t(0)) / L is the number of request round trips on the
critical path. Baselines, measured in the same run with the same code: a sequential client making the same
requests one after another, and resolve's order before issue 19 (every lookup first, then the download).

    python bench/resolve_depth.py [--latency 0.4] [--repeat 5]

Goal: depth <= 5.5 for the reference pins. The floor is the registry's chain, 5 requests each needing the previous
answer (manifest -> 401 challenge -> token -> manifest index -> platform manifest -> config); the wheel's chain
(metadata.json -> the downloading GET) is 2 and runs beside it. See bench/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildkit.models.pins import load_pins  # noqa: E402
from buildkit.stages.resolve import Resolver, download  # noqa: E402
from buildkit.stages.resolve.wheels import FoundWheel, resolve_wheel  # noqa: E402
from buildkit.world.http import Http  # noqa: E402
from tests.support.fake_upstreams import pins_text, reference_upstreams  # noqa: E402


def concurrent_resolve(pins, cache: Path) -> None:
    """buildkit resolve: the download starts once the wheel is chosen, beside the registry's chain."""
    lock = Resolver(pins, Http(), cache).resolve()
    assert lock.wheel.content_addressed


def lookups_then_download(pins, cache: Path) -> None:
    """Resolve's order before issue 19: every lookup concurrently, then HEAD had found the wheel, then its GET."""
    r = Resolver(pins, Http(), cache, wheel_bytes="none")
    w = r.resolve().wheel  # HEAD found it, in the wheel's chain
    fields = {f.name: getattr(w, f.name) for f in dataclasses.fields(FoundWheel) if f.name != "listed_variant"}
    download.fetch(r.http, cache, FoundWheel(**fields))


def sequential_resolve(pins, cache: Path) -> None:
    """The same requests, one after another: what a straightforward client does."""
    r = Resolver(pins, Http(), cache)
    r.commit(pins.nemo_rl.repo, pins.nemo_rl.ref)
    r.github.pull(pins.vllm.repo, pins.vllm.pr)
    commit = r.commit(pins.vllm.repo, pins.vllm.ref).commit
    found = resolve_wheel(r.http, pins.wheel_index(), commit, pins.wheel.arch, pins.wheel.variant)
    r.registry.resolve(pins.base_image, pins.build.platform)
    download.fetch(r.http, cache, found)


def timed(fn, pins, cache: Path, repeat: int) -> float:
    samples = []
    for run in range(repeat):
        fresh = cache / str(run)  # an empty cache each run: the wheel is downloaded and hashed every time
        started = time.perf_counter()
        fn(pins, fresh)
        samples.append(time.perf_counter() - started)
        shutil.rmtree(fresh, ignore_errors=True)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.4, help="seconds added to every request")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import os

    up = reference_upstreams()
    os.environ.update(up.env())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            pins_path = Path(tmp) / "pins.yaml"
            pins_path.write_text(pins_text(up.base_image))
            pins = load_pins(pins_path)
            cache = Path(tmp) / "cache"
            results = {}
            for name, fn in (
                ("sequential client (baseline)", sequential_resolve),
                ("lookups, then the download", lookups_then_download),
                ("buildkit resolve", concurrent_resolve),
            ):
                up.set_latency(0.0)
                base = timed(fn, pins, cache, args.repeat)
                up.set_latency(args.latency)
                slow = timed(fn, pins, cache, args.repeat)
                results[name] = (base, slow, (slow - base) / args.latency)
    finally:
        up.stop()

    print(f"latency injected per request: {args.latency * 1000:.0f} ms; median of {args.repeat} runs each")
    print(f"{'client':32} {'t(0)':>8} {'t(L)':>8} {'depth':>7}")
    for name, (base, slow, depth) in results.items():
        print(f"{name:32} {base:8.3f} {slow:8.3f} {depth:7.2f}")
    baseline = results["sequential client (baseline)"][2]
    ours = results["buildkit resolve"][2]
    print(f"depth ratio buildkit/sequential: {ours / baseline:.2f}; buildkit depth {ours:.2f} (goal: <= 5.5)")


if __name__ == "__main__":
    main()
