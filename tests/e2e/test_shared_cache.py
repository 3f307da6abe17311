"""Scale-out on the real engine: one registry cache for many builders (pins `build.cache`), and zstd layers.

Builder A is the engine's first buildkitd; builder B the second one (scripts/engine-up.sh), emptied before it
builds, so it stands for a fresh machine that has only the registry to go on.
"""

from __future__ import annotations

import json
import uuid

import requests

from tests.support.engine import STAND_IN_BASE, empty_builder
from tests.support.nemo_repo import use_remote

REGISTRY = "127.0.0.1:5000"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPES = ", ".join(
    (
        OCI_INDEX,
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    )
)


def _project(project, remote, *, build_lines: str = "", tag: str | None = None):
    """The smoke project, with lines added to pins.yaml's `build:` section (and another image tag)."""
    root, cli = project
    text = (root / "pins.yaml").read_text()
    start = text.index("base_image: ") + len("base_image: ")
    text = text[:start] + STAND_IN_BASE + text[text.index("\n", start) :]
    text = text.replace("\nbuild:\n", "\nbuild:\n" + build_lines, 1)
    if tag:
        text = text.replace("tag: nemo-rl:v0.5.0-spec-decode", f"tag: {tag}", 1)
    (root / "pins.yaml").write_text(text)
    return use_remote((root, cli), remote)


def _record(root) -> dict:
    return json.loads((root / "build" / "smoke-record.json").read_text())


def test_a_second_empty_builder_takes_every_step_from_the_shared_cache(project, remote, engine, engine_b, tmp_path):
    ref = f"{REGISTRY}/test-{uuid.uuid4().hex[:12]}/cache"
    root, cli = _project(project, remote, build_lines=f"  cache:\n    ref: {ref}\n")

    first = cli("build", "--smoke", "--builder", engine, "--progress", "plain", "--", "--no-cache", timeout=600)
    assert first.code == 0, first.output
    a = _record(root)
    assert a["cache"]["cache_to"] == [
        f"type=registry,ref={ref}:smoke,mode=max,image-manifest=true,oci-mediatypes=true,ignore-error=true"
    ]
    assert a["instructions_total"] >= 4
    # The first build finds the cache empty: a note, and the record keeps BuildKit's words.
    [empty] = a["cache"]["problems"]
    assert empty.startswith(f"importing cache manifest from {ref}:smoke") and empty.endswith("not found")
    assert f"note: build cache {ref}:smoke has nothing yet; this build fills it" in first.stderr

    # Builder B has nothing of its own, and prepares NeMo-RL afresh in another cache dir (another clone path).
    empty_builder(engine_b)
    second = cli(
        "build",
        "--smoke",
        "--builder",
        engine_b,
        "--progress",
        "plain",
        env={"BUILDKIT_CACHE_DIR": str(tmp_path / "builder-b-cache")},
        timeout=600,
    )
    assert second.code == 0, second.output
    b = _record(root)
    assert b["builder"] == engine_b and b["cache"]["cache_from"] == [f"type=registry,ref={ref}:smoke"]
    assert b["instructions_cached"] == b["instructions_total"] == a["instructions_total"], second.stderr
    assert b["cache"]["problems"] == []
    assert b["image"]["digest"] == a["image"]["digest"]
    total = b["instructions_total"]
    assert f"{total}/{total} Dockerfile steps cached" in second.stderr
    assert f"shared build cache: {ref}:smoke" in second.stderr

    report = cli("report")
    assert report.code == 0, report.output
    assert f"Dockerfile steps: {total} of {total} from the cache" in report.stdout
    assert f"imported from `type=registry,ref={ref}:smoke`" in report.stdout, report.stdout.split("## Build")[1][:1500]


def test_a_missing_or_unreachable_cache_is_a_warning_not_a_failure(project, remote, engine, engine_b):
    root, cli = _project(project, remote, build_lines=f"  cache:\n    ref: {REGISTRY}/never-written/cache\n")
    empty_builder(engine_b)
    missing = cli("build", "--smoke", "--builder", engine_b, "--progress", "plain", "--no-shared-cache", timeout=600)
    assert missing.code == 0 and _record(root)["cache"] is None, missing.output

    pins = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(
        pins.replace(
            "ref: 127.0.0.1:5000/never-written/cache", "ref: 127.0.0.1:5000/never-written/cache\n    export: false"
        )
    )
    empty_builder(engine_b)
    missing = cli("build", "--smoke", "--builder", engine_b, "--progress", "plain", timeout=600)
    assert missing.code == 0, missing.output
    [problem] = _record(root)["cache"]["problems"]
    assert (
        problem.startswith(f"importing cache manifest from {REGISTRY}/never-written/cache:smoke")
        and "not found" in problem
    )
    assert f"build cache {REGISTRY}/never-written/cache:smoke has nothing yet" in missing.stderr

    # Nothing listens on port 1: import and export both fail, the build does not.
    (root / "pins.yaml").write_text(pins.replace(f"{REGISTRY}/never-written/cache", "127.0.0.1:1/nowhere/cache"))
    unreachable = cli("build", "--smoke", "--builder", engine_b, "--progress", "plain", timeout=600)
    assert unreachable.code == 0, unreachable.output
    problems = _record(root)["cache"]["problems"]
    assert [p.split(":", 1)[0] for p in problems] == [
        "importing cache manifest from 127.0.0.1",
        "exporting cache to registry",
    ]
    assert all("connection refused" in p for p in problems), problems
    assert unreachable.stderr.count("warning: build cache not used") == 2


def _pushed(tag: str) -> tuple[list[dict], str]:
    """The layers of the linux/amd64 image a tag names in the loopback registry, and its manifest's media type."""
    name, reference = tag.removeprefix(f"{REGISTRY}/").rsplit(":", 1)
    url = f"http://{REGISTRY}/v2/{name}/manifests/"
    top = requests.get(url + reference, headers={"Accept": MANIFEST_TYPES}, timeout=10).json()
    if top.get("manifests"):
        [entry] = [m for m in top["manifests"] if m.get("platform", {}).get("architecture") == "amd64"]
        manifest = requests.get(url + entry["digest"], headers={"Accept": MANIFEST_TYPES}, timeout=10).json()
    else:
        manifest = top
    return manifest["layers"], manifest["mediaType"]


def test_zstd_layers_for_what_the_build_adds_and_force_compression_for_all(project, remote, engine):
    repo = f"{REGISTRY}/test-{uuid.uuid4().hex[:12]}/nemo-rl"
    root, cli = _project(project, remote, build_lines="  compression: zstd\n", tag=f"{repo}:zstd")
    base_layers, _ = _pushed(STAND_IN_BASE)
    base_digests = [layer["digest"] for layer in base_layers]

    pushed = cli("build", "--smoke", "--push", "--progress", "plain", timeout=600)
    assert pushed.code == 0, pushed.output
    assert "the base image's layers stay as its registry has them" in pushed.stderr
    layers, media_type = _pushed(f"{repo}:zstd-smoke")
    assert media_type == "application/vnd.oci.image.manifest.v1+json"
    # The base image's layers are shared as they are; every layer the build made is zstd.
    assert [layer["digest"] for layer in layers[: len(base_digests)]] == base_digests
    added = layers[len(base_digests) :]
    assert added and all(layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd" for layer in added)
    record = _record(root)
    assert record["compression"] == "zstd" and not record["force_compression"]
    assert "compression=zstd,oci-mediatypes=true" in record["command"]

    forced = cli("build", "--smoke", "--push", "--force-compression", "--progress", "plain", timeout=600)
    assert forced.code == 0, forced.output
    assert "nodes that already pulled the base image pull them again" in forced.stderr
    layers, _ = _pushed(f"{repo}:zstd-smoke")
    assert all(layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd" for layer in layers)
    assert not set(base_digests) & {layer["digest"] for layer in layers}
    assert _record(root)["force_compression"]

    # --compression on the command line wins over the pins; a loaded image keeps gzip (Docker 20.10 loads no zstd).
    loaded = cli("build", "--smoke", "--compression", "gzip", "--progress", "plain", timeout=600)
    assert loaded.code == 0 and _record(root)["compression"] == "gzip", loaded.output


def test_a_malformed_cache_ref_or_compression_is_refused_with_its_line(project):
    root, cli = project
    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(
        text.replace("\nbuild:\n", "\nbuild:\n  cache:\n    ref: 127.0.0.1:5000/x/cache:tagged\n", 1)
    )
    bad = cli("resolve", "--offline")
    assert bad.code == 2, bad.output
    assert "build.cache.ref" in bad.stderr and "without a tag" in bad.stderr
    (root / "pins.yaml").write_text(text.replace("\nbuild:\n", "\nbuild:\n  compression: brotli\n", 1))
    bad = cli("resolve", "--offline")
    assert bad.code == 2 and "build.compression" in bad.stderr, bad.output
    assert cli("build", "--compression", "lz4", "--dry-run").code == 2
