"""linux/arm64 on the engine of scripts/engine-up.sh, under QEMU (issue 30, point 5): the stand-in base is an index
of a linux/amd64 and a linux/arm64 image, each with the busybox of its architecture, buildkit's resolve picks either
one from it, and a RUN step of a linux/arm64 build really runs."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile

import pytest
import requests

from buildkit.gpu.elfsections import MACHINES, ElfFile
from buildkit.world.http import Http
from buildkit.world.registry import Registry
from tests.support.engine import STAND_IN_BASE

REGISTRY, _, NAME = STAND_IN_BASE.partition("/")
REPOSITORY, TAG = NAME.rsplit(":", 1)
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PLATFORMS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}  # what `uname -m` says on each
MAX_BLOB = 16 << 20  # the stand-in's layers are about 1 MB each


def _get(path: str, accept: str = "*/*") -> bytes:
    """A blob or manifest of the stand-in's repository, by tag or digest; one named by digest is checked."""
    answer = requests.get(f"http://{REGISTRY}/v2/{REPOSITORY}/{path}", headers={"Accept": accept}, timeout=30)
    answer.raise_for_status()
    body = answer.content
    assert len(body) <= MAX_BLOB
    reference = path.rsplit("/", 1)[1]
    if reference.startswith("sha256:"):
        assert "sha256:" + hashlib.sha256(body).hexdigest() == reference
    return body


def _images() -> dict[str, str]:
    """The index's image manifests by platform (its attestation manifests aside)."""
    index = json.loads(_get(f"manifests/{TAG}", INDEX))
    assert index["mediaType"] == INDEX
    images = [m for m in index["manifests"] if m.get("annotations", {}).get("vnd.docker.reference.type") is None]
    found = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in images}
    assert len(found) == len(images), index  # one image per platform
    return found


def _file(layers: list[dict], path: str) -> bytes:
    """A regular file of the image whose layers are given (bottom first): the topmost layer's copy."""
    found = None
    for layer in layers:
        with tarfile.open(fileobj=io.BytesIO(_get(f"blobs/{layer['digest']}")), mode="r:*") as tar:
            for member in tar:
                if member.name.removeprefix("./") == path and member.isfile():
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    found = extracted.read(MAX_BLOB)
    assert found is not None, f"no {path} in the image"
    return found


def test_the_stand_in_base_is_an_index_of_exactly_a_linux_amd64_and_a_linux_arm64_image(engine):
    assert sorted(_images()) == sorted(PLATFORMS)


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_each_image_of_the_stand_in_holds_the_busybox_of_its_architecture(engine, platform):
    manifest = json.loads(_get(f"manifests/{_images()[platform]}", MANIFEST))
    config = json.loads(_get(f"blobs/{manifest['config']['digest']}"))
    assert f"{config['os']}/{config['architecture']}" == platform
    assert "CUDA_VERSION=12.9.1" in config["config"]["Env"]
    busybox = _file(manifest["layers"], "bin/busybox")
    assert ElfFile(io.BytesIO(busybox), len(busybox)).machine == MACHINES[PLATFORMS[platform]]  # 62, 183


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_resolve_picks_the_platform_image_from_the_stand_in_index(engine, monkeypatch, platform):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    fact = Registry(Http()).resolve(STAND_IN_BASE, platform)
    assert fact.manifest_digest == _images()[platform] and fact.index_digest is not None
    assert fact.cuda_version == "12.9.1"


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_a_run_step_runs_on_the_platform_built_for(engine, tmp_path, platform):
    """linux/arm64 runs under qemu-aarch64 (binfmt_misc): `uname -m` inside the step says aarch64."""
    context, out = tmp_path / "context", tmp_path / "out"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {STAND_IN_BASE} AS run\nRUN uname -m > /m\nFROM scratch\nCOPY --from=run /m /m\n"
    )
    done = subprocess.run(
        [
            "docker",
            "buildx",
            "build",
            "--builder",
            engine,
            "--platform",
            platform,
            "--no-cache",
            "--progress",
            "plain",
            "--output",
            f"type=local,dest={out}",
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "m").read_text() == PLATFORMS[platform] + "\n"
