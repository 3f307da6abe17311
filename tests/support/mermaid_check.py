"""Mermaid's own parser, for the tests that check the report's charts: mermaid (and jsdom, the DOM it needs in
Node) at the versions and integrity hashes of tests/mermaid/package-lock.json, installed with `npm ci` once per lock
into a cache outside the repository ($BUILDKIT_TEST_ARTIFACTS, else a temporary directory of the test session)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from tests.support.paths import MERMAID

HERE = MERMAID
FILES = ("package.json", "package-lock.json", "check.mjs")


@cache
def _installed() -> Path:
    key = hashlib.sha256(b"".join((HERE / name).read_bytes() for name in FILES)).hexdigest()[:16]
    root = Path(os.environ.get("BUILDKIT_TEST_ARTIFACTS") or tempfile.mkdtemp(prefix="mermaid-")) / "mermaid"
    target = root / key
    if (target / "node_modules" / "mermaid" / "package.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    for name in FILES:
        shutil.copy(HERE / name, work / name)
    # npm ci installs exactly the lock (and checks each package's integrity); no install scripts run.
    subprocess.run(
        ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=work,
        check=True,
        capture_output=True,
        timeout=600,
    )
    try:
        work.rename(target)
    except OSError:  # another test process installed it first
        shutil.rmtree(work, ignore_errors=True)
    return target


def mermaid_parse(text: str) -> dict:
    """{"ok": true, "type": "gantt"} or {"ok": false, "error": ...}: what mermaid.parse says of the chart."""
    return _check(text)


def mermaid_gantt(text: str) -> dict:
    """mermaid_parse's answer, and for a gantt chart what mermaid made of it: its title, excluded days, and each
    task as [section, name, id]."""
    return _check(text, "--tasks")


def _check(text: str, *args: str) -> dict:
    done = subprocess.run(
        ["node", str(_installed() / "check.mjs"), *args], input=text, capture_output=True, text=True, timeout=120
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
