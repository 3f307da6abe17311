"""The lock: every pin turned into a verified fact and where it came from, plus the hash of the pins.

Facts only: no time read from the clock, so resolving unchanged upstreams writes the same bytes on any machine, any
day (its hash labels the image). When each fact was read goes into the resolve record beside it
(buildkit/stages/resolve/record.py).

Later stages trust only the lock, so reading one validates it with the same strict grammars as the pins, and
`consistency_problems` holds it to the pins before anything uses it. Written with files.write_atomic.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from buildkit.errors import InputError, excerpt
from buildkit.files import MAX_LOCK_BYTES, read_local
from buildkit.models.gpufacts import GpuCheck
from buildkit.models.grammar import (
    CudaVersion,
    Digest,
    FullSha,
    GitRef,
    GitUrl,
    HttpsUrl,
    ImageRef,
    OneLine,
    WheelCuda,
    parse_image_ref,
)
from buildkit.models.pins import Build, KnownIssue, Pins, dump_build

# 2: the wheel is content-addressed (wheel.sha256 is measured; the index's claim moved to wheel.index_sha256).
# 3: the CUDA versions of the base image and the wheel are read and checked (base_image.cuda_version,
#    wheel.cuda, the cuda section).
# 4: facts only: the resolve times (`resolved_at`, top level and in every fact) moved to the resolve record.
# Older locks are read, migrated in memory, and reported stale; they are never written.
LOCK_VERSION: Final = 4
READABLE_VERSIONS = (1, 2, 3, 4)

SHA256_HEX_RE = re.compile(r"[0-9a-f]{64}")
SKIPPED_REASON = "resolve --no-wheel-download was given: the wheel's bytes were not hashed; the build trusts its URL"
V1_REASON = "written by lock version 1, before wheels were hashed"
V1_STALE = "lock version 1: the wheel is not content-addressed; run `buildkit resolve`"
V2_STALE = "lock version 2: CUDA versions were not checked; run `buildkit resolve`"
V3_STALE = "lock version 3: it holds the times its facts were read (its hash changes with them); run `buildkit resolve`"
STALE = {1: V1_STALE, 2: V2_STALE, 3: V3_STALE}

# CUDA_VERSION as the CUDA images' config sets it ("12.9.1"); a wheel's CUDA is major.minor or just the major.


def _pre_cuda_reason(version: int) -> str:
    return f"written by lock version {version}, before CUDA versions were read"


def _sha256_hex(value: str) -> str:
    if not SHA256_HEX_RE.fullmatch(value):
        raise ValueError(f"expected a sha256 (64 lowercase hex digits), found {excerpt(value)}")
    return value


Sha256Hex = Annotated[str, AfterValidator(_sha256_hex), WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{64}$"})]


def cuda_major(version: str) -> int:
    """12 of "12.9.1", "12.9" or "12" (values already held to their grammar)."""
    return int(version.split(".", 1)[0])


# Strict reading (issue 20): a lock is a file anyone can edit, so its JSON and its values are held to bounds
# before anything reads them: no duplicate keys, no integer longer than 19 digits, no NaN, strings of at most
# MAX_STRING characters, sizes and numbers within range and never booleans, dates that parse.
MAX_STRING = 16384
MAX_DIGITS = 19


class _Refused(ValueError):
    """JSON the lock's decoder refuses (its message names what)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # json.loads would keep the last one silently
            raise _Refused(f"duplicate key {excerpt(key, 60)}")
        out[key] = value
    return out


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number")


def strict_json(text: str) -> Any:
    """JSON as a lock may hold it; raises _Refused or json.JSONDecodeError (both ValueError)."""
    return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_int=_bounded_int, parse_constant=_no_constant)


_ISO_TIME_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})"
)


def _iso_time(value: str) -> str:
    try:
        if _ISO_TIME_RE.fullmatch(value):
            datetime.fromisoformat(value)
            return value
    except ValueError:
        pass
    raise ValueError(f"expected an ISO 8601 time with its offset (2026-02-05T12:34:56Z), found {excerpt(value)}")


IsoTime = Annotated[str, AfterValidator(_iso_time)]
Size = Annotated[int, Field(strict=True, ge=0, le=1 << 40)]
PrNumber = Annotated[int, Field(strict=True, ge=1, le=10_000_000)]


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_max_length=MAX_STRING)


class PatchFact(_Fact):
    """A declared patch as the lock records it: its bytes are pinned by sha256."""

    file: str
    reason: str
    sha256: str


class CommitFact(_Fact):
    repo: GitUrl
    ref: GitRef = Field(description="The ref as pinned.")
    commit: FullSha
    date: IsoTime = Field(description="Committer date, ISO 8601.")
    subject: str
    url: str | None = Field(default=None, description="Web page of the commit, when the host has one.")
    source: str = Field(description="How it was resolved: the API URL, or the git command and remote.")


class PullRequestFact(_Fact):
    number: PrNumber
    title: str
    state: str
    merged_at: IsoTime
    merge_commit: FullSha
    url: str
    source: str


class WheelFact(_Fact):
    index: HttpsUrl
    variant: str
    arch: str
    filename: str
    version: str
    url: HttpsUrl = Field(description="Absolute URL exactly as the index encodes it.")
    size: Size | None
    etag: str | None = None
    last_modified: str | None = None
    sha256: Sha256Hex | None = Field(description="Of the bytes, measured by resolve downloading the wheel.")
    index_sha256: Sha256Hex | None = Field(description="What the index's #sha256= fragment claimed, if it gave one.")
    content_addressed: StrictBool = Field(description="True when sha256 was measured; the build then checks the bytes.")
    not_content_addressed: OneLine | None = Field(description="Why the wheel is not content-addressed, when it is not.")
    listed_in: str = Field(description="The metadata.json or PEP 503 page that listed the wheel.")
    verified_by: Literal["GET", "HEAD", "GET Range: bytes=0-0"] = Field(
        description="How the wheel was found to exist: the GET that downloaded it, or HEAD (--no-wheel-download)."
    )
    cuda: WheelCuda | None = Field(
        description="The CUDA the wheel is built for: major.minor (12.9), or only the major when just its bytes "
        "say (libcudart.so.12); null when unknown."
    )
    cuda_source: OneLine = Field(description="How the CUDA is known (the variant's name, the bytes), or why not.")

    @model_validator(mode="after")
    def _coherent(self) -> WheelFact:
        if self.content_addressed != (self.sha256 is not None):
            raise ValueError("content_addressed must be true exactly when sha256 is set")
        if self.content_addressed == (self.not_content_addressed is not None):
            raise ValueError("not_content_addressed gives the reason exactly when the wheel is not content-addressed")
        return self


class ImageFact(_Fact):
    ref: ImageRef = Field(description="The base image as pinned.")
    registry: str
    repository: str
    tag: str | None
    index_digest: Digest | None = Field(description="Digest of the multi-platform index the tag points at.")
    manifest_digest: Digest = Field(description="Digest of the manifest for the build platform.")
    platform: str
    pinned: ImageRef = Field(description="What FROM uses: name@digest.")
    source: str
    cuda_version: CudaVersion | None = Field(
        description="CUDA_VERSION from the image config's Env, as it says it (12.9.1); null when it sets none."
    )
    config_digest: Digest | None = Field(description="Digest of the build platform's image config, read for it.")


class CudaCheck(_Fact):
    """The base image's CUDA against the wheel's, at resolve. A mismatch stops resolve: it never reaches a lock."""

    base_image: CudaVersion | None = Field(description="base_image.cuda_version.")
    wheel: WheelCuda | None = Field(description="wheel.cuda.")
    outcome: Literal["match", "not checked"]
    detail: OneLine = Field(description="What was compared, or why it could not be.")


class Lock(_Fact):
    # 1 to 3 only in memory, for an older lock read and migrated by read_lock: it is stale (consistency_problems).
    lock_version: Literal[1, 2, 3, 4] = LOCK_VERSION
    buildkit_version: str
    pins_sha256: str
    nemo_rl: CommitFact
    vllm: CommitFact
    vllm_pr: PullRequestFact | None
    wheel: WheelFact
    base_image: ImageFact
    cuda: CudaCheck
    build: Build
    patches: list[PatchFact] = Field(description="Declared patches to NeMo-RL, each pinned by sha256.")
    known_issues: list[KnownIssue]
    # Optional: written only when resolve read the wheel's GPU code, so locks without it keep their bytes and hash.
    gpu: GpuCheck | None = Field(default=None, description="Kernels per target GPU, ABI, driver (buildkit.gpu).")

    # An older lock as read_lock decoded it, before migration (None for a current one).
    _as_read: dict[str, Any] | None = PrivateAttr(default=None)

    def to_json(self) -> str:
        # A migrated lock serializes as the lock it was read from, so its hash (lock_sha256, which labels and
        # records carry) stays the one its builds were stamped with.
        data = self._as_read if self._as_read is not None else {
            **self.model_dump(mode="json"), "build": dump_build(self.build)
        }  # fmt: skip
        if data.get("gpu", ...) is None:  # written only when resolve read the wheel's GPU code
            data = {k: v for k, v in data.items() if k != "gpu"}
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    def times_as_read(self) -> dict[str, str]:
        """The `resolved_at` values an older lock held ("lock" for its top level), for the report; {} for v4."""
        data = self._as_read or {}
        times = {"lock": data.get("resolved_at")}
        times.update({k: v.get("resolved_at") for k, v in data.items() if isinstance(v, dict)})
        return {k: v for k, v in times.items() if isinstance(v, str)}


REWRITE_HINT = "run `buildkit resolve` to rewrite it"


def read_lock(path: Path) -> Lock:
    try:
        raw = read_local(path, "the lock", MAX_LOCK_BYTES)
        data = strict_json(raw.decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no lock yet", hint="run `buildkit resolve` to write one") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else excerpt(str(exc))
        raise InputError(f"{path}: not a readable lock: {reason}", hint=REWRITE_HINT) from None
    try:
        lock = Lock.model_validate(_migrate(path, data))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()
        )
        raise InputError(f"{path}: invalid lock: {problems}", hint="run `buildkit resolve` to rewrite it") from None
    if lock.lock_version < LOCK_VERSION:
        lock._as_read = data
    return lock


def _migrate(path: Path, data: Any) -> Any:
    """A lock of any readable version in the current shape (conda-lock's habit: read old, write new). A version-1
    lock keeps lock_version 1 in memory, so consistency_problems calls it stale and to_json gives back its bytes."""
    if not isinstance(data, dict):
        return data  # validation says what is wrong
    version = data.get("lock_version")
    if type(version) is not int or version not in READABLE_VERSIONS:  # not bool: True == 1
        found = "no lock_version" if version is None else f"lock_version {excerpt(version, 40)}"
        raise InputError(
            f"{path}: invalid lock: {found}; this buildkit reads lock versions "
            + ", ".join(map(str, READABLE_VERSIONS[:-1]))
            + f" and {READABLE_VERSIONS[-1]}",
            hint="run `buildkit resolve` to rewrite it, or use the buildkit that wrote it",
        )
    wheel = data.get("wheel")
    if version == 1 and isinstance(wheel, dict):
        wheel = {k: v for k, v in wheel.items() if k != "sha256"}
        wheel.update(
            sha256=None,
            index_sha256=data["wheel"].get("sha256"),
            content_addressed=False,
            not_content_addressed=V1_REASON,
        )
        data = {**data, "wheel": wheel}
    if version < 3:
        data = _without_cuda_facts(data, version)
    if version < 4:
        data = _without_times(data)
    return data


def _without_times(data: dict[str, Any]) -> dict[str, Any]:
    """A lock from before version 4 without its resolve times (`resolved_at`, top level and in each fact)."""
    return {
        k: {f: x for f, x in v.items() if f != "resolved_at"} if isinstance(v, dict) else v
        for k, v in data.items()
        if k != "resolved_at"
    }


def _without_cuda_facts(data: dict[str, Any], version: int) -> dict[str, Any]:
    """A lock from before CUDA versions were read, with them unknown and the check "not checked"."""
    reason = _pre_cuda_reason(version)
    data = dict(data)
    if isinstance(data.get("base_image"), dict):
        data["base_image"] = {**data["base_image"], "cuda_version": None, "config_digest": None}
    if isinstance(data.get("wheel"), dict):
        data["wheel"] = {**data["wheel"], "cuda": None, "cuda_source": reason}
    data["cuda"] = {"base_image": None, "wheel": None, "outcome": "not checked", "detail": reason}
    return data


def content_warning(lock: Lock) -> str | None:
    """The one line commands print when they load a lock whose wheel is not content-addressed."""
    if lock.wheel.content_addressed:
        return None
    return (
        f"the locked wheel is not content-addressed ({lock.wheel.not_content_addressed}); "
        "run `buildkit resolve` without --no-wheel-download to hash it"
    )


def cuda_warning(lock: Lock) -> str | None:
    """The one line resolve prints when the base image's CUDA and the wheel's could not be compared."""
    if lock.cuda.outcome == "match":
        return None
    return f"the CUDA match of the base image and the wheel was not checked: {lock.cuda.detail}"


def lock_sha256(lock: Lock) -> str:
    """The hash later stages stamp into their outputs (labels, records): of the lock's canonical JSON."""
    return hashlib.sha256(lock.to_json().encode()).hexdigest()


def consistency_problems(pins: Pins, lock: Lock, patches: list[PatchFact]) -> list[str]:
    """What makes a lock unusable for these pins (and these patch files), checked with no network."""
    problems: list[str] = [STALE[lock.lock_version]] if lock.lock_version in STALE else []
    if [p.model_dump() for p in patches] != [p.model_dump() for p in lock.patches]:
        changed = [p.file for p in patches if p not in lock.patches] or [p.file for p in lock.patches]
        problems.append(f"declared patches changed since the lock was written: {', '.join(changed)}")
    if lock.pins_sha256 != pins.sha256():
        problems.append("the pins changed since the lock was written (pins hash differs)")
    for name, pinned, fact in (("nemo_rl", pins.nemo_rl, lock.nemo_rl), ("vllm", pins.vllm, lock.vllm)):
        if fact.repo != pinned.repo:
            problems.append(f"{name}.repo: lock has {fact.repo}, pins say {pinned.repo}")
        if pinned.ref and fact.ref != pinned.ref:
            problems.append(f"{name}.ref: lock resolved {fact.ref!r}, pins say {pinned.ref!r}")
        if pinned.ref and _is_hex(pinned.ref) and not fact.commit.startswith(pinned.ref):
            problems.append(f"{name}: locked commit {fact.commit} does not start with the pinned {pinned.ref}")
    if pins.vllm.pr is not None:
        if lock.vllm_pr is None or lock.vllm_pr.number != pins.vllm.pr:
            problems.append(f"vllm.pr: pins say #{pins.vllm.pr}, the lock has no such PR")
        elif lock.vllm_pr.merge_commit != lock.vllm.commit:
            problems.append("vllm: locked commit is not the locked PR's merge commit")
    elif lock.vllm_pr is not None:
        problems.append(f"vllm.pr: the lock has PR #{lock.vllm_pr.number}, the pins name none")
    problems += _wheel_problems(pins, lock)
    problems += _base_image_problems(pins, lock)
    problems += _cuda_problems(lock)
    if lock.build != pins.build:
        fields = [f for f in type(pins.build).model_fields if getattr(lock.build, f) != getattr(pins.build, f)]
        problems.append(f"build: the lock's {', '.join(fields)} differ from the pins")
    if lock.known_issues != pins.known_issues:
        problems.append("known_issues: the lock's differ from the pins")
    return problems


def _wheel_problems(pins: Pins, lock: Lock) -> list[str]:
    """The wheel is the one the pins' index lists for the locked commit: its URL is the index's per-commit
    directory plus the file, and the file name says vllm, the pinned arch and the locked commit."""
    from urllib.parse import unquote, urlsplit

    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    wheel, commit, problems = lock.wheel, lock.vllm.commit, []
    if wheel.index != pins.wheel_index():
        problems.append(f"wheel.index: lock has {wheel.index}, the pins (and environment) say {pins.wheel_index()}")
    if wheel.arch != pins.wheel.arch or wheel.variant != pins.wheel.variant:
        problems.append(
            f"wheel: lock has {wheel.arch}/{wheel.variant}, pins say {pins.wheel.arch}/{pins.wheel.variant}"
        )
    directory = f"{wheel.index}/{commit}/"
    # No "." or ".." segment (plain or %-encoded): a server that normalizes paths would serve another file.
    if any(unquote(part) in (".", "..") for part in urlsplit(wheel.url).path.split("/")):
        problems.append(f"wheel.url {wheel.url} has a '.' or '..' path segment")
    if wheel.sha256 and wheel.index_sha256 and wheel.sha256 != wheel.index_sha256:
        problems.append("wheel: the measured sha256 and the index's sha256 differ")
    if not wheel.url.startswith(directory) or unquote(wheel.url.rsplit("/", 1)[-1]) != wheel.filename:
        problems.append(f"wheel.url {wheel.url} is not {wheel.filename} in the locked commit's index {directory}")
    if not wheel.listed_in.startswith(directory):
        problems.append(f"wheel.listed_in {wheel.listed_in} is not in the locked commit's index {directory}")
    try:
        name, version, _, tags = parse_wheel_filename(wheel.filename)
    except InvalidWheelFilename:
        return [*problems, f"wheel.filename {wheel.filename!r} is not a wheel file name"]
    if name != "vllm" or str(version) != wheel.version:
        problems.append(f"wheel.filename {wheel.filename} is not vllm {wheel.version}")
    if f"g{commit[:9]}" not in (version.local or "").split("."):
        problems.append(f"wheel {wheel.filename} does not name the locked vLLM commit {commit[:9]}")
    if not any(tag.platform.endswith(f"_{wheel.arch}") for tag in tags):
        problems.append(f"wheel {wheel.filename} is not for {wheel.arch}")
    return problems


def _base_image_problems(pins: Pins, lock: Lock) -> list[str]:
    """The base image is the pinned reference, and `pinned` (what FROM uses) is derived from the resolved
    registry, repository and digest, not taken on the lock's word."""
    b, problems = lock.base_image, []
    if b.ref != pins.base_image:
        problems.append(f"base_image: lock has {b.ref}, pins say {pins.base_image}")
    if b.platform != pins.build.platform:
        problems.append(f"base_image platform {b.platform} is not build.platform {pins.build.platform}")
    pinned = parse_image_ref(pins.base_image)
    if (b.registry, b.repository, b.tag) != (pinned.registry, pinned.repository, pinned.tag):
        problems.append(f"base_image: lock names {b.registry}/{b.repository}:{b.tag}, pins say {pins.base_image}")
    if pinned.digest and pinned.digest not in (b.index_digest, b.manifest_digest):
        problems.append(f"base_image: the pins name digest {pinned.digest}, the lock resolved another")
    expected = f"{pinned.name}@{b.index_digest or b.manifest_digest}"
    if b.pinned != expected:
        problems.append(f"base_image.pinned: lock has {b.pinned}, its resolved facts give {expected}")
    return problems


def _cuda_problems(lock: Lock) -> list[str]:
    """The cuda section repeats the facts it compared, and says "match" exactly when both were known and their
    majors are equal: a lock is a file anyone can edit in a pull request, and a mismatch never reaches one."""
    c, problems = lock.cuda, []
    if (c.base_image, c.wheel) != (lock.base_image.cuda_version, lock.wheel.cuda):
        problems.append(
            f"cuda: the check compared base image {c.base_image} and wheel {c.wheel}, but the lock's facts are "
            f"base_image.cuda_version {lock.base_image.cuda_version} and wheel.cuda {lock.wheel.cuda}"
        )
    if c.base_image is not None and c.wheel is not None:
        if cuda_major(c.base_image) != cuda_major(c.wheel):
            problems.append(
                f"cuda: the base image is CUDA {c.base_image} and the wheel CUDA {c.wheel}: different majors, "
                f"which resolve never locks (the lock says {c.outcome!r})"
            )
        elif c.outcome != "match":
            problems.append("cuda: both CUDA versions are known and agree, but the lock says 'not checked'")
    elif c.outcome == "match":
        problems.append("cuda: the lock says 'match' without knowing both CUDA versions")
    return problems


def _is_hex(ref: str) -> bool:
    return all(c in "0123456789abcdef" for c in ref) and 7 <= len(ref) <= 40


# Values that must agree between a lock and a fresh resolve (`resolve --check`); sources may differ.
COMPARED_FIELDS: tuple[tuple[str, str], ...] = (
    ("nemo_rl", "commit"),
    ("vllm", "commit"),
    ("vllm_pr", "merge_commit"),
    ("wheel", "url"),
    ("wheel", "size"),
    ("wheel", "etag"),
    ("base_image", "index_digest"),
    ("base_image", "manifest_digest"),
)


def differences(locked: Lock, fresh: Lock, *, every_fact: bool = False) -> list[tuple[str, Any, Any]]:
    """(field, locked value, fresh value) for each fact that differs. By default the facts a build depends on
    (COMPARED_FIELDS); with every_fact, every field (is a rewrite of the lock worth it?)."""
    if every_fact:
        was, now = _flatten(locked.model_dump(mode="json")), _flatten(fresh.model_dump(mode="json"))
        return [(k, was.get(k), now.get(k)) for k in sorted(was.keys() | now.keys()) if was.get(k) != now.get(k)]
    out = []
    for section, field in COMPARED_FIELDS:
        old = getattr(getattr(locked, section), field, None) if getattr(locked, section) else None
        new = getattr(getattr(fresh, section), field, None) if getattr(fresh, section) else None
        if old != new:
            out.append((f"{section}.{field}", old, new))
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}{index}."))
        return out or {prefix.rstrip("."): []}
    return {prefix.rstrip("."): value}
