"""A moved PR head on the engine (issue 42): a release-shaped image built and pushed cold, then the head moved by a
Python-only commit and the image built and pushed again; what BuildKit ran and what the registry received.

The world is real git (tests/support/vllmfork.py): vLLM's main with the merge base (its wheel in the stand-in index)
and a fork whose head moves. The Dockerfile is the one `buildkit build --smoke` renders (its layer plan: the install
of the wheel's commit, then the vLLM overlay last), with the heavy install standing in at a realistic size: one RUN
after the smoke target's own that reads the install's build args and writes HEAVY_MIB MiB of incompressible bytes
(NeMo-RL's install RUN leaves 1.2 GiB of vLLM alone). Both builds push to the engine's registry through buildkit's
own code for a pushed build with an overlay (stages/build/installed.py: the install's stage probed, pushed by digest
once per install, the target FROM it), with the plan `buildkit build --smoke --push` makes; the times are those of
every buildx run of it. Steps come from BuildKit's own progress (the build record's, cached or not), bytes from the
registry (the new manifest's blobs that the old one does not name, with both manifests and the config), and
changed_bytes from git (the moved head's bytes of the paths the overlay copies).

    sudo python bench/pr_head_move.py [--heavy-mib 1100] [--json]

Goal: only the overlay's steps run, pushed_bytes <= 2 x changed_bytes + manifests, rebuild_s <= cold_s / 10.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
import urllib.request
import uuid
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from smoke_project import BUILDKIT, smoke_project

from buildkit.models.lock import lock_sha256, read_lock
from buildkit.models.paths import Paths
from buildkit.models.plan import BuildPlan, plan_for_lock
from buildkit.models.rebuild import inputs_of
from buildkit.models.records.build import BuildRecord
from buildkit.models.results import Builder
from buildkit.stages.build import execute_in_three
from tests.support.engine import BUILDER
from tests.support.fake_upstreams import VLLM_SHA, Upstreams
from tests.support.gitserver import git
from tests.support.vllmfork import pin_fork, vllm_fork, wheel_name

REGISTRY = "127.0.0.1:5000"
OVERLAY = ("[vllm-source ", "[vllm-overlay ", "--from=vllm-overlay", "3rdparty/vllm && rm -f")
MANIFEST = (
    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json"
)


def heavy(dockerfile: Path, mib: int) -> None:
    """The smoke Dockerfile with the heavy install's stand-in after the smoke target's RUN (its heredoc's end)."""
    text = dockerfile.read_text()
    at = text.index("\nEOF\n", text.index(" AS smoke-vllm-installed\n")) + len("\nEOF\n")
    run = (
        "# bench: the install RUN's stand-in: it reads the install's build args, as build-custom-vllm.sh does\n"
        'RUN echo "${BUILD_CUSTOM_VLLM_URL} ${BUILD_CUSTOM_VLLM_REF}" > /opt/installed && '
        f"dd if=/dev/urandom of=/opt/install.bin bs=1048576 count={mib} 2>/dev/null\n"
    )
    dockerfile.write_text(text[:at] + run + text[at:])


def build(plan: BuildPlan, lock, project: Path, previous: BuildRecord | None = None) -> tuple[float, BuildRecord]:
    """Seconds and the record of one push the way `buildkit build --push` runs it with an overlay: the install's
    stage probed, pushed by digest unless `previous` pushed the same, then the target FROM it
    (buildkit/stages/build/installed.py)."""
    builder = Builder(BUILDER, "remote", "", "", "", "")
    started = time.perf_counter()
    record = execute_in_three(
        plan, previous=previous, say=lambda text: None, log_path=project / "build" / "bench.log",
        record_path=project / "build" / "bench-record.json", on_line=lambda line, progress: None,
        inputs=inputs_of(lock), lock_sha256=lock_sha256(lock), smoke=True, builder=builder, provenance_note="",
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if record.outcome != "succeeded":
        raise SystemExit(f"bench: the build {record.outcome}: {record.error}; log {record.log}")
    return seconds, record


def manifest(ref: str) -> tuple[dict, int]:
    """The platform manifest the registry holds for a tag (of an index, its linux/amd64 image's), and the bytes of the
    manifests read to reach it."""
    repo, tag = ref.split("/", 1)[1].rsplit(":", 1)

    def get(reference: str) -> bytes:
        url = f"http://{REGISTRY}/v2/{repo}/manifests/{reference}"
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": MANIFEST}), timeout=30) as answer:
            return answer.read()

    body = get(tag)
    top = json.loads(body)
    if "manifests" not in top:
        return top, len(body)
    (entry,) = [m for m in top["manifests"] if m.get("platform", {}).get("architecture") == "amd64"]
    platform = get(entry["digest"])
    return json.loads(platform), len(body) + len(platform)


def python_text(size: int, seed: int) -> str:
    """About `size` bytes of Python, as a review's change to a module leaves it (vLLM's modules are tens of KiB)."""
    lines: list[str] = []
    n = 0
    while sum(len(line) for line in lines) < size:
        n += 1
        lines.append(f"def proposer_{seed}_{n}(hidden, k={n % 7}):\n    return hidden[..., : k * {n}] + {n * seed}\n\n")
    return "".join(lines)


def pushed(old: dict | None, new: dict, sizes: int) -> int:
    """Bytes the registry received for `new` after `old`: the blobs `old` does not name, the config, the manifests."""
    named = {layer["digest"] for layer in (old or {}).get("layers", [])}
    blobs = [layer for layer in new["layers"] if layer["digest"] not in named]
    return sum(layer["size"] for layer in blobs) + new["config"]["size"] + sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy-mib", type=int, default=1100)
    parser.add_argument("--json", action="store_true", help="write the figures as JSON, as the last line")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        fork = vllm_fork(Path(scratch))
        try:

            def merge_base_wheel(up: Upstreams) -> None:
                up.wheels.add(fork.base, wheel_name(fork.base))

            with smoke_project(merge_base_wheel) as (project, env, _):
                figures = measure(project, env, fork, args.heavy_mib)
        finally:
            fork.stop()
    steps = figures.pop("steps")
    slowest = figures.pop("slowest")
    print(f"a PR head moved by a Python-only commit; the install's stand-in {args.heavy_mib} MiB; pushed as buildkit "
          "pushes (rewrite-timestamp=true; the install's image pushed by digest once per install)")  # fmt: skip
    print(f"  cold build and push:    {figures['cold_s']:7.1f} s")
    print(f"  rebuild and push:       {figures['rebuild_s']:7.1f} s  ({figures['rebuild_s'] / figures['cold_s']:.3f} "
          "of cold; goal <= 0.1)")  # fmt: skip
    print(f"  steps run again:        {figures['steps_run']} of {figures['steps_total']} instructions, "
          f"{figures['steps_overlay']} of them the overlay's: {', '.join(steps) or 'none'}")  # fmt: skip
    print(f"  pushed:                 {figures['pushed_bytes']:,} bytes for {figures['changed_bytes']:,} bytes of "
          "changed files (goal: <= 2x plus manifests)")  # fmt: skip
    print(f"  the rebuild's slowest:  {'; '.join(slowest)}")
    if args.json:
        print(json.dumps(figures))


_INSTRUCTION = re.compile(r"\[[a-z0-9-]+ [0-9]+/[0-9]+\] ")  # BuildKit's name of a Dockerfile step


def _slowest(record: BuildRecord, count: int = 3) -> list[str]:
    """BuildKit's slowest steps of a build, by its own times: where the seconds went."""
    timed = []
    for step in record.steps:
        begun, ended = (
            datetime.fromisoformat(s.replace("Z", "+00:00")[:26] + "+00:00") for s in (step.started, step.completed)
        )
        timed.append(((ended - begun).total_seconds(), step.name[:60]))
    return [f"{seconds:.1f} s {name}" for seconds, name in sorted(timed, reverse=True)[:count]]


def measure(project: Path, env: dict[str, str], fork, mib: int) -> dict:
    pin_fork(project, fork, VLLM_SHA)
    buildkit = [*BUILDKIT, "build", "--smoke", "--builder", BUILDER, "--no-syntax", "--progress", "plain"]
    subprocess.run(buildkit, cwd=project, env=env, check=True, capture_output=True)  # resolve, prepare, render
    dockerfile = project / "build" / "bench.Dockerfile"
    ref = f"{REGISTRY}/bench-{uuid.uuid4().hex[:12]}/nemo-rl:smoke"

    def plan_of(cold: bool):
        lock = read_lock(project / "pins.lock")
        dockerfile.write_text((project / "build" / "smoke" / "Dockerfile").read_text())
        heavy(dockerfile, mib)
        paths = Paths.named(project / "pins.yaml", cache_dir=Path(env["BUILDKIT_CACHE_DIR"]))
        plan = plan_for_lock(lock, paths, smoke=True, push=True, builder=BUILDER)
        return replace(plan, dockerfile=dockerfile, tag=ref, no_cache=cold), lock

    plan, lock = plan_of(cold=True)
    cold_s, cold = build(plan, lock, project)
    before, before_size = manifest(ref)

    moved = fork.move({"vllm/draft.py": python_text(48 << 10, 1), "vllm/spec/tp.py": python_text(16 << 10, 2)})
    subprocess.run([*BUILDKIT, "resolve"], cwd=project, env=env, check=True, capture_output=True)
    planned = subprocess.run([*buildkit, "--dry-run"], cwd=project, env=env, check=True, capture_output=True, text=True)
    if "runs again: only the vLLM overlay" not in planned.stderr:
        raise SystemExit(f"bench: the plan is not the overlay's:\n{planned.stderr}")
    subprocess.run(buildkit, cwd=project, env=env, check=True, capture_output=True)  # renders the moved head
    plan, lock = plan_of(cold=False)
    rebuild_s, record = build(plan, lock, project, cold)
    after, after_size = manifest(ref)
    if not (record.installed and record.installed.reused):
        raise SystemExit(f"bench: the install's image was not reused: {record.installed}")

    locked = json.loads((project / "pins.lock").read_text())
    copied = [p for p, change in locked["vllm_compare"]["changed"].items() if change != "removed"]
    changed_bytes = sum(int(git("cat-file", "-s", f"{moved}:{p}", cwd=fork.work)) for p in copied)
    steps = sorted({s.name for s in record.steps if _INSTRUCTION.match(s.name)})
    ran = [name for name in steps if not next(s for s in record.steps if s.name == name).cached]
    # A FROM is resolved and the wheel's HTTP source asked again on every build; neither makes a layer.
    ran = [name for name in ran if "] FROM " not in name and not name.startswith("[vllm-wheel ")]
    return {
        "slowest": _slowest(record),
        "cold_s": round(cold_s, 2),
        "rebuild_s": round(rebuild_s, 2),
        "steps_run": len(ran),
        "steps_overlay": len([n for n in ran if any(marker in n for marker in OVERLAY)]),
        "steps_total": len(steps),
        "pushed_bytes": pushed(before, after, before_size + after_size),
        "changed_bytes": changed_bytes,
        "steps": ran,
    }


if __name__ == "__main__":
    main()
