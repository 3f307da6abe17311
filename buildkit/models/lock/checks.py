"""What makes a lock unusable for these pins (consistency_problems, checked with no network), the warnings
commands print when they load one, its hash, and how two locks differ (`resolve --check`)."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from buildkit.models.grammar import parse_image_ref
from buildkit.models.lock.facts import STALE, Lock, PatchFact, cuda_major
from buildkit.models.pins import Pins


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


def composition(lock: Lock) -> str:
    """One sentence: where the image's vLLM Python comes from and where its kernels come from, and the proof."""
    v, w, c = lock.vllm, lock.vllm_wheel, lock.vllm_compare
    where = _repo_name(v.repo)
    if w.commit == v.commit:
        return f"vLLM {v.commit[:12]} from {where}: its Python and its kernels (the wheel of the same commit)"
    chosen = {
        "the merge base": f"the merge base with {w.branch}",
        "pinned": "pinned by hand (wheel.commit)",
        "an ancestor of the merge base": f"the newest ancestor of the merge base with {w.branch} that has one",
        "the source commit": "the source commit",
    }[w.chosen_by]
    proof = (
        f"no compiled source differs ({c.paths} path(s) compared by {c.method})"
        if not c.compiled
        else f"{len(c.compiled)} compiled input(s) differ, accepted: {c.accepted}"
    )
    return (
        f"vLLM's Python at {v.commit[:12]} from {where}, its kernels from the wheel of {w.commit[:12]}, "
        f"{chosen}; {proof}"
    )


def _repo_name(url: str) -> str:
    """`alice/vllm` for a GitHub URL; the URL itself otherwise."""
    if url.startswith("https://github.com/"):
        return url.removeprefix("https://github.com/").removesuffix(".git")
    return url


def lock_sha256(lock: Lock) -> str:
    """The hash later stages stamp into their outputs (labels, records): of the lock's canonical JSON (of the whole
    lock's, for a platform's view of it)."""
    if lock._whole_sha256 is not None:
        return lock._whole_sha256
    return hashlib.sha256(lock.to_json().encode()).hexdigest()


def platform_lock(lock: Lock, platform: str) -> Lock:
    """One platform of a lock as a single-platform lock (Lock.for_platform) that keeps the whole lock's hash: the
    records and image labels of that platform's build name the lock file they came from."""
    view = lock.for_platform(platform)
    view._whole_sha256 = lock_sha256(lock)
    return view


def consistency_problems(pins: Pins, lock: Lock, patches: list[PatchFact]) -> list[str]:
    """What makes a lock unusable for these pins (and these patch files), checked with no network."""
    problems: list[str] = [STALE[lock.lock_version]] if lock.lock_version in STALE else []
    if [p.model_dump() for p in patches] != [p.model_dump() for p in lock.patches]:
        changed = [p.file for p in patches if p not in lock.patches] or [p.file for p in lock.patches]
        problems.append(f"declared patches changed since the lock was written: {', '.join(changed)}")
    if lock.pins_sha256 != pins.sha256():
        problems.append("the pins changed since the lock was written (pins hash differs)")
    pr = lock.vllm_pr
    open_pr = pr is not None and not pr.merged
    for name, pinned, fact in (("nemo_rl", pins.nemo_rl, lock.nemo_rl), ("vllm", pins.vllm, lock.vllm)):
        # An open PR is built from its head repository (a fork): the lock says which, as GitHub answered.
        repo = pr.head_repo if name == "vllm" and pr is not None and open_pr else pinned.repo
        if fact.repo != repo:
            problems.append(f"{name}.repo: lock has {fact.repo}, expected {repo}")
        if pinned.ref and fact.ref != pinned.ref:
            problems.append(f"{name}.ref: lock resolved {fact.ref!r}, pins say {pinned.ref!r}")
        if pinned.ref and _is_hex(pinned.ref) and not fact.commit.startswith(pinned.ref):
            problems.append(f"{name}: locked commit {fact.commit} does not start with the pinned {pinned.ref}")
    if pins.vllm.pr is not None:
        if lock.vllm_pr is None or lock.vllm_pr.number != pins.vllm.pr:
            problems.append(f"vllm.pr: pins say #{pins.vllm.pr}, the lock has no such PR")
        elif lock.vllm_pr.merged and lock.vllm_pr.merge_commit != lock.vllm.commit:
            problems.append("vllm: locked commit is not the locked PR's merge commit")
        elif not lock.vllm_pr.merged and lock.vllm_pr.head_commit != lock.vllm.commit:
            problems.append("vllm: locked commit is not the locked open PR's head")
    elif lock.vllm_pr is not None:
        problems.append(f"vllm.pr: the lock has PR #{lock.vllm_pr.number}, the pins name none")
    problems += _source_problems(pins, lock)
    problems += _listing_problems(lock)
    problems += _wheel_problems(pins, lock)
    problems += _base_image_problems(pins, lock)
    problems += _cuda_problems(lock)
    if lock.build != pins.build:
        fields = [f for f in type(pins.build).model_fields if getattr(lock.build, f) != getattr(pins.build, f)]
        problems.append(f"build: the lock's {', '.join(fields)} differ from the pins")
    if lock.known_issues != pins.known_issues:
        problems.append("known_issues: the lock's differ from the pins")
    return problems + _platform_problems(pins, lock)


def _listing_problems(lock: Lock) -> list[str]:
    """vLLM's Python listing is of the locked source commit (verify holds the image to it)."""
    listed = lock.vllm_python
    if listed is not None and listed.commit != lock.vllm.commit:
        return [f"vllm_python: a listing of {listed.commit[:12]}, but the vLLM source is {lock.vllm.commit[:12]}"]
    return []


def _platform_problems(pins: Pins, lock: Lock) -> list[str]:
    """build.platforms: the lock holds each platform the pins name, and each one's wheel (of the same wheel
    commit), base image manifest (of the same pinned image) and CUDA check hold as the primary's do."""
    wanted = [platform for platform, _ in pins.build.targets()]
    if lock.platforms() != wanted:
        return [f"platforms: the lock holds {', '.join(lock.platforms())}, the pins name {', '.join(wanted)}"]
    built = [platform for platform, _ in lock.build.targets()]
    if built != wanted:  # the lock's own build section names other platforms than its facts: never view it
        return [f"build.platforms: the lock's build names {', '.join(built)}, its facts {', '.join(wanted)}"]
    problems: list[str] = []
    for platform in wanted[1:]:
        view, pinned = lock.for_platform(platform), pins.for_platform(platform)
        found = _wheel_problems(pinned, view) + _base_image_problems(pinned, view) + _cuda_problems(view)
        problems += [f"{platform}: {problem}" for problem in found]
        if view.base_image.index_digest != lock.base_image.index_digest:
            problems.append(f"{platform}: base_image is not the primary's image index")
    return problems


def _source_problems(pins: Pins, lock: Lock) -> list[str]:
    """The wheel's commit and the comparison as the pins ask for them (an older lock has no pins of its own)."""
    if lock.lock_version < 5:
        return []
    vw, compared, problems = lock.vllm_wheel, lock.vllm_compare, []
    if (vw.upstream, vw.branch) != (pins.vllm.upstream, pins.vllm.upstream_branch):
        problems.append(
            f"vllm_wheel: lock has {vw.upstream} {vw.branch}, pins say {pins.vllm.upstream} {pins.vllm.upstream_branch}"
        )
    if pins.wheel.commit != "auto" and vw.commit != pins.wheel.commit:
        problems.append(f"wheel.commit: lock has {vw.commit}, pins say {pins.wheel.commit}")
    expected_base = {"the source commit": lock.vllm.commit, "the merge base": vw.commit, "pinned": None}
    if vw.chosen_by in expected_base and vw.merge_base != expected_base[vw.chosen_by]:
        problems.append(f"vllm_wheel: chosen as {vw.chosen_by!r}, but its merge_base is {vw.merge_base}")
    if vw.chosen_by == "the source commit" and vw.commit != lock.vllm.commit:
        problems.append("vllm_wheel: chosen as 'the source commit', but it is not the source commit")
    if (vw.chosen_by == "pinned") != (pins.wheel.commit != "auto"):
        problems.append(f"vllm_wheel: chosen as {vw.chosen_by!r}, but the pins say wheel.commit {pins.wheel.commit}")
    if compared.method == "same commit" and (vw.commit != lock.vllm.commit or compared.paths):
        problems.append("vllm_compare: 'same commit', but the wheel's commit is not the source commit")
    if compared.compiled and compared.accepted is None:
        problems.append("vllm_compare: compiled inputs changed, and no wheel.accept_compiled_changes accepts it")
    if compared.accepted != (pins.wheel.accept_compiled_changes if compared.compiled else None):
        problems.append("vllm_compare.accepted differs from the pins' wheel.accept_compiled_changes")
    return problems


def _wheel_problems(pins: Pins, lock: Lock) -> list[str]:
    """The wheel is the one the pins' index lists for the locked commit: its URL is the index's per-commit
    directory plus the file, and the file name says vllm, the pinned arch and the locked commit."""
    wheel, commit, problems = lock.wheel, lock.vllm_wheel.commit, []
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
        named = f"{b.registry}/{b.repository}" + (f":{b.tag}" if b.tag else "")
        problems.append(f"base_image: lock names {named}, pins say {pins.base_image}")
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
    ("vllm_pr", "head_commit"),
    ("vllm_wheel", "commit"),
    ("wheel", "url"),
    ("wheel", "size"),
    ("wheel", "etag"),
    ("base_image", "index_digest"),
    ("base_image", "manifest_digest"),
    ("vllm_python", "digest"),  # the source's Python files, as GitHub or git lists them now
)

_PER_PLATFORM = [(section, field) for section, field in COMPARED_FIELDS if section in ("wheel", "base_image")]


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
    # build.platforms after the first: each one's wheel and base image manifest, by platform
    for platform in dict.fromkeys(locked.platforms()[1:] + fresh.platforms()[1:]):
        was_lock = locked.for_platform(platform) if platform in locked.platforms() else None
        now_lock = fresh.for_platform(platform) if platform in fresh.platforms() else None
        for section, field in _PER_PLATFORM:
            old = getattr(getattr(was_lock, section), field) if was_lock else None
            new = getattr(getattr(now_lock, section), field) if now_lock else None
            if old != new:
                out.append((f"{platform}: {section}.{field}", old, new))
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
