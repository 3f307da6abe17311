"""Issue 29: torch's wheel, downloaded at resolve for its symbols (NeMo-RL's uv.lock names it), has a total deadline
besides the stall timer, and a 404 says what to check for torch, not vLLM's per-commit wheels. Served on loopback."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from buildkit.budget import LimitExceeded
from buildkit.errors import UpstreamMismatch
from buildkit.gpu.torchlock import LockedTorch
from buildkit.stages.resolve import Resolver
from buildkit.stages.resolve.download import TORCH_MISSING_HINT
from buildkit.stages.resolve.wheels import MISSING_HINT
from buildkit.world.http import Http

FILENAME = "torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_x86_64.whl"


def serve(status: int, trickle: float = 0.0) -> ThreadingHTTPServer:
    """An index that answers `status`; a 200's body comes 64 KiB every `trickle` seconds (never stalled)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Length", "0" if status != 200 else str(1 << 30))
            self.end_headers()
            try:
                while status == 200:
                    self.wfile.write(b"x" * 65536)
                    time.sleep(trickle)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def torch_symbols(server: ThreadingHTTPServer, tmp_path) -> set[str] | str:
    url = f"http://127.0.0.1:{server.server_port}/whl/cu129/{FILENAME}"
    torch = LockedTorch(
        "2.9.0+cu129", f"http://127.0.0.1:{server.server_port}/whl/cu129", url, FILENAME, "0" * 64, None
    )
    resolver = SimpleNamespace(
        wheel_bytes="download",
        cache_dir=tmp_path,
        http=Http(),
        pins=SimpleNamespace(wheel=SimpleNamespace(arch="x86_64")),
    )
    return Resolver.torch_symbols(resolver, torch)  # type: ignore[arg-type]


def test_a_404_on_torchs_wheel_says_what_to_check_for_torch(tmp_path):
    server = serve(404)
    try:
        with pytest.raises(UpstreamMismatch) as raised:
            torch_symbols(server, tmp_path)
    finally:
        server.shutdown()
    assert raised.value.message == (
        f"torch's wheel http://127.0.0.1:{server.server_port}/whl/cu129/{FILENAME}, which NeMo-RL's uv.lock names, "
        "answered 404"
    )
    assert raised.value.hint == TORCH_MISSING_HINT and "BUILDKIT_TORCH_INDEX" in TORCH_MISSING_HINT
    assert "vLLM" not in raised.value.hint and raised.value.hint != MISSING_HINT


def test_the_torch_download_has_a_total_deadline_besides_the_stall_timer(monkeypatch, tmp_path):
    """6 MB/s never stalls, and 1 GiB would take minutes: the deadline (checked between the download's 1 MiB chunks,
    each of which the stall timer bounds) ends it."""
    monkeypatch.setenv("BUILDKIT_TORCH_DEADLINE", "1")
    server = serve(200, trickle=0.01)
    begun = time.monotonic()
    try:
        with pytest.raises(LimitExceeded) as raised:
            torch_symbols(server, tmp_path)
    finally:
        server.shutdown()
    # The failure's scale: without the deadline the download runs to its end, 1 GiB at 64 KiB per 0.01 s at the
    # most (6.4 MB/s: over 160 s). The message says the deadline ended it.
    assert time.monotonic() - begun < 60
    assert raised.value.exit_code == 3
    assert raised.value.message == f"torch 2.9.0+cu129's wheel {FILENAME}: more than 1 s to read: refused"
    assert raised.value.hint == "on a slow link, raise BUILDKIT_TORCH_DEADLINE=<seconds>"
