"""The resolve stage: pins -> a verified lock (`run`, `current`), in the mode its options say (`ResolveOptions.mode`:
`buildkit resolve` writes, `--check` compares, `--offline` reads, `build` resolves only a stale lock, `bump` resolves
its staged pins and writes nothing). How the pins are looked up is resolver.py's (`Resolver`)."""

from __future__ import annotations

from collections.abc import Callable

from buildkit.errors import CheckFailed, InputError
from buildkit.files import write_atomic
from buildkit.models.lock import Lock, PatchFact, WheelFact, consistency_problems, cuda_warning, differences, read_lock
from buildkit.models.paths import Paths
from buildkit.models.pins import Pins
from buildkit.models.records.resolve import ResolveRecord, write_record
from buildkit.options import ResolveOptions
from buildkit.stages.context import (
    Context,
    Inputs,
    OnNote,
    Resolved,
    StageStatus,
    load_pins_and_patches,
    lock_state,
    not_matching,
    platform_inputs,
    warn_content,
)
from buildkit.stages.resolve.download import OnProgress, measure_afresh, of_platform
from buildkit.stages.resolve.ours import check_lock_is_ours, pins_file_of
from buildkit.stages.resolve.resolver import NoWheelFound, Resolver, WheelBytes
from buildkit.world.http import Http

__all__ = ["NoWheelFound", "Resolver", "current", "ensure_lock", "resolve_lock", "run"]


def resolve_lock(
    paths: Paths,
    pins: Pins,
    patches: list[PatchFact],
    on_note: OnNote | None = None,
    *,
    wheel_bytes: WheelBytes = "download",
    on_progress: OnProgress | None = None,
    on_record: Callable[[ResolveRecord], None] | None = None,
) -> Lock:
    """Every pin turned into a verified fact (network); the caller decides whether to write it. `on_note` hears what
    the user should know first (e.g. that a token is withheld from an API named in pins.yaml). The wheel is
    downloaded and hashed once all lookups succeeded (`on_progress` hears about it); `wheel_bytes` "cache": hashed
    only if the cache already has it; "none": not at all."""
    resolver = Resolver(
        pins,
        cache_dir=paths.cache_dir,
        patches=patches,
        wheel_bytes=wheel_bytes,
        on_progress=on_progress,
        pins_file=pins_file_of(paths),
    )
    for note in resolver.notes:
        if on_note:
            on_note(note)
    lock = resolver.resolve()
    for note in resolver.git.notes:
        if on_note:
            on_note(note)
    if on_record and resolver.record:
        on_record(resolver.record)
    return lock


def measure_wheel(paths: Paths, wheel: WheelFact, on_progress: OnProgress | None = None) -> str:
    """The sha256 of the wheel's bytes as upstream serves them now, downloaded afresh: not from the cache, into a
    temporary file that is removed (`resolve --check --deep`)."""
    return measure_afresh(Http(), paths.cache_dir, wheel.url, wheel.filename, wheel.size, wheel.etag, on_progress)


def write_lock(paths: Paths, lock: Lock, record: ResolveRecord | None = None, *, rewrite: bool = True) -> None:
    """The lock (unless `rewrite` is False: it is current as it is), then the resolve record beside it, which says
    when its facts were read (build/resolve.json; the lock holds no times)."""
    if rewrite:
        write_atomic(paths.lock, lock.to_json())
    if record is not None:
        write_record(paths.resolve_record, record)


def ensure_lock(
    paths: Paths, on_note: OnNote | None = None, on_progress: OnProgress | None = None
) -> tuple[Inputs, bool]:
    """A current lock, resolving and writing one when it is missing or stale (a version-1 lock is); (inputs, whether
    it was written). Without on_progress, the wheel download is told through on_note in a few lines."""
    pins, patches = load_pins_and_patches(paths)
    lock, problems = lock_state(paths, pins, patches)
    if lock is not None and not problems:
        warn_content(lock, on_note)
        return Inputs(paths, pins, patches, lock), False
    check_lock_is_ours(paths, lock, pins, on_note)  # before the network: a refusal costs no download
    records: list[ResolveRecord] = []
    told = _told(on_progress, on_note)
    fresh = resolve_lock(paths, pins, patches, on_note, on_progress=told, on_record=records.append)
    write_lock(paths, fresh, records[0] if records else None)
    if on_note and (warning := cuda_warning(fresh)):
        on_note(warning)
    return Inputs(paths, pins, patches, fresh), True


def _told(on_progress: OnProgress | None, on_note: OnNote | None) -> OnProgress | None:
    """Who hears the download: the caller's display, else (with none) a few notes."""
    if on_progress is None and on_note is not None:
        return download_notes(on_note)
    return on_progress


def download_notes(on_note: OnNote) -> OnProgress:
    """The wheel download as notes: where it starts or resumes, and its hash (for callers with no progress view)."""

    held: list[str] | None = []  # until every lookup succeeded: a refusal stays one clear line

    def say(line: str) -> None:
        held.append(line) if held is not None else on_note(line)

    def note(event) -> None:
        nonlocal held
        mib = f"{event.total / 2**20:.1f} MiB" if event.total is not None else "size unknown"
        if event.kind == "resolved":
            lines, held = held or [], None
            for line in lines:
                on_note(line)
        elif event.kind == "started":
            at = f", resuming at {event.resumed_at:,} bytes" if event.resumed_at else ""
            say(f"wheel: downloading {event.filename} ({mib}) to hash it{at}")
        elif event.kind == "cached":
            say(f"wheel: reused from cache, sha256 {event.sha256}")
        elif event.kind == "finished":
            say(f"wheel: downloaded, sha256 {event.sha256}")

    return note


def current(ctx: Context[ResolveOptions]) -> StageStatus:
    """Current when the lock exists and agrees with the pins and the declared patches (a version-1 lock does not)."""
    pins, patches = load_pins_and_patches(ctx.paths)
    lock, problems = lock_state(ctx.paths, pins, patches)
    if lock is None or problems:
        check_lock_is_ours(ctx.paths, lock, pins)  # the dry run stops as the build would
        what = f"{ctx.paths.lock} is stale ({problems[0]})" if lock is not None else problems[0]
        return StageStatus("resolve", False, f"{what}: would resolve the pins and write the lock")
    ctx.inputs = Inputs(ctx.paths, pins, patches, lock)
    if ctx.paths.platform:  # one platform's dry run of a multi-platform lock
        ctx.inputs = platform_inputs(ctx.inputs, ctx.paths.platform)
    return StageStatus("resolve", True, f"{ctx.paths.lock} is current")


def run(ctx: Context[ResolveOptions]) -> None:
    """The lock as the mode says (ResolveOptions.mode), in ctx.made.resolve (`Resolved`); the inputs it leaves
    current, if any, in ctx.inputs. The wheel's download is told to ctx.on_progress."""
    opts, paths = ctx.options, ctx.paths
    if opts.mode == "if-stale":
        inputs, written = ensure_lock(paths, ctx.on_note, ctx.on_progress)
        ctx.made.resolve = Resolved(inputs, written)
    else:
        pins, patches = opts.staged or load_pins_and_patches(paths)
        ctx.made.resolve = _MODES[opts.mode](ctx, pins, patches)
    ctx.inputs = ctx.made.resolve.inputs


def _offline(ctx: Context[ResolveOptions], pins: Pins, patches: list[PatchFact]) -> Resolved:
    """The pins valid, and the lock, if there is one, consistent with them: no network."""
    lock, problems = lock_state(ctx.paths, pins, patches)
    if lock is None:
        return Resolved(None)
    if problems:
        raise not_matching(ctx.paths, problems)
    return Resolved(Inputs(ctx.paths, pins, patches, lock), old=lock)


def _fresh(ctx: Context[ResolveOptions], pins: Pins, patches: list[PatchFact]) -> Resolved:
    """Upstream's answer for the pins, written nowhere (bump writes it with the rest, or not at all)."""
    lock = resolve_lock(ctx.paths, pins, patches, ctx.on_note, on_progress=_told(ctx.on_progress, ctx.on_note))
    return Resolved(Inputs(ctx.paths, pins, patches, lock), fresh=lock)


def _write(ctx: Context[ResolveOptions], pins: Pins, patches: list[PatchFact]) -> Resolved:
    """Upstream's answer, written as the lock unless it says what the lock says (then only the resolve record is
    written, which says the facts were read again). A lock written from other pins is never replaced."""
    paths = ctx.paths
    old = _previous_lock(paths.lock, ctx.on_note)
    check_lock_is_ours(paths, old, pins, on_note=ctx.on_note)  # before the network
    records: list[ResolveRecord] = []
    wheel_bytes: WheelBytes = "download" if ctx.options.download_wheel else "cache"
    fresh = resolve_lock(
        paths,
        pins,
        patches,
        ctx.on_note,
        wheel_bytes=wheel_bytes,
        on_progress=ctx.on_progress,
        on_record=records.append,
    )
    same = old is not None and not differences(old, fresh, every_fact=True)
    write_lock(paths, fresh, records[0] if records else None, rewrite=not same)
    kept = old if same and old is not None else fresh
    return Resolved(Inputs(paths, pins, patches, kept), written=not same, old=old, fresh=fresh)


def _check(ctx: Context[ResolveOptions], pins: Pins, patches: list[PatchFact]) -> Resolved:
    """The lock against upstream's answer now, writing nothing: `--check` stays cheap (HEAD tells the wheel's URL,
    size and ETag); `deep` also downloads each platform's wheel afresh and compares its sha256."""
    paths, deep = ctx.paths, ctx.options.deep
    old = read_lock(paths.lock) if paths.lock.exists() else None  # --check must read it
    _stop_unless_checkable(paths, old, pins, patches, deep)
    assert old is not None
    fresh = resolve_lock(paths, pins, patches, ctx.on_note, wheel_bytes="none", on_progress=ctx.on_progress)
    diffs = differences(old, fresh)
    lines = _pr_moves(old, fresh) + [f"{field}: lock has {a!r}, upstream now says {b!r}" for field, a, b in diffs]
    if not lines and deep:
        lines = _bytes_differ(paths, old, fresh, ctx.on_progress)
    disagrees = _bullets("upstream no longer agrees with the lock:", lines) if lines else None
    return Resolved(Inputs(paths, pins, patches, old), old=old, fresh=fresh, disagrees=disagrees)


_MODES: dict[str, Callable[[Context[ResolveOptions], Pins, list[PatchFact]], Resolved]] = {
    "offline": _offline,
    "fresh": _fresh,
    "write": _write,
    "check": _check,
}


def _previous_lock(lock_path, on_note: OnNote | None) -> Lock | None:
    """The existing lock; an unreadable one is replaced once resolve succeeds."""
    if not lock_path.exists():
        return None
    try:
        return read_lock(lock_path)
    except InputError as error:
        if on_note:
            on_note(f"{error.message}; it will be replaced once resolve succeeds")
        return None


def _stop_unless_checkable(paths: Paths, old: Lock | None, pins: Pins, patches: list[PatchFact], deep: bool) -> None:
    """`--check` needs a lock that is current for the pins (and, with --deep, one that holds the wheel's sha256)."""
    if old is None:
        raise CheckFailed(f"{paths.lock}: no lock to check", hint="run `buildkit resolve` to write one")
    problems = consistency_problems(pins, old, patches)
    if problems:
        raise CheckFailed(_bullets(f"{paths.lock} is stale:", problems), hint="run `buildkit resolve`")
    if deep and old.wheel.sha256 is None:
        raise CheckFailed(
            f"{paths.lock}: wheel.sha256: the lock has none ({old.wheel.not_content_addressed}), so --deep has "
            "nothing to compare the wheel's bytes with",
            hint="run `buildkit resolve` (without --no-wheel-download) to hash the wheel",
        )


def _pr_moves(old: Lock, fresh: Lock) -> list[str]:
    """What happened to a tracked pull request, in words, before the fields that say it."""
    was, now = old.vllm_pr, fresh.vllm_pr
    if was is None or now is None or was.number != now.number:
        return []
    if not was.merged and now.merged:
        return [
            f"PR #{now.number} was merged as {now.merge_commit}: `buildkit resolve` builds its merge commit "
            "(with vllm.ref pinned, `buildkit bump --vllm` moves it)"
        ]
    if not now.merged and was.head_commit != now.head_commit:
        return [
            f"PR #{now.number}'s head moved from {was.head_commit} to {now.head_commit} (new commits, or a "
            "force-push): `buildkit resolve` follows it (with vllm.ref pinned, `buildkit bump --vllm` moves "
            "it)"
        ]
    return []


def _bytes_differ(paths: Paths, old: Lock, fresh: Lock, on_progress: OnProgress | None) -> list[str]:
    """--deep: each platform's wheel downloaded afresh (not from the cache) hashes to the locked sha256. Another
    platform's download is told as resolve tells it (its name after the platform)."""
    problems = []
    for platform in old.platforms():
        locked, now = old.for_platform(platform).wheel, fresh.for_platform(platform).wheel
        primary = platform == old.build.platform
        told = on_progress if primary or on_progress is None else of_platform(on_progress, platform)
        measured = measure_wheel(paths, now, told)
        if measured != locked.sha256:
            where = "" if primary else f"{platform}: "
            problems.append(f"{where}wheel.sha256: lock has {locked.sha256!r}, upstream now says {measured!r}")
    return problems


def _bullets(head: str, lines: list[str]) -> str:
    return head + "".join(f"\n  - {line}" for line in lines)
