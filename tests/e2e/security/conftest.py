"""Fixtures for the hostile-server suite: a 64 KiB tmpfs for the full-disk cases. The hostile servers on two loopback
hosts (`hostile`, `elsewhere`) are fixtures of tests/support/hostile.py, registered by tests/conftest.py; the
measured CLI run is tests/support/measured.py."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.engine import unavailable


@pytest.fixture
def tiny_mount(tmp_path):
    """A 64 KiB tmpfs (root only: CI runs as root, and fails rather than skips there)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)
