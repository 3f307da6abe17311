"""`buildkit resolve`: pins -> lock, `--check` against upstream, `--offline` consistency."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlsplit

from rich import box
from rich.table import Table

from buildkit import pipeline, ui
from buildkit.errors import CheckFailed, InputError
from buildkit.lock import Lock, PatchFact, consistency_problems, differences, read_lock
from buildkit.pins import Pins
from buildkit.pipeline import Paths


def run_resolve(paths: Paths, *, json_out: bool, check: bool, offline: bool) -> None:
    pins, patches = pipeline.load_pins_and_patches(paths)
    lock_path = paths.lock
    if offline:
        _offline(paths, pins, patches, json_out=json_out, check=check)
        return

    old = _previous_lock(lock_path, strict=check)
    if check:
        if old is None:
            raise CheckFailed(f"{lock_path}: no lock to check", hint="run `buildkit resolve` to write one")
        problems = consistency_problems(pins, old, patches)
        if problems:
            raise CheckFailed(_bullets(f"{lock_path} is stale:", problems), hint="run `buildkit resolve`")

    with ui.err.status("resolving pins (GitHub, wheel index, registry)...", spinner="dots"):
        fresh = pipeline.resolve(
            paths, pins, patches, on_note=lambda note: ui.err.print(f"[yellow]note[/]: {ui.safe(note)}")
        )

    if check:
        assert old is not None
        diffs = differences(old, fresh)
        _emit(old, json_out, title=f"{lock_path} (checked against upstream)")
        if diffs:
            lines = [f"{field}: lock has {a!r}, upstream now says {b!r}" for field, a, b in diffs]
            raise CheckFailed(
                _bullets("upstream no longer agrees with the lock:", lines), hint="run `buildkit resolve`"
            )
        ui.err.print(f"[green]ok[/]: {ui.safe(str(lock_path))} is current and upstream agrees")
        return

    if old is not None and not differences(old, fresh, every_fact=True):
        ui.err.print(f"[green]ok[/]: {ui.safe(str(lock_path))} is already up to date (left as it was)")
        _emit(old, json_out, title=str(lock_path))
        return
    pipeline.write_lock(paths, fresh)
    _emit(fresh, json_out, title=str(lock_path))
    ui.err.print(f"[green]wrote[/] {ui.safe(str(lock_path))}")


def _previous_lock(lock_path: Path, *, strict: bool) -> Lock | None:
    """The existing lock. `--check` must read it; a plain resolve replaces an unreadable one (after success)."""
    if not lock_path.exists():
        return None
    try:
        return read_lock(lock_path)
    except InputError as error:
        if strict:
            raise
        ui.err.print(f"[yellow]note[/]: {ui.safe(error.message)}; it will be replaced once resolve succeeds")
        return None


def _offline(paths: Paths, pins: Pins, patches: list[PatchFact], *, json_out: bool, check: bool) -> None:
    lock, problems = pipeline.lock_state(paths, pins, patches)
    if lock is None:
        msg = f"pins valid; no lock at {paths.lock} to compare (run `buildkit resolve` with network to write one)"
        if check:
            raise CheckFailed(msg)
        if json_out:
            sys.stdout.write("null\n")
        ui.err.print(f"[green]ok[/]: {ui.safe(msg)}")
        return
    if problems:
        raise CheckFailed(_bullets(f"{paths.lock} does not match the pins:", problems), hint="run `buildkit resolve`")
    _emit(lock, json_out, title=f"{paths.lock} (offline: consistent with the pins, upstream not asked)")
    ui.err.print("[green]ok[/]: pins valid and the lock is consistent with them (no network used)")


def _emit(lock: Lock, json_out: bool, title: str) -> None:
    if json_out:
        sys.stdout.write(lock.to_json())
    else:
        ui.out.print(lock_table(lock, title))


def lock_table(lock: Lock, title: str) -> Table:
    """One line per pin that fits an 80-column terminal: short SHAs and hosts; the lock and --json have it all."""
    table = Table(title=ui.safe(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("pin", no_wrap=True, min_width=10)
    table.add_column("resolved to", overflow="ellipsis", no_wrap=True)
    table.add_column("from", overflow="ellipsis", no_wrap=True, max_width=16)
    n, v, pr, w, b = lock.nemo_rl, lock.vllm, lock.vllm_pr, lock.wheel, lock.base_image
    rows = [("nemo_rl", f"{_short_ref(n.ref)} -> {n.commit[:12]} ({n.date[:10]})", _commit_source(n))]
    if pr:
        rows.append(("vllm.pr", f"#{pr.number} merged {pr.merged_at[:10]} as {pr.merge_commit[:12]}", "GitHub API"))
    rows += [
        ("vllm", f"{_short_ref(v.ref)} -> {v.commit[:12]} ({v.date[:10]})", _commit_source(v)),
        ("wheel", f"{w.version} ({w.arch}, {_size(w.size)})", _host(w.index)),
        ("base_image", f"{b.tag or b.repository} @ {b.manifest_digest.removeprefix('sha256:')[:12]}", b.registry),
    ]
    for row in rows:
        table.add_row(*(ui.safe(cell) for cell in row))
    return table


def _short_ref(ref: str) -> str:
    return ref[:12] if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref) else ref


def _commit_source(fact) -> str:
    return "GitHub API" if fact.source.startswith("GitHub API") else f"git {_host(fact.repo) or 'file'}"


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _size(size: int | None) -> str:
    return "size unknown" if size is None else f"{size / 2**20:.1f} MiB"


def _bullets(head: str, lines: list[str]) -> str:
    return head + "".join(f"\n  - {line}" for line in lines)
