"""Source preparation: NeMo-RL at the locked commit in a cache, submodules at the commits its tree records, the
declared patches applied and verified, and a record of all of it.

Fetches only what is needed: the locked commit by SHA, shallow; each submodule's recorded commit, shallow. A cached
tree is reset to pristine and reused. Git URL rewrites (git's insteadOf) from pins.yaml apply to every fetch,
submodules included, so mirrors work without editing upstream's .gitmodules.

The cache is untrusted (another user, a CI cache restored from a pull request, a damaged disk):
  - git runs with hooks and fsmonitor off (gitcmd), and a cached tree is used only if its git dirs (the
    superproject's and every submodule's) hold just the config buildkit writes, and no attributes, alternates or
    hooks; otherwise the entry is deleted and prepared afresh, and the record's `fetched` says why;
  - the reset to pristine starts from fresh indexes, so no skip-worktree or assume-unchanged flag survives it;
  - a tree counts as prepared only when it is the locked commit itself: every file has the content and mode of the
    commit's blob (trees read through objects whose ids are checked), the patch targets the commit's blobs with the
    locked patches applied, nothing else is there, and each submodule likewise at its recorded commit. The marker
    beside the tree only says that this check is worth making.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from buildkit import __version__
from buildkit.dockerfile.patches import apply_patches, patch_targets, read_patch_text
from buildkit.errors import BuildkitError, GitFailed, InputError, UpstreamMismatch
from buildkit.files import MAX_RECORD_BYTES, read_local, utc_now, write_atomic, write_error
from buildkit.models.lock import Lock, PatchFact
from buildkit.models.pins import GitUrlRewrite, git_settings
from buildkit.models.records.prepare import AppliedPatch, PrepareRecord, SubmoduleFact
from buildkit.options import PrepareOptions
from buildkit.stages.context import Context, StageStatus
from buildkit.stages.prepare.submodules import submodule_failure, submodule_status
from buildkit.stages.prepare.uvsource import write_uv_source, writes_uv_source
from buildkit.world.cache import prepared_tree
from buildkit.world.git import (
    has_commit,
    inspect_git_dir,
    object_id,
    read_objects,
    run_git,
    run_git_bytes,
    written_by_init,
)


class _Damaged(Exception):
    """A cache entry that is not what buildkit left there (or not the locked commit); the message says how."""


def git_config(rewrites: list[GitUrlRewrite], repo: str) -> list[str]:
    """`-c` options for every git call: the pins' git settings (models/pins.py `git_settings`)."""
    return [arg for key, value in git_settings(rewrites, repo) for arg in ("-c", f"{key}={value}")]


def _git_dir_bytes(tree: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(tree / ".git"):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def prepare(
    lock: Lock,
    lock_sha256: str,
    project_dir: Path,
    cache_dir: Path,
    rewrites: list[GitUrlRewrite],
    submodules: bool = True,
    on_step: Callable[[str], None] | None = None,
) -> PrepareRecord:
    """NeMo-RL at the lock's commit in the cache, patched (and the uv-source mode written); `on_step` hears what a
    long step does now (uv's lines, for the spinner)."""
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

    with entry_lock(tree):  # one prepare of a commit at a time; the others then find it prepared
        return _prepare_locked(lock, project_dir, tree, marker, config, submodules, fetched, record, rewrites, on_step)


@contextmanager
def entry_lock(tree: Path) -> Iterator[None]:
    """An exclusive lock on the cache entry `tree` (a lock file beside it, flock'd), held for the whole prepare:
    concurrent prepares of one commit (CI jobs sharing a cache, two terminals) wait for each other instead of
    fetching into, or deleting, the same tree. Released when the process ends, however it ends."""
    path = tree.with_name(tree.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        raise InputError(f"cannot lock the cache entry {tree}: {exc.strerror or exc}", hint=_disk_hint(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{path} is not a regular file", hint=f"delete {path}, then run buildkit again")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _disk_hint(exc: OSError) -> str:
    return write_error(Path("."), exc).hint or "check the cache directory"


def _prepare_locked(
    lock: Lock,
    project_dir: Path,
    tree: Path,
    marker: Path,
    config: list[str],
    submodules: bool,
    fetched: list[str],
    record: Callable[..., PrepareRecord],
    rewrites: list[GitUrlRewrite],
    on_step: Callable[[str], None] | None = None,
) -> PrepareRecord:
    repo, commit = lock.nemo_rl.repo, lock.nemo_rl.commit
    modules: dict[Path, Path] = {}
    if os.path.lexists(tree):
        try:
            modules = _check_entry(tree, repo)
        except _Damaged as exc:
            _discard(tree, str(exc), fetched)

    # Fast path: a tree that already is what this lock asks for is left untouched, so its bytes (.git included,
    # which upstream's Dockerfile copies into the image) stay the same and the build cache holds.
    # A written uv-source mode is uv's answer of now, not a function of the lock: it is written on every prepare.
    if not fetched and not writes_uv_source(lock) and _hinted(marker, commit, lock.patches, submodules):
        try:
            facts, applied = _verify_prepared(tree, modules, commit, lock.patches, project_dir, submodules)
            return record(reused=True, fetched=[], fetched_bytes=0, submodules=facts, patches=applied)
        except (_Damaged, BuildkitError, OSError, ValueError):
            pass  # not what this lock asks for (any more): prepare it below
    _remove(marker)

    reused, facts, bytes_before = _pristine_or_afresh(tree, modules, repo, commit, config, submodules, fetched)
    applied = _apply_and_check_patches(tree, lock, project_dir)
    written = write_uv_source(tree, lock, rewrites, on_step) if writes_uv_source(lock) else None
    if written is not None:
        targets = {t.path for patch in applied for t in patch.targets}
        _changed_only(tree, targets | {"pyproject.toml", "uv.lock"}, "after writing the uv-source mode")
    make_reproducible(tree, _check_entry(tree, repo))
    result = record(
        reused=reused,
        fetched=fetched,
        fetched_bytes=max(0, _git_dir_bytes(tree) - bytes_before),
        submodules=facts if submodules else None,
        patches=applied,
        uv_source=written,
    )
    write_atomic(marker, result.to_json())
    return result


def _pristine_or_afresh(
    tree: Path,
    modules: dict[Path, Path],
    repo: str,
    commit: str,
    config: list[str],
    submodules: bool,
    fetched: list[str],
) -> tuple[bool, list[SubmoduleFact], int]:
    """_reset_to_pristine on the cache entry; a damaged entry is discarded and prepared once more from nothing.
    Also returns the size of the git dirs before the last try (what was fetched is the growth)."""
    while True:
        cached = (tree / ".git").is_dir()
        bytes_before = _git_dir_bytes(tree)
        try:
            reused, facts = _reset_to_pristine(tree, modules, repo, commit, config, submodules, fetched)
            return reused, facts, bytes_before
        except _Damaged as exc:
            if not cached:
                raise UpstreamMismatch(f"the tree prepared afresh in {tree} is not {commit[:12]}: {exc}") from None
            reason = str(exc)
        except GitFailed as exc:
            if not cached or exc.remote_unreachable():
                raise
            reason = exc.message
        except OSError as exc:  # a file where a directory should be, one that cannot be removed, a full disk ...
            if not cached or exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise InputError(f"cannot prepare {tree}: {exc.strerror or exc}", hint=_disk_hint(exc)) from None
            reason = f"{exc.filename or tree}: {exc.strerror or exc}"
        # A damaged cache entry: start again from an empty one (once; it is not cached the second time).
        _discard(tree, reason, fetched)
        modules = {}


def _apply_and_check_patches(tree: Path, lock: Lock, project_dir: Path) -> list[AppliedPatch]:
    """The lock's patches applied to the pristine tree, which then differs from the commit in their targets only."""
    applied = apply_patches(tree, lock.patches, project_dir)
    _changed_only(tree, {t.path for patch in applied for t in patch.targets}, "after patching", exact=True)
    return applied


def _changed_only(tree: Path, expected: set[str], when: str, exact: bool = False) -> None:
    """The tree differs from the commit in `expected` only (exact: in each of them)."""
    changed = {line[3:] for line in run_git(["status", "--porcelain"], cwd=tree).splitlines() if line}
    if changed != expected if exact else not changed <= expected:
        raise UpstreamMismatch(f"{when}, changed files {sorted(changed)} differ from the expected {sorted(expected)}")


def _reset_to_pristine(
    tree: Path,
    modules: dict[Path, Path],
    repo: str,
    commit: str,
    config: list[str],
    submodules: bool,
    fetched: list[str],
) -> tuple[bool, list[SubmoduleFact]]:
    """The locked commit checked out afresh (submodules too, unless skipped), nothing else in the tree; raises
    _Damaged when the cache entry turns out not to be what buildkit left there."""
    if not (tree / ".git").exists():
        _init_entry(tree, repo)
    reused = has_commit(tree, commit)
    if not reused:
        run_git(["fetch", "-q", "--depth=1", "--no-tags", "origin", commit], cwd=tree, config=config)
        fetched.append(f"{repo} at {commit} (shallow, by SHA)")
    listing = _checkout(tree, modules, commit)
    gitlinks = sorted(path for path, (mode, _) in listing.items() if mode == "160000")
    if submodules:
        modules = _update_submodules(tree, modules, repo, commit, config, gitlinks, fetched)
    else:
        # Without submodules the tree holds none of their files.
        for path in gitlinks:
            for child in (tree / path).iterdir() if (tree / path).is_dir() else ():
                _remove(child)
    facts = _check_work(tree, tree, modules, listing, {}, submodules)
    _check_index_flags(tree, facts)
    return reused, facts


def _init_entry(tree: Path, repo: str) -> None:
    """An empty repository for the cache entry, fetching from `repo`."""
    try:
        tree.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        in_the_way = next((p for p in (tree, *tree.parents) if os.path.lexists(p) and not p.is_dir()), tree)
        raise InputError(
            f"cannot create the cache entry {tree}: {exc.strerror or exc}",
            hint=f"{in_the_way} is in the way: delete it, then run buildkit again",
        ) from None
    run_git(["init", "-q", str(tree)])
    (tree / ".git" / "info").mkdir(exist_ok=True)  # git's usual layout, which comes from templates (none here)
    run_git(["remote", "add", "origin", repo], cwd=tree)


def _checkout(tree: Path, modules: dict[Path, Path], commit: str) -> dict[str, tuple[str, str]]:
    """The superproject checked out at `commit` (its .gitmodules included) before any submodule command reads it,
    with nothing else in its work tree; the commit's listing."""
    # Fresh indexes: a cached one may flag files skip-worktree or assume-unchanged, which checkout leaves alone.
    for git_dir in (tree / ".git", *modules):
        (git_dir / "index").unlink(missing_ok=True)
    run_git(["checkout", "-q", "--detach", "--force", commit], cwd=tree)
    run_git(["clean", "-q", "-ffdx"], cwd=tree)
    listing = _listing(tree, commit)
    try:
        _check_work(tree, tree, modules, listing, {}, submodules=None)
    except _Damaged as exc:
        raise _Damaged(f"after a fresh checkout, {exc} (the cached objects are not the commit's)") from None
    return listing


def _update_submodules(
    tree: Path,
    modules: dict[Path, Path],
    repo: str,
    commit: str,
    config: list[str],
    gitlinks: list[str],
    fetched: list[str],
) -> dict[Path, Path]:
    """Every submodule at the commit the superproject records, fetched only where it was not there already; the
    submodule git dirs (each with its work tree) afterwards."""
    _check_gitfiles(tree, modules, gitlinks)
    # What each submodule had checked out: one already at its recorded commit needs no fetch.
    top = tree.resolve()
    before = {work.relative_to(top).as_posix(): _head(module) for module, work in modules.items()}
    run_git(["submodule", "sync", "-q", "--recursive"], cwd=tree, config=config)
    _check_entry(tree, repo)  # sync wrote the URLs from .gitmodules: each submodule git dir must agree
    try:
        run_git(
            ["submodule", "update", "-q", "--init", "--recursive", "--depth", "1", "--force"],
            cwd=tree,
            config=config,
        )
    except GitFailed as exc:
        raise submodule_failure(tree, exc) from None
    run_git(["submodule", "foreach", "-q", "--recursive", "git clean -q -ffdx"], cwd=tree, config=config)
    status = submodule_status(tree, config)
    for _flag, sha, path in status:
        if before.get(path) != sha:
            fetched.append(f"submodule {path} at {sha} (shallow)")
    wrong = [f"{path} ({flag!r})" for flag, _, path in status if flag != " "]
    if wrong:
        raise _Damaged(f"submodules not at the commits {commit[:12]} records: {', '.join(wrong)}")
    return _check_entry(tree, repo)  # the submodule git dirs update made


def make_reproducible(tree: Path, modules: dict[Path, Path]) -> None:
    """Make the tree's bytes a function of the commit alone, not of when, where or how often it was cloned:
    upstream's Dockerfile copies all of it, .git included, into the image. In each git dir (superproject and
    submodules):
      - reflogs, FETCH_HEAD and ORIG_HEAD go (times of local operations, the URL fetched from);
      - the index is rebuilt from HEAD with `git read-tree`: no stat data of this clone (git re-hashes the files on
        its next status, and with GIT_OPTIONAL_LOCKS=0 buildkit's own calls never write it back);
      - the objects are repacked into one pack, single-threaded and without reusing deltas: the fetched pack is
        whatever the server sent, and what an earlier commit in a reused cache entry left is dropped; `git prune`
        then drops it from the shallow list too.
    Then every file and directory gets mode 0644/0755 (0444/0555 where read-only) whatever the umask, so the named
    context is the same on every machine (git keeps only the executable bit). File times are left as they are: the
    exporter clamps them to SOURCE_DATE_EPOCH (`rewrite-timestamp=true`), and BuildKit's incremental context
    transfer tells changed files by time and size, so equal times would let it keep a stale file of equal size.
    """
    # Only buildkit's settings: a user's pack.window, core.compression or index.version would change the bytes.
    quiet = {"GIT_OPTIONAL_LOCKS": "0", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    pack = ["-c", "pack.threads=1", "-c", "pack.writeReverseIndex=false", "-c", "repack.writeBitmaps=false"]
    for git_dir, work in ((tree / ".git", tree), *modules.items()):
        for name in ("logs", "FETCH_HEAD", "ORIG_HEAD"):
            _remove(git_dir / name)
        (git_dir / "index").unlink(missing_ok=True)
        run_git(["read-tree", "HEAD"], cwd=work, env=quiet)
        run_git(["repack", "-a", "-d", "-F", "-q"], cwd=work, config=pack, env=quiet)
        run_git(["prune", "--expire=now"], cwd=work, env=quiet)
    for root, dirnames, filenames in os.walk(tree):
        for name in (*filenames, *dirnames):
            _normalize_mode(os.path.join(root, name))
    _normalize_mode(str(tree))


def _normal_mode(info: os.stat_result) -> int | None:
    """The mode make_reproducible gives a path (None for a link: its own mode means nothing, and cannot be set)."""
    if stat.S_ISLNK(info.st_mode):
        return None
    mode = 0o755 if info.st_mode & stat.S_IXUSR or stat.S_ISDIR(info.st_mode) else 0o644
    return mode if info.st_mode & stat.S_IWUSR else mode & ~0o222


def _normalize_mode(path: str) -> None:
    info = os.lstat(path)
    mode = _normal_mode(info)
    if mode is not None and stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def _check_modes(tree: Path) -> None:
    """Every path in the tree (.git and submodules included) has the mode make_reproducible gave it: a `chmod g+w`
    in the cache would otherwise reach the image (the named context keeps modes)."""

    def fail(exc: OSError) -> None:
        raise exc

    for root, dirnames, filenames in os.walk(tree, onerror=fail):
        for name in (*filenames, *dirnames):
            info = os.lstat(os.path.join(root, name))
            mode = _normal_mode(info)
            if mode is not None and stat.S_IMODE(info.st_mode) != mode:
                path = os.path.relpath(os.path.join(root, name), tree.parent)
                raise _Damaged(f"{path} has mode {stat.S_IMODE(info.st_mode):o}, not {mode:o}")


def _marker(tree: Path) -> Path:
    return tree.with_name(tree.name + ".prepared.json")


def is_prepared(tree: Path, lock: Lock, project_dir: Path, submodules: bool = True) -> bool:
    """Whether `prepare` would leave the tree as it is (it is already what this lock asks for). Writes nothing."""
    if writes_uv_source(lock) or not _hinted(_marker(tree), lock.nemo_rl.commit, lock.patches, submodules):
        return False
    try:
        modules = _check_entry(tree, lock.nemo_rl.repo)
        _verify_prepared(tree, modules, lock.nemo_rl.commit, lock.patches, project_dir, submodules)
        return True
    except (_Damaged, BuildkitError, OSError, ValueError):
        return False


def _hinted(marker: Path, commit: str, patches: list[PatchFact], submodules: bool) -> bool:
    """Whether the marker says a prepare finished for this commit, these patches and this choice of submodules: only
    then is checking the tree worth its time. The marker decides nothing more (anyone can write it)."""
    try:
        if marker.is_symlink() or not marker.is_file():
            return False
        previous = PrepareRecord.model_validate_json(read_local(marker, "the cache marker", MAX_RECORD_BYTES))
    except (OSError, ValueError, InputError):
        return False
    return (
        previous.record_version == 2
        and previous.commit == commit
        and (previous.submodules is not None) == submodules
        and [(p.file, p.sha256) for p in previous.patches] == [(p.file, p.sha256) for p in patches]
    )


def _verify_prepared(
    tree: Path, modules: dict[Path, Path], commit: str, patches: list[PatchFact], project_dir: Path, submodules: bool
) -> tuple[list[SubmoduleFact] | None, list[AppliedPatch]]:
    """The submodules and patch records of a tree that is exactly what `prepare` makes of this lock, checked against
    the commit itself; raises _Damaged otherwise. Writes nothing in the cache."""
    if _head(tree / ".git") != commit:
        raise _Damaged(f"HEAD is not {commit[:12]}")
    for git_dir in (tree / ".git", *modules):
        if any(os.path.lexists(git_dir / name) for name in ("logs", "FETCH_HEAD", "ORIG_HEAD")) or (
            len(list((git_dir / "objects" / "pack").glob("*.pack"))) != 1
        ):
            raise _Damaged(f"{git_dir.relative_to(tree.parent)} is not as make_reproducible left it")
    try:
        _check_modes(tree)
    except OSError as exc:
        raise _Damaged(f"cannot read {exc.filename or tree}: {exc.strerror or exc}") from None
    listing = _listing(tree, commit)
    applied, patched = _patched(tree, commit, listing, patches, project_dir)
    facts = _check_work(tree, tree, modules, listing, patched, submodules)
    _check_index_flags(tree, facts)
    return (facts if submodules else None), applied


def _patched(
    tree: Path, commit: str, listing: dict[str, tuple[str, str]], patches: list[PatchFact], project_dir: Path
) -> tuple[list[AppliedPatch], dict[str, tuple[str, str] | None]]:
    """The locked patches applied to the commit's own blobs in a scratch directory: the records `prepare` makes, and
    the (mode, blob id) each target must have (None where a patch deletes it)."""
    if not patches:
        return [], {}
    targets: set[str] = set()
    for fact in patches:
        targets.update(patch_targets(read_patch_text(project_dir / fact.file, project_dir), fact.file))
    pristine = {path: listing[path] for path in sorted(targets) if path in listing}
    blobs = read_objects(tree, [oid for _, oid in pristine.values()])
    with tempfile.TemporaryDirectory(prefix="buildkit-patch-") as tmp:
        scratch = Path(tmp)
        run_git(["init", "-q", str(scratch)])
        for (path, (mode, _)), (_, _, data) in zip(pristine.items(), blobs, strict=True):
            target = scratch / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == "120000":
                target.symlink_to(os.fsdecode(data))
            else:
                target.write_bytes(data)
                target.chmod(0o755 if mode == "100755" else 0o644)
        applied = apply_patches(scratch, patches, project_dir)
        expected: dict[str, tuple[str, str] | None] = {}
        for path in targets:
            target = scratch / path
            if target.is_symlink():
                expected[path] = ("120000", object_id("blob", os.fsencode(os.readlink(target)), len(commit)))
            elif target.is_file():
                mode = "100755" if target.stat().st_mode & stat.S_IXUSR else "100644"
                expected[path] = (mode, object_id("blob", target.read_bytes(), len(commit)))
            else:
                expected[path] = None
    return applied, expected


def _listing(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, id) of every blob and gitlink in the commit, read through objects whose ids are checked (from
    the commit down), so a forged tree object in the cache cannot change the answer."""
    try:
        raw = run_git_bytes(["ls-tree", "-r", "-t", "-z", "--full-tree", commit], cwd=repo)
        # ls-tree names the subtrees to read; what they hold comes from the checked objects alone.
        subtrees = {item.split(b" ")[2].split(b"\t")[0].decode() for item in raw.split(b"\0") if b" tree " in item}
        objects = read_objects(repo, [commit, f"{commit}^{{tree}}", *sorted(subtrees)])
    except (GitFailed, IndexError, UnicodeDecodeError) as exc:
        raise _Damaged(f"cannot read commit {commit[:12]}: {exc}") from None
    (commit_id, kind, body), (root, _, _) = objects[0], objects[1]
    if commit_id != commit or kind != "commit" or not body.startswith(f"tree {root}\n".encode()):
        raise _Damaged(f"commit {commit[:12]} is corrupt")
    trees = {oid: data for oid, kind, data in objects if kind == "tree"}
    files: dict[str, tuple[str, str]] = {}
    todo = [("", root)]
    while todo:
        prefix, oid = todo.pop()
        if oid not in trees:
            raise _Damaged(f"tree {oid} of commit {commit[:12]} is missing")
        for mode, name, child in _tree_entries(trees[oid], len(commit) // 2):
            if mode == "40000":
                todo.append((f"{prefix}{name}/", child))
            else:
                files[prefix + name] = (mode, child)
    return files


def _tree_entries(data: bytes, id_bytes: int):
    """(mode, name, id) of each entry of a raw tree object: `<mode> <name>\\0<binary id>`."""
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        nul = data.find(b"\0", space)
        if space < 0 or nul < 0:
            raise _Damaged("a tree object is malformed")
        name = os.fsdecode(data[space + 1 : nul])
        if name in ("", ".", "..", ".git") or "/" in name:
            raise _Damaged(f"a tree names {name!r}, which git never checks out")
        yield data[pos:space].decode(), name, data[nul + 1 : nul + 1 + id_bytes].hex()
        pos = nul + 1 + id_bytes


def _scan(work: Path, gitlinks: set[str]) -> tuple[dict[str, os.stat_result], set[str]]:
    """Every file and link (with its lstat) and every directory under work, relative to it; the top .git and the
    submodules' directories are not entered (they are checked on their own)."""
    files: dict[str, os.stat_result] = {}
    dirs: set[str] = set()

    def fail(exc: OSError) -> None:
        raise exc

    for root, dirnames, filenames in os.walk(work, onerror=fail):
        rel = os.path.relpath(root, work)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        enter = []
        for name in dirnames:
            path = prefix + name
            info = os.lstat(os.path.join(root, name))
            if stat.S_ISLNK(info.st_mode):
                files[path] = info  # a link to a directory is a link, never entered
            elif path != ".git":
                dirs.add(path)
                if path not in gitlinks:
                    enter.append(name)
        dirnames[:] = enter
        for name in filenames:
            if prefix + name != ".git":
                files[prefix + name] = os.lstat(os.path.join(root, name))
    return files, dirs


def _check_work(
    tree: Path,
    work: Path,
    modules: dict[Path, Path],
    listing: dict[str, tuple[str, str]],
    patched: dict[str, tuple[str, str] | None],
    submodules: bool | None,
    prefix: str = "",
) -> list[SubmoduleFact]:
    """Check that work holds exactly the commit's files (listing, patch targets as patched): each with the blob's
    content and mode, links as links, and no other file or directory; raises _Damaged otherwise. Content is hashed,
    never judged by stat data, which a forged index or a kept mtime fools. Submodules: None, not entered; True,
    each at its recorded commit and checked the same way against its own commit; False, empty. Returns the
    submodules checked, each followed by its own."""
    want = {path: entry for path, entry in {**listing, **patched}.items() if entry is not None}
    gitlinks = {path for path, (mode, _) in want.items() if mode == "160000"}
    try:
        files, dirs = _scan(work, gitlinks)
        blobs = want.keys() - gitlinks
        if extra := sorted(files.keys() - blobs):
            raise _Damaged(f"untracked file {prefix}{extra[0]}")
        if missing := sorted(blobs - files.keys()):
            raise _Damaged(f"missing file {prefix}{missing[0]}")
        parents = {path.rsplit("/", n)[0] for path in want for n in range(1, path.count("/") + 1)}
        if stray := sorted(dirs - parents - gitlinks):
            raise _Damaged(f"untracked directory {prefix}{stray[0]}")
        for path, info in files.items():
            mode, oid = want[path]
            full = os.path.join(work, path)
            if mode == "120000":
                same = stat.S_ISLNK(info.st_mode) and object_id("blob", os.fsencode(os.readlink(full)), len(oid)) == oid
            else:
                same = (
                    stat.S_ISREG(info.st_mode)
                    and bool(info.st_mode & stat.S_IXUSR) == (mode == "100755")
                    and not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
                    and object_id("blob", _read(full), len(oid)) == oid
                )
            if not same:
                raise _Damaged(f"{prefix}{path} differs from the commit")
        facts: list[SubmoduleFact] = []
        for path in sorted(gitlinks) if submodules is not None else ():
            sub, sha = work / path, want[path][1]
            if path not in dirs or not any(os.scandir(sub)):
                if submodules:
                    raise _Damaged(f"submodule {prefix}{path} is not checked out")
                continue
            if not submodules:
                raise _Damaged(f"submodule {prefix}{path} is checked out")
            module = _module_of(sub, modules)
            if _head(module) != sha:
                raise _Damaged(f"submodule {prefix}{path} is not at {sha[:12]}")
            facts.append(SubmoduleFact(path=prefix + path, commit=sha))
            facts += _check_work(tree, sub, modules, _listing(module, sha), {}, True, f"{prefix}{path}/")
        return facts
    except OSError as exc:
        raise _Damaged(f"cannot read {exc.filename or work}: {exc.strerror or exc}") from None


def _head(git_dir: Path) -> str:
    return (git_dir / "HEAD").read_text(errors="replace").strip()


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _module_of(work: Path, modules: dict[Path, Path]) -> Path:
    """The submodule git dir work's .git links to: one of the checked ones, whose work tree work is."""
    gitfile = work / ".git"
    text = gitfile.read_text(errors="replace") if gitfile.is_file() and not gitfile.is_symlink() else ""
    if not text.startswith("gitdir: "):
        raise _Damaged(f"{gitfile} does not link to a submodule git dir")
    module = (work / text.removeprefix("gitdir: ").strip()).resolve()
    if modules.get(module) != work.resolve():
        raise _Damaged(f"{gitfile} links to {module}, not to the git dir of that submodule")
    return module


def _check_gitfiles(tree: Path, modules: dict[Path, Path], gitlinks: list[str]) -> None:
    """Every .git in the submodules' directories links to a checked submodule git dir whose work tree it is: git
    would otherwise run in a git dir anywhere, with its config, attributes and hooks."""
    for path in gitlinks:
        for root, dirnames, filenames in os.walk(tree / path):
            if ".git" in dirnames or ".git" in filenames:
                _module_of(Path(root), modules)
            dirnames[:] = [name for name in dirnames if name != ".git"]


def _check_index_flags(tree: Path, facts: list[SubmoduleFact]) -> None:
    """Every index entry is cached without flags (`H`): skip-worktree (S) or assume-unchanged (h) hide changes."""
    for work in (tree, *(tree / fact.path for fact in facts)):
        out = run_git(["ls-files", "-v", "-z"], cwd=work, env={"GIT_OPTIONAL_LOCKS": "0"})
        flagged = [entry for entry in out.split("\0") if entry and not entry.startswith("H ")]
        if flagged:
            raise _Damaged(f"index flag {flagged[0][0]!r} on {flagged[0][2:]}")


def _submodule_config(key: str, value: str) -> bool:
    # The URLs upstream's .gitmodules gives (`git submodule sync` writes them again before any fetch).
    return key.startswith("submodule.") and (key.endswith(".url") or (key.endswith(".active") and value == "true"))


def _module_config(key: str, value: str) -> bool:
    """What `git submodule update` writes in a submodule's git dir; core.worktree and the URL are checked apart."""
    return (
        written_by_init(key, value)
        or _submodule_config(key, value)
        or key in ("core.worktree", "remote.origin.url")
        or (key == "remote.origin.fetch" and bool(re.fullmatch(r"\+refs/heads/[^:]+:refs/remotes/origin/[^:]+", value)))
        or (key.startswith("branch.") and key.endswith(".remote") and value == "origin")
        or (key.startswith("branch.") and key.endswith(".merge") and value.startswith("refs/heads/"))
    )


def _check_entry(tree: Path, repo: str) -> dict[Path, Path]:
    """The submodule git dirs of a cached tree (each with its work tree), once the entry is one buildkit could have
    left there: git dirs holding only the config buildkit writes, no attributes, alternates or hooks, submodule
    work trees inside the tree and fetching from the URL their owner names. Raises _Damaged otherwise; reads only."""
    if tree.is_symlink() or not tree.is_dir():
        raise _Damaged("not a directory")
    git_dir = tree / ".git"

    origin = {("remote.origin.url", repo), ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")}

    def superproject(key: str, value: str) -> bool:
        return written_by_init(key, value) or _submodule_config(key, value) or (key, value) in origin

    problem, configs = inspect_git_dir(git_dir, superproject)
    if problem:
        raise _Damaged(f"{problem} in .git")
    owners = {git_dir: configs}
    modules: dict[Path, Path] = {}
    for module, name, owner in _module_dirs(git_dir):
        where = module.relative_to(tree).as_posix()
        problem, config = inspect_git_dir(module, _module_config)
        if problem:
            raise _Damaged(f"{problem} in {where}")
        owners[module] = config
        work = (module / config.get("core.worktree", "/")).resolve()
        if not work.is_relative_to(tree.resolve()) or work.is_relative_to(git_dir.resolve()):
            raise _Damaged(f"unexpected git config core.worktree in {where}")
        if config.get("remote.origin.url") != owners[owner].get(f"submodule.{name}.url"):
            raise _Damaged(f"unexpected git config remote.origin.url in {where}")
        modules[module.resolve()] = work
    return modules


def _module_dirs(git_dir: Path) -> list[tuple[Path, str, Path]]:
    """(git dir, name, owner's git dir) of every submodule git dir under git_dir/modules, nested ones included."""
    found = []
    owners = [git_dir]
    while owners:
        owner = owners.pop()
        base = owner / "modules"
        for root, dirnames, filenames in os.walk(base):
            if any(os.path.islink(os.path.join(root, name)) for name in dirnames):
                raise _Damaged(f"unexpected link in {Path(root).relative_to(git_dir.parent).as_posix()}")
            if "HEAD" in filenames:
                found.append((Path(root), Path(root).relative_to(base).as_posix(), owner))
                owners.append(Path(root))
                dirnames.clear()
    return found


def _discard(tree: Path, reason: str, fetched: list[str]) -> None:
    """Delete a damaged cache entry (tree and marker), saying why in the record."""
    fetched.append(f"cache entry reset: {reason}")
    for path in (_marker(tree), tree):
        _remove(path, f" (a damaged cache entry: {reason})")


def _remove(path: Path, why: str = "") -> None:
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()  # a link itself, never what it points to
        elif path.exists():
            shutil.rmtree(path)
    except FileNotFoundError:
        return  # already gone
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise InputError(f"cannot delete {path}{why}: {exc.strerror}", hint=_disk_hint(exc)) from None
        raise InputError(
            f"cannot delete {path}{why}: {exc.strerror or exc}", hint=f"delete {path} by hand, then run buildkit again"
        ) from None


# -- the pipeline's stage (stages/pipeline.py) --------------------------------------------------------------------


def current(ctx: Context[PrepareOptions]) -> StageStatus:
    """Prepared when the cached tree is this lock's commit with its patches (and submodules, if asked for)."""
    commit = ctx.lock.nemo_rl.commit
    tree = ctx.paths.tree(commit)
    if is_prepared(tree, ctx.lock, ctx.paths.project_dir, ctx.options.submodules):
        return StageStatus("prepare", True, f"{tree} is prepared for this lock")
    written = ", and write vLLM's uv-source mode (uv lock)" if writes_uv_source(ctx.lock) else ""
    return StageStatus("prepare", False, f"would fetch NeMo-RL {commit} into {tree}, and patch{written}")


def run(ctx: Context[PrepareOptions]) -> None:
    """NeMo-RL at the locked commit with the declared patches, in ctx.paths.cache_dir; writes build/prepare.json."""
    assert ctx.inputs is not None
    record = prepare(
        ctx.lock,
        ctx.inputs.lock_sha256,
        ctx.paths.project_dir,
        ctx.paths.cache_dir,
        ctx.inputs.pins.git_url_rewrites,
        submodules=ctx.options.submodules,
        on_step=ctx.on_step,
    )
    ctx.write(ctx.paths.prepare_record, record.to_json())
    ctx.made.prepare = record
