"""verify's GPU checks over an image's files (issue 23, point 3): the tar stream reader, and on the real engine an
image holding the device-built kernels (tests/fixtures/gpu) where vLLM's libraries would be."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.gpu import image as gpu_image
from buildkit.gpu.image import driver_check, tar_libraries
from buildkit.models.lock.facts import Lock
from buildkit.models.pins import Build
from tests.support.engine import STAND_IN_BASE, engine  # noqa: F401
from tests.support.paths import GPU_FIXTURES

FIXTURES = GPU_FIXTURES
SITE = "opt/venv/lib/python3.12/site-packages"


def _tar(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


def _chunks(data: bytes, size: int = 7777):
    for at in range(0, len(data), size):
        yield data[at : at + size]


def test_tar_stream_libraries():
    data = _tar(
        {
            "site-packages/vllm/_C.abi3.so": (FIXTURES / "libk_sm90a.so").read_bytes(),
            "site-packages/x/libc.so": b"/* GNU ld script */ GROUP ( libc.so.6 )",  # a linker script, not ELF
            "site-packages/x/readme.txt": b"hello",
        },
        links={"site-packages/vllm/_moe_C.abi3.so": "_C.abi3.so"},
    )
    found = list(tar_libraries(_chunks(data), "image"))
    assert [(name, [k.arch for k in ks or ()]) for name, ks, _s in found] == [
        ("site-packages/vllm/_C.abi3.so", ["sm_90a", "sm_90a"])
    ]
    assert "libcudart.so.13" in found[0][2].needed


def test_tar_stream_hostile(monkeypatch):
    with pytest.raises(UpstreamMalformed, match="not a readable tar stream"):
        list(tar_libraries(_chunks(b"\x01" * 2048), "image"))
    cut = (FIXTURES / "libk_sm80.so").read_bytes()[:5000]
    with pytest.raises(UpstreamMalformed, match="a/b.so is not a shared object buildkit can read"):
        list(tar_libraries(_chunks(_tar({"a/b.so": cut})), "image"))
    monkeypatch.setattr(gpu_image, "MAX_LIBRARY_BYTES", 100)
    with pytest.raises(UpstreamMalformed, match="more than buildkit reads"):
        list(tar_libraries(_chunks(_tar({"a/b.so": b"\x7fELF" + b"\0" * 200})), "image"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_compiled_files_are_held_to_the_wheels_hashes():
    from buildkit.stages.verify import compiled_files

    locked = {"vllm/_C.abi3.so": "a" * 64, "vllm/_moe_C.abi3.so": "b" * 64}
    required = ["vllm/_C.abi3.so", "vllm/_moe_C.abi3.so"]
    assert compiled_files(locked, dict(locked), required) == (True, "2 file(s) match the wheel's sha256")
    ok, reason = compiled_files(locked, {"vllm/_C.abi3.so": "c" * 64}, required)
    assert ok is False and reason == (
        "vllm/_C.abi3.so is cccccccccccc..., the wheel's is aaaaaaaaaaaa...; vllm/_moe_C.abi3.so is not in the image"
    )
    # A file the pins do not require may be absent (said); none there at all is "not checked", never a pass.
    assert compiled_files(locked, {"vllm/_C.abi3.so": "a" * 64}, ["vllm/_C.abi3.so"]) == (
        True,
        "1 file(s) match the wheel's sha256; vllm/_moe_C.abi3.so is not in the image",
    )
    assert compiled_files(locked, {}, [])[0] is None
    ok, reason = compiled_files(None, {})
    assert ok is None and "run `buildkit resolve`" in reason


def test_tar_stream_hashes_each_library():
    data = _tar({"site-packages/vllm/_C.abi3.so": (FIXTURES / "libk_sm90a.so").read_bytes()})
    hashes: dict[str, str] = {}
    list(tar_libraries(_chunks(data), "image", hashes=hashes))
    assert hashes == {"site-packages/vllm/_C.abi3.so": _sha(FIXTURES / "libk_sm90a.so")}


def test_driver_check():
    check = driver_check("12.9.0.043", False, ["575.57.08", "470.256.02"])
    assert (check.cuda_runtime, check.minimum_driver) == ("12.9", "575.51.03")
    assert check.drivers["575.57.08"].startswith("native") and check.drivers["470.256.02"].startswith("no:")
    assert driver_check(None, True, ["575.57.08"]).drivers["575.57.08"].startswith("unknown")


def test_verify_gpu_checks_on_the_engine(engine, tmp_path):  # noqa: F811
    from buildkit.stages.verify import gpu_checks
    from buildkit.world.engine import Engine

    context = tmp_path / "image"
    (context / SITE / "vllm").mkdir(parents=True)
    (context / SITE / "torch" / "lib").mkdir(parents=True)
    (context / SITE / "vllm" / "_C.abi3.so").write_bytes((FIXTURES / "libk_sm90a.so").read_bytes())
    (context / SITE / "vllm" / "_moe_C.abi3.so").write_bytes((FIXTURES / "libk_sm80.so").read_bytes())
    (context / SITE / "torch" / "lib" / "libc10.so").write_bytes((FIXTURES / "libk_sm90.so").read_bytes())
    (context / "Dockerfile").write_text(f"FROM {STAND_IN_BASE}\nCOPY opt /opt\n")
    tag = "buildkit-test-gpu-image:1"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True, timeout=600)
    try:
        results = []
        c_sha = hashlib.sha256((FIXTURES / "libk_sm90a.so").read_bytes()).hexdigest()
        lock = Lock.model_construct(
            build=Build(cuda_arch_list="9.0", tag="x:1"),  # only the fields the checks read
            vllm_files={"vllm/_C.abi3.so": c_sha, "vllm/_moe_C.abi3.so": "0" * 64},
        )
        gpu = gpu_checks(
            Engine(),
            tag,
            lock,
            "12.9.0.043",
            ["575.57.08"],
            lambda name, ok, reason: results.append((name, ok, reason)),
        )
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
    rows = {r.library: r for r in gpu.libraries}
    assert rows[f"/{SITE}/vllm/_C.abi3.so"].loads == {"sm_90": "SASS"}
    assert rows[f"/{SITE}/vllm/_moe_C.abi3.so"].loads == {"sm_90": "none"}
    by_name = {name: (ok, reason) for name, ok, reason in results}
    ok, reason = by_name["required libraries have kernels for sm_90"]
    assert (
        ok is False
        and f"/{SITE}/vllm/_moe_C.abi3.so has no kernel for sm_90 (build.cuda_arch_list); it has sm_80" in reason
    )
    assert by_name["vLLM's symbols resolve against the image's torch"][0] is True
    ok, reason = by_name["vLLM's compiled files are the locked wheel's"]  # _C is the wheel's; _moe_C is not
    assert (
        ok is False
        and reason
        == f"vllm/_moe_C.abi3.so is {_sha(FIXTURES / 'libk_sm80.so')[:12]}..., the wheel's is 000000000000..."
    )
    assert by_name["CUDA 12.9 runs on driver 575.57.08"][0] is True
    assert gpu.driver is not None and gpu.driver.forward_compat is False
