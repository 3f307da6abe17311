"""A lock is a file anyone can edit in a pull request: every field a build uses must agree with the pins and with
the lock's own facts, or resolve --offline, render, report and verify refuse it (exit 1, naming the field)."""

from __future__ import annotations

import json

import pytest

EVIL_DIGEST = "sha256:" + "e" * 64


def _set(path: tuple[str, ...], value):
    def tamper(lock: dict) -> None:
        target = lock
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return tamper


def _wheel_elsewhere(lock: dict) -> None:
    commit, name = lock["vllm"]["commit"], lock["wheel"]["url"].rsplit("/", 1)[-1]
    lock["wheel"]["url"] = f"https://evil.example.com/{commit}/{name}"


def _wheel_and_index_elsewhere(lock: dict) -> None:
    _wheel_elsewhere(lock)
    lock["wheel"]["index"] = "https://evil.example.com"


TAMPERS = {
    "base_image.pinned": (
        _set(("base_image", "pinned"), f"docker.io/attacker/evil@{EVIL_DIGEST}"),
        "base_image.pinned",
    ),
    "base image digest": (_set(("base_image", "index_digest"), EVIL_DIGEST), "base_image.pinned"),
    "build.drop_extras": (_set(("build", "drop_extras"), []), "build: the lock's drop_extras"),
    "build.tag": (_set(("build", "tag"), "evil:1"), "build: the lock's tag"),
    "build.cuda_arch_list": (_set(("build", "cuda_arch_list"), "8.0"), "build: the lock's cuda_arch_list"),
    "wheel.url": (_wheel_elsewhere, "wheel.url https://evil.example.com/"),
    "wheel.index and url": (_wheel_and_index_elsewhere, "wheel.index: lock has https://evil.example.com"),
    "wheel.filename": (_set(("wheel", "filename"), "vllm-0.1-cp38-abi3-manylinux_2_31_x86_64.whl"), "wheel.url"),
    "known_issues": (_set(("known_issues",), []), "known_issues"),
    "vllm_pr dropped": (_set(("vllm_pr",), None), "vllm.pr"),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_a_hand_edited_lock_is_refused_everywhere(project, name):
    root, cli = project
    assert cli("resolve").code == 0
    tamper, message = TAMPERS[name]
    lock = json.loads((root / "pins.lock").read_text())
    tamper(lock)
    (root / "pins.lock").write_text(json.dumps(lock, indent=2))
    for args in (["resolve", "--offline"], ["render"], ["report"], ["verify", "some-image:1"]):
        result = cli(*args)
        assert result.code == 1, (args, result.output)
        assert "does not match the pins" in result.stderr and message in result.stderr, (args, result.stderr)
    # Only resolve's own record (written before the edit): nothing rendered or recorded from the tampered lock.
    assert {p.name for p in (root / "build").glob("*")} == {"resolve.json"}


def test_a_huge_or_deeply_nested_lock_is_bad_input(project):
    root, cli = project
    (root / "pins.lock").write_text("[" * 100_000 + "]" * 100_000)
    result = cli("resolve", "--offline")
    assert result.code == 2 and "not a readable lock: nested too deeply" in result.stderr, result.output
    (root / "pins.lock").write_text('{"x": "' + "a" * (2 << 20) + '"}')
    result = cli("resolve", "--offline")
    assert result.code == 2 and "larger than 1 MiB" in result.stderr and len(result.stderr) < 500, result.output
