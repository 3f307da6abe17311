"""The source cache is shared safely (issue 20): concurrent prepares of one commit used to fail (`remote origin
already exists`, then "delete the damaged cache entry by hand", which was wrong advice); a full disk under the cache
was exit 3 "git fetch failed". Now a per-entry lock makes the prepares wait for each other, and a full disk anywhere
under the cache is exit 2 with the README's hint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.measured import measured
from tests.support.nemo_repo import use_remote


def test_four_concurrent_prepares_of_one_commit_all_succeed(project, remote):
    root, cli = use_remote(project, remote)
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "buildkit.cli", "prepare", "--json"],
            cwd=root,
            env=cli.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = [(child.wait(timeout=300), *child.communicate()) for child in children]
    for code, _, stderr in results:
        assert code == 0, stderr
        assert "by hand" not in stderr and "cache entry reset" not in stderr
    trees = {line for _, stdout, _ in results for line in stdout.splitlines() if '"tree"' in line}
    assert len(trees) == 1, "all four prepared the same entry"
    assert sum('"reused": false' in stdout for _, stdout, _ in results) >= 1
    # After them, the entry is intact: a fifth prepare reuses it untouched.
    again = cli("prepare", "--json")
    assert again.code == 0 and '"reused": true' in again.stdout, again.output


def test_a_full_disk_under_the_cache_is_exit_2_with_the_hint(project, remote, tiny_mount: Path):
    root, cli = use_remote(project, remote)
    cache = tiny_mount / "cache"
    run = measured(cli, "prepare", "--cache-dir", str(cache), timeout=120)
    run.assert_refused(2, "the disk is full: free some space")
    assert "by hand" not in run.stderr
