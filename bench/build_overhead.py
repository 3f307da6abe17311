"""What `buildkit build` adds to a no-op rebuild (everything cached), against the bare `docker buildx build` of the
same Dockerfile with the same arguments, measured alternately in the same run.

Needs the engine from scripts/engine-up.sh (root). Sets up the NeMo-RL-shaped test repository (git daemon), the
loopback GitHub and wheel index, and the engine's registry as the base image's registry; resolves; builds the
smoke target once to fill the cache; then times both commands.

    sudo python bench/build_overhead.py [--repeat 5]

Goal (issue 4): at most 2 s added.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess

from smoke_project import BUILDKIT, smoke_project, timed

from tests.support.engine import BUILDER


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with smoke_project() as (project, env, _):
        ours = [*BUILDKIT, "build", "--smoke", "--builder", BUILDER, "--progress", "plain", "--no-syntax"]
        subprocess.run(ours, cwd=project, env=env, check=True, capture_output=True)  # fills the cache
        record = json.loads((project / "build" / "smoke-record.json").read_text())
        bare = record["argv"]
        bare_env = {**env, "SOURCE_DATE_EPOCH": str(record["source_date_epoch"])}
        timed(bare, project, bare_env)
        samples_ours, samples_bare = [], []
        for _ in range(args.repeat):
            samples_ours.append(timed(ours, project, env))
            samples_bare.append(timed(bare, project, bare_env))
        cached = json.loads((project / "build" / "smoke-record.json").read_text())

    m_ours, m_bare = statistics.median(samples_ours), statistics.median(samples_bare)
    print(f"no-op rebuild of the smoke target, median of {args.repeat} alternating runs")
    print(f"  bare docker buildx build (baseline): {m_bare:6.2f} s")
    steps = f"{cached['steps_cached']}/{cached['steps_total']} steps cached"
    print(f"  buildkit build --smoke:              {m_ours:6.2f} s  ({steps})")
    print(f"  added by buildkit: {m_ours - m_bare:+.2f} s, ratio {m_ours / m_bare:.2f}  (goal: <= 2 s added)")


if __name__ == "__main__":
    main()
