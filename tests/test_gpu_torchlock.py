"""The ABI check before the build (issue 23, point 2): the torch of NeMo-RL's uv.lock, fetched from a loopback
index ($BUILDKIT_TORCH_INDEX) that serves PyPI's real torch 2.9.0 wheel, against vLLM 0.14.0's real wheel in
resolve's cache. The uv.lock entry is torch 2.9.0 as PyPI publishes it (file name, sha256, size: realwheels.py);
NeMo-RL 946862e7's uv.lock also lists 2.9.0+cu129 from the PyTorch index, which this machine cannot reach."""

from __future__ import annotations

import hashlib
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from buildkit.errors import UpstreamMismatch
from buildkit.gpu.torchlock import locked_torch
from buildkit.models.lock import WheelFact
from buildkit.stages.gpucheck import abi_before_build
from buildkit.world.http import Http
from tests.realwheels import TORCH_2_9_0, VLLM_0_14_0, real_wheel


class _Files(SimpleHTTPRequestHandler):
    requests: list[str] = []

    def end_headers(self) -> None:
        self.send_header("ETag", '"' + hashlib.md5(self.path.encode()).hexdigest() + '"')
        super().end_headers()

    def log_message(self, *args) -> None:
        _Files.requests.append(f"{self.command} {self.path}")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    for wheel in (TORCH_2_9_0, VLLM_0_14_0):
        (root / wheel.filename).symlink_to(real_wheel(wheel))
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Files, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def uv_lock(sha256: str) -> str:
    return f'''version = 1
requires-python = ">=3.12"

[[package]]
name = "torch"
version = "2.9.0"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [
    {{ url = "https://files.pythonhosted.org/packages/00/00/{TORCH_2_9_0.filename}", hash = "sha256:{sha256}", size = {TORCH_2_9_0.size} }},
]
'''  # noqa: E501


def vllm_in_cache(index: str, cache: Path) -> WheelFact:
    from buildkit.stages.resolve import download
    from buildkit.stages.resolve.wheels import FoundWheel

    url = f"{index}/{VLLM_0_14_0.filename}"
    found = FoundWheel(index=index, variant="default", arch="x86_64", filename=VLLM_0_14_0.filename,
                       version="0.14.0", url=url, size=VLLM_0_14_0.size, etag=None, last_modified=None,
                       index_sha256=VLLM_0_14_0.sha256, listed_in=index, verified_by="HEAD")  # fmt: skip
    head = Http().head(url)
    found = FoundWheel(**{**found.__dict__, "etag": head.headers.get("ETag")})
    download.fetch(Http(), cache, found)  # as resolve downloads it: through the loopback index
    return WheelFact(**{k: v for k, v in found.__dict__.items() if k != "listed_variant"}, sha256=VLLM_0_14_0.sha256,
                     content_addressed=True, not_content_addressed=None, cuda="12", cuda_source="test")  # fmt: skip


@pytest.mark.e2e  # real PyPI wheels
def test_links_against_uv_locks_torch_cold_then_warm(index, tmp_path, monkeypatch):
    monkeypatch.setenv("BUILDKIT_TORCH_INDEX", index)
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "uv.lock").write_text(uv_lock(TORCH_2_9_0.sha256))
    torch = locked_torch(tree / "uv.lock", "x86_64")
    assert torch.url == f"{index}/{TORCH_2_9_0.filename}" and torch.version == "2.9.0"
    wheel = vllm_in_cache(index, cache)
    _Files.requests.clear()
    result = abi_before_build(tree, wheel, cache, Http())
    assert not isinstance(result, str) and result.unresolved == [] and result.checked == 487  # torch symbols
    assert f"GET /{TORCH_2_9_0.filename}" in _Files.requests  # cold: downloaded
    _Files.requests.clear()
    again = abi_before_build(tree, wheel, cache, Http())
    assert again.checked == result.checked and _Files.requests == []  # warm: torch's symbols from the cache


@pytest.mark.e2e  # real PyPI wheels
def test_a_torch_wheel_with_other_bytes_stops(index, tmp_path, monkeypatch):
    monkeypatch.setenv("BUILDKIT_TORCH_INDEX", index)
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "uv.lock").write_text(uv_lock("0" * 64))
    with pytest.raises(UpstreamMismatch, match="the wheel index says sha256 0000"):
        abi_before_build(tree, vllm_in_cache(index, cache), cache, Http())


def test_no_torch_in_uv_lock_is_not_checked(tmp_path):
    (tmp_path / "uv.lock").write_text('version = 1\n\n[[package]]\nname = "numpy"\nversion = "2.0.0"\n')
    assert locked_torch(tmp_path / "uv.lock", "x86_64") is None
    assert locked_torch(tmp_path / "missing.lock", "x86_64") is None
