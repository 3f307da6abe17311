"""Resolve against a real vLLM wheel: the bytes of vLLM 0.14.0 for manylinux x86_64 from PyPI (the release line of the
pinned wheel; tests/support/realwheels.py fetches it once into a cache outside the repository and checks PyPI's sha256),
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

from buildkit.errors import UpstreamMismatch
from buildkit.gpu import abi
from buildkit.gpu.check import wheel_check
from buildkit.gpu.torchlock import LockedTorch
from buildkit.models.pins import Build
from tests.support.fake_upstreams import (
    NEMO_RL_SHA,
    NEMO_RL_TORCH_PYPI,
    NEMO_RL_UV_LOCK_HEADER,
    VLLM_SHA,
    WHEEL_X86,
    RealFile,
)
from tests.support.projects import use_base, use_variant
from tests.support.realwheels import (
    TORCH_2_8_0,
    TORCH_2_9_0,
    VLLM_0_14_0,
    real_wheel,
    seed_torch_symbols,
    shared_torch_symbols,
)


@pytest.fixture
def real_upstreams(project, upstreams):
    """The real vLLM wheel, and the torch its ABI check needs (below): NeMo-RL's uv.lock with its PyPI torch table,
    PyPI's torch 2.9.0 on the loopback index, $BUILDKIT_TORCH_INDEX pointing there."""
    upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"] = RealFile(real_wheel(VLLM_0_14_0), VLLM_0_14_0.sha256)
    project[1].env.update(_serve_torch(upstreams, NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_PYPI, TORCH_2_9_0))
    return upstreams


def test_resolve_hashes_the_real_wheel_and_reads_its_libcudart(project, real_upstreams, shared_dir):
    root, cli = project
    # torch's symbols already in the cache, as this run read them once (the test below reads them cold, through
    # resolve): this test is about the vLLM wheel.
    seed_torch_symbols(root / "cache", TORCH_2_9_0, shared_dir)
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
    from tests.support.fake_upstreams import WHEEL_CU130_X86

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


# The ABI check at resolve (issue 23, point 2): vLLM 0.14.0's real extension modules against the torch NeMo-RL's
# uv.lock installs, read from the (loopback) GitHub API at the locked commit; $BUILDKIT_TORCH_INDEX points at the
# loopback index, which serves PyPI's real torch wheels. NeMo-RL 946862e7's uv.lock installs 2.9.0+cu129 from the
# PyTorch index, whose bytes this machine cannot fetch, so the uv.lock served here keeps only its PyPI table (same
# version, same C++ symbols; tests/support/fake_upstreams.py: NEMO_RL_TORCH_PYPI, each value as it stands there).
# Expected, from the reference build (a dev wheel of the 0.14 line ran on torch 2.9.0): that pair links; with
# torch 2.8.0 it does not, and FlashAttention's modules name the c10::SymInt methods 2.8.0 lacks.
TORCH_2_8_0_TABLE = """
[[package]]
name = "torch"
version = "2.8.0"
source = { registry = "https://pypi.org/simple" }
wheels = [
    { url = "https://files.pythonhosted.org/packages/99/a8/6acf48d48838fb8fe480597d98a0668c2beb02ee4755cc136de92a0a956f/torch-2.8.0-cp312-cp312-manylinux_2_28_x86_64.whl", hash = "sha256:b2aca0939fb7e4d842561febbd4ffda67a8e958ff725c1c27e244e85e982173c", size = 887913624, upload-time = "2025-08-06T14:56:44.330Z" },
]
"""  # noqa: E501 -- PyPI's entry for that file (https://pypi.org/simple/torch/, 2026-11-24), in uv.lock's form


def _serve_torch(upstreams, uv_lock: str, wheel) -> dict[str, str]:
    """NeMo-RL's uv.lock as GitHub serves it at the pinned commit, the torch wheel on the loopback index."""
    upstreams.github.files[("NVIDIA-NeMo/RL", NEMO_RL_SHA, "uv.lock")] = uv_lock.encode()
    upstreams.wheels.files[f"/torch/{wheel.filename}"] = RealFile(real_wheel(wheel), wheel.sha256)
    return {"BUILDKIT_TORCH_INDEX": f"{upstreams.wheels.url}/torch"}


def _torch_gets(upstreams) -> list[str]:
    return [p for m, p, _h in upstreams.wheels.log if m == "GET" and p.startswith("/torch/")]


def test_resolve_links_vllm_against_the_torch_of_nemo_rls_uv_lock(project, real_upstreams):
    root, cli = project
    env = _serve_torch(real_upstreams, NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_PYPI, TORCH_2_9_0)
    result = cli("resolve", "--json", env=env, timeout=600)
    assert result.code == 0, result.output[-3000:]
    abi = json.loads(result.stdout)["gpu"]["abi"]
    assert abi["against"] == [f"torch 2.9.0 ({TORCH_2_9_0.filename}, NeMo-RL's uv.lock)"]
    assert abi["unresolved"] == [] and abi["checked"] == 487  # vLLM's undefined symbols in torch's namespaces
    assert len(_torch_gets(real_upstreams)) == 1  # cold: the torch wheel downloaded, checked against uv.lock
    # ...and, its symbols cached, not kept: 900 MB that no later resolve would reuse (it has no ETag).
    assert list((root / "cache" / "wheels").rglob("torch-*")) == []
    contents = [p for m, p, _h in real_upstreams.github.log if "/contents/uv.lock" in p]
    assert contents == [f"/repos/NVIDIA-NeMo/RL/contents/uv.lock?ref={NEMO_RL_SHA}"]
    real_upstreams.wheels.log.clear()
    again = cli("resolve", "--json", env=env, timeout=600)
    assert again.code == 0 and json.loads(again.stdout)["gpu"]["abi"] == abi
    assert _torch_gets(real_upstreams) == []  # warm: torch's symbols from the cache


def test_resolve_stops_on_symbols_torch_2_8_0_lacks(project, real_upstreams, shared_dir):
    """Against torch 2.8.0 the real wheel stops resolve twice over: its METADATA requires torch==2.9.1 (another
    release line: the first stop, before torch's 900 MB are read), and its modules need symbols torch 2.8.0's real
    libraries do not define (the ABI check, run here on the same real files without the METADATA stop)."""
    root, cli = project
    env = _serve_torch(real_upstreams, NEMO_RL_UV_LOCK_HEADER + TORCH_2_8_0_TABLE, TORCH_2_8_0)
    result = cli("resolve", "--json", env=env, timeout=600)
    assert result.code == 4, result.output[-3000:]
    line = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert line.startswith(
        f"error: torch mismatch: the vLLM wheel {WHEEL_X86} was built for torch==2.9.1 (its "
        "METADATA), but NeMo-RL's uv.lock installs torch 2.8.0"
    )
    assert not (root / "pins.lock").exists()
    torch = LockedTorch(
        "2.8.0",
        "https://pypi.org/simple",
        "https://files.pythonhosted.org/torch.whl",
        TORCH_2_8_0.filename,
        TORCH_2_8_0.sha256,
        TORCH_2_8_0.size,
    )
    build = Build(cuda_arch_list="9.0", tag="nemo-rl:test")
    with pytest.raises(UpstreamMismatch) as caught:
        wheel_check(
            real_wheel(VLLM_0_14_0),
            WHEEL_X86,
            build,
            torch,
            lambda _t: abi.torch_defined(
                real_wheel(TORCH_2_8_0), TORCH_2_8_0.sha256, shared_torch_symbols(TORCH_2_8_0, shared_dir)
            ),
        )
    assert caught.value.message == (
        f"wheel {WHEEL_X86}: 4 undefined symbol(s) would not resolve against torch 2.8.0 "
        f"({TORCH_2_8_0.filename}, NeMo-RL's uv.lock): c10::SymInt::maybe_as_int_slow_path() const (should be in "
        "libc10.so; needed by _vllm_fa2_C.abi3.so, _vllm_fa3_C.abi3.so); c10::SymInt::sym_ne_slow_path(c10::SymInt "
        "const&) const (should be in libc10.so; needed by _vllm_fa2_C.abi3.so, _vllm_fa3_C.abi3.so)"
    )


def test_a_torch_wheel_with_other_bytes_stops_resolve(project, real_upstreams):
    root, cli = project
    lock = (NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_PYPI).replace(TORCH_2_9_0.sha256, "0" * 64)
    result = cli("resolve", env=_serve_torch(real_upstreams, lock, TORCH_2_9_0), timeout=600)
    assert result.code == 4 and f"{TORCH_2_9_0.filename}: NeMo-RL's uv.lock says sha256 {'0' * 64}" in (
        result.stderr
    ), result.output[-3000:]


def test_resolve_stops_when_the_base_images_glibc_is_older_than_vllm_needs(project, real_upstreams, shared_dir):
    """The base image's layers hold Ubuntu 18.04's real glibc 2.27 (tests/support/realdebs.py); vLLM 0.14.0's _moe_C
    asks for log2@GLIBC_2.29. resolve reads the base's layers from the top, finds libc.so.6 in the bottom one, and
    stops."""
    from tests.support.realdebs import ubuntu_layers

    root, cli = project
    seed_torch_symbols(root / "cache", TORCH_2_9_0, shared_dir)  # torch read once for the run (above)
    use_base(root, real_upstreams, "bionic", cuda_version="12.9.0.043", layers=ubuntu_layers("bionic"))
    result = cli("resolve", timeout=600)
    assert result.code == 4, result.output[-3000:]
    line = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    assert line == (
        f"error: wheel {WHEEL_X86}: 1 undefined symbol(s) would not resolve against torch 2.9.0 "
        f"({TORCH_2_9_0.filename}, NeMo-RL's uv.lock), glibc/libstdc++/libgcc_s of the base image (newest: "
        "CXXABI_1.3.11, GCC_7.0.0, GLIBC_2.27, GLIBCXX_3.4.25): log2@GLIBC_2.29 (should be in libm.so.6; needed by "
        "_moe_C.abi3.so)"
    )
    assert not (root / "pins.lock").exists()
    layer_gets = [p for m, p, _h in real_upstreams.registry.log if m == "GET" and "/blobs/" in p]
    assert len(layer_gets) == 1 + 3  # the config, then the three layers from the top
