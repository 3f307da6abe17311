"""Source preparation: cold (bytes and time) against a full clone, and warm time.

Makes a repository with a long history (git fast-import: many commits, each rewriting a few files of random
content), serves it with `git daemon` on 127.0.0.1, then measures in the same run:
  - baseline: `git clone` of the whole repository (what the manual recipe does);
  - cold `prepare`: the pinned commit by SHA, shallow, into an empty cache;
  - warm `prepare`: the same again, cache in place.

    python bench/prepare.py [--commits 1500] [--files 200] [--repeat 5]

Goals (issue 3): cold bytes <= 10% of a full clone; warm <= 1 s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from buildkit.models.lock import Lock, lock_sha256  # noqa: E402
from buildkit.stages.prepare import _git_dir_bytes, prepare  # noqa: E402
from tests.support.gitserver import GitDaemon, git  # noqa: E402


def make_history(path: Path, commits: int, files: int, size: int, seed: int = 7) -> str:
    """A repository whose history is much larger than its tree, built in one fast-import stream."""
    rng = random.Random(seed)
    git("init", "-q", "--bare", "-b", "main", str(path), cwd=path.parent)
    stream: list[bytes] = []

    def blob(mark: int) -> None:
        data = rng.randbytes(size // 2).hex().encode()
        stream.append(b"blob\nmark :%d\ndata %d\n" % (mark, len(data)) + data + b"\n")

    mark = 0
    for n in range(commits):
        changed = range(files) if n == 0 else rng.sample(range(files), 3)
        entries = []
        for index in changed:
            mark += 1
            blob(mark)
            entries.append(b"M 100644 :%d src/file%04d.txt\n" % (mark, index))
        message = b"commit %d" % n
        stream.append(
            b"commit refs/heads/main\ncommitter t <t@e> %d +0000\ndata %d\n%s\n"
            % (1_700_000_000 + n, len(message), message)
            + b"".join(entries)
        )
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input=b"".join(stream), check=True)
    return git("rev-parse", "main", cwd=path)


def fake_lock(url: str, commit: str) -> Lock:
    """A lock naming only what prepare reads; the other facts are placeholders that pass the grammars."""
    fact = {
        "repo": url,
        "ref": commit,
        "commit": commit,
        "date": "2026-01-01T00:00:00Z",
        "subject": "s",
        "source": "bench",
    }
    digest = "sha256:" + "0" * 64
    return Lock.model_validate(
        {
            "buildkit_version": "bench",
            "pins_sha256": "0" * 64,
            "nemo_rl": fact,
            "vllm": {**fact, "repo": "https://github.com/vllm-project/vllm.git"},
            "vllm_pr": None,
            "wheel": {
                "index": "https://wheels.vllm.ai",
                "variant": "default",
                "arch": "x86_64",
                "filename": "w.whl",
                "version": "0",
                "url": "https://wheels.vllm.ai/w.whl",
                "size": 1,
                "sha256": "0" * 64,
                "index_sha256": None,
                "content_addressed": True,
                "not_content_addressed": None,
                "listed_in": "https://wheels.vllm.ai",
                "verified_by": "HEAD",
                "cuda": None,
                "cuda_source": "bench",
            },
            "base_image": {
                "ref": "a/b:c",
                "registry": "docker.io",
                "repository": "a/b",
                "tag": "c",
                "index_digest": None,
                "manifest_digest": digest,
                "platform": "linux/amd64",
                "pinned": f"a/b@{digest}",
                "source": "bench",
                "cuda_version": None,
                "config_digest": None,
            },
            "cuda": {"base_image": None, "wheel": None, "outcome": "not checked", "detail": "bench"},
            "build": {"cuda_arch_list": "9.0", "tag": "x:y"},
            "patches": [],
            "known_issues": [],
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1500)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--size", type=int, default=4096, help="bytes per file version")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        served = tmp_path / "served"
        served.mkdir()
        commit = make_history(served / "big.git", args.commits, args.files, args.size)
        daemon = GitDaemon(served)
        url = f"{daemon.url}big.git"
        try:
            started = time.perf_counter()
            git("clone", "-q", url, str(tmp_path / "full"), cwd=tmp_path)
            full_seconds = time.perf_counter() - started
            full_bytes = _git_dir_bytes(tmp_path / "full")

            lock = fake_lock(url, commit)
            cache = tmp_path / "cache"
            started = time.perf_counter()
            cold = prepare(lock, lock_sha256(lock), tmp_path, cache, [], submodules=True)
            cold_seconds = time.perf_counter() - started

            warm = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                record = prepare(lock, lock_sha256(lock), tmp_path, cache, [], submodules=True)
                warm.append(time.perf_counter() - started)
                assert record.reused and not record.fetched
        finally:
            daemon.stop()

    print(f"repository: {args.commits} commits, {args.files} files of {args.size} bytes, served by git daemon")
    print(f"{'':28} {'bytes':>14} {'seconds':>8}")
    print(f"{'git clone (baseline)':28} {full_bytes:>14,} {full_seconds:8.2f}")
    print(f"{'prepare, cold':28} {cold.fetched_bytes:>14,} {cold_seconds:8.2f}")
    print(f"cold bytes ratio prepare/clone: {cold.fetched_bytes / full_bytes:.3f}  (goal: <= 0.10)")
    print(f"cold time ratio prepare/clone:  {cold_seconds / full_seconds:.2f}")
    print(f"prepare, warm: median {statistics.median(warm):.3f}s of {args.repeat}  (goal: <= 1 s)")


if __name__ == "__main__":
    main()
