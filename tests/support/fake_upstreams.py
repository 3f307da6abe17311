"""Real HTTP servers on 127.0.0.1 that answer like GitHub's REST API, vLLM's per-commit wheel index and an OCI
registry with anonymous bearer tokens (or one that demands a login: `FakeRegistry.login`). Tests, bench/ and
manual demos use them; nothing here is mocked in-process: buildkit talks to them over sockets exactly as it talks
to the real services.

Each server can inject latency into every request and script faults (5xx, dropped connections, hangs, rate
limits). Run `python -m tests.support.fake_upstreams` to serve all three with the reference data and print the settings.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import random
import struct
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, Literal, Self
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.support import vllmtree
from tests.support.paths import REPO_ROOT

# The reference facts (../shared/notes/upstream-facts.md), served as upstream would serve them.
NEMO_RL_SHA = "946862e7755f74833d866c2a3a87ddbefae089c1"
NEMO_RL_SUBJECT = "docs: add release runs to front page readme for 0.5 (#1879)"
NEMO_RL_DATE = "2026-02-05T18:32:11Z"
VLLM_SHA = "4a5299c93ff97c26def537b92562df5ada530fea"
VLLM_SUBJECT = "[Spec Decode] feat: spec decode with draft models (#24322)"
VLLM_DATE = "2026-01-19T21:04:55Z"
VLLM_PR = 24322
VLLM_PR_TITLE = "feat: spec decode with draft models"
WHEEL_VERSION = "0.14.0rc2.dev156+g4a5299c93"
WHEEL_X86 = f"vllm-{WHEEL_VERSION}-cp38-abi3-manylinux_2_31_x86_64.whl"
WHEEL_ARM = f"vllm-{WHEEL_VERSION}-cp38-abi3-manylinux_2_31_aarch64.whl"
WHEEL_CU130_X86 = f"vllm-{WHEEL_VERSION}.cu130-cp38-abi3-manylinux_2_31_x86_64.whl"
WHEEL_SIZE = 452_718_563  # the reference wheel's size, as wheels.vllm.ai serves it
# What the fake index serves by default: real bytes, but few of them, so the suite stays fast (the reference-facts
# test in test_report.py serves WHEEL_SIZE).
TEST_WHEEL_SIZE = 256 * 1024
BASE_REPO = "nvidia/cuda-dl-base"
BASE_TAG = "25.05-cuda12.9-devel-ubuntu24.04"
# What that image's config sets in its Env: NGC images carry four parts. NVIDIA's framework support matrix
# (https://docs.nvidia.com/deeplearning/frameworks/support-matrix/index.html) lists CUDA 12.9.0.043 for the 25.05
# containers, the line nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04 belongs to.
CUDA_VERSION = "12.9.0.043"

# NeMo-RL's uv.lock at NEMO_RL_SHA (https://github.com/NVIDIA-NeMo/RL/blob/946862e7755f74833d866c2a3a87ddbefae089c1/
# uv.lock, 1.7 MB), trimmed to its header and its two torch tables (lines 8548-8587 and 8588-8660), each with its
# name, version, source and cp312 Linux wheels; every value copied as it stands there. The PyPI table carries
# markers for darwin; the +cu129 one, from the PyTorch index (pyproject.toml's `pytorch-cu129`), is what Linux gets.
NEMO_RL_UV_LOCK_HEADER = 'version = 1\nrevision = 3\nrequires-python = ">=3.12"\n'
NEMO_RL_TORCH_PYPI = """
[[package]]
name = "torch"
version = "2.9.0"
source = { registry = "https://pypi.org/simple" }
wheels = [
    { url = "https://files.pythonhosted.org/packages/d1/d3/3985739f3b8e88675127bf70f82b3a48ae083e39cda56305dbd90398fec0/torch-2.9.0-cp312-cp312-manylinux_2_28_aarch64.whl", hash = "sha256:e5f7af1dc4c0a7c4a260c2534f41ddaf209714f7c89145e644c44712fbd6b642", size = 104107898, upload-time = "2025-10-15T15:46:20.883Z" },
    { url = "https://files.pythonhosted.org/packages/a5/4b/f4bb2e6c25d0272f798cd6d7a04ed315da76cec68c602d87040c7847287f/torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", hash = "sha256:01cff95ecd9a212ea2f141db28acccdceb6a4c54f64e6c51091146f5e2a772c6", size = 899738273, upload-time = "2025-10-15T15:50:04.188Z" },
]
"""  # noqa: E501
NEMO_RL_TORCH_CU129 = """
[[package]]
name = "torch"
version = "2.9.0+cu129"
source = { registry = "https://download.pytorch.org/whl/cu129" }
wheels = [
    { url = "https://download.pytorch.org/whl/cu129/torch-2.9.0%2Bcu129-cp312-cp312-manylinux_2_28_aarch64.whl", hash = "sha256:106f9619d43edbd7087bc89b5fd1e4d9f491d9ec8ce91e84378a79b0a7c2b586" },
    { url = "https://download.pytorch.org/whl/cu129/torch-2.9.0%2Bcu129-cp312-cp312-manylinux_2_28_x86_64.whl", hash = "sha256:6a2f119afeefe66eef75484f008b1a240952e45b24899d27d281961e8a395458" },
]
"""  # noqa: E501
NEMO_RL_UV_LOCK = NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_PYPI + NEMO_RL_TORCH_CU129
# NeMo-RL's later uv.lock (7ea279ab, 2026-08-22: torch 2.11.0 from its `pytorch-cu130` index, per
# ../shared/notes/upstream-facts.md), its CUDA table alone, shaped as the cu129 one above: version, registry and the
# wheel's URL follow the PyTorch index's naming. The sha256 is NOT upstream's (not known here): torch's wheel is never
# fetched from it, since the stand-in vLLM wheels need no symbol of torch's.
NEMO_RL_TORCH_CU130 = """
[[package]]
name = "torch"
version = "2.11.0+cu130"
source = { registry = "https://download.pytorch.org/whl/cu130" }
wheels = [
    { url = "https://download.pytorch.org/whl/cu130/torch-2.11.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl", hash = "sha256:0000000000000000000000000000000000000000000000000000000000000000" },
]
"""  # noqa: E501
LATER_UV_LOCK = NEMO_RL_UV_LOCK_HEADER + NEMO_RL_TORCH_CU130
# NeMo-RL's pyproject.toml at NEMO_RL_SHA (https://github.com/NVIDIA-NeMo/RL/blob/946862e7755f74833d866c2a3a87ddbefae089c1/
# pyproject.toml, 15 KB), trimmed to its project name and its [tool.uv.sources] (lines 167-189, as they stand): vLLM
# is no git source there (build-custom-vllm.sh installs it), though other packages are.
NEMO_RL_PYPROJECT = """[project]
name = "nemo-rl"

[tool.uv.sources]
megatron-core = { workspace = true }
nemo-automodel = { workspace = true }
megatron-bridge = { workspace = true }
nemo_gym = { workspace = true }
nemo_run = { git = "https://github.com/NVIDIA-NeMo/Run", rev = "414f0077c648fde2c71bb1186e97ccbf96d6844c" }
# torch/torchvision/triton all come from the torch index in order to pick up aarch64 wheels
torch = [
  { index = "pytorch-cu129", marker = "sys_platform != 'darwin'" },
  { index = "pypi", marker = "sys_platform == 'darwin'" },
]
torchvision = [
  { index = "pytorch-cu129", marker = "sys_platform != 'darwin'" },
  { index = "pypi", marker = "sys_platform == 'darwin'" },
]
triton = [
  { index = "pytorch-cu129", marker = "sys_platform != 'darwin'" },
  { index = "pypi", marker = "sys_platform == 'darwin'" },
]
causal-conv1d = { git = "https://github.com/Dao-AILab/causal-conv1d", rev = "67e0a9dfe1518fc0036444e9ab5fe06ab78299e0" }
mamba-ssm = { git = "https://github.com/state-spaces/mamba.git", rev = "d68d16ed7d5d5164eb5a57c0285f3b7eb8394ec1" }
nv-grouped-gemm = { git = "https://github.com/fanshiqing/grouped_gemm", tag = "v1.1.4.post7" }
sgl-kernel = { git = "https://github.com/sgl-project/sglang", tag = "v0.5.7", subdirectory = "sgl-kernel" }
"""


class _Drop(enum.Enum):
    DROP = "drop"


DROP: Final = _Drop.DROP  # close the connection without answering; as a body chunk: cut the answer off there
Answer = tuple[int, dict[str, str], "bytes | Iterator[bytes | _Drop]"]


@dataclass
class Fault:
    """Answer the next `count` requests whose path starts with `path` with `status` (or DROP / 'hang')."""

    path: str
    status: Any
    count: int = 1
    headers: dict[str, str] = field(default_factory=dict)


class _Counted:
    """The handler's writer, adding every byte it sends (status lines, headers and bodies) to `Upstream.sent`."""

    def __init__(self, raw: Any, upstream: Upstream) -> None:
        self._raw, self._upstream = raw, upstream

    def write(self, data: bytes) -> int:
        written = self._raw.write(data)
        with self._upstream._lock:
            self._upstream.sent += len(data)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        self.wfile = _Counted(self.wfile, self.server.upstream)  # type: ignore[assignment]

    def _serve(self, method: str) -> None:
        upstream = self.server.upstream
        upstream.record(method, self.path, dict(self.headers))
        posted = b""
        if method == "POST":
            length = self.headers.get("Content-Length", "0")
            posted = self.rfile.read(min(int(length), 1 << 16) if length.isdigit() else 0)
            upstream.record_body(self.path, posted)
        if upstream.latency:
            time.sleep(upstream.latency)
        answer = upstream.fault_for(self.path)
        if answer is None:
            headers = dict(self.headers)
            accepts = self.headers.get_all("Accept") or []
            if len(accepts) > 1:  # Go clients send one Accept header per type
                headers["Accept"] = ", ".join(accepts)
            answer = (
                upstream.handle_post(self.path, headers, posted)
                if method == "POST"
                else upstream.handle(method, self.path, headers)
            )
        if answer is DROP:
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if answer == "hang":
            time.sleep(upstream.hang_seconds)
            self.close_connection = True
            return
        status, headers, body = answer
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers and isinstance(body, bytes):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method == "HEAD":
            return
        if isinstance(body, bytes):
            self.wfile.write(body)
            return
        try:
            for chunk in body:  # a big body, made as it is sent
                if chunk is DROP:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(chunk)
        except OSError:
            self.close_connection = True  # the client went away

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    upstream: Upstream


class Upstream:
    """Base class: a threaded HTTP server on 127.0.0.1 with request log, latency and scripted faults."""

    hang_seconds = 5.0

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.latency = 0.0
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, dict[str, str]]] = []
        self.bodies: list[tuple[str, bytes]] = []  # what each POST sent
        self.sent = 0  # bytes written to clients: every answer's status line, headers and body (bench/platforms.py)
        self._lock = threading.Lock()
        self._server = _Server((host, 0), _Handler)
        self._server.upstream = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.netloc}"

    @property
    def netloc(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 socket's address: typeshed also allows bytes
        return f"{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def record(self, method: str, path: str, headers: dict[str, str]) -> None:
        with self._lock:
            self.log.append((method, path, headers))

    def record_body(self, path: str, body: bytes) -> None:
        with self._lock:
            self.bodies.append((path, body))

    def fault_for(self, path: str) -> Answer | _Drop | Literal["hang"] | None:
        with self._lock:
            for fault in self.faults:
                if fault.count > 0 and path.startswith(fault.path):
                    fault.count -= 1
                    if fault.status is DROP or fault.status == "hang":
                        return fault.status
                    return fault.status, fault.headers, b'{"message": "injected fault"}'
        return None

    def handle(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        raise NotImplementedError

    def handle_post(self, path: str, headers: dict[str, str], body: bytes) -> Answer:
        return 405, {"Allow": "GET, HEAD"}, b""


def _json(status: int, data: Any, headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode()


class FakeGitHub(Upstream):
    """GET /repos/{owner}/{repo}/commits/{ref}, /pulls/{n}, /commits?sha=BRANCH (newest first, first parents),
    /compare/{base}...{head} and /contents/{path}?ref={sha} (a file's bytes with the raw media type, as GitHub
    answers `Accept: application/vnd.github.raw+json`), with GitHub's status codes and rate-limit headers.

    Commits form a graph: each has parents (by default the commit added before it to the same repository) and the
    paths it changes. A fork (`fork_of`) shares its parent's network, as GitHub's forks do: a fork's commit is
    visible through the parent's API by its SHA. Compare answers as GitHub's "Compare two commits" does
    (docs.github.com/en/rest/commits/commits#compare-two-commits): `status` (ahead, behind, identical, diverged),
    `ahead_by`, `behind_by`, `merge_base_commit`, and `files` (each `filename`, `status`, `previous_filename` for a
    rename) between the merge base and head, at most 300 of them (GitHub cuts the list there)."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: dict[str, dict[str, dict[str, str]]] = {}  # "owner/repo" -> sha -> {message, date}
        self.branches: dict[str, dict[str, str]] = {}
        self.pulls: dict[tuple[str, int], dict[str, Any]] = {}
        self.rate_limited_until: int | None = None
        self.history: dict[str, list[str]] = {}  # "owner/repo" -> shas, oldest first
        self.files: dict[tuple[str, str, str], bytes] = {}  # ("owner/repo", sha, path) -> bytes
        self.parents: dict[str, list[str]] = {}  # sha -> parents (first parent first)
        self.changed: dict[str, list[str]] = {}  # sha -> paths it changes
        self.renamed: dict[str, dict[str, str]] = {}  # sha -> {new path: old path}
        self.fork_of: dict[str, str] = {}  # "user/vllm" -> "vllm-project/vllm"
        self.compare_edits: list[Callable[[dict[str, Any]], None]] = []  # hostile tests edit compare's answers
        # sha -> {path: blob id}: a commit's tree, as /git/trees/{sha}?recursive=1 lists it. A commit without one
        # answers vLLM 0.14.0's real Python files (tests/support/vllmtree.py); `truncated_trees` answer `truncated:
        # true`.
        self.trees: dict[str, dict[str, str]] = {}
        self.truncated_trees: set[str] = set()
        # A vLLM commit's setup.py, unless `files` holds another: vLLM 0.14.0's real one (vllmtree.SETUP_PY), whose
        # extraction resolve reads to list what precompiled mode takes from the wheel. None: no default (404).
        self.setup_py: bytes | None = vllmtree.SETUP_PY.read_bytes()

    def add_commit(
        self,
        repo: str,
        sha: str,
        message: str,
        date: str,
        branch: str | None = None,
        parents: list[str] | None = None,
        files: list[str] | None = None,
    ) -> None:
        previous = self.history.get(repo, [])
        self.parents[sha] = parents if parents is not None else previous[-1:]
        self.changed[sha] = list(files or [])
        self.commits.setdefault(repo, {})[sha] = {"message": message, "date": date}
        self.history.setdefault(repo, []).append(sha)
        if branch:
            self.branches.setdefault(repo, {})[branch] = sha

    def add_pull(
        self,
        repo: str,
        number: int,
        title: str,
        merge_commit: str | None,
        merged_at: str | None,
        head: tuple[str, str, str | None] | None = None,
    ) -> None:
        """head: (sha, branch, repository "user/vllm" or None when the fork was deleted), as GitHub's `head`."""
        merged = merge_commit is not None and merged_at is not None
        sha, ref, head_repo = head or (merge_commit or "0" * 40, "feature", repo)
        self.pulls[(repo, number)] = {
            "number": number,
            "title": title,
            "state": "closed" if merged else "open",
            "merged": merged,
            "merged_at": merged_at,
            "merge_commit_sha": merge_commit,
            "html_url": f"https://github.com/{repo}/pull/{number}",
            "head": {
                "label": f"{(head_repo or 'ghost').split('/')[0]}:{ref}",
                "ref": ref,
                "sha": sha,
                "repo": None
                if head_repo is None
                else {
                    "full_name": head_repo,
                    "clone_url": f"https://github.com/{head_repo}.git",
                    "html_url": f"https://github.com/{head_repo}",
                    "fork": head_repo != repo,
                },
            },
            "base": {"ref": "main", "repo": {"full_name": repo, "clone_url": f"https://github.com/{repo}.git"}},
        }

    def _network(self, repo: str) -> list[str]:
        root = repo
        while root in self.fork_of:
            root = self.fork_of[root]
        members = [r for r in self.commits if r == root or self._root(r) == root]
        return [repo, *[r for r in members if r != repo]]

    def _root(self, repo: str) -> str:
        while repo in self.fork_of:
            repo = self.fork_of[repo]
        return repo

    def _ancestors(self, sha: str) -> list[str]:
        """sha and every commit it contains, breadth first (the newest first along each line)."""
        seen, queue = [sha], [sha]
        while queue:
            for parent in self.parents.get(queue.pop(0), []):
                if parent not in seen:
                    seen.append(parent)
                    queue.append(parent)
        return seen

    def _compare(self, repo: str, base: str, head: str) -> dict[str, Any]:
        below_base, below_head = self._ancestors(base), self._ancestors(head)
        merge_base = next((c for c in below_head if c in below_base), None)
        status = (
            "identical"
            if base == head
            else "ahead"
            if base in below_head
            else "behind"
            if head in below_base
            else "diverged"
        )
        new = [c for c in below_head if c not in (self._ancestors(merge_base) if merge_base else [])]
        files: dict[str, dict[str, str]] = {}
        for commit in reversed(new):
            for path in self.changed.get(commit, []):
                files[path] = {"filename": path, "status": "modified"}
                if path in self.renamed.get(commit, {}):
                    files[path] = {
                        "filename": path,
                        "status": "renamed",
                        "previous_filename": self.renamed[commit][path],
                    }
        owner = next(r for r in self._network(repo) if merge_base in self.commits.get(r, {})) if merge_base else repo
        return {
            "url": f"https://api.github.com/repos/{repo}/compare/{base}...{head}",
            "status": status,
            "ahead_by": len([c for c in below_head if c not in below_base]),
            "behind_by": len([c for c in below_base if c not in below_head]),
            "total_commits": len(new),
            "merge_base_commit": self._commit_json(owner, merge_base) if merge_base else None,
            "files": list(files.values())[:300],
        }

    def handle(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        if self.rate_limited_until is not None:
            return _json(
                403,
                {"message": "API rate limit exceeded for 127.0.0.1."},
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(self.rate_limited_until)},
            )
        parts = urlsplit(path).path.strip("/").split("/")
        limit_headers = {"X-RateLimit-Remaining": "59", "X-RateLimit-Limit": "60"}
        if len(parts) == 5 and parts[0] == "repos" and parts[3] == "commits":
            repo, ref = f"{parts[1]}/{parts[2]}", unquote(parts[4])
            sha = self._find(repo, ref)
            if sha is None:
                return _json(422, {"message": f"No commit found for SHA: {ref}", "status": "422"}, limit_headers)
            owner = next(r for r in self._network(repo) if sha in self.commits.get(r, {}))
            return _json(200, self._commit_json(owner, sha), limit_headers)
        if len(parts) == 4 and parts[0] == "repos" and parts[3] == "commits":
            repo = f"{parts[1]}/{parts[2]}"
            query = parse_qs(urlsplit(path).query)
            tip = self._find(repo, query.get("sha", ["main"])[0])
            if tip is None:
                return _json(404, {"message": "Not Found", "status": "404"}, limit_headers)
            per_page = min(int(query.get("per_page", ["30"])[0]), 100)
            line: list[str] = []
            at: str | None = tip
            while at and len(line) < per_page:  # first parents (GitHub lists by date; main's history is a line)
                line.append(at)
                parents = self.parents.get(at)
                at = parents[0] if parents else None
            owners = {sha: r for r in self._network(repo)[::-1] for sha in self.commits.get(r, {})}
            return _json(200, [self._commit_json(owners[sha], sha) for sha in line], limit_headers)
        if len(parts) == 5 and parts[0] == "repos" and parts[3] == "compare" and "..." in parts[4]:
            repo = f"{parts[1]}/{parts[2]}"
            base, head = (self._find(repo, unquote(p)) for p in parts[4].split("...", 1))
            if base is None or head is None:
                return _json(404, {"message": "Not Found", "status": "404"}, limit_headers)
            answer = self._compare(repo, base, head)
            for edit in self.compare_edits:
                edit(answer)
            if answer["merge_base_commit"] is None:  # no common history: GitHub answers 404
                return _json(404, {"message": "Not Found", "status": "404"}, limit_headers)
            return _json(200, answer, limit_headers)
        if len(parts) == 6 and parts[0] == "repos" and parts[3:5] == ["git", "trees"]:
            repo, sha = f"{parts[1]}/{parts[2]}", self._find(f"{parts[1]}/{parts[2]}", unquote(parts[5]))
            if sha is None:
                return _json(404, {"message": "Not Found", "status": "404"}, limit_headers)
            return _json(200, self._tree_json(repo, sha), limit_headers)
        if len(parts) >= 5 and parts[0] == "repos" and parts[3] == "contents":
            repo, name = f"{parts[1]}/{parts[2]}", unquote("/".join(parts[4:]))
            sha = self._find(repo, parse_qs(urlsplit(path).query).get("ref", ["main"])[0])
            data = self.files.get((repo, sha or "", name))
            if data is None and sha is not None and name == "setup.py" and repo.endswith("/vllm"):
                data = self.setup_py
            if data is None:
                return _json(404, {"message": "Not Found", "status": "404"}, limit_headers)
            if headers.get("Accept") == "application/vnd.github.raw+json":
                return 200, {"Content-Type": "application/vnd.github.raw+json", **limit_headers}, data
            # Without the raw media type GitHub answers JSON, its content base64-encoded (files up to 1 MB).
            return _json(
                200,
                {
                    "type": "file",
                    "name": name.rsplit("/", 1)[-1],
                    "path": name,
                    "sha": sha,
                    "size": len(data),
                    "encoding": "base64",
                    "content": base64.b64encode(data).decode(),
                },
                limit_headers,
            )
        if len(parts) == 5 and parts[0] == "repos" and parts[3] == "pulls" and parts[4].isdigit():
            pull = self.pulls.get((f"{parts[1]}/{parts[2]}", int(parts[4])))
            if pull is None:
                return _json(404, {"message": "Not Found"}, limit_headers)
            return _json(200, pull, limit_headers)
        return _json(404, {"message": "Not Found"})

    def _tree_json(self, repo: str, sha: str) -> dict[str, Any]:
        """GitHub's "Get a tree" answer (docs.github.com/en/rest/git/trees#get-a-tree), recursive: the blob
        entries (mode, type, sha, path, url); trees and sizes are left out (the stand-in has no tree objects)."""
        files = self.trees.get(sha)
        if files is None:
            files = vllmtree.listing()
        api = f"https://api.github.com/repos/{repo}/git"
        return {
            "sha": sha,
            "url": f"{api}/trees/{sha}",
            "tree": [
                {"path": path, "mode": "100644", "type": "blob", "sha": blob, "url": f"{api}/blobs/{blob}"}
                for path, blob in sorted(files.items())
            ],
            "truncated": sha in self.truncated_trees,
        }

    def _find(self, repo: str, ref: str) -> str | None:
        """The commit a branch name, full SHA or unique prefix (4+ hex) names, as GitHub finds it; a full SHA
        anywhere in the repository's network (a fork's commit through its parent)."""
        known = self.commits.get(repo, {})
        sha = self.branches.get(repo, {}).get(ref)
        if sha is None:
            matches = [s for s in known if s.startswith(ref)] if len(ref) >= 4 else []
            sha = matches[0] if len(matches) == 1 else None
        if sha is None and len(ref) == 40:
            sha = next((ref for r in self._network(repo) if ref in self.commits.get(r, {})), None)
        return sha

    def _commit_json(self, repo: str, sha: str) -> dict[str, Any]:
        info = self.commits[repo][sha]
        return {
            "sha": sha,
            "html_url": f"https://github.com/{repo}/commit/{sha}",
            "commit": {
                "message": info["message"],
                "committer": {"name": "GitHub", "date": info["date"]},
                "author": {"name": "dev", "date": info["date"]},
            },
        }


_BLOCK = 1 << 20


@lru_cache(maxsize=4)
def _block_base(seed: int) -> bytes:
    return random.Random(seed).randbytes(_BLOCK)


LIBRARY = "vllm/_C.abi3.so"
# vLLM's other library every GPU loads (build.gpu_required's default); real wheels hold both (vLLM 0.14.0's PyPI
# wheel: vllm/_C.abi3.so and vllm/_moe_C.abi3.so). Served as the same minimal ELF.
MOE_LIBRARY = "vllm/_moe_C.abi3.so"
PADDING = "vllm/_padding.bin"  # the rest of the wheel's size: seeded random bytes, stored


def minimal_elf(needed: tuple[str, ...] = ("libcudart.so.12",), machine: int = 62) -> bytes:
    """A minimal ELF64 little-endian shared object whose dynamic section names `needed` (DT_NEEDED): one PT_LOAD
    covering the whole file at address 0, one PT_DYNAMIC, the string table between them, and after the dynamic
    section the symbol table (the null symbol alone) and its DT_HASH table, which every shared object has. Nothing
    loads it. `machine`: e_machine, EM_X86_64 (62) or EM_AARCH64 (183) as elf.h numbers them."""
    strtab = b"\0" + b"".join(name.encode() + b"\0" for name in needed)
    offsets, at = [], 1
    for name in needed:
        offsets.append(at)
        at += len(name.encode()) + 1
    str_off = 64 + 2 * 56
    dyn_off = (str_off + len(strtab) + 7) // 8 * 8
    tail = 6 * 16  # DT_STRTAB, DT_STRSZ, DT_SYMTAB, DT_SYMENT, DT_HASH, DT_NULL
    sym_off = dyn_off + 16 * len(offsets) + tail
    hash_off = sym_off + 24
    entries = [(1, o) for o in offsets] + [
        (5, str_off),
        (10, len(strtab)),
        (6, sym_off),
        (11, 24),
        (4, hash_off),
        (0, 0),
    ]
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    symbols = bytes(24) + struct.pack("<IIII", 1, 1, 0, 0)  # the null symbol; nbucket 1, nchain 1
    total = hash_off + 16
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, machine, 1, 0, 64, 0, 0, 64, 56, 2, 64, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
    dyn = struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dynamic), len(dynamic), 8)
    body = header + load + dyn + strtab
    return body + bytes(dyn_off - len(body)) + dynamic + symbols


def cudart_for(variant: str) -> tuple[str, ...]:
    """What the fake's library needs by default: libcudart.so.12 (the default variant is CUDA 12.9), or the
    major a cuNNN variant names."""
    if variant.startswith("cu") and variant[2:].isdigit() and len(variant) >= 4:
        return (f"libcudart.so.{int(variant[2:-1])}",)
    return ("libcudart.so.12",)


def _local_header(name: bytes, crc: int, size: int) -> bytes:
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0x21, crc, size, size, len(name), 0) + name


def _central_entry(name: bytes, crc: int, size: int, offset: int) -> bytes:
    return (
        struct.pack(
            "<4sHHHHHHIIIHHHHHII",
            b"PK\x01\x02",
            20,
            20,
            0,
            0,
            0,
            0x21,
            crc,
            size,
            size,
            len(name),
            0,
            0,
            0,
            0,
            0,
            offset,
        )
        + name
    )


@lru_cache(maxsize=16)
def _pad_crc(seed: int, length: int) -> int:
    crc = 0
    for chunk in _seeded(seed, 0, length):
        crc = zlib.crc32(chunk, crc)
    return crc


@lru_cache(maxsize=16)
def _zip_layout(
    seed: int, size: int, library: bytes | None, member: str, extra: tuple[tuple[str, bytes], ...] = ()
) -> tuple[bytes, int, bytes]:
    """(the bytes before the padding's data, its length, the bytes after it) of a stored zip `size` bytes long:
    the library member and vllm/_moe_C.abi3.so (when there is one), the `extra` members (the dist-info METADATA),
    then the padding member, then the central directory."""
    members = [(member.encode(), library), (MOE_LIBRARY.encode(), library)] if library is not None else []
    members += [(name.encode(), data) for name, data in extra]
    pad_name = PADDING.encode()
    fixed = sum(30 + len(n) + len(d) + 46 + len(n) for n, d in members) + 30 + 46 + 2 * len(pad_name) + 22
    pad_len = size - fixed
    assert pad_len >= 0, f"a fake wheel needs at least {fixed} bytes"
    assert size < 1 << 32, "the fake wheel is a zip without zip64"
    pad_crc = _pad_crc(seed, pad_len)
    head, directory = b"", b""
    for name, data in members:
        crc = zlib.crc32(data)
        directory += _central_entry(name, crc, len(data), len(head))
        head += _local_header(name, crc, len(data)) + data
    directory += _central_entry(pad_name, pad_crc, pad_len, len(head))
    head += _local_header(pad_name, pad_crc, pad_len)
    count = len(members) + 1
    tail = directory + struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(directory), len(head) + pad_len, 0
    )
    return head, pad_len, tail


def _seeded(seed: int, start: int, end: int) -> Iterator[bytes]:
    """Bytes [start, end) of the seeded stream, in blocks: each block is a fixed random block with its index in
    front, so no two blocks are equal."""
    base = _block_base(seed)
    index = start // _BLOCK
    while start < end:
        block = index.to_bytes(8, "big") + base[8:]
        offset = start - index * _BLOCK
        piece = block[offset : min(_BLOCK, end - index * _BLOCK)]
        yield piece
        start += len(piece)
        index += 1


@dataclass
class WheelFile:
    """A wheel's bytes: a real zip (stored) holding `vllm/_C.abi3.so`, a minimal ELF that needs `needed`, and a
    padding member of seeded random bytes up to `size`; made on demand in 1 MiB blocks (a 432 MiB wheel costs no
    memory). Change `seed` to change the bytes and nothing else (same size, same ETag). `library` replaces the
    ELF's bytes (hostile ones), `member` its name; `archive=False` serves the seeded bytes alone, not a zip."""

    size: int
    etag: str
    last_modified: str = "Tue, 20 Jan 2026 03:12:44 GMT"
    seed: int = 0
    served_size: int | None = None  # a GET serves this many bytes (HEAD still says `size`): a lying server
    needed: tuple[str, ...] = ("libcudart.so.12",)
    library: bytes | None = None
    member: str | None = LIBRARY  # None: the wheel has no such library
    archive: bool = True
    metadata: tuple[tuple[str, bytes], ...] = ()  # (name, bytes): the dist-info METADATA (dist_info_metadata)

    def _layout(self) -> tuple[bytes, int, bytes]:
        if not self.archive:
            return b"", self.size, b""
        library = (
            None if self.member is None else self.library if self.library is not None else minimal_elf(self.needed)
        )
        return _zip_layout(self.seed, self.size, library, self.member or LIBRARY, self.metadata)

    def chunks(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes [start, end) of the file as served (zeros past `size` when served_size says more)."""
        return _file_chunks(self.seed, self.size, self._layout(), start, self.length if end is None else end)

    @property
    def length(self) -> int:
        return self.size if self.served_size is None else self.served_size

    def data(self) -> bytes:
        return b"".join(self.chunks())

    def sha256(self) -> str:
        return _sha256_of(self.seed, self.size, self.length, self._layout())


def _file_chunks(seed: int, size: int, layout: tuple[bytes, int, bytes], start: int, end: int) -> Iterator[bytes]:
    head, pad_len, tail = layout
    segments = ((0, head), (len(head), pad_len), (len(head) + pad_len, tail), (size, max(end - size, 0)))
    for at, part in segments:
        length = len(part) if isinstance(part, bytes) else part
        lo, hi = max(start, at), min(end, at + length)
        if lo >= hi:
            continue
        if isinstance(part, bytes):
            yield part[lo - at : hi - at]
        elif at == len(head):
            yield from _seeded(seed, lo - at, hi - at)
        else:  # past the end of the file: a lying server's extra bytes
            for offset in range(lo, hi, _BLOCK):
                yield bytes(min(_BLOCK, hi - offset))


@lru_cache(maxsize=16)
def _sha256_of(seed: int, size: int, length: int, layout: tuple[bytes, int, bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in _file_chunks(seed, size, layout, 0, length):
        digest.update(chunk)
    return digest.hexdigest()


def wheel_bytes(size: int = 1024, needed: tuple[str, ...] = ("libcudart.so.12",)) -> bytes:
    """The bytes of a small wheel resolve accepts (a zip whose vllm/_C.abi3.so needs `needed`), for servers other
    than FakeWheelIndex."""
    return WheelFile(size, "", needed=needed).data()


@dataclass
class RealFile:
    """A real wheel's bytes (tests/support/realwheels.py: fetched from PyPI, sha256-checked), served from the file as
    they are, in place of a WheelFile. Only the bytes are real: the name and the index entry the stand-in index gives
    them are the test's."""

    path: Path
    sha256_hex: str  # PyPI's, which realwheels.py already checked the file against
    etag: str = '"6ac1d49b0e6b0d1b3bd0a9e2d4f8f1c5-60"'  # an S3 multipart ETag's shape; not the real object's
    last_modified: str = "Tue, 20 Jan 2026 03:12:44 GMT"

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def length(self) -> int:
        return self.size

    def chunks(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        end = self.size if end is None else end
        with self.path.open("rb") as handle:
            handle.seek(start)
            while start < end and (chunk := handle.read(min(_BLOCK, end - start))):
                start += len(chunk)
                yield chunk

    def data(self) -> bytes:
        return self.path.read_bytes()

    def sha256(self) -> str:
        return self.sha256_hex


# The torch requirement in the stand-in wheels' METADATA, copied from vLLM 0.14.0's PyPI wheel
# (vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl, vllm-0.14.0.dist-info/METADATA: `Requires-Dist: torch==2.9.1`),
# the release line of the pinned 0.14.0rc2.dev156 wheel; NeMo-RL's build-custom-vllm.sh installs torch 2.9.0 for it.
WHEEL_REQUIRES_TORCH = "torch==2.9.1"


def dist_info_metadata(filename: str, requires_torch: str | None = WHEEL_REQUIRES_TORCH) -> tuple[str, bytes]:
    """A wheel's `{name}-{version}.dist-info/METADATA`, shaped as vLLM 0.14.0's (its first headers, the lines
    around torch's as they stand there, then the description after a blank line)."""
    version = filename.split("-")[1]
    lines = [
        "Metadata-Version: 2.4",
        "Name: vllm",
        f"Version: {version}",
        "Summary: A high-throughput and memory-efficient inference and serving engine for LLMs",
        "Requires-Python: <3.14,>=3.10",
        "Requires-Dist: regex",
        "Requires-Dist: ray[cgraph]>=2.48.0",
    ]
    if requires_torch is not None:
        lines.append(f"Requires-Dist: {requires_torch}")
    lines += [
        "Requires-Dist: torchaudio==2.9.1",
        "Requires-Dist: torchvision==0.24.1",
        'Requires-Dist: pandas; extra == "bench"',
        "Provides-Extra: bench",
        "",
        "vLLM is a fast library.",
        "",
    ]
    return f"vllm-{version}.dist-info/METADATA", "\n".join(lines).encode()


class FakeWheelIndex(Upstream):
    """vLLM's per-commit index: /{commit}[/{variant}]/vllm/{metadata.json,index.html} and the wheels themselves."""

    def __init__(self) -> None:
        super().__init__()
        # commit -> variant ("default" or a name) -> filenames
        self.listings: dict[str, dict[str, list[str]]] = {}
        self.files: dict[str, WheelFile | RealFile] = {}  # "/{commit}/{filename}" (decoded) -> file
        self.refuse_head = False
        self.without_metadata = False
        self.encode_metadata_paths = True
        self.redirect_wheels = False
        self.ranges = True  # False: Range is ignored, every GET is a 200 with the whole file
        self.conditional = True  # False: If-None-Match is ignored (a 200 with the whole file)
        self.chunk_delay = 0.0  # seconds before each 1 MiB of a wheel's body: a slow link
        self.cuts: list[int] = []  # each wheel GET takes the first: its body is cut off after that many bytes
        self.wheel_size = TEST_WHEEL_SIZE

    def add(
        self,
        commit: str,
        filename: str,
        variant: str = "default",
        size: int | None = None,
        needed: tuple[str, ...] | None = None,
        requires_torch: str | None = WHEEL_REQUIRES_TORCH,
    ) -> WheelFile:
        """List the wheel; its vllm/_C.abi3.so needs `needed` (default: cudart_for(variant)); its METADATA requires
        `requires_torch` (None: no torch line)."""
        self.listings.setdefault(commit, {}).setdefault(variant, []).append(filename)
        etag = '"' + hashlib.md5(filename.encode()).hexdigest() + '-52"'
        wheel = WheelFile(
            size=self.wheel_size if size is None else size,
            etag=etag,
            needed=cudart_for(variant) if needed is None else needed,
            metadata=(dist_info_metadata(filename, requires_torch),),
        )
        self.files[f"/{commit}/{filename}"] = wheel
        return wheel

    def wheel_gets(self) -> list[dict[str, str]]:
        """The headers of every GET of a wheel's bytes (not the one-byte probe): what was downloaded, and how."""
        return [h for m, p, h in self.log if m == "GET" and p.endswith(".whl") and h.get("Range") != "bytes=0-0"]

    def _variant_of(self, filename: str) -> str | None:
        version = filename.split("-")[1]
        local = version.split("+", 1)[1] if "+" in version else ""
        rest = [p for p in local.split(".") if p and not p.startswith("g")]
        return rest[0] if rest else None

    def handle(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        raw_path = urlsplit(path).path
        decoded = unquote(raw_path)
        if decoded.startswith("/blobs/"):
            decoded = "/" + decoded.removeprefix("/blobs/")
            return self._wheel(method, decoded, headers)
        parts = decoded.strip("/").split("/")
        if parts[-1].endswith(".whl"):
            if self.redirect_wheels:
                return 302, {"Location": f"/blobs{raw_path}"}, b""
            return self._wheel(method, decoded, headers)
        if len(parts) in (3, 4) and parts[-2] == "vllm":
            commit = parts[0]
            variant = parts[1] if len(parts) == 4 else "default"
            names = self.listings.get(commit, {}).get(variant)
            if names is None:
                return 404, {"Content-Type": "text/plain"}, b"Not Found"
            up = "../../" if variant != "default" else "../"
            if parts[-1] == "metadata.json" and not self.without_metadata:
                entries = []
                for name in sorted(names):
                    rel = up + name
                    _, version, python_tag, abi_tag, platform_tag = name.removesuffix(".whl").split("-")
                    entries.append(
                        {
                            "package_name": "vllm",
                            "version": version,
                            "build_tag": None,
                            "python_tag": python_tag,
                            "abi_tag": abi_tag,
                            "platform_tag": platform_tag,
                            "variant": self._variant_of(name),
                            "filename": name,
                            "path": quote(rel) if self.encode_metadata_paths else rel,
                        }
                    )
                return _json(200, entries)
            if parts[-1] == "index.html":
                links = "\n".join(
                    f'    <a href="{quote(up + n)}#sha256={self._sha256(commit, n)}">{n}</a><br/>'
                    for n in sorted(names)
                )
                html = f"<!DOCTYPE html>\n<html>\n  <body>\n{links}\n  </body>\n</html>\n"
                return 200, {"Content-Type": "text/html"}, html.encode()
        return 404, {"Content-Type": "text/plain"}, b"Not Found"

    def _sha256(self, commit: str, filename: str) -> str:
        wheel = self.files.get(f"/{commit}/{filename}")
        return wheel.sha256() if wheel else hashlib.sha256(filename.encode()).hexdigest()

    def _wheel(self, method: str, decoded: str, headers: dict[str, str]) -> Answer:
        """HEAD, and GET with RFC 9110 ranges: `Range: bytes=N-` (or N-M) answered 206 with Content-Range, unless
        `If-Range` names another ETag (then 200, the whole file); a range past the end is 416."""
        wheel = self.files.get(decoded)
        if wheel is None:
            return 404, {"Content-Type": "text/plain"}, b"Not Found"
        common = {"ETag": wheel.etag, "Last-Modified": wheel.last_modified, "Content-Type": "application/octet-stream"}
        if method == "HEAD":
            if self.refuse_head:
                return 405, {"Allow": "GET"}, b""
            return 200, {**common, "Content-Length": str(wheel.size)}, b""
        if self.conditional and headers.get("If-None-Match") == wheel.etag:
            # RFC 9110 13.1.2, as S3 and CloudFront (which serve wheels.vllm.ai) answer it: 304, no body.
            return 304, {"ETag": wheel.etag, "Last-Modified": wheel.last_modified}, b""
        length = wheel.length
        start, end, status = 0, length, 200
        wanted = headers.get("Range", "")
        if self.ranges and wanted.startswith("bytes=") and headers.get("If-Range", wheel.etag) == wheel.etag:
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start, end, status = int(first), min(int(last) + 1 if last else length, length), 206
            if start >= length:
                return 416, {**common, "Content-Range": f"bytes */{length}"}, b""
            common["Content-Range"] = f"bytes {start}-{end - 1}/{length}"
        with self._lock:
            cut = self.cuts.pop(0) if self.cuts else None
        return status, {**common, "Content-Length": str(end - start)}, self._body(wheel, start, end, cut)

    def _body(self, wheel: WheelFile | RealFile, start: int, end: int, cut: int | None) -> Iterator[bytes | _Drop]:
        sent = 0
        for chunk in wheel.chunks(start, end):
            time.sleep(self.chunk_delay)
            if cut is not None and sent + len(chunk) >= cut:
                yield chunk[: cut - sent]
                yield DROP
                return
            sent += len(chunk)
            yield chunk


@dataclass
class Login:
    """What a registry that demands a login accepts. `mode`:
    "token"  the registry answers 401 with `Bearer realm=<its /token>`; the token endpoint gives tokens only for
             Basic auth with this username and password (GET), or for this identity token as an OAuth2 refresh
             token (POST grant_type=refresh_token), and refuses anything else (401 to a GET, 400 to a POST);
    "basic"  the registry itself demands Basic auth with this username and password (`Basic realm=...`)."""

    mode: str
    username: str
    password: str
    identity_token: str | None = None

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


class FakeRegistry(Upstream):
    """OCI distribution API with the anonymous bearer-token flow; serves an index with amd64 and arm64 images.
    With `login` set it demands a login (see Login); with `backend` set (a real registry's URL) it serves, once the
    login is right, what that registry serves: an image the Docker engine can pull. `realm` names another token
    endpoint in its challenges (share `tokens` with the registry serving it)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.blobs: dict[str, tuple[str, bytes]] = {}  # digest -> (media type, bytes)
        self.tags: dict[tuple[str, str], str] = {}  # (repo, tag) -> digest
        self.tokens: dict[str, str] = {}  # token -> scope
        self.anonymous_allowed = True
        self.login: Login | None = None
        self.backend: str | None = None
        self.realm: str | None = None

    def _put(self, media_type: str, data: Any) -> str:
        body = json.dumps(data, sort_keys=True).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.blobs[digest] = (media_type, body)
        return digest

    def put_image(
        self,
        config: dict[str, Any],
        platform: dict[str, str] | None = None,
        layers: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """One image as BuildKit pushes it: an OCI image manifest whose config blob is `config`, with `layers`
        ((media type, bytes), bottom first; none by default). Returns its descriptor, as an index lists it (with
        `platform` when given)."""
        config_digest = self._put(OCI_CONFIG, config)
        descriptors = []
        for media_type, body in layers:
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            self.blobs[digest] = (media_type, body)
            descriptors.append({"mediaType": media_type, "digest": digest, "size": len(body)})
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(self.blobs[config_digest][1])},
            "layers": descriptors,
        }
        digest = self._put(OCI_MANIFEST, manifest)
        platform_ = {"platform": platform} if platform is not None else {}
        return {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(self.blobs[digest][1]), **platform_}

    def put_index(self, repo: str, tag: str, manifests: list[dict[str, Any]]) -> str:
        """An OCI image index of `manifests` (descriptors), tagged repo:tag; its digest."""
        digest = self._put(OCI_INDEX, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})
        self.tags[(repo, tag)] = digest
        return digest

    def add_image(
        self,
        repo: str,
        tag: str,
        platforms: tuple[str, ...] = ("linux/amd64", "linux/arm64"),
        cuda_version: str | None = CUDA_VERSION,
        env: list[Any] | None = None,
        layers: list[tuple[str, bytes]] = (),  # type: ignore[assignment]
    ) -> str:
        """An image whose configs set `CUDA_VERSION=<cuda_version>` in their Env (None: not at all), as nvcr.io's
        cuda-dl-base does; `env` replaces the whole Env (any JSON, for malformed configs); every platform's
        manifest lists `layers` ((media type, bytes), bottom first)."""
        manifests = []
        for platform in platforms:
            os_name, arch = platform.split("/")
            if env is None:
                lines = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/bin:/bin"]
                lines += [f"CUDA_VERSION={cuda_version}"] if cuda_version is not None else []
            config = {"architecture": arch, "os": os_name, "config": {"Env": lines if env is None else env}}
            manifests.append(self.put_image(config, {"architecture": arch, "os": os_name}, layers))
        if len(platforms) == 1:
            self.tags[(repo, tag)] = manifests[0]["digest"]
            return manifests[0]["digest"]
        # BuildKit-style attestation manifest, which has no real platform: must never be chosen.
        manifests.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": "sha256:" + "a" * 64,
                "size": 1,
                "platform": {"architecture": "unknown", "os": "unknown"},
            }
        )
        return self.put_index(repo, tag, manifests)

    def platform_digest(self, repo: str, tag: str, platform: str) -> str:
        media_type, body = self.blobs[self.tags[(repo, tag)]]
        data = json.loads(body)
        os_name, arch = platform.split("/")
        for m in data.get("manifests", []):
            if m["platform"] == {"architecture": arch, "os": os_name}:
                return m["digest"]
        return self.tags[(repo, tag)]

    def _issue(self, scope: str) -> Answer:
        token = hashlib.sha256(f"{scope}{time.time()}{random.random()}".encode()).hexdigest()
        with self._lock:
            self.tokens[token] = scope
        return _json(200, {"token": token, "access_token": token, "expires_in": 300})

    def handle_post(self, path: str, headers: dict[str, str], body: bytes) -> Answer:
        """The OAuth2 form Docker posts with an identity token: grant_type=refresh_token."""
        if urlsplit(path).path != "/token":
            return 405, {"Allow": "GET, HEAD"}, b""
        form = {name: values[0] for name, values in parse_qs(body.decode()).items()}
        login = self.login
        if (
            login is None
            or login.identity_token is None
            or form.get("grant_type") != "refresh_token"
            or form.get("refresh_token") != login.identity_token
            or not form.get("client_id")
        ):
            return _json(400, {"error": "invalid_grant"})
        return self._issue(form.get("scope", ""))

    def handle(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        parsed = urlsplit(path)
        auth = headers.get("Authorization", "")
        if parsed.path == "/token":
            scope = parse_qs(parsed.query).get("scope", [""])[0]
            if self.login is not None:
                if auth != self.login.basic():
                    return _json(
                        401, {"errors": [{"code": "UNAUTHORIZED", "message": "incorrect username or password"}]}
                    )
                return self._issue(scope)
            if not self.anonymous_allowed:
                return _json(401, {"errors": [{"code": "UNAUTHORIZED"}]})
            return self._issue(scope)
        if not parsed.path.startswith("/v2/"):
            return 404, {}, b""
        rest = parsed.path.removeprefix("/v2/")
        for kind in ("/manifests/", "/blobs/"):
            if kind in rest:
                repo, reference = rest.split(kind, 1)
                break
        else:
            if not rest:  # the ping: open, unless a login is demanded
                return self._challenge("") if self.login and not self._authorized(auth, None) else _json(200, {})
            return _json(401, {})
        scope = f"repository:{repo}:pull"
        if not self._authorized(auth, scope):
            return self._challenge(scope)
        if self.backend:
            return self._forward(method, path, headers)
        digest = self.tags.get((repo, reference), reference)
        if digest not in self.blobs:
            return _json(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        media_type, body = self.blobs[digest]
        return 200, {"Content-Type": media_type, "Docker-Content-Digest": digest}, body

    def _authorized(self, auth: str, scope: str | None) -> bool:
        if self.login is not None and self.login.mode == "basic":
            return auth == self.login.basic()
        with self._lock:
            granted = self.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
        return granted is not None and (scope is None or granted == scope)

    def _challenge(self, scope: str) -> Answer:
        if self.login is not None and self.login.mode == "basic":
            challenge = 'Basic realm="fake-registry"'
        else:
            challenge = f'Bearer realm="{self.realm or self.url + "/token"}",service="fake-registry"'
            challenge += f',scope="{scope}"' if scope else ""
        return _json(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": challenge})

    def _forward(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        """The backend registry's answer to the same request (no login there: it is a loopback registry)."""
        forwarded = {k: v for k, v in headers.items() if k.lower() == "accept"}
        request = urllib.request.Request(f"{self.backend}{path}", method=method, headers=forwarded)
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with direct.open(request, timeout=30) as answer:
                status, answer_headers, body = answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as exc:
            status, answer_headers, body = exc.code, exc.headers, exc.read()
        kept = {
            name: answer_headers[name]
            for name in ("Content-Type", "Docker-Content-Digest", "Content-Length")
            if answer_headers.get(name)
        }
        return status, kept, body


@dataclass
class Upstreams:
    github: FakeGitHub
    wheels: FakeWheelIndex
    registry: FakeRegistry

    @property
    def base_image(self) -> str:
        return f"{self.registry.netloc}/{BASE_REPO}:{BASE_TAG}"

    def env(self) -> dict[str, str]:
        return {"BUILDKIT_GITHUB_API": self.github.url, "BUILDKIT_WHEEL_INDEX": self.wheels.url}

    def all(self) -> tuple[Upstream, ...]:
        return (self.github, self.wheels, self.registry)

    def set_latency(self, seconds: float) -> None:
        for upstream in self.all():
            upstream.latency = seconds

    def stop(self) -> None:
        for upstream in self.all():
            upstream.stop()


def reference_upstreams(wheel_size: int = TEST_WHEEL_SIZE) -> Upstreams:
    """All three servers, started, holding the reference build's facts (the wheels `wheel_size` bytes long)."""
    github = FakeGitHub()
    github.add_commit("NVIDIA-NeMo/RL", NEMO_RL_SHA, NEMO_RL_SUBJECT + "\n\nSigned-off-by: dev", NEMO_RL_DATE, "main")
    github.files[("NVIDIA-NeMo/RL", NEMO_RL_SHA, "uv.lock")] = NEMO_RL_UV_LOCK.encode()
    github.files[("NVIDIA-NeMo/RL", NEMO_RL_SHA, "pyproject.toml")] = NEMO_RL_PYPROJECT.encode()
    github.add_commit("vllm-project/vllm", VLLM_SHA, VLLM_SUBJECT, VLLM_DATE, "main")
    github.add_pull("vllm-project/vllm", VLLM_PR, VLLM_PR_TITLE, VLLM_SHA, "2026-01-19T21:04:56Z")
    wheels = FakeWheelIndex()
    wheels.wheel_size = wheel_size
    # Listed out of order on purpose, with the other architecture first: position must not decide.
    wheels.add(VLLM_SHA, WHEEL_ARM)
    wheels.add(VLLM_SHA, WHEEL_X86)
    wheels.add(VLLM_SHA, WHEEL_CU130_X86, variant="cu130")
    registry = FakeRegistry()
    registry.add_image(BASE_REPO, BASE_TAG)
    return Upstreams(github.start(), wheels.start(), registry.start())


def pins_text(base_image: str, **overrides: str) -> str:
    """The reference pins.yaml with the base image moved (to a loopback registry)."""
    text = (REPO_ROOT / "pins.yaml").read_text()
    text = text.replace("nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04", base_image)
    for old, new in overrides.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


# build.platforms for H100 (linux/amd64) and GB200 (linux/arm64), issue 30.
TWO_PLATFORMS = '  platforms:\n    linux/amd64: {cuda_arch_list: "9.0"}\n    linux/arm64: {cuda_arch_list: "10.0"}\n'


def two_platforms(text: str) -> str:
    """The reference pins (pins_text) with TWO_PLATFORMS in place of build.platform and cuda_arch_list, and no
    wheel.arch (it follows each platform)."""
    for old in ("  arch: x86_64\n", "  platform: linux/amd64\n"):
        assert old in text, old
        text = text.replace(old, "")
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("  cuda_arch_list:"))
    return "".join(lines[:at]) + TWO_PLATFORMS + "".join(lines[at + 1 :])


if __name__ == "__main__":
    up = reference_upstreams(wheel_size=WHEEL_SIZE)
    print("# Fake GitHub, wheel index and registry on loopback. Ctrl-C stops them.")
    for name, value in up.env().items():
        print(f"export {name}={value}")
    print(f"# base_image for pins.yaml: {up.base_image}")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        up.stop()


def authorizations(log) -> set[str | None]:
    """The Authorization headers a server saw (hostile servers log Requests, the fakes tuples)."""
    return {(entry.headers if hasattr(entry, "headers") else entry[2]).get("Authorization") for entry in log}
