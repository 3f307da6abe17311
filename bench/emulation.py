"""What building for linux/arm64 under QEMU costs on this x86_64 engine: the same CPU-bound RUN step built for
linux/amd64 (native, the baseline) and for linux/arm64 (emulated by qemu-aarch64 through binfmt_misc), alternately
in the same run.

Needs the engine from scripts/engine-up.sh (root): its builder, and the stand-in base, an index of an amd64 and an
arm64 busybox image.

    python bench/emulation.py [--repeat 3]

Three steps, each built with --no-cache so that it runs every time: `uname -m` alone (the fixed cost of a step:
the container's start, and qemu's), busybox's sha256sum over 50 MB of zeros (one tight loop of arithmetic, which
QEMU translates once and then runs fast) and a busybox shell loop of 1,000,000 turns (an interpreter: branches and
calls, closer to what pip, Python and configure scripts do in a real build). The time is the RUN step's own
duration, read from BuildKit's progress, so that buildx's start and the solve are left out; the step's output says
which machine it ran on (uname -m).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

from smoke_project import ROOT

sys.path.insert(0, str(ROOT))

from buildkit.models.plan import BuildPlan
from buildkit.stages.build import run_buildx
from tests.support.engine import BUILDER, STAND_IN_BASE, engine_problem

STEPS = {
    "uname -m alone (the step's fixed cost)": "true",
    "sha256sum over 50 MB": "head -c 50000000 /dev/zero | sha256sum",
    "shell loop, 1,000,000 turns": "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done; echo $i",
}
MACHINES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}  # what `uname -m` says


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def step_time(context: Path, platform: str) -> float:
    """Seconds the Dockerfile's RUN step takes, built with no cache for `platform`."""
    plan = BuildPlan(
        dockerfile=context / "Dockerfile",
        tree=context,
        target="",
        platform=platform,
        tag="bench-emulation:1",
        build_args=(),
        metadata_file=context.parent / "metadata.json",
        source_date_epoch=1770316331,
        builder=BUILDER,
        provenance=False,
        export=False,
        no_cache=True,
    )
    log = context.parent / "build.log"
    result = run_buildx(plan, log, lambda line, progress: None)
    if result.exit_code:
        sys.exit(log.read_text()[-3000:])
    [run] = [s for s in result.progress.steps.values() if "RUN " in s.name]
    assert run.started is not None and run.completed is not None  # a finished step
    if not any(MACHINES[platform] in line for line in run.logs):
        sys.exit(f"bench: the step did not say it ran on {MACHINES[platform]}: {list(run.logs)}")
    return _seconds(run.started, run.completed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    problem = engine_problem()
    if problem:
        sys.exit(f"bench: {problem}; run scripts/engine-up.sh first")
    results: dict[str, dict[str, list[float]]] = {name: {p: [] for p in MACHINES} for name in STEPS}
    with tempfile.TemporaryDirectory() as tmp_name:
        for name, command in STEPS.items():
            context = Path(tmp_name) / "context"
            context.mkdir(exist_ok=True)
            (context / "Dockerfile").write_text(f"FROM {STAND_IN_BASE}\nRUN uname -m && {command}\n")
            for _ in range(args.repeat):
                for platform in MACHINES:
                    results[name][platform].append(step_time(context, platform))
    print(f"one RUN step on the stand-in base, --no-cache, median of {args.repeat} alternating builds")
    for name, times in results.items():
        native, emulated = (statistics.median(times[p]) for p in MACHINES)
        print(f"  {name}")
        print(f"    linux/amd64, native (baseline)   {native:6.2f} s")
        print(f"    linux/arm64, under qemu          {emulated:6.2f} s")
        print(f"    ratio emulated/native: {emulated / native:.1f}")


if __name__ == "__main__":
    main()
