"""Download the wheel once, hash it in the same pass, and keep it: the lock then names the wheel's bytes.

The index publishes no hash of the bytes (a PEP 503 `#sha256=` fragment, when there is one, is checked against
the hash measured here), so resolve downloads the wheel and hashes it as it is written, never reading it twice.

The cache: `<cache>/wheels/<sha256 of url and ETag>/` holds the finished file under its own name and
`record.json` beside it (url, etag, size, sha256), so a later resolve, or another project with the same cache
dir, does not download it again. An interrupted download leaves `<name>.part`, which the next attempt continues
with `Range: bytes=N-` and `If-Range: <etag>`: a 206 from byte N continues it (the part is hashed first), a 200
starts over. The finished size must be the one announced (by the GET's own answer, or HEAD's). resolve sends one GET
(fetch_by_get): it is the wheel's existence check, and it asks for what the cache lacks (`If-None-Match` for a
finished entry, `Range` for a part), by the ETag `wheels/<sha256 of url>.etag` remembers for the URL.

The cache is untrusted, like the source cache: another user, a CI cache restored from a pull request. Its record
is read strictly and bounded; an entry that does not hold together is deleted and downloaded again. Its sha256
(and a planted `.part`, which the download continues) is still taken on trust, and that is safe: the hash
only goes into the lock, and the build fetches the wheel with `ADD --checksum=sha256:...`, so a wrong hash can
only make the build fail, never let other bytes in. `buildkit resolve --check --deep` downloads afresh and
compares.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from buildkit.budget import Budget
from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable, excerpt
from buildkit.files import utc_now, write_atomic, write_hint
from buildkit.gpu.check import Step
from buildkit.models.lock import Sha256Hex
from buildkit.stages.resolve.wheels import CONTENT_RANGE_RE, MISSING_HINT, FoundWheel, header_text
from buildkit.world.http import OFFLINE_HINT, WHEEL, Http, Stream, content_length, redact

# 1 MiB: large enough that hashing and writing cost little per call, small enough for smooth progress.
CHUNK = 1 << 20
MAX_RECORD_BYTES = 4096
MAX_ETAG_BYTES = 256
ETAG_RE = re.compile(r"[\x20-\x7e]{1,256}")  # as wheels.header_text lets it into the lock
RESUME_HINT = "rerun `buildkit resolve`: the download continues where it stopped"
# torch's wheel is named by NeMo-RL's uv.lock (its URL on the pytorch-cu129 index), not found in vLLM's index.
TORCH_MISSING_HINT = (
    "NeMo-RL's uv.lock at the locked commit names this torch wheel; if $BUILDKIT_TORCH_INDEX names a mirror, check "
    "that it holds the file (the path below the index is kept); otherwise the torch index no longer serves it: "
    "pin a NeMo-RL commit whose uv.lock names one it does"
)


@dataclass(frozen=True)
class DownloadEvent:
    """What the download is doing, for the command to show. `done` counts the bytes of the file so far (a resumed
    part included); `total` is HEAD's size (None: unknown)."""

    # "resolved": not the download's: every other lookup of resolve succeeded (a display may say what it held back);
    # "base": not the download's either: the base image's layers being read for its glibc (`filename`: which layer,
    # done/total: bytes of all its layers);
    # "gpu", "gpu_read": nor these: the GPU checks reading the wheel (gpu_progress): "gpu" a step worth a line (they
    # start, torch's symbols are read, they are done), "gpu_read" one more shared object read (for a display's row);
    # `step` says it, done counts the shared objects read so far
    kind: Literal["cached", "waiting", "started", "advanced", "finished", "resolved", "base", "gpu", "gpu_read"]
    filename: str
    done: int
    total: int | None
    resumed_at: int = 0  # "started": the bytes already there, continued with a Range request
    sha256: str | None = None  # "cached", "finished"
    step: str = ""  # "gpu", "gpu_read": what the GPU checks do now, in words


OnProgress = Callable[[DownloadEvent], None]


def of_platform(on_progress: OnProgress, platform: str) -> OnProgress:
    """Another platform's events (build.platforms) to the same display: its name before the file's, "linux/arm64:
    <file>", which a display reads as that platform's row."""
    return lambda event: on_progress(replace(event, filename=f"{platform}: {event.filename}"))


def gpu_progress(on_progress: OnProgress | None, filename: str) -> Callable[[Step], None] | None:
    """The GPU checks' steps (buildkit.gpu.check.wheel_check's on_step) as events of the display that shows the
    download, for the wheel `filename` (None: nobody listens)."""
    if on_progress is None:
        return None
    said = on_progress

    def on_step(step: Step) -> None:
        said(DownloadEvent("gpu" if step.line else "gpu_read", filename, step.libraries, None, step=step.text))

    return on_step


class _Record(BaseModel):
    """record.json beside a finished wheel in the cache."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    url: str
    etag: str | None
    size: int
    sha256: Sha256Hex
    last_modified: str | None = None  # what the 200 said: a 304 may not repeat it, and the lock holds it


@dataclass(frozen=True)
class Hashed:
    sha256: str
    size: int
    path: Path  # the finished file in the cache
    reused: bool  # taken from the cache, nothing downloaded
    at: str = field(default_factory=utc_now)  # when (for the resolve record)
    found: FoundWheel | None = None  # fetch_by_get: the wheel as its GET described it


class Cancelled(Exception):
    """The caller stopped the download (resolve failed elsewhere); what arrived stays in the part."""


def entry_dir(cache_dir: Path, url: str, etag: str | None) -> Path:
    """Where a wheel lives in the cache: a new ETag (the bytes changed upstream) is a new entry."""
    key = hashlib.sha256(f"{url}\n{etag or ''}".encode()).hexdigest()
    return cache_dir / "wheels" / key


def cached(cache_dir: Path, wheel: FoundWheel, on_progress: OnProgress | None = None) -> Hashed | None:
    """The wheel's hash from the cache when an earlier resolve finished it; None otherwise (nothing downloaded)."""
    entry = entry_dir(cache_dir, wheel.url, wheel.etag)
    if wheel.etag is None or not _is_dir(entry):
        return None
    with _locked(entry, wheel.filename, on_progress):
        return _reuse(entry, wheel, on_progress)


def fetch(
    http: Http,
    cache_dir: Path,
    wheel: FoundWheel,
    on_progress: OnProgress | None = None,
    cancel: threading.Event | None = None,
    opened: Stream | None = None,
    budget: Budget | None = None,
) -> Hashed:
    """The wheel's sha256: from the cache, or downloaded (resuming a part) and hashed in one pass, then cached.
    `opened`: a GET of the whole file already answered (fetch_by_get), whose body is the download. `budget`: a
    total deadline for the download, all its attempts together (its `tick` between chunks)."""
    entry = entry_dir(cache_dir, wheel.url, wheel.etag)
    _make_dir(entry)
    with _locked(entry, wheel.filename, on_progress):
        if wheel.etag is None:
            _clear(entry)  # without an ETag a changed file at the same URL cannot be told: no reuse, no resume
        elif found := _reuse(entry, wheel, on_progress):
            return found
        part = entry / f"{wheel.filename}.part"
        _remember_etag(cache_dir, wheel.url, wheel.etag)  # the next run asks for the rest of the part, or a 304
        try:
            missing = TORCH_MISSING_HINT if wheel.listed_in == "uv.lock" else MISSING_HINT
            sha256, size = download(
                http,
                wheel.url,
                wheel.filename,
                wheel.size,
                wheel.etag,
                part,
                on_progress,
                cancel,
                opened,
                budget,
                missing,
            )
            if wheel.index_sha256 is not None and sha256 != wheel.index_sha256:
                said = "NeMo-RL's uv.lock" if wheel.listed_in == "uv.lock" else "the wheel index"  # torch's, or vLLM's
                raise UpstreamMismatch(
                    f"{wheel.filename}: {said} says sha256 {wheel.index_sha256}, the downloaded bytes hash to {sha256}",
                    hint="the index or the file changed while being read; rerun `buildkit resolve`",
                )
        except (UpstreamMismatch, UpstreamMalformed):
            _remove(part)  # these bytes are known bad: nothing later may continue or trust them
            raise
        final = entry / wheel.filename
        try:
            os.replace(part, final)
            _fsync_dir(entry)
        except OSError as exc:
            raise _cache_error(entry, exc) from None
        record = _Record(url=wheel.url, etag=wheel.etag, size=size, sha256=sha256, last_modified=wheel.last_modified)
        write_atomic(entry / "record.json", record.model_dump_json(indent=2) + "\n")
        return Hashed(sha256, size, final, reused=False)


def discard(cache_dir: Path, wheel: FoundWheel) -> None:
    """Empty the wheel's entry (its lock file stays): for a file whose use is over once read (torch's wheel, whose
    symbols are cached, and which without an ETag is never reused)."""
    entry = entry_dir(cache_dir, wheel.url, wheel.etag)
    if _is_dir(entry):
        with _locked(entry, wheel.filename, None):
            _clear(entry)


def fetch_by_get(
    http: Http,
    cache_dir: Path,
    wheel: FoundWheel,
    on_progress: OnProgress | None = None,
    cancel: threading.Event | None = None,
) -> Hashed:
    """fetch, with the downloading GET as the wheel's existence check (no HEAD first): its answer gives the size,
    ETag and Last-Modified HEAD would (Hashed.found, verified_by "GET"). The cache remembers the ETag it last saw for
    the URL, so that one GET asks for what is missing: `If-None-Match` for a finished entry (304: reused, nothing
    sent), `Range` + `If-Range` to continue a part (206), nothing for a wheel not seen before (200). A 200 whose
    ETag names a finished entry is reused too, its body left unread."""
    failed = 0
    while True:
        known, headers = _last_etag(cache_dir, wheel.url), None
        if known is not None:
            entry = entry_dir(cache_dir, wheel.url, known)
            have = _part_size(entry / f"{wheel.filename}.part") if _is_dir(entry) else 0
            if _exists(entry / "record.json"):
                headers = {"If-None-Match": known}
            elif have:
                headers = {"Range": f"bytes={have}-", "If-Range": known}
        described = False
        try:
            with http.stream(wheel.url, limit=WHEEL, headers=headers) as answer:
                if answer.status == 304 and known is not None:
                    reused = _not_modified(cache_dir, answer, wheel, known, on_progress)
                    if reused is not None:
                        return reused
                    _forget_etag(cache_dir, wheel.url)  # the entry did not hold together: ask for the whole file
                    continue
                found = _described(answer, wheel)
                if answer.status == 206 and found.etag is None and headers and "If-Range" in headers:
                    found = replace(found, etag=known)  # a 206 to If-Range is that ETag's file (RFC 9110 13.1.5)
                described = True  # from here on the download retries (and resumes) by itself
                if found.size is not None and found.size > http.max_bytes[WHEEL]:
                    raise http.too_large("GET", wheel.url, WHEEL)  # before a byte is read
                hashed = fetch(http, cache_dir, found, on_progress, cancel, opened=answer)
                return replace(hashed, found=found)
        except UpstreamUnreachable:
            failed += 1
            if described or failed >= http.attempts:
                raise
        time.sleep(http.backoff * 2 ** (failed - 1))


def _not_modified(
    cache_dir: Path, answer: Stream, wheel: FoundWheel, etag: str, on_progress: OnProgress | None
) -> Hashed | None:
    """A 304 to `If-None-Match: etag`: the finished entry, described as the 200 that filled it did (its record)."""
    record = _read_record(entry_dir(cache_dir, wheel.url, etag) / "record.json")
    if record is None:
        return None
    last_modified = header_text("GET", wheel.url, answer.headers, "Last-Modified") or record.last_modified
    found = replace(wheel, size=record.size, etag=etag, last_modified=last_modified, verified_by="GET")
    hashed = cached(cache_dir, found, on_progress)
    return replace(hashed, found=found) if hashed is not None else None


def _described(answer: Stream, wheel: FoundWheel) -> FoundWheel:
    """The wheel as the answer to its GET describes it (a 200: the whole file; a 206: the rest of a part, its
    size in Content-Range); an answer that is no wheel is an error."""
    url = wheel.url
    if answer.status == 404:
        raise UpstreamMismatch(f"the index lists the wheel, but it is missing: {url} answered 404", MISSING_HINT)
    if answer.status >= 500:
        raise UpstreamUnreachable(f"GET {redact(url)}: HTTP {answer.status}")
    if answer.status == 206:
        m = CONTENT_RANGE_RE.fullmatch(answer.headers.get("Content-Range", ""))
        if not m:
            value = excerpt(answer.headers.get("Content-Range"), 80)
            raise UpstreamMalformed(f"GET {redact(url)}: malformed Content-Range header {value} in the answer")
        size = int(m["size"]) if m["size"] != "*" else None
    elif answer.status == 200:
        try:
            size = content_length(answer.headers.get("Content-Length"))
        except ValueError:
            value = excerpt(answer.headers.get("Content-Length"), 80)
            raise UpstreamMalformed(
                f"GET {redact(url)}: malformed Content-Length header {value} in the answer"
            ) from None
    else:
        raise UpstreamUnreachable(f"GET {redact(url)} answered {answer.status}")
    return replace(
        wheel,
        size=size,
        etag=header_text("GET", url, answer.headers, "ETag"),
        last_modified=header_text("GET", url, answer.headers, "Last-Modified"),
        verified_by="GET",
    )


def _etag_path(cache_dir: Path, url: str) -> Path:
    return cache_dir / "wheels" / f"{hashlib.sha256(url.encode()).hexdigest()}.etag"


def _last_etag(cache_dir: Path, url: str) -> str | None:
    """The ETag the cache last saw for the URL; None when there is none or it is not one (the cache is untrusted:
    a bad one only costs a download)."""
    try:
        with open(os.open(_etag_path(cache_dir, url), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
            raw = handle.read(MAX_ETAG_BYTES + 1)
        text = raw.decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    return text if ETAG_RE.fullmatch(text) else None


def _remember_etag(cache_dir: Path, url: str, etag: str | None) -> None:
    if etag is not None and _last_etag(cache_dir, url) != etag:
        write_atomic(_etag_path(cache_dir, url), etag)


def _forget_etag(cache_dir: Path, url: str) -> None:
    _remove(_etag_path(cache_dir, url))


def measure_afresh(
    http: Http,
    cache_dir: Path,
    url: str,
    filename: str,
    size: int | None,
    etag: str | None,
    on_progress: OnProgress | None = None,
) -> str:
    """The sha256 of the bytes upstream serves now, downloaded afresh (never from the cache) into a temporary
    file that is removed (`resolve --check --deep`)."""
    _make_dir(cache_dir / "wheels")
    try:
        scratch = Path(tempfile.mkdtemp(prefix=".deep-", dir=cache_dir / "wheels"))
    except OSError as exc:
        raise _cache_error(cache_dir / "wheels", exc) from None
    try:
        return download(http, url, filename, size, etag, scratch / f"{filename}.part", on_progress)[0]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def download(
    http: Http,
    url: str,
    filename: str,
    size: int | None,
    etag: str | None,
    part: Path,
    on_progress: OnProgress | None = None,
    cancel: threading.Event | None = None,
    opened: Stream | None = None,
    budget: Budget | None = None,
    missing: str = MISSING_HINT,
) -> tuple[str, int]:
    """Download url into `part` (continuing what it holds), hashing as the bytes are written; (sha256, size).
    A broken transfer is resumed up to the Http's attempts; after the last, the part is kept for the next run.
    A size other than HEAD's is UpstreamMismatch; a part known to be bad is removed."""
    if size is not None and size > http.max_bytes[WHEEL]:
        raise http.too_large("GET", url, WHEEL)  # before a byte is read, or a part continued
    problem: UpstreamUnreachable | None = None
    for attempt in range(1, http.attempts + 1):
        if attempt > 1:
            time.sleep(http.backoff * 2 ** (attempt - 2))
        if cancel is not None and cancel.is_set():
            raise Cancelled()
        if budget is not None:
            budget.tick()  # the deadline holds across attempts: a link that keeps breaking does not reset it
        first, opened = opened, None  # an answer already open serves the first attempt only
        try:
            return _attempt(http, url, filename, size, etag, part, on_progress, cancel, first, budget, missing)
        except UpstreamMalformed:
            raise
        except UpstreamUnreachable as exc:
            problem = exc  # the bytes so far stay in the part: the next attempt continues them
    assert problem is not None
    have = _part_size(part)
    own = problem.hint if problem.hint != OFFLINE_HINT else None  # e.g. raise the stall timeout
    raise UpstreamUnreachable(
        f"{problem.message}; the download of {filename} stopped at {have:,}"
        + (f" of {size:,} bytes" if size is not None else " bytes")
        + f" ({http.attempts} attempts)",
        hint="; ".join(h for h in (RESUME_HINT if have else None, own) if h) or OFFLINE_HINT,
    )


def _attempt(
    http: Http,
    url: str,
    filename: str,
    size: int | None,
    etag: str | None,
    part: Path,
    on_progress: OnProgress | None,
    cancel: threading.Event | None,
    opened: Stream | None,
    budget: Budget | None = None,
    missing: str = MISSING_HINT,
) -> tuple[str, int]:
    have = _part_size(part)
    if have and (etag is None or (size is not None and have >= size)):
        _remove(part)  # nothing to continue: without an ETag If-Range cannot guard it; or it is already too long
        have = 0
    if opened is not None:  # the answer to fetch_by_get's GET: the whole file (200) or the part's rest (206)
        return _take(opened, url, filename, size, part, have, on_progress, cancel, budget, missing)
    headers = {"Range": f"bytes={have}-", "If-Range": etag} if have and etag else None
    with http.stream(url, limit=WHEEL, headers=headers) as answer:
        return _take(answer, url, filename, size, part, have, on_progress, cancel, budget, missing)


def _take(
    answer: Stream,
    url: str,
    filename: str,
    size: int | None,
    part: Path,
    have: int,
    on_progress: OnProgress | None,
    cancel: threading.Event | None,
    budget: Budget | None = None,
    missing: str = MISSING_HINT,
) -> tuple[str, int]:
    """The answer's body into the part (after the `have` bytes it holds, for a 206), hashed on the way."""
    if answer.status == 404 and missing == TORCH_MISSING_HINT:
        raise UpstreamMismatch(f"torch's wheel {redact(url)}, which NeMo-RL's uv.lock names, answered 404", missing)
    if answer.status == 404:
        raise UpstreamMismatch(f"the wheel {redact(url)} answered 404 to GET after HEAD found it", missing)
    if answer.status == 416 and have:
        _remove(part)  # the part does not fit the file: start over on the next attempt
        raise UpstreamUnreachable(f"GET {redact(url)}: the server refused to continue at byte {have:,}")
    if answer.status >= 500:
        raise UpstreamUnreachable(f"GET {redact(url)}: HTTP {answer.status}")
    if answer.status == 206 and have:
        _check_continues(answer, url, have, size)
        digest = _hash_part(part, have)
    elif answer.status == 200:
        _check_length(answer, url, size)
        have, digest = 0, hashlib.sha256()  # a 200 is the whole file (the ETag changed, or no ranges)
    else:
        raise UpstreamMalformed(f"GET {redact(url)}: unexpected HTTP {answer.status} for the wheel")
    _emit(on_progress, DownloadEvent("started", filename, have, size, resumed_at=have))
    done = _receive(answer, part, have, digest, url, filename, size, on_progress, cancel, budget)
    if size is not None and done != size:
        raise UpstreamMismatch(f"GET {redact(url)}: the wheel is {done:,} bytes, {size:,} were announced")
    sha256 = digest.hexdigest()
    _emit(on_progress, DownloadEvent("finished", filename, done, size, sha256=sha256))
    return sha256, done


def _receive(
    answer: Stream,
    part: Path,
    have: int,
    digest,
    url: str,
    filename: str,
    size: int | None,
    on_progress: OnProgress | None,
    cancel: threading.Event | None = None,
    budget: Budget | None = None,
) -> int:
    """The body appended to the part (truncated to `have` first) and fed to the hash in the same pass; fsync'd."""
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _cache_error(part.parent, exc) from None
    done = have
    with open(fd, "wb", buffering=0) as out:
        try:
            out.truncate(have)
            out.seek(have)
            sink = _Sink(digest, out, have)
            try:
                for chunk in answer.chunks(CHUNK, held=have):
                    done += len(chunk)
                    if size is not None and done > size:
                        raise UpstreamMismatch(
                            f"GET {redact(url)}: the wheel is more than the {size:,} bytes announced"
                        )
                    sink.put(chunk)
                    if cancel is not None and cancel.is_set():
                        raise Cancelled()  # what arrived so far is written: the next run continues it
                    if budget is not None:
                        budget.tick()  # (what arrived stays in the part, as for a broken transfer)
                    _emit(on_progress, DownloadEvent("advanced", filename, done, size))
            finally:
                sink.close()  # what arrived is in the part, also when the transfer broke: the next one continues it
            os.fsync(out.fileno())
        except OSError as exc:
            raise _cache_error(part.parent, exc) from None
    return done


class _Sink:
    """Hashes and writes the chunks the download receives, each in a thread of its own: hashlib (on chunks this
    big) and file writes let go of the interpreter lock, so hashing, writing and receiving overlap instead of
    taking turns (bench/wheel_hash.py). Both see every chunk in order; a few MiB at most wait in the queues."""

    WRITEBACK_EVERY = 32 << 20

    def __init__(self, digest, out, offset: int) -> None:
        self._out, self._written, self._flushed = out, offset, offset
        self._error: BaseException | None = None
        self._queues: list[queue.Queue] = []
        self._threads: list[threading.Thread] = []
        for consume in (digest.update, self._write):
            inbox: queue.Queue = queue.Queue(maxsize=8)
            thread = threading.Thread(target=self._run, args=(inbox, consume), name="wheel-sink", daemon=True)
            thread.start()
            self._queues.append(inbox)
            self._threads.append(thread)

    def put(self, chunk: bytes) -> None:
        if self._error is not None:
            raise self._error
        for inbox in self._queues:
            inbox.put(chunk)

    def close(self) -> None:
        """Waits for the chunks put so far; raises what failed (a full disk)."""
        for inbox in self._queues:
            inbox.put(None)
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise self._error

    def _run(self, inbox: queue.Queue, consume) -> None:
        while (chunk := inbox.get()) is not None:
            if self._error is None:
                try:
                    consume(chunk)
                except BaseException as exc:  # noqa: BLE001 -- handed to the receiving thread
                    self._error = exc

    def _write(self, chunk: bytes) -> None:
        self._out.write(chunk)
        self._written += len(chunk)
        if self._written - self._flushed >= self.WRITEBACK_EVERY and hasattr(os, "posix_fadvise"):
            # Linux starts writing back what DONTNEED names, so the fsync at the end waits for the last few MiB
            # only (256 MiB here: 75 ms without, under 10 ms with). The cache keeps the file, not its pages.
            os.posix_fadvise(self._out.fileno(), self._flushed, self._written - self._flushed, os.POSIX_FADV_DONTNEED)
            self._flushed = self._written


def _check_continues(answer: Stream, url: str, have: int, size: int | None) -> None:
    """A 206 continues the part only when it starts where the part ends, in a file of HEAD's size."""
    value = answer.headers.get("Content-Range", "")
    m = CONTENT_RANGE_RE.fullmatch(value)
    same_file = m is not None and (m["size"] == "*" or size is None or int(m["size"]) == size)
    if not m or int(m["start"]) != have or not same_file:
        raise UpstreamMalformed(
            f"GET {redact(url)}: asked for the bytes from {have:,}, the answer's Content-Range is {excerpt(value, 80)}"
        )


def _check_length(answer: Stream, url: str, size: int | None) -> None:
    """A 200 that announces another size than HEAD is refused before its body is read."""
    try:
        declared = content_length(answer.headers.get("Content-Length"))
    except ValueError:
        declared = None  # then the bytes are counted as they come
    if size is not None and declared is not None and declared != size:
        raise UpstreamMismatch(f"GET {redact(url)}: the wheel is {declared:,} bytes, {size:,} were announced")


def _hash_part(part: Path, have: int):
    """The hash of the part's first `have` bytes, the prefix the 206 continues."""
    digest = hashlib.sha256()
    try:
        with open(os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb", buffering=0) as handle:
            left = have
            while left and (chunk := handle.read(min(CHUNK, left))):
                digest.update(chunk)
                left -= len(chunk)
    except OSError as exc:
        raise _cache_error(part.parent, exc) from None
    if left:
        raise _cache_error(part.parent, OSError(errno.EIO, "the partial download shrank while being read"))
    return digest


def _reuse(entry: Path, wheel: FoundWheel, on_progress: OnProgress | None) -> Hashed | None:
    """A finished entry that holds together (record, file, HEAD's size, the index's hash); a damaged one is
    deleted (its part too) so it is downloaded afresh."""
    record_path, final = entry / "record.json", entry / wheel.filename
    if not _exists(record_path):
        return None  # nothing finished: a part, if any, is continued
    record = _read_record(record_path)
    good = (
        record is not None
        and (record.url, record.etag) == (wheel.url, wheel.etag)
        and (wheel.size is None or record.size == wheel.size)
        and (wheel.index_sha256 is None or record.sha256 == wheel.index_sha256)
        and _regular_size(final) == record.size
    )
    if not good or record is None:
        _clear(entry)
        return None
    _emit(on_progress, DownloadEvent("cached", wheel.filename, record.size, wheel.size, sha256=record.sha256))
    return Hashed(record.sha256, record.size, final, reused=True)


def _read_record(path: Path) -> _Record | None:
    """The record, read strictly and bounded: no symlink, at most 4 KiB, exactly the fields buildkit writes."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
        if len(raw) > MAX_RECORD_BYTES:
            return None
        return _Record.model_validate(json.loads(raw.decode("utf-8")))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, ValidationError):
        return None


@contextmanager
def _locked(entry: Path, filename: str, on_progress: OnProgress | None) -> Iterator[None]:
    """One process at a time in an entry (two resolves sharing a cache dir): the second waits, then reuses."""
    if _exists(entry / ".lock") and _regular_size(entry / ".lock") is None:
        _drop(entry, entry / ".lock")  # planted: a symlink or a directory
    try:
        fd = os.open(entry / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _cache_error(entry, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _emit(on_progress, DownloadEvent("waiting", filename, 0, None))
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _emit(on_progress: OnProgress | None, event: DownloadEvent) -> None:
    if on_progress is not None:
        on_progress(event)


def _part_size(part: Path) -> int:
    """The bytes a part holds; a part that is not a regular file (a planted symlink) is removed."""
    try:
        info = part.lstat()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise _cache_error(part.parent, exc) from None
    if not stat.S_ISREG(info.st_mode):
        _remove(part)
        return 0
    return info.st_size


def _regular_size(path: Path) -> int | None:
    try:
        info = path.lstat()
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _make_dir(entry: Path) -> None:
    """The entry as a real directory: anything else in its place (a symlink planted to send the download
    elsewhere, a file) is removed first."""
    try:
        if _exists(entry) and not _is_dir(entry):
            entry.unlink()
        entry.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_error(entry, exc) from None


def _clear(entry: Path) -> None:
    """Everything in a damaged entry but the lock file (which the caller holds)."""
    try:
        children = [child for child in entry.iterdir() if child.name != ".lock"]
    except OSError as exc:
        raise _cache_error(entry, exc) from None
    for child in children:
        _drop(entry, child)


def _drop(entry: Path, path: Path) -> None:
    try:
        shutil.rmtree(path) if _is_dir(path) else path.unlink(missing_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot delete the damaged wheel cache entry {entry}: {exc.strerror or exc}",
            hint=f"delete {entry} yourself and rerun",
        ) from None


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise _cache_error(path.parent, exc) from None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _cache_error(where: Path, exc: OSError) -> InputError:
    return InputError(f"cannot write the wheel cache in {where}: {exc.strerror or exc}", hint=write_hint(exc))
