"""Files that cannot be written are bad input with a plain message (exit 2), never exit 70, and a temp file that a
killed run left in the write window is cleaned up by the next write."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def test_a_lock_path_that_is_a_directory(project):
    root, cli = project
    (root / "lockdir").mkdir()
    for args in (["resolve", "--lock", "lockdir"], ["resolve", "--offline", "--lock", "lockdir"]):
        result = cli(*args)
        assert result.code == 2, (args, result.output)
        assert "lockdir" in result.stderr and "Traceback" not in result.output


def test_an_orphaned_temp_file_is_cleaned_up(project):
    root, cli = project
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs, as after a kill in the write window
    orphan = root / f".pins.lock.{dead.pid}.abc123.tmp"
    orphan.write_text("{half a lock")
    live = root / f".pins.lock.{os.getpid()}.def456.tmp"  # a live writer's file is left alone
    live.write_text("{")
    assert cli("resolve").code == 0
    assert not orphan.exists() and live.exists()


def test_a_full_disk(project, tiny_mount: Path):
    root, cli = project
    (tiny_mount / "filler").write_bytes(b"\0" * 60 * 1024)
    subprocess.run(["dd", "if=/dev/zero", f"of={tiny_mount / 'rest'}", "bs=1k", "count=64"], capture_output=True)
    result = cli("resolve", "--lock", str(tiny_mount / "pins.lock"))
    assert result.code == 2, result.output
    assert "disk is full" in result.stderr and "Traceback" not in result.output
    assert not list(tiny_mount.glob(".pins.lock.*.tmp")), "no half-written temp file is left"


def test_a_read_only_directory(project, tiny_mount: Path):
    root, cli = project
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_mount)], check=True)
    result = cli("resolve", "--lock", str(tiny_mount / "pins.lock"))
    assert result.code == 2, result.output
    assert "read-only" in result.stderr and "Traceback" not in result.output
