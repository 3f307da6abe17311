"""One pins file, one lock: the lock holds facts only (lock version 4), so resolving unchanged upstreams writes the
same bytes with or without a previous lock, with another cache (another machine), at another time; when each fact
was read goes into the resolve record beside it (build/resolve.json)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time

from tests.conftest import Cli
from tests.support.fake_upstreams import pins_text
from tests.support.paths import REPO_ROOT
from tests.support.projects import smoke_project


def resolve(cli) -> None:
    result = cli("resolve")
    assert result.code == 0, result.output


def test_deleted_lock_resolved_twice_a_second_apart_is_byte_equal(project, upstreams, tmp_path):
    root, cli = project
    lock = root / "pins.lock"
    resolve(cli)
    first = lock.read_bytes()
    record = json.loads((root / "build" / "resolve.json").read_text())
    lock.unlink()
    time.sleep(1.1)
    resolve(cli)
    (root / "first.lock").write_bytes(first)
    assert subprocess.run(["cmp", str(root / "first.lock"), str(lock)]).returncode == 0
    assert b"resolved_at" not in first and json.loads(first)["lock_version"] == 5
    # The times moved to the record, which changed; it names the (same) lock it describes.
    again = json.loads((root / "build" / "resolve.json").read_text())
    assert again["lock_sha256"] == record["lock_sha256"] == hashlib.sha256(first).hexdigest()
    assert again["read_at"] != record["read_at"] and again["started_at"] > record["started_at"]
    # With the previous lock in place: left as it is.
    resolve(cli)
    assert lock.read_bytes() == first
    # Another machine: another project directory and an empty cache (the wheel downloaded afresh, git asked anew).
    other = tmp_path / "other"
    other.mkdir()
    (other / "pins.yaml").write_text(pins_text(upstreams.base_image))
    shutil.copytree(REPO_ROOT / "patches", other / "patches")
    resolve(Cli(other, {**cli.env, "BUILDKIT_CACHE_DIR": str(tmp_path / "another-cache")}))
    assert (other / "pins.lock").read_bytes() == first


def test_a_version_3_lock_is_migrated_stale_keeps_its_bytes_and_is_rewritten(project, upstreams, monkeypatch):
    """A lock written by version 3 holds `resolved_at` at the top and in every fact: read, its times dropped in
    memory, reported stale, written back byte for byte (its hash labels its builds), and rewritten by resolve."""
    root, cli = project
    resolve(cli)
    v4 = json.loads((root / "pins.lock").read_text())
    at = "2026-11-23T12:52:41Z"
    v3 = {"lock_version": 3, "buildkit_version": v4["buildkit_version"], "pins_sha256": v4["pins_sha256"]}
    v3["resolved_at"] = "2026-11-23T12:52:42Z"
    for key, value in v4.items():
        v5_only = ("lock_version", "vllm_wheel", "vllm_compare", "vllm_files", "vllm_python", "torch", "pins_file")
        if key in v3 or key in v5_only:
            continue
        if key in ("nemo_rl", "vllm", "vllm_pr"):
            value = {**value, "resolved_at": at}
        elif key in ("wheel", "base_image"):
            fields = list(value.items())
            cut = [k for k, _ in fields].index("cuda" if key == "wheel" else "cuda_version")
            value = dict(fields[:cut] + [("resolved_at", at)] + fields[cut:])
            if key == "wheel":
                value["verified_by"] = "HEAD"  # what version 3 wrote
        v3[key] = value
    text = json.dumps(v3, indent=2) + "\n"
    (root / "pins.lock").write_text(text)

    from buildkit.models.lock import V3_STALE, consistency_problems, lock_sha256, read_lock
    from buildkit.models.pins import load_pins

    migrated = read_lock(root / "pins.lock")
    assert migrated.lock_version == 3 and migrated.to_json() == text
    assert lock_sha256(migrated) == hashlib.sha256(text.encode()).hexdigest()
    assert migrated.times_as_read() == {
        "lock": "2026-11-23T12:52:42Z",
        "nemo_rl": at,
        "vllm": at,
        "vllm_pr": at,
        "wheel": at,
        "base_image": at,
    }
    for name, value in upstreams.env().items():
        monkeypatch.setenv(name, value)
    assert consistency_problems(load_pins(root / "pins.yaml"), migrated, list(migrated.patches)) == [V3_STALE]
    check = cli("resolve", "--check")
    assert check.code == 1 and "lock version 3" in check.stderr, check.output
    resolve(cli)
    assert json.loads((root / "pins.lock").read_text()) == v4


def test_a_lock_with_a_time_is_invalid(project):
    """A version-4 lock holds no times: one that does was not written by resolve (exit 2, one line)."""
    root, cli = project
    resolve(cli)
    lock = json.loads((root / "pins.lock").read_text())
    lock["vllm"]["resolved_at"] = "2026-11-23T12:52:41Z"
    (root / "pins.lock").write_text(json.dumps(lock))
    result = cli("resolve", "--check")
    assert result.code == 2 and "vllm.resolved_at: Extra inputs are not permitted" in result.stderr, result.output
    assert "Traceback" not in result.output


def test_the_report_shows_the_record_times(project):
    root, cli = project
    resolve(cli)
    record = json.loads((root / "build" / "resolve.json").read_text())
    report = cli("report", "--format", "json")
    assert report.code == 0, report.output
    data = json.loads(report.stdout)
    assert data["overview"]["resolved_at"] == record["finished_at"]
    assert data["commits"]["vllm"]["resolved_at"] == record["read_at"]["vllm"]
    assert data["wheel"]["resolved_at"] == record["read_at"]["wheel"]
    # A record about another lock says nothing about this one.
    (root / "build" / "resolve.json").write_text(json.dumps({**record, "lock_sha256": "0" * 64}))
    data = json.loads(cli("report", "--format", "json").stdout)
    assert data["overview"]["resolved_at"] is None


def test_two_locks_resolved_a_second_apart_build_one_image(project, remote, engine):
    """The issue's measurement on the engine: delete the lock, resolve, smoke-build; again a second later. The
    locks are the same bytes, so the images (whose labels carry the lock's hash) are one digest."""

    root, cli = smoke_project(project, remote)
    locks, images = [], []
    for n in range(2):
        (root / "pins.lock").unlink()
        if n:
            time.sleep(1.1)  # another second on the clock: nothing in the lock may depend on it
        resolve(cli)
        locks.append((root / "pins.lock").read_bytes())
        result = cli("build", "--smoke", "--builder", engine, "--progress", "plain", timeout=600)
        assert result.code == 0, result.output[-3000:]
        record = json.loads((root / "build" / "smoke-record.json").read_text())
        images.append((record["image"]["digest"], record["image"]["config_digest"]))
    (root / "first.lock").write_bytes(locks[0])
    assert subprocess.run(["cmp", str(root / "first.lock"), str(root / "pins.lock")]).returncode == 0
    assert images[0] == images[1] and images[0][0].startswith("sha256:")


def test_a_version_4_lock_is_migrated_stale_the_wheels_commit_its_source_and_is_rewritten(project):
    """Version 4 held one vLLM pin: the source was the commit whose wheel was used. Read, it says exactly that
    (chosen as "the source commit", compared with itself), keeps its bytes and hash, is stale, and resolve rewrites
    it as version 5."""
    root, cli = project
    resolve(cli)
    v5 = json.loads((root / "pins.lock").read_text())
    v5_only = ("vllm_wheel", "vllm_compare", "vllm_files", "vllm_python", "torch", "pins_file")
    v4 = {k: v for k, v in v5.items() if k not in v5_only} | {"lock_version": 4}
    v4["vllm_pr"] = {k: v for k, v in v5["vllm_pr"].items() if not k.startswith("head_")}
    text = json.dumps(v4, indent=2) + "\n"
    (root / "pins.lock").write_text(text)

    from buildkit.models.lock import V4_STALE, consistency_problems, lock_sha256, read_lock
    from buildkit.models.pins import load_pins

    migrated = read_lock(root / "pins.lock")
    assert migrated.lock_version == 4 and migrated.to_json() == text
    assert lock_sha256(migrated) == hashlib.sha256(text.encode()).hexdigest()
    assert migrated.vllm_wheel.commit == migrated.vllm.commit and migrated.vllm_wheel.chosen_by == "the source commit"
    assert migrated.vllm_compare.method == "same commit" and migrated.vllm_compare.compiled == []
    assert consistency_problems(load_pins(root / "pins.yaml"), migrated, migrated.patches)[0] == V4_STALE
    resolve(cli)
    assert json.loads((root / "pins.lock").read_text())["lock_version"] == 5
