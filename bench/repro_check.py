"""What `buildkit build --check-reproducible` costs, against what it replaces: two plain builds of the same lock
from a clean cache. Measured alternately in the same run, on the smoke target.

Needs the engine from scripts/engine-up.sh (root). Both sides build with `--no-cache` (`-- --no-cache` reaches
both of the check's builds), so neither is helped by the other's cache.

    python bench/repro_check.py [--repeat 3]

The check adds a second clone of NeMo-RL (prepare in a fresh cache directory), two OCI layouts and their
comparison; goal: at most 1.5 times two plain builds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess

from smoke_project import BUILDKIT, smoke_project, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with smoke_project() as (project, env, _):
        plain = [*BUILDKIT, "build", "--smoke", "--progress", "plain", "--", "--no-cache"]
        check = [*BUILDKIT, "build", "--smoke", "--progress", "plain", "--check-reproducible", "--", "--no-cache"]
        subprocess.run(plain, cwd=project, env=env, check=True, capture_output=True)  # the tree is prepared once
        two_plain, checks = [], []
        for _ in range(args.repeat):
            two_plain.append(timed(plain, project, env) + timed(plain, project, env))
            checks.append(timed(check, project, env))
        record = json.loads((project / "build" / "smoke-record.json").read_text())
    assert record["reproducibility"]["identical"], record["reproducibility"]["summary"]
    m_plain, m_check = statistics.median(two_plain), statistics.median(checks)
    print(f"smoke target, --no-cache, median of {args.repeat} alternating runs")
    print(f"  two plain builds (baseline):       {m_plain:6.2f} s")
    print(f"  build --check-reproducible:        {m_check:6.2f} s  (identical)")
    print(f"  ratio check/two builds: {m_check / m_plain:.2f}  (goal: <= 1.5)")


if __name__ == "__main__":
    main()
