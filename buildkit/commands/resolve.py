"""`buildkit resolve`: pins -> lock, `--check` against upstream, `--offline` consistency."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from buildkit import ui
from buildkit.errors import CheckFailed, InputError
from buildkit.lock import Lock, consistency_problems, default_lock_path, differences, read_lock, write_atomic
from buildkit.patches import PatchFact, patch_facts
from buildkit.pins import Pins, load_pins


def run_resolve(pins_path: Path, lock_path: Path | None, *, json_out: bool, check: bool, offline: bool) -> None:
    pins = load_pins(pins_path)
    patches = patch_facts(pins, pins_path.parent)
    lock_path = lock_path or default_lock_path(pins_path)
    if offline:
        _offline(pins, patches, lock_path, json_out=json_out, check=check)
        return

    old = _previous_lock(lock_path, strict=check)
    if check:
        if old is None:
            raise CheckFailed(f"{lock_path}: no lock to check", hint="run `buildkit resolve` to write one")
        problems = consistency_problems(pins, old, patches)
        if problems:
            raise CheckFailed(_bullets(f"{lock_path} is stale:", problems), hint="run `buildkit resolve`")

    from buildkit.resolve import Resolver

    resolver = Resolver(pins, patches=patches)
    for note in resolver.notes:
        ui.err.print(f"[yellow]note[/]: {escape(note)}")
    with ui.err.status("resolving pins (GitHub, wheel index, registry)...", spinner="dots"):
        fresh = resolver.resolve()

    if check:
        assert old is not None
        diffs = differences(old, fresh)
        _emit(old, json_out, title=f"{lock_path} (checked against upstream)")
        if diffs:
            lines = [f"{field}: lock has {a!r}, upstream now says {b!r}" for field, a, b in diffs]
            raise CheckFailed(
                _bullets("upstream no longer agrees with the lock:", lines), hint="run `buildkit resolve`"
            )
        ui.err.print(f"[green]ok[/]: {escape(str(lock_path))} is current and upstream agrees")
        return

    if old is not None and _same_facts(old, fresh):
        ui.err.print(f"[green]ok[/]: {escape(str(lock_path))} is already up to date (left as it was)")
        _emit(old, json_out, title=str(lock_path))
        return
    write_atomic(lock_path, fresh.to_json())
    _emit(fresh, json_out, title=str(lock_path))
    ui.err.print(f"[green]wrote[/] {escape(str(lock_path))}")


def _previous_lock(lock_path: Path, *, strict: bool) -> Lock | None:
    """The existing lock. `--check` must read it; a plain resolve replaces an unreadable one (after success)."""
    if not lock_path.exists():
        return None
    try:
        return read_lock(lock_path)
    except InputError as error:
        if strict:
            raise
        ui.err.print(f"[yellow]note[/]: {escape(error.message)}; it will be replaced once resolve succeeds")
        return None


def _offline(pins: Pins, patches: list[PatchFact], lock_path: Path, *, json_out: bool, check: bool) -> None:
    if not lock_path.exists():
        msg = f"pins valid; no lock at {lock_path} to compare (run `buildkit resolve` with network to write one)"
        if check:
            raise CheckFailed(msg)
        if json_out:
            sys.stdout.write("null\n")
        ui.err.print(f"[green]ok[/]: {escape(msg)}")
        return
    lock = read_lock(lock_path)
    problems = consistency_problems(pins, lock, patches)
    if problems:
        raise CheckFailed(_bullets(f"{lock_path} does not match the pins:", problems), hint="run `buildkit resolve`")
    _emit(lock, json_out, title=f"{lock_path} (offline: consistent with the pins, upstream not asked)")
    ui.err.print("[green]ok[/]: pins valid and the lock is consistent with them (no network used)")


def _emit(lock: Lock, json_out: bool, title: str) -> None:
    if json_out:
        sys.stdout.write(lock.to_json())
    else:
        ui.out.print(lock_table(lock, title))


def lock_table(lock: Lock, title: str) -> Table:
    table = Table(title=escape(title), title_justify="left", show_lines=False)
    for column in ("pin", "resolved", "check", "source"):
        table.add_column(column, overflow="fold")
    n, v, pr, w, b = lock.nemo_rl, lock.vllm, lock.vllm_pr, lock.wheel, lock.base_image
    rows = [
        ("nemo_rl", f"{n.ref} -> {n.commit}\n{n.date} {n.subject}", "commit exists", n.source),
    ]
    if pr:
        rows.append(
            (
                f"vllm.pr #{pr.number}",
                f"{pr.title}\nmerged {pr.merged_at} as {pr.merge_commit}",
                "merged; = vllm commit",
                pr.source,
            )
        )
    rows += [
        ("vllm", f"{v.ref} -> {v.commit}\n{v.date} {v.subject}", "commit exists", v.source),
        (
            f"wheel ({w.arch}, {w.variant})",
            f"{w.url}\n{_size(w.size)}",
            f"{w.verified_by} ok; version {w.version} names g{v.commit[:9]}",
            w.listed_in,
        ),
        (
            "base_image",
            f"{b.ref}\n{b.pinned}",
            f"{b.platform} manifest {b.manifest_digest}",
            b.source,
        ),
    ]
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _size(size: int | None) -> str:
    if size is None:
        return "size unknown"
    return f"{size:,} bytes ({size / 2**20:.1f} MiB)"


def _bullets(head: str, lines: list[str]) -> str:
    return head + "".join(f"\n  - {line}" for line in lines)


def _same_facts(a: Lock, b: Lock) -> bool:
    return _without_times(a.model_dump(mode="json")) == _without_times(b.model_dump(mode="json"))


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k != "resolved_at"}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value
