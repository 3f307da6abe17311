"""zstd against gzip layers: bytes pushed and the time to compress and push them, on the same image, through the
exporter options `buildkit build --push --compression` passes (buildkit.models.plan.argv).

Needs the engine from scripts/engine-up.sh (root) and its loopback registry.

    python bench/compression.py [--repeat 3] [--source DIR]

The image: the stand-in base plus one layer holding a copy of a directory of real files (default: this Python's
standard library, text and bytecode like the Python trees that fill the NeMo-RL image). Before each push the
builder (`buildkit-engine-b`, so that the main builder's cache is left alone) is emptied, because BuildKit keeps
each compressed variant of a layer once made; each push goes to a new repository with `force-compression=true`, so
it compresses and uploads every layer afresh. Push time is the duration of BuildKit's "exporting to image" step
(compression and upload), read from its progress.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import sysconfig
import tempfile
import uuid
from datetime import datetime
from pathlib import Path

import requests
from smoke_project import ROOT

sys.path.insert(0, str(ROOT))

from buildkit.models.plan import BuildPlan
from buildkit.stages.build import run_buildx
from tests.support.engine import BUILDER_B, STAND_IN_BASE, empty_builder, engine_problem

REGISTRY = "127.0.0.1:5000"
ACCEPT = (
    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json"
)


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def pushed_bytes(repo: str, tag: str) -> int:
    """Layer and config bytes of the linux/amd64 image in the registry."""
    url = f"http://{REGISTRY}/v2/{repo}/manifests/"
    manifest = requests.get(url + tag, headers={"Accept": ACCEPT}, timeout=10).json()
    if "manifests" in manifest:  # an index: the amd64 image in it
        digest = next(m["digest"] for m in manifest["manifests"] if m["platform"]["architecture"] == "amd64")
        manifest = requests.get(url + digest, headers={"Accept": ACCEPT}, timeout=10).json()
    return manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])


def push(context: Path, tmp: Path, compression: str) -> tuple[int, float]:
    empty_builder(BUILDER_B)
    repo = f"bench-{uuid.uuid4().hex[:12]}/image"
    plan = BuildPlan(
        dockerfile=context / "Dockerfile",
        tree=context,
        target="",
        platform="linux/amd64",
        tag=f"{REGISTRY}/{repo}:{compression}",
        build_args=(),
        metadata_file=tmp / "metadata.json",
        source_date_epoch=1770316331,
        builder=BUILDER_B,
        provenance=False,
        push=True,
        compression=compression,
        force_compression=True,
    )
    result = run_buildx(plan, tmp / "push.log", lambda line, progress: None)
    if result.exit_code:
        sys.exit((tmp / "push.log").read_text()[-3000:])
    [export] = [s for s in result.progress.steps.values() if s.name == "exporting to image"]
    assert export.started is not None and export.completed is not None  # a finished step
    return pushed_bytes(repo, compression), _seconds(export.started, export.completed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    args = parser.parse_args()
    problem = engine_problem()
    if problem:
        sys.exit(f"bench: {problem}; run scripts/engine-up.sh first")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        context = tmp / "context"
        shutil.copytree(args.source, context / "payload", symlinks=True, ignore=shutil.ignore_patterns("site-packages"))
        (context / "Dockerfile").write_text(f"FROM {STAND_IN_BASE}\nCOPY payload /opt/payload\n")
        size = sum(p.stat().st_size for p in (context / "payload").rglob("*") if p.is_file() and not p.is_symlink())
        results: dict[str, list[tuple[int, float]]] = {"gzip": [], "zstd": []}
        for _ in range(args.repeat):
            for compression in results:
                results[compression].append(push(context, tmp, compression))
    print(
        f"image: {STAND_IN_BASE} + {size / 2**20:.1f} MiB of {args.source}; median of {args.repeat} alternating pushes"
    )
    medians = {}
    for compression, runs in results.items():
        medians[compression] = (statistics.median(b for b, _ in runs), statistics.median(t for _, t in runs))
        b, t = medians[compression]
        label = f"{compression} (baseline)" if compression == "gzip" else compression
        print(f"  {label:16} {b / 2**20:8.2f} MiB pushed  {t:6.2f} s")
    (gb, gt), (zb, zt) = medians["gzip"], medians["zstd"]
    print(f"  ratio zstd/gzip: bytes {zb / gb:.2f}, push time {zt / gt:.2f}")


if __name__ == "__main__":
    main()
