"""What a command that failed must have done: one clear line with its exit code, and the old lock untouched."""

from __future__ import annotations

OLD_LOCK = b'{"this is": "the old lock, which a failed resolve must not touch"}\n'


def assert_failed(result, code: int, *needles: str) -> None:
    assert result.code == code, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    for needle in needles:
        assert needle in result.stderr, result.stderr


def assert_untouched(lock_path) -> None:
    assert lock_path.read_bytes() == OLD_LOCK
    assert [p.name for p in lock_path.parent.iterdir() if p.name.startswith(".pins.lock")] == []
