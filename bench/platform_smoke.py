"""What a second platform adds to the smoke build (issue 30): `buildkit build --smoke` end to end, every step run
(`-- --no-cache`), for linux/amd64 alone (native here: the baseline), for linux/arm64 alone (under QEMU, --emulate)
and for both (build.platforms, --emulate), alternately in the same run.

Needs the engine from scripts/engine-up.sh (root): its builder (with qemu-aarch64 registered), the two-platform
stand-in base. The aarch64 stand-in wheel is given aarch64 shared objects (the stand-in's minimal ELF for
EM_AARCH64), as tests/e2e/test_platform_smoke.py does.

    python bench/platform_smoke.py [--repeat 3]

The smoke target's own steps are small (busybox copies and a shell script), so this measures what a platform costs
around the work: buildkit's stages, buildx, the base image, and QEMU's start on every RUN. bench/emulation.py
measures the work itself under QEMU (4-10x for CPU-bound steps).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from pathlib import Path

from smoke_project import BUILDKIT, smoke_project, timed

from tests.support.fake_upstreams import (
    VLLM_SHA,
    WHEEL_ARM,
    Upstreams,
    WheelFile,
    cudart_for,
    minimal_elf,
    two_platforms,
)

EM_AARCH64 = 183


def aarch64_wheel(up: Upstreams) -> None:
    wheel = up.wheels.files[f"/{VLLM_SHA}/{WHEEL_ARM}"]
    assert isinstance(wheel, WheelFile)
    wheel.library = minimal_elf(cudart_for("default"), EM_AARCH64)


def arm64_only(text: str) -> str:
    """The reference pins for GB200 alone: linux/arm64, its GPUs and its wheel's arch."""
    for old, new in (
        ("platform: linux/amd64", "platform: linux/arm64"),
        ("arch: x86_64", "arch: aarch64"),
        ('cuda_arch_list: "9.0"', 'cuda_arch_list: "10.0"'),
    ):
        assert old in text, old
        text = text.replace(old, new)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shapes = {
        "linux/amd64 alone (native)": (lambda t: t, []),
        "linux/arm64 alone (QEMU)": (arm64_only, ["--emulate"]),
        "both (build.platforms)": (two_platforms, ["--emulate"]),
    }
    times: dict[str, list[float]] = {name: [] for name in shapes}
    with smoke_project(aarch64_wheel) as (project, env, _):
        pins = (project / "pins.yaml").read_text()
        for _ in range(args.repeat):
            for name, (edit, flags) in shapes.items():
                (project / "pins.yaml").write_text(edit(pins))
                Path(project / "pins.lock").unlink(missing_ok=True)
                subprocess.run([*BUILDKIT, "resolve"], cwd=project, env=env, check=True, capture_output=True)
                build = [*BUILDKIT, "build", "--smoke", "--progress", "plain", *flags, "--", "--no-cache"]
                times[name].append(timed(build, project, env))
    base = statistics.median(times["linux/amd64 alone (native)"])
    print(f"`buildkit build --smoke -- --no-cache` end to end, median of {args.repeat} rounds, alternating")
    for name, each in times.items():
        median = statistics.median(each)
        print(f"  {name:28s} {median:6.2f} s   {median / base:5.2f}x the native amd64 build")


if __name__ == "__main__":
    main()
