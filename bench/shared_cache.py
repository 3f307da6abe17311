"""A registry build cache shared by builders: what a second, empty builder saves by importing what the first
exported. Measured in the same run, on the smoke target.

Needs the engine from scripts/engine-up.sh (root): builder A (`buildkit-engine`) and builder B
(`buildkit-engine-b`, a buildkitd with state of its own), and the loopback registry for the cache.

    python bench/shared_cache.py [--repeat 3]

Each round: A is emptied and builds cold from a fresh cache dir (so a fresh clone), exporting the cache to a new
repository; then B is emptied and builds the same lock from another fresh cache dir, importing it. Both times are
`buildkit build` end to end (prepare and render included). Goal: every Dockerfile step on B from the cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import uuid

from smoke_project import BUILDKIT, smoke_project, timed

A, B = "buildkit-engine", "buildkit-engine-b"


def empty(builder: str) -> None:
    subprocess.run(["docker", "buildx", "prune", "-af", "--builder", builder], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cold, warm, cached = [], [], []
    with smoke_project() as (project, env, tmp):
        pins = (project / "pins.yaml").read_text()
        for n in range(args.repeat):
            ref = f"127.0.0.1:5000/bench-{uuid.uuid4().hex[:12]}/cache"
            (project / "pins.yaml").write_text(pins.replace("\nbuild:\n", f"\nbuild:\n  cache:\n    ref: {ref}\n", 1))
            subprocess.run([*BUILDKIT, "resolve"], cwd=project, env=env, check=True, capture_output=True)
            build = [*BUILDKIT, "build", "--smoke", "--progress", "plain", "--builder"]
            empty(A)
            cold.append(timed([*build, A], project, {**env, "BUILDKIT_CACHE_DIR": str(tmp / f"a{n}")}))
            empty(B)
            warm.append(timed([*build, B], project, {**env, "BUILDKIT_CACHE_DIR": str(tmp / f"b{n}")}))
            record = json.loads((project / "build" / "smoke-record.json").read_text())
            assert record["builder"] == B and not [p for p in record["cache"]["problems"]], record["cache"]
            cached.append((record["instructions_cached"], record["instructions_total"]))
    m_cold, m_warm = statistics.median(cold), statistics.median(warm)
    print(f"smoke target, median of {args.repeat} rounds; each builder emptied before it builds")
    print(f"  builder A, cold, exporting the cache (baseline): {m_cold:6.2f} s")
    print(f"  builder B, empty, importing it:                  {m_warm:6.2f} s")
    print(f"  Dockerfile steps from the cache on B: {', '.join(f'{c}/{t}' for c, t in cached)}  (goal: all)")
    print(f"  time ratio B/A: {m_warm / m_cold:.2f}")


if __name__ == "__main__":
    main()
