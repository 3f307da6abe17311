"""Declared modifications to upstream files: patch files referenced from pins.yaml, applied with verification.

A patch either applies cleanly or stops the run with the file, the hunk and what upstream has there now. A patch
that changes nothing, or whose change upstream already contains, is an error too: never a silent no-op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from buildkit.errors import GitFailed, InputError, UpstreamMismatch, excerpt
from buildkit.files import MAX_PATCH_BYTES, read_local, sha256_bytes, sha256_file
from buildkit.models.grammar import REPO_PATH_RE
from buildkit.models.lock import PatchFact
from buildkit.models.pins import Pins
from buildkit.models.records.prepare import AppliedPatch, TargetHashes
from buildkit.world.git import run_git_bytes


def _parse(text: str, name: str) -> PatchSet:
    try:
        patch = PatchSet.from_string(text)
    except UnidiffParseError as exc:
        raise InputError(f"{name}: not a unified diff: {exc}") from None
    if not len(patch):
        raise InputError(f"{name}: the patch changes no file")
    for patched in patch:
        path = _target_path(patched.path)
        if path.startswith("/") or ".." in Path(path).parts:
            raise InputError(f"{name}: patch touches {patched.path!r}, outside the source tree")
        if not REPO_PATH_RE.fullmatch(path):
            # Target paths reach the smoke stage of the Dockerfile: plain relative paths only.
            raise InputError(f"{name}: patch touches {patched.path!r}; expected a plain relative path")
    return patch


def _target_path(path: str) -> str:
    return path.removeprefix("a/").removeprefix("b/")


def patch_targets(text: str, name: str) -> list[str]:
    """The paths a patch touches, relative to the source tree."""
    return [_target_path(p.path) for p in _parse(text, name)]


def read_patch(path: Path, project_dir: Path) -> bytes:
    """A declared patch's bytes: a regular file inside the project (a symlink that leads out of it, to /dev/zero or
    a FIFO, is refused), at most MAX_PATCH_BYTES."""
    try:
        return read_local(path, "the patch declared in pins.yaml", MAX_PATCH_BYTES, within=project_dir)
    except FileNotFoundError:
        raise InputError(f"{path}: cannot read the patch declared in pins.yaml: no such file") from None


def read_patch_text(path: Path, project_dir: Path) -> str:
    return _utf8(read_patch(path, project_dir), path)


def _utf8(data: bytes, path: Path) -> str:
    """A patch's text: resolve refuses a patch that is not UTF-8, so every later stage reads the same bytes the
    same way."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: the patch is not UTF-8 text (byte {exc.start})", hint="save the patch as UTF-8"
        ) from None


def patch_facts(pins: Pins, project_dir: Path) -> list[PatchFact]:
    """Read and hash every declared patch (resolve records these in the lock)."""
    facts = []
    for pin in pins.nemo_rl.patches:
        path = project_dir / pin.file
        data = read_patch(path, project_dir)
        _parse(_utf8(data, path), pin.file)
        facts.append(PatchFact(file=pin.file, reason=pin.reason, sha256=sha256_bytes(data)))
    return facts


def _git_apply(tree: Path, patch: bytes, *extra: str) -> str | None:
    """None when `git apply` succeeds, else git's complaint. The patch goes on stdin: git applies exactly the bytes
    that were checked and hashed, never the file again (it could have changed in between)."""
    try:
        run_git_bytes(["apply", "--whitespace=nowarn", *extra, "-"], cwd=tree, stdin=patch)
        return None
    except GitFailed as exc:
        return exc.stderr


@dataclass(frozen=True)
class Conflict:
    """Where a patch no longer fits upstream: the file, and (when a hunk's context moved) the hunk, the line, what
    the patch expects there and what upstream has now. hunk None: the file is gone, or every context is in place."""

    path: str
    hunk: int | None = None
    header: str = ""
    line: int | None = None
    expected: str = ""
    found: str = ""
    missing: bool = False


def find_conflict(tree: Path, patch: PatchSet) -> Conflict | None:
    """The first hunk that no longer fits and what upstream has at its place now; None when every hunk does."""
    for patched in patch:
        rel = _target_path(patched.path)
        target = tree / rel
        if not target.exists():
            return Conflict(rel, missing=True)
        lines = target.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, hunk in enumerate(patched, start=1):
            expected = [line.value.rstrip("\n") for line in hunk if line.is_context or line.is_removed]
            start = hunk.source_start - 1
            actual = lines[start : start + len(expected)]
            if actual == expected:
                continue
            for offset, want in enumerate(expected):
                have = actual[offset] if offset < len(actual) else "<end of file>"
                if have != want:
                    header = str(hunk).splitlines()[0]
                    return Conflict(rel, number, header, start + offset + 1, want, have)
    return None


def describe_conflict(conflict: Conflict | None, name: str) -> str:
    if conflict is None:
        return f"{name} does not apply, though every hunk's context is in place"
    if conflict.missing:
        return f"{name}: {conflict.path} does not exist in the upstream tree any more"
    return (
        f"{name} no longer fits upstream:\n"
        f"  file: {conflict.path}\n"
        f"  hunk {conflict.hunk}: {conflict.header}\n"
        f"  line {conflict.line}:\n"
        f"    the patch expects: {conflict.expected}\n"
        f"    upstream has now:  {conflict.found}"
    )


class PatchConflict(UpstreamMismatch):
    """A declared patch that does not apply to upstream (exit 4); `conflict` says where, when that can be shown."""

    def __init__(self, message: str, patch_file: str, conflict: Conflict | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.patch_file = patch_file
        self.conflict = conflict


class PatchObsolete(UpstreamMismatch):
    """A patch that no longer applies because upstream now does what it did (exit 4, with the reason)."""

    def __init__(self, message: str, patch_file: str, reason: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.patch_file = patch_file
        self.reason = reason


_ASSIGN_RE = re.compile(r"^\s*(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")
_PARAM_RE = r"\$(?:[1-9]|\{[1-9](?::?[-=?+][^}]*)?\})"  # $3, ${3}, ${3:-default}


def _configurable(name: str, value: str) -> str | None:
    """How an assignment lets the caller choose the value: 'argument N' or 'the environment'; None if it does not."""
    param = re.search(_PARAM_RE, value)
    if param:
        return f"argument {param.group().lstrip('${')[0]}"  # $3 or ${3...}: the digit after $ or ${
    if re.search(r"\$\{" + re.escape(name) + r":?[-=]", value):
        return "the environment"
    return None


def obsolete_reason(tree: Path, patch: PatchSet) -> str | None:
    """Why a patch that no longer applies is unnecessary: every variable it made the caller choose (an assignment
    it changed from a fixed value to one read from an argument or the environment) upstream now lets the caller
    choose too. None when that cannot be shown (then the patch merely no longer fits)."""
    reasons = []
    for patched in patch:
        rel = _target_path(patched.path)
        target = tree / rel
        if target.is_symlink() or not target.is_file():
            return None
        upstream = target.read_text(encoding="utf-8", errors="replace").splitlines()
        made: dict[str, str] = {}
        fixed: set[str] = set()
        for hunk in patched:
            for line in hunk:
                assign = _ASSIGN_RE.match(line.value.rstrip("\n"))
                if not assign:
                    continue
                how = _configurable(assign["name"], assign["value"])
                if line.is_added and how:
                    made[assign["name"]] = how
                elif line.is_removed and not how:
                    fixed.add(assign["name"])
        for name in sorted(set(made) & fixed):
            now = [
                (number, line.strip(), _configurable(name, m["value"]))
                for number, line in enumerate(upstream, start=1)
                if (m := _ASSIGN_RE.match(line)) and m["name"] == name
            ]
            chosen = [(number, text, how) for number, text, how in now if how]
            if not chosen:
                return None
            number, text, how = chosen[0]
            reasons.append(
                f"the patch makes {rel} take {name} from {made[name]}; upstream now takes it from {how} itself "
                f"(line {number}: {excerpt(text, 120)})"
            )
    return "; ".join(reasons) or None


def apply_patches(tree: Path, facts: list[PatchFact], project_dir: Path) -> list[AppliedPatch]:
    applied = []
    for fact in facts:
        path = project_dir / fact.file
        data = read_patch(path, project_dir)
        if sha256_bytes(data) != fact.sha256:
            raise InputError(
                f"{fact.file} changed since the lock was written (sha256 differs)",
                hint="run `buildkit resolve` to record the new patch",
            )
        text = _utf8(data, path)
        patch = _parse(text, fact.file)
        targets = [_target_path(p.path) for p in patch]
        before = {t: sha256_file(tree / t) if (tree / t).exists() else "" for t in targets}
        if _git_apply(tree, data, "--check") is not None:
            if _git_apply(tree, data, "--check", "--reverse") is None:
                raise PatchObsolete(
                    f"{fact.file}: upstream already contains this change",
                    fact.file,
                    "upstream already contains this change",
                    hint="drop the patch from pins.yaml",
                )
            reason = obsolete_reason(tree, patch)
            if reason is not None:
                raise PatchObsolete(
                    f"{fact.file} is obsolete at this upstream commit: {reason}",
                    fact.file,
                    reason,
                    hint="remove it from nemo_rl.patches in pins.yaml (upstream does what it did), then "
                    "`buildkit resolve`",
                )
            conflict = find_conflict(tree, patch)
            raise PatchConflict(
                describe_conflict(conflict, fact.file),
                fact.file,
                conflict,
                hint="update the patch to the new upstream, then resolve again",
            )
        problem = _git_apply(tree, data)
        if problem is not None:
            raise PatchConflict(f"{fact.file}: git apply failed: {problem.strip()}", fact.file)
        hashes = []
        for target in targets:
            after = sha256_file(tree / target) if (tree / target).exists() else ""
            if after == before[target]:
                raise PatchConflict(f"{fact.file}: applying it left {target} unchanged (a silent no-op)", fact.file)
            hashes.append(TargetHashes(path=target, before=before[target], after=after))
        applied.append(AppliedPatch(file=fact.file, reason=fact.reason, sha256=fact.sha256, diff=text, targets=hashes))
    return applied
