"""Resolve against a real vLLM wheel: the bytes of vLLM 0.14.0 for manylinux x86_64 from PyPI (the release line of the
pinned wheel; tests/realwheels.py fetches it once into a cache outside the repository and checks PyPI's sha256),
served by the loopback wheel index, against a base image whose config carries NGC's four-part CUDA_VERSION.

What is real and what is stand-in: the bytes are PyPI's `vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl`
(https://pypi.org/project/vllm/0.14.0/#files). The real per-commit index (https://wheels.vllm.ai/<commit>/vllm/
metadata.json) lists, for the pinned commit 4a5299c93, a dev wheel named
`vllm-0.14.0rc2.dev156%2Bg4a5299c93-cp38-abi3-manylinux_2_31_x86_64.whl`, whose bytes are not on PyPI and cannot be
fetched here. So the stand-in index lists the real release bytes under the real per-commit *name* (which resolve
requires: its local part must name the commit); a release commit's own wheel would be named `vllm-0.14.0-...`. The
lock's sha256 is therefore PyPI's file's, not the per-commit wheel's; everything resolve reads from the bytes (the
zip, `vllm/_C.abi3.so`, its DT_NEEDED libcudart.so.12) is real.
"""

from __future__ import annotations

import json

import pytest

from tests.fake_upstreams import VLLM_SHA, WHEEL_X86, RealFile
from tests.projects import use_base, use_variant
from tests.realwheels import VLLM_0_14_0, real_wheel


@pytest.fixture
def real_upstreams(upstreams):
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"] = RealFile(real_wheel(VLLM_0_14_0), VLLM_0_14_0.sha256)
    return upstreams


def test_resolve_hashes_the_real_wheel_and_reads_its_libcudart(project, real_upstreams):
    root, cli = project
    result = cli("resolve", "--json", timeout=600)
    assert result.code == 0, result.output[-3000:]
    lock = json.loads(result.stdout)
    wheel = lock["wheel"]
    assert wheel["sha256"] == VLLM_0_14_0.sha256 and wheel["size"] == VLLM_0_14_0.size == 495_377_847
    assert wheel["content_addressed"] and wheel["verified_by"] == "GET"
    # The default variant's name says no CUDA; the real vllm/_C.abi3.so NEEDs libcudart.so.12.
    assert wheel["cuda"] == "12" and wheel["cuda_source"] == "vllm/_C.abi3.so needs libcudart.so.12"
    # The base image's config carries the reference image's CUDA_VERSION as NGC writes it: kept exactly.
    assert lock["base_image"]["cuda_version"] == "12.9.0.043"
    assert lock["cuda"] == {
        "base_image": "12.9.0.043",
        "wheel": "12",
        "outcome": "match",
        "detail": "base image CUDA_VERSION=12.9.0.043 and wheel CUDA 12: both CUDA 12",
    }


def test_real_bytes_under_a_cu130_name_on_a_cuda_13_base_are_refused(project, real_upstreams):
    """A cu130 name on bytes that need libcudart.so.12 (vLLM's #52544: a lookup fell back across CUDA variants):
    the name agrees with the CUDA 13 base, the real bytes do not; refused, no lock."""
    from tests.fake_upstreams import WHEEL_CU130_X86

    root, cli = project
    wheels = real_upstreams.wheels
    wheels.files[f"/{VLLM_SHA}/{WHEEL_CU130_X86}"] = RealFile(real_wheel(VLLM_0_14_0), VLLM_0_14_0.sha256)
    use_base(root, real_upstreams, "cuda13", cuda_version="13.0.0")  # nvidia/cuda:13.0.0-* images set 13.0.0
    use_variant(root, "cu130")
    result = cli("resolve", timeout=600)
    assert result.code == 3, result.output[-3000:]
    assert "its name says CUDA 13.0 (the pinned variant cu130), but vllm/_C.abi3.so needs libcudart.so.12" in (
        result.stderr
    )
    assert not (root / "pins.lock").exists()
