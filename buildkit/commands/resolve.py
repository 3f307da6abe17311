"""`buildkit resolve`: pins -> lock (the wheel downloaded and hashed, with its progress shown), `--check` against
upstream (`--deep`: the wheel's bytes too), `--offline` consistency."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from urllib.parse import urlsplit

from rich import box
from rich.console import RenderableType
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from buildkit.errors import CheckFailed
from buildkit.models.lock import (
    Lock,
    content_warning,
    cuda_warning,
)
from buildkit.models.paths import Paths
from buildkit.models.pins import ARCH_OF_PLATFORM
from buildkit.options import ResolveOptions
from buildkit.stages import pipeline
from buildkit.stages.context import Context, Resolved
from buildkit.stages.resolve.download import DownloadEvent
from buildkit.text import ui


def run_resolve(paths: Paths, opts: ResolveOptions) -> None:
    """The resolve stage in the mode the options say, then what it found: the lock's table (or JSON), what was
    written, and where upstream disagrees (`--check`: exit 1)."""
    ctx = Context(paths, opts, on_note=ui.stage_note)
    if opts.mode == "offline":
        pipeline.run_stage("resolve", ctx)
    else:
        with WheelProgress("resolving pins (GitHub, wheel index, registry)") as progress:
            ctx.on_progress = progress
            pipeline.run_stage("resolve", ctx)
    _SHOW[opts.mode](paths, ctx.made.resolve, opts)


def _offline(paths: Paths, resolved: Resolved, opts: ResolveOptions) -> None:
    if resolved.old is None:
        msg = f"pins valid; no lock at {paths.lock} to compare (run `buildkit resolve` with network to write one)"
        if opts.check:
            raise CheckFailed(msg)
        if opts.json_out:
            sys.stdout.write("null\n")
        ui.err.print(f"[green]ok[/]: {ui.safe(msg)}")
        return
    _emit(resolved.old, opts.json_out, title=f"{paths.lock} (offline: consistent with the pins, upstream not asked)")
    ui.err.print("[green]ok[/]: pins valid and the lock is consistent with them (no network used)")
    _warn(resolved.old)


def _checked(paths: Paths, resolved: Resolved, opts: ResolveOptions) -> None:
    old = resolved.old
    assert old is not None
    _emit(old, opts.json_out, title=f"{paths.lock} (checked against upstream)")
    if resolved.disagrees:
        raise CheckFailed(resolved.disagrees, hint="run `buildkit resolve`")
    wheels = "the wheel's bytes too" if len(old.platforms()) == 1 else "every platform's wheel's bytes too"
    agrees = f"upstream agrees ({wheels})" if opts.deep else "upstream agrees"
    ui.err.print(f"[green]ok[/]: {ui.safe(str(paths.lock))} is current and {agrees}")
    _warn(old)


def _written(paths: Paths, resolved: Resolved, opts: ResolveOptions) -> None:
    assert resolved.inputs is not None
    lock = resolved.inputs.lock
    if not resolved.written:
        ui.err.print(f"[green]ok[/]: {ui.safe(str(paths.lock))} is already up to date (left as it was)")
        _emit(lock, opts.json_out, title=str(paths.lock))
    else:
        _emit(lock, opts.json_out, title=str(paths.lock))
        ui.err.print(f"[green]wrote[/] {ui.safe(str(paths.lock))}")
    _warn(lock)


_SHOW = {"offline": _offline, "check": _checked, "write": _written}


def _warn(lock: Lock) -> None:
    for warning in (content_warning(lock), cuda_warning(lock)):
        if warning:
            ui.warn(warning)


class _WheelOnly(ProgressColumn):
    """A column shown for the wheel's row only (the lookups' row is a spinner and its words)."""

    def __init__(self, column: ProgressColumn):
        super().__init__()
        self.column = column

    def render(self, task: Task) -> RenderableType:
        return self.column.render(task) if task.fields.get("wheel") else Text("")


class WheelProgress:
    """Resolve's progress on stderr, one display for the lookups and the wheel download that runs beside them: on a
    terminal a spinner row for the lookups and, once the download starts, a bar with size, rate and time left;
    otherwise a handful of plain lines (every 10% or 10 s)."""

    EVERY_SECONDS = 10.0

    def __init__(self, lookups: str | None, label: str = "wheel", parent: WheelProgress | None = None):
        self.lookups = lookups  # the lookups' row, None for a download alone (--deep)
        self.label = label  # "wheel", or "wheel linux/arm64" for another platform's (build.platforms)
        self.parent = parent  # another platform's download says its lines, and shows its bar, through the first's
        self.others: dict[str, WheelProgress] = {}
        self.held: list[str] | None = [] if lookups else None
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.began = 0.0  # when the first attempt started; 0: none yet
        self.done = 0  # bytes of the file so far
        self.received = 0  # bytes that came over the network in this run (a resumed part not counted)
        self.next_percent = 10
        self.next_time = 0.0
        self.lookups_task: TaskID | None = None
        self.base_said = False
        self.holding = threading.Lock()  # `held`: the download's thread says lines while the lookups' thread ends it

    def __enter__(self) -> WheelProgress:
        if ui.err.is_terminal and self.lookups:
            self.lookups_task = self._display().add_task(self.lookups, total=None)
        return self

    def _display(self) -> Progress:
        if self.parent is not None:
            return self.parent._display()
        if self.bar is None:
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                _WheelOnly(BarColumn()),
                _WheelOnly(DownloadColumn(binary_units=True)),
                _WheelOnly(TransferSpeedColumn()),
                _WheelOnly(TimeRemainingColumn()),
                console=ui.err,
                transient=True,
            )
            self.bar.start()
        return self.bar

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()  # also when the download failed: the error is printed below the bar
            self.bar = None

    def _say(self, line: str) -> None:
        """A line about the download; held back while the lookups may still fail, so that a refusal is one clear
        line (the download started beside them; it stops, and nothing of it is said)."""
        if self.parent is not None:
            self.parent._say(line)
            return
        with self.holding:
            if self.held is not None:
                self.held.append(line)
                return
        ui.err.print(line)

    def __call__(self, event: DownloadEvent) -> None:
        platform, said, filename = event.filename.partition(": ")
        if said and platform in ARCH_OF_PLATFORM and event.kind != "resolved":  # another platform's download
            other = self.others.setdefault(platform, WheelProgress(None, f"wheel {platform}", self))
            other(dataclasses.replace(event, filename=filename))
            return
        if event.kind == "resolved":  # every lookup succeeded: what was held back is said now, in order
            with self.holding:
                held, self.held = self.held or [], None
                for line in held:
                    ui.err.print(line)
        elif event.kind == "cached":
            self._say(f"{self.label}: reused from cache, sha256 {ui.safe(event.sha256)}")
        elif event.kind == "waiting":
            self._say(f"{self.label}: waiting for another buildkit that is downloading it into the same cache")
        elif event.kind == "started":
            self._started(event)
        elif event.kind == "advanced":
            self.received += event.done - self.done
            self.done = event.done
            self._advanced(event)
        elif event.kind == "finished":
            self._finished(event)
        elif event.kind == "base":
            self._base(event)
        elif event.kind in ("gpu", "gpu_read"):
            self._gpu(event)

    def _base(self, event: DownloadEvent) -> None:
        """The base image's layers read for its glibc and libstdc++ (once per base): on the lookups' row on a
        terminal, else one line when it starts."""
        if not self.base_said:  # said at once (not held back): it may take minutes
            self.base_said = True
            ui.err.print(
                f"base image: reading its layers from the top for its glibc and libstdc++ "
                f"({_size(event.total)} at most; once per base, then cached)"
            )
        if self.bar is not None and self.lookups_task is not None:
            shown = (
                f"{self.lookups}; base image {ui.safe(event.filename)} from the top, "
                f"{event.done / 1e9:.2f} of {(event.total or 0) / 1e9:.2f} GB"
            )
            self.bar.update(self.lookups_task, description=shown)

    def _gpu(self, event: DownloadEvent) -> None:
        """The GPU checks on the wheel's bytes (tens of seconds with real wheels): a line when they start, when
        torch's symbols are read and when they are done (held back with the download's lines, for another
        platform, while the lookups may still fail); on a terminal, each shared object read on the lookups' row."""
        said = f"{self.label.replace('wheel', 'GPU checks', 1)}: {ui.safe(event.step)}"
        if event.kind == "gpu":
            self._say(said)
        root = self.parent or self
        if root.bar is not None and root.lookups_task is not None:
            root.bar.update(root.lookups_task, description=f"{root.lookups}; {said}")

    def _started(self, event: DownloadEvent) -> None:
        """An attempt starts: the first one, or one that resumes (or restarts) after a broken transfer."""
        if not self.began:
            self.began = time.monotonic()
            self.next_time = self.began + self.EVERY_SECONDS
            self._say(f"{self.label}: downloading {ui.safe(event.filename)} ({_size(event.total)}) to hash it")
        if event.resumed_at:
            self._say(f"{self.label}: resumed at {event.resumed_at:,} bytes")
        elif self.done:
            self._say(f"{self.label}: starting over")
        self.done = event.done
        if ui.err.is_terminal:
            if self.task is None:
                self.task = self._display().add_task(self.label, total=event.total, wheel=True)
            self._display().update(self.task, completed=event.done)

    def _advanced(self, event: DownloadEvent) -> None:
        if self.task is not None:
            self._display().update(self.task, completed=event.done)
            return
        now = time.monotonic()
        percent = event.done * 100 // event.total if event.total else None
        at_step = percent is not None and percent >= self.next_percent and event.done < (event.total or 0)
        if ui.err.is_terminal or not (at_step or now >= self.next_time):
            return
        self.next_time = now + self.EVERY_SECONDS
        if percent is None:
            shown = f"{event.done / 2**20:.1f} MiB"
        else:
            self.next_percent = percent - percent % 10 + 10
            shown = f"{percent}% ({event.done / 2**20:.1f} of {_size(event.total)})"
        self._say(f"{self.label}: {shown}, {self._rate(now)}")

    def _finished(self, event: DownloadEvent) -> None:
        if self.task is not None:
            self._display().update(self.task, completed=event.done)  # the display stays for the lookups running
        now = time.monotonic()
        took = f"in {now - self.began:.1f}s ({self._rate(now)})"
        if self.received == event.done:
            what = f"downloaded {event.done / 2**20:.1f} MiB {took}"
        else:
            what = f"hashed {event.done / 2**20:.1f} MiB ({self.received / 2**20:.1f} MiB downloaded {took})"
        self._say(f"{self.label}: {what}, sha256 {ui.safe(event.sha256)}")

    def _rate(self, now: float) -> str:
        return f"{self.received / max(now - self.began, 1e-3) / 2**20:.1f} MiB/s"


def _emit(lock: Lock, json_out: bool, title: str) -> None:
    if json_out:
        sys.stdout.write(lock.to_json())
    else:
        ui.out.print(lock_table(lock, title, whole=ui.unbounded(ui.out)))


_CHOSEN = {
    "the source commit": "source",
    "the merge base": "merge base",
    "an ancestor of the merge base": "older",
    "pinned": "pinned",
}


def lock_table(lock: Lock, title: str, whole: bool = False) -> Table:
    """One line per pin that fits an 80-column terminal: short SHAs and hosts; the lock and --json have it all.
    `whole` (a pipe or a file, no COLUMNS): every value whole, however wide the table."""
    table = Table(title=ui.safe(title), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("pin", no_wrap=True, min_width=10)
    table.add_column("resolved to", overflow="ellipsis", no_wrap=True)
    table.add_column("from", overflow="ellipsis", no_wrap=True, max_width=None if whole else 16)
    n, v, pr, w, b = lock.nemo_rl, lock.vllm, lock.vllm_pr, lock.wheel, lock.base_image
    rows = [("nemo_rl", f"{_short_ref(n.ref)} -> {n.commit[:12]} ({n.date[:10]})", _commit_source(n))]
    if pr and pr.merged_at and pr.merge_commit:
        rows.append(("vllm.pr", f"#{pr.number} merged {pr.merged_at[:10]} as {pr.merge_commit[:12]}", "GitHub API"))
    elif pr:
        rows.append(("vllm.pr", f"#{pr.number} open, head {(pr.head_commit or '')[:12]}", "GitHub API"))
    vw = lock.vllm_wheel
    rows += [
        ("vllm", f"{_short_ref(v.ref)} -> {v.commit[:12]} ({v.date[:10]})", _commit_source(v)),
        (
            "wheel from",
            f"{vw.commit[:12]} ({_CHOSEN[vw.chosen_by]}); compiled changes: "
            f"{len(lock.vllm_compare.compiled) or 'none'}",
            lock.vllm_compare.method,
        ),
        ("wheel", f"{w.version} ({w.arch}, {_size(w.size)})", _host(w.index)),
        ("base_image", f"{b.tag or b.repository} @ {b.manifest_digest.removeprefix('sha256:')[:12]}", b.registry),
    ]
    for platform, facts in (lock.other_platforms or {}).items():  # build.platforms: one pair of rows each
        ow, ob = facts.wheel, facts.base_image
        gpus = lock.build.for_platform(platform).cuda_arch_list
        rows += [
            (f"  {platform}", f"wheel {ow.arch}, {_size(ow.size)}; GPUs {gpus}", _host(ow.index)),
            ("", f"base_image @ {ob.manifest_digest.removeprefix('sha256:')[:12]}", ob.registry),
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
