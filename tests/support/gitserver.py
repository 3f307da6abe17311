"""Git repositories made in the test, and `git daemon` serving them over git's own protocol on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git(*args: str, cwd: Path, date: str | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit_all(work: Path, message: str, date: str = "2026-02-05T18:32:11+00:00") -> str:
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", message, cwd=work, date=date)
    return git("rev-parse", "HEAD", cwd=work)


class GitDaemon:
    """Serves every bare repository under `root` at git://127.0.0.1:PORT/<name>."""

    def __init__(self, root: Path):
        self.root = root
        for _ in range(5):  # a port another test process took between free_port and the bind: try another
            self.port = free_port()
            self.process = subprocess.Popen(
                [
                    "git",
                    "daemon",
                    "--reuseaddr",
                    "--listen=127.0.0.1",
                    f"--port={self.port}",
                    "--export-all",
                    f"--base-path={root}",
                    "--informative-errors",
                    str(root),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._listening():
                return
        raise RuntimeError("git daemon did not start")

    def _listening(self) -> bool:
        """This daemon answers on its port (not another's: one that could not bind has exited)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.process.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    time.sleep(0.1)  # one that lost the port exits at once: still running, it is ours
                    return self.process.poll() is None
            time.sleep(0.05)
        self.process.kill()
        self.process.wait()
        return False

    @property
    def url(self) -> str:
        return f"git://127.0.0.1:{self.port}/"

    def publish(self, work: Path, name: str) -> None:
        """Push every branch and tag of a work repository to the served bare repository `name`."""
        bare = self.root / name
        if not bare.exists():
            git("init", "-q", "--bare", "-b", "main", str(bare), cwd=self.root)
        git("push", "-q", "--force", "--tags", str(bare), "refs/heads/*:refs/heads/*", cwd=work)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
