"""Source preparation: NeMo-RL at the locked commit in a cache, submodules at the commits its tree records, the
declared patches applied and verified, and a record of all of it.

Fetches only what is needed: the locked commit by SHA, shallow; each submodule's recorded commit, shallow. A cached
tree is reset to pristine and reused. Git URL rewrites (git's insteadOf) from pins.yaml apply to every fetch,
submodules included, so mirrors work without editing upstream's .gitmodules.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit import __version__
from buildkit.cache import prepared_tree
from buildkit.errors import BuildkitError, UpstreamMismatch
from buildkit.files import utc_now
from buildkit.gitcmd import has_commit, run_git
from buildkit.lock import Lock
from buildkit.patches import AppliedPatch, apply_patches, sha256_file
from buildkit.pins import GitUrlRewrite


class SubmoduleFact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    commit: str


class PrepareRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    record_version: Literal[1] = 1
    buildkit_version: str
    lock_sha256: str
    prepared_at: str
    repo: str
    commit: str
    tree: str
    reused: bool
    fetched: list[str]
    fetched_bytes: int
    seconds: float
    submodules: list[SubmoduleFact] | None  # None: skipped with --no-submodules
    patches: list[AppliedPatch]

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def git_config(rewrites: list[GitUrlRewrite], repo: str) -> list[str]:
    """`-c` options for every git call: URL rewrites, and file:// transport only where the pins ask for it."""
    args: list[str] = []
    for rewrite in rewrites:
        args += ["-c", f"url.{rewrite.url}.insteadOf={rewrite.instead_of}"]
    # Submodules may not use file:// by default (CVE-2022-39253); allow it only for the user's own mirrors.
    if repo.startswith("file://") or any(r.url.startswith("file://") for r in rewrites):
        args += ["-c", "protocol.file.allow=always"]
    return args


def _git_dir_bytes(tree: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(tree / ".git"):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _submodule_status(tree: Path, config: list[str]) -> list[tuple[str, str, str]]:
    """(flag, commit, path) per submodule: ' ' in sync, '-' not checked out, '+' other commit, 'U' conflict."""
    out = run_git(["submodule", "status", "--recursive"], cwd=tree, config=config)
    rows = []
    for line in out.splitlines():
        if not line:
            continue
        flag, rest = line[0], line[1:]
        commit, _, path = rest.partition(" ")
        rows.append((flag, commit, path.split(" (")[0]))
    return rows


def prepare(
    lock: Lock,
    lock_sha256: str,
    project_dir: Path,
    cache_dir: Path,
    rewrites: list[GitUrlRewrite],
    submodules: bool = True,
) -> PrepareRecord:
    started = time.monotonic()
    repo, commit = lock.nemo_rl.repo, lock.nemo_rl.commit
    tree = prepared_tree(cache_dir, commit)
    marker = _marker(tree)
    config = git_config(rewrites, repo)
    fetched: list[str] = []

    def record(**values) -> PrepareRecord:
        return PrepareRecord(
            buildkit_version=__version__,
            lock_sha256=lock_sha256,
            prepared_at=utc_now(),
            repo=repo,
            commit=commit,
            tree=str(tree),
            seconds=round(time.monotonic() - started, 3),
            **values,
        )

    # Fast path: a tree already prepared for exactly these patches is left untouched, so its bytes (.git
    # included, which upstream's Dockerfile copies into the image) stay the same and the build cache holds.
    done = _already_prepared(tree, marker, commit, lock.patches, submodules)
    if done is not None:
        return record(reused=True, fetched=[], fetched_bytes=0, submodules=done.submodules, patches=done.patches)
    marker.unlink(missing_ok=True)

    if not (tree / ".git").exists():
        tree.mkdir(parents=True, exist_ok=True)
        run_git(["init", "-q", str(tree)])
        run_git(["remote", "add", "origin", repo], cwd=tree)
    bytes_before = _git_dir_bytes(tree)
    reused = has_commit(tree, commit)
    if not reused:
        run_git(["fetch", "-q", "--depth=1", "--no-tags", "origin", commit], cwd=tree, config=config)
        fetched.append(f"{repo} at {commit} (shallow, by SHA)")

    # Back to pristine: the locked commit, nothing modified, nothing untracked (earlier patches included).
    run_git(["checkout", "-q", "--detach", "--force", commit], cwd=tree)
    run_git(["clean", "-q", "-ffdx"], cwd=tree)

    submodule_facts: list[SubmoduleFact] | None = None
    if submodules:
        before = {path: (flag, sha) for flag, sha, path in _submodule_status(tree, config)}
        run_git(["submodule", "sync", "-q", "--recursive"], cwd=tree, config=config)
        run_git(
            ["submodule", "update", "-q", "--init", "--recursive", "--depth", "1", "--force"], cwd=tree, config=config
        )
        run_git(["submodule", "foreach", "-q", "--recursive", "git clean -q -ffdx"], cwd=tree, config=config)
        status = _submodule_status(tree, config)
        for _flag, sha, path in status:
            if before.get(path) != (" ", sha):
                fetched.append(f"submodule {path} at {sha} (shallow)")
        submodule_facts = [SubmoduleFact(path=path, commit=sha) for _, sha, path in status]
        wrong = [f"{path} ({flag!r})" for flag, _, path in status if flag != " "]
        if wrong:
            raise UpstreamMismatch(f"submodules not at the commits {commit[:12]} records: {', '.join(wrong)}")

    head = run_git(["rev-parse", "HEAD"], cwd=tree).strip()
    if head != commit:
        raise UpstreamMismatch(f"prepared tree is at {head}, not the locked {commit}")
    dirty = run_git(["status", "--porcelain", "--ignore-submodules=none"], cwd=tree).strip()
    if dirty:
        raise UpstreamMismatch(f"prepared tree has stray changes before patching:\n{dirty}")

    applied = apply_patches(tree, lock.patches, project_dir)

    changed = {line[3:] for line in run_git(["status", "--porcelain"], cwd=tree).splitlines() if line}
    expected = {t.path for patch in applied for t in patch.targets}
    if changed != expected:
        raise UpstreamMismatch(
            f"after patching, changed files {sorted(changed)} differ from the patches' targets {sorted(expected)}"
        )
    result = record(
        reused=reused,
        fetched=fetched,
        fetched_bytes=max(0, _git_dir_bytes(tree) - bytes_before),
        submodules=submodule_facts,
        patches=applied,
    )
    marker.write_text(result.to_json())
    return result


def _marker(tree: Path) -> Path:
    return tree.with_name(tree.name + ".prepared.json")


def is_prepared(tree: Path, lock: Lock, submodules: bool = True) -> bool:
    """Whether `prepare` would leave the tree as it is (it is already what this lock asks for)."""
    return _already_prepared(tree, _marker(tree), lock.nemo_rl.commit, lock.patches, submodules) is not None


def _already_prepared(tree: Path, marker: Path, commit: str, patches: list, submodules: bool) -> PrepareRecord | None:
    """The previous prepare's record, if the tree is still exactly what it produced; checked without writing."""
    try:
        previous = PrepareRecord.model_validate_json(marker.read_text())
    except (OSError, ValueError):
        return None
    if previous.commit != commit or (previous.submodules is not None) != submodules:
        return None
    if [(p.file, p.sha256) for p in previous.patches] != [(p.file, p.sha256) for p in patches]:
        return None
    try:
        if (tree / ".git" / "HEAD").read_text().strip() != commit:
            return None
        # GIT_OPTIONAL_LOCKS=0: status must not refresh (rewrite) the index.
        status = run_git(
            ["status", "--porcelain", "--ignored", "--ignore-submodules=none"],
            cwd=tree,
            env={"GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, BuildkitError):
        return None
    changed = {line[3:] for line in status.splitlines() if line}
    targets = {t.path: t.after for patch in previous.patches for t in patch.targets}
    if changed != set(targets):
        return None
    if any(sha256_file(tree / path) != after for path, after in targets.items()):
        return None
    return previous
