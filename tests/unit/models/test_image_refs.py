"""An image reference with a digest is written `name@sha256:...`, never `name:sha256:...` (issue 32, 6d)."""

from __future__ import annotations

from buildkit.models.grammar import parse_image_ref
from tests.support.failures import assert_failed
from tests.support.fake_upstreams import BASE_REPO

MISSING = "sha256:" + "0" * 64


def test_a_name_with_a_tag_or_a_digest():
    tag = "25.05-cuda12.9-devel-ubuntu24.04"
    image = parse_image_ref(f"nvcr.io/nvidia/cuda-dl-base:{tag}")
    assert image.at(tag) == f"nvcr.io/nvidia/cuda-dl-base:{tag}"
    assert image.at(MISSING) == f"nvcr.io/nvidia/cuda-dl-base@{MISSING}"
    assert parse_image_ref("ubuntu@" + MISSING).at(MISSING) == f"library/ubuntu@{MISSING}"


def test_a_base_image_digest_the_registry_lacks_is_named_with_an_at(project, upstreams):
    root, cli = project
    pinned = f"{upstreams.registry.netloc}/{BASE_REPO}@{MISSING}"
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace(upstreams.base_image, pinned))
    result = cli("resolve")
    assert_failed(result, 4, f"{pinned} not found in registry {upstreams.registry.netloc}")
    assert f"{BASE_REPO}:sha256:" not in result.stderr
