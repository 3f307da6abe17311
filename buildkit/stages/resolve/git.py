"""Resolve a ref on a plain git remote (anything that is not a GitHub API host) with git itself.

`git ls-remote` answers branch and tag names and full SHAs at branch tips; a bare commit SHA is fetched by id
(shallow, commit objects only where the server allows filters). A SHA prefix that no ref tip starts with needs
the history of the branches, fetched once into a cache that later runs reuse.

The cache is untrusted: a cached repository holding config buildkit does not write, attributes, alternates or
hooks, or one git cannot read, is deleted and fetched afresh (the resolve record's notes say why).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from buildkit.errors import GitFailed, InputError, UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable
from buildkit.files import work_dir_beside
from buildkit.models.grammar import FULL_SHA_RE, SHA_PREFIX_RE
from buildkit.models.lock import Changes, CommitFact
from buildkit.world.git import has_commit, inspect_git_dir, path_problem, run_git, run_git_bytes, written_by_init
from buildkit.world.http import OFFLINE_HINT


class GitResolver:
    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self.notes: list[str] = []  # what the cache made necessary (a reset): for the resolve record, not the lock
        # resolve reads NeMo-RL's uv.lock and pyproject.toml side by side: one git fetch into a cache repo at a time
        # (two would race for its shallow.lock)
        self._files = threading.Lock()

    def _repo_for(self, url: str, damaged: str | None = None) -> tuple[Path, str | None]:
        """The cache repository for url, and why an earlier one was deleted (None when it was not)."""
        path = self.cache_dir / "git" / (hashlib.sha256(url.encode()).hexdigest()[:20] + ".git")
        if os.path.lexists(path) and not damaged:
            damaged, _ = inspect_git_dir(path, lambda key, value: _cache_config(url, key, value))
        if os.path.lexists(path) and damaged:
            try:
                if path.is_symlink() or path.is_file():
                    path.unlink()
                else:
                    shutil.rmtree(path)
            except OSError as exc:
                raise InputError(
                    f"cannot delete the damaged git cache {path} ({damaged}): {exc.strerror or exc}",
                    hint=f"delete {path} by hand, then run buildkit again",
                ) from None
        if not (path / "HEAD").exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            run_git(["init", "--quiet", "--bare", str(path)])
        return path, damaged

    def resolve(self, url: str, ref: str, config: list[str] | None = None) -> CommitFact:
        """The commit `ref` names on `url`. `config`: git's `-c` options for every command that reaches the remote
        (pins.yaml's git_url_rewrites: the mirror a GitHub URL is fetched from)."""
        try:
            return self._resolve(url, ref, config=config)
        except GitFailed as exc:
            if exc.remote_unreachable():
                raise
            # Git could not use the cached repository (garbage objects, half deleted): once more from an empty one.
            return self._resolve(url, ref, damaged=exc.message, config=config)

    def _resolve(self, url: str, ref: str, damaged: str | None = None, config: list[str] | None = None) -> CommitFact:
        repo, reset = self._repo_for(url, damaged)
        if reset:
            self.notes.append(f"git cache for {url} reset: {reset}")
        # `source` says how the ref is found on the remote, never what the cache spared (the lock is the same with
        # or without a cache): by its id, by the remote's refs, or in the history of its branches and tags.
        sha = FULL_SHA_RE.fullmatch(ref) and ref
        how = "git fetch --depth=1 <sha>"
        if not sha:
            sha = self._from_ls_remote(url, ref, config)
            how = "git ls-remote"
        if not sha and SHA_PREFIX_RE.fullmatch(ref):
            sha = self._from_history(repo, url, ref, config)
            how = "git ls-remote, git fetch (branches and tags)"
        if not sha:
            raise UpstreamMismatch(f"{url}: no branch, tag or commit matches {ref!r}")
        if not has_commit(repo, sha):
            self._fetch(repo, url, [sha], depth=1, config=config)
        out = run_git(["log", "-1", "--format=%H%n%cI%n%s", sha], cwd=repo)
        commit, date, subject = (out.splitlines() + ["", "", ""])[:3]
        return CommitFact(
            repo=url,
            ref=ref,
            commit=commit,
            date=date,
            subject=subject,
            url=None,
            source=f"{how} on {url}",
        )

    def branch_commits(self, url: str, branch: str, count: int, config: list[str] | None = None) -> list[CommitFact]:
        """The newest `count` commits reachable from a branch or tag, newest first: its tip from `git ls-remote`,
        then that much of its history (commit objects only where the server allows filters) into the cache.
        `config`: as for resolve."""
        repo, reset = self._repo_for(url)
        tip = self._from_ls_remote(url, branch, config)
        if not tip:
            raise UpstreamMismatch(f"{url}: no branch or tag {branch!r}")
        self._fetch(repo, url, [tip], depth=count, config=config)
        out = run_git(["log", f"--max-count={count}", "--format=%H%x1f%cI%x1f%s", tip, "--"], cwd=repo)
        if reset:
            self.notes.append(f"git cache for {url} reset: {reset}")
        source = f"git ls-remote, git fetch --depth={count}"
        facts = []
        for line in out.splitlines():
            commit, date, subject = (line.split("\x1f") + ["", "", ""])[:3]
            if not FULL_SHA_RE.fullmatch(commit):
                continue
            facts.append(
                CommitFact(
                    repo=url,
                    ref=commit,
                    commit=commit,
                    date=date,
                    subject=subject,
                    url=None,
                    source=f"{source} on {url}",
                )
            )
        return facts

    def file(self, url: str, commit: str, path: str, max_bytes: int, config: list[str] | None = None) -> bytes | None:
        """A file's bytes at a commit (NeMo-RL's uv.lock): the commit is in the cache after resolve(), and git
        fetches the trees and the one blob it needs from the remote (the cache is a partial clone); None when the
        commit has no such file. Larger than max_bytes: UpstreamMalformed, nothing more read. `config`: git's `-c`
        options for every fetch (pins.yaml's git_url_rewrites: the mirror a GitHub URL is fetched from)."""
        with self._files:
            repo, _reset = self._repo_for(url)
            if not has_commit(repo, commit):
                self._fetch(repo, url, [commit], depth=1, config=config)
            return _blob_at(repo, commit, path, max_bytes, url, config)

    def _from_ls_remote(self, url: str, ref: str, config: list[str] | None = None) -> str | None:
        try:
            out = run_git(["ls-remote", "--", url], timeout=120, config=config)
        except GitFailed as exc:
            last = exc.stderr.splitlines()[-1] if exc.stderr else "no answer"
            raise UpstreamUnreachable(f"cannot reach git remote {url}: {last}", hint=OFFLINE_HINT) from None
        tips: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            tips[name] = sha
        # A peeled tag (refs/tags/x^{}) names the commit; the plain tag may name a tag object.
        for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
            if name in tips:
                return tips[name]
        if SHA_PREFIX_RE.fullmatch(ref):
            matches = {sha for sha in tips.values() if sha.startswith(ref)}
            if len(matches) == 1:
                return matches.pop()
        return None

    def _from_history(self, repo: Path, url: str, prefix: str, config: list[str] | None = None) -> str | None:
        refspecs = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"]
        self._fetch(repo, url, refspecs, depth=None, config=config)
        try:
            return run_git(["rev-parse", "--verify", "--quiet", f"{prefix}^{{commit}}"], cwd=repo).strip() or None
        except GitFailed as exc:
            if "ambiguous" in exc.stderr:
                raise UpstreamMismatch(f"{url}: SHA prefix {prefix!r} is ambiguous; pin more hex digits") from None
            return None

    def _fetch(
        self, repo: Path, url: str, refspecs: list[str], depth: int | None, config: list[str] | None = None
    ) -> None:
        args = ["fetch", "--quiet", "--no-tags", "--filter=tree:0"]
        if depth:
            args.append(f"--depth={depth}")
        try:
            run_git([*args, "--", url, *refspecs], cwd=repo, config=config)
        except GitFailed as exc:
            if (
                "not our ref" in exc.stderr
                or "couldn't find remote ref" in exc.stderr
                or ("upload-pack" in exc.stderr and not exc.remote_unreachable())
            ):
                what = f"commit {refspecs[0]}" if FULL_SHA_RE.fullmatch(refspecs[0]) else "its branches and tags"
                raise UpstreamMismatch(
                    f"{url}: {what}: the fetch was refused ({_last(exc.stderr)}); it does not "
                    "exist there, or the remote serves no partial fetch"
                ) from None
            raise


class GitHistory:
    """vLLM's branch and a source commit (of a fork, or of any remote) in one blobless repository, for what GitHub's
    compare API cannot answer: a remote that is not GitHub, or more changed files than its answer lists. Commits and
    trees are fetched, no file contents: enough for merge-base, first-parent ancestry and the changed paths. The
    repository is made afresh for each resolve in a private directory and removed by `close`: the proof never rests
    on objects a cache kept (git does not check a loose object's content against its id when it reads it).
    `rewrites` are git's url.<mirror>.insteadOf from pins.yaml. Without a branch, only `commits` are fetched (by id,
    with their history): what `bump` compares and counts where GitHub's compare API does not answer
    (`fetch_filter` "tree:0": the commits alone; a file read later fetches its trees and blob)."""

    def __init__(
        self,
        cache_dir: Path,
        upstream: str,
        branch: str | None,
        rewrites: list[tuple[str, str]],
        commits: tuple[str, ...] = (),
        fetch_filter: str = "blob:none",
    ):
        self.upstream, self.branch, self._filter = upstream, branch, fetch_filter
        self._config = [arg for url, instead in rewrites for arg in ("-c", f"url.{url}.insteadOf={instead}")]
        # A private directory (0700) named with this process's id, as files.work_dir_beside names them: removed by
        # `close`, or here when the first fetch fails (the caller never gets an object to close); one a killed
        # resolve left is removed by the next history made beside it, once that process is gone.
        self._stack = ExitStack()
        self._dir = self._stack.enter_context(work_dir_beside(cache_dir / "git" / "history"))
        self.tip = ""  # the branch's tip (none without a branch)
        try:
            self.repo = self._dir / "repo.git"
            run_git(["init", "--quiet", "--bare", str(self.repo)])
            if branch is not None:
                self.tip = self._fetch(upstream, f"+refs/heads/{branch}:refs/buildkit/upstream")
            for commit in commits:
                self.add(upstream, commit)
        except BaseException:
            self.close()
            raise
        self.command = f"git fetch --filter={fetch_filter} {upstream} {branch or ' '.join(c[:12] for c in commits)}"

    def close(self) -> None:
        self._stack.close()

    def add(self, url: str, commit: str) -> None:
        """Fetch a source commit (by id: every host that allows it, GitHub included, serves a reachable SHA)."""
        if not has_commit(self.repo, commit):
            self._fetch(url, commit)

    def _fetch(self, url: str, refspec: str) -> str:
        try:
            run_git(
                ["fetch", "--quiet", "--no-tags", f"--filter={self._filter}", "--", url, refspec],
                cwd=self.repo,
                timeout=1800,
                config=self._config,
            )
        except GitFailed as exc:
            if exc.remote_unreachable() and "not our ref" not in exc.stderr:
                last = exc.stderr.splitlines()[-1] if exc.stderr else "no answer"
                raise UpstreamUnreachable(f"cannot fetch from {url}: {last}", hint=OFFLINE_HINT) from None
            raise UpstreamMismatch(
                f"{url}: {refspec.split(':')[0].lstrip('+')} does not exist there ({_last(exc.stderr)})",
                hint=f"check that {url}, or the mirror pins.yaml's git_url_rewrites send it to, holds it: update the "
                "mirror, or pin a commit it has",
            ) from None
        return run_git(["rev-parse", "FETCH_HEAD"], cwd=self.repo).strip()

    def merge_base(self, commit: str) -> str | None:
        """The newest commit of the branch that `commit` contains; None when they share no history."""
        try:
            return run_git(["merge-base", self.tip, commit], cwd=self.repo).strip() or None
        except GitFailed as exc:
            if exc.stderr.strip():
                raise
            return None  # exit 1 with nothing said: no common ancestor

    def first_parents(self, commit: str, count: int) -> list[str]:
        out = run_git(["rev-list", "--first-parent", f"--max-count={count}", commit], cwd=self.repo)
        return [line for line in out.split() if FULL_SHA_RE.fullmatch(line)]

    def contains(self, ancestor: str, head: str) -> bool:
        try:
            run_git(["merge-base", "--is-ancestor", ancestor, head], cwd=self.repo)
            return True
        except GitFailed as exc:
            if exc.stderr.strip():
                raise
            return False

    def status(self, base: str, head: str) -> Literal["ahead", "behind", "identical", "diverged"]:
        """How `head` relates to `base`, in the words of GitHub's compare API (its `status`)."""
        if base == head:
            return "identical"
        if self.contains(base, head):
            return "ahead"
        return "behind" if self.contains(head, base) else "diverged"

    def count(self, base: str, head: str) -> int:
        """The commits `head` has that `base` has not (GitHub's compare `ahead_by`): `git rev-list --count`."""
        counted = run_git(["rev-list", "--count", f"{base}..{head}", "--"], cwd=self.repo).strip()
        if not counted.isdigit():
            raise UpstreamMalformed(f"git rev-list --count {base[:12]}..{head[:12]} gave no count: {counted[:80]!r}")
        return int(counted)

    def file(self, commit: str, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        """A small file at a commit (a requirements file): its blob fetched on demand from the promisor remote."""
        return _blob_at(self.repo, commit, path, max_bytes, self.upstream, self._config)

    def changed(self, base: str, head: str) -> Changes:
        """Each path that differs between two commits' trees, and whether head has it (a rename: its old path
        removed, its new one added). A tree entry named `..` (or `.`, or empty) is no file git checks out, and spells a
        path past the compiled-input rules: the fetched history is refused (a remote's trees are not checked on
        fetch), as GitHub's answer is (github.py GitPath)."""
        out = run_git_bytes(
            ["diff", "--name-status", "-z", "--no-renames", base, head, "--"], cwd=self.repo, timeout=600
        )
        fields = out.split(b"\0")
        if fields and fields[-1] == b"":
            fields.pop()
        if len(fields) % 2:
            raise UpstreamMalformed(f"git diff {base[:12]} {head[:12]}: an entry without a path")
        found: Changes = {}
        for status, path in zip(fields[0::2], fields[1::2], strict=True):
            problem = path_problem(path.decode("utf-8", "replace"))
            if problem is not None:
                raise UpstreamMalformed(
                    f"git diff {base[:12]} {head[:12]}: {_shown(path)} is no path git checks out ({problem}): "
                    "the fetched history is refused"
                )
            found[_shown(path)] = "added" if status == b"A" else "removed" if status == b"D" else "modified"
        return dict(sorted(found.items()))

    def tree_files(self, commit: str, keep: Callable[[str, str], bool]) -> dict[str, str]:
        """The blob ids of the files at a commit that `keep(path, mode)` keeps: its trees, no file contents."""
        out = run_git_bytes(["ls-tree", "-r", "-z", "--full-tree", commit], cwd=self.repo, timeout=600)
        files: dict[str, str] = {}
        for entry in out.split(b"\0"):
            head, _, raw = entry.partition(b"\t")
            fields = head.split()
            if len(fields) != 3 or fields[1] != b"blob":
                continue  # a tree (-r lists none), a submodule's commit, or the empty tail
            path = _shown(raw)
            if keep(path, fields[0].decode()):
                files[path] = fields[2].decode()
        return files


def _blob_at(
    repo: Path, commit: str, path: str, max_bytes: int, url: str, config: list[str] | None = None
) -> bytes | None:
    """A file's bytes at a commit of a partial clone (git fetches the trees and the blob it needs); None when the
    commit has no such file. Larger than max_bytes: UpstreamMalformed, nothing more read."""
    spec = f"{commit}:{path}"
    try:
        kind = run_git(["cat-file", "-t", spec], cwd=repo, timeout=300, config=config).strip()
    except GitFailed as exc:
        if exc.remote_unreachable():
            raise
        return None  # no such path in that commit
    if kind != "blob":
        return None
    size = int(run_git(["cat-file", "-s", spec], cwd=repo, config=config).strip() or 0)
    if size > max_bytes:
        raise UpstreamMalformed(
            f"{url}: {path} at {commit[:12]} is {size:,} bytes, more than buildkit reads ({max_bytes:,})"
        )
    return run_git_bytes(["cat-file", "blob", spec], cwd=repo, config=config)


def _last(stderr: str) -> str:
    return stderr.strip().splitlines()[-1] if stderr.strip() else "no output"


def _shown(path: bytes) -> str:
    """A path from a remote's tree, as messages and the lock may hold it: one line, control characters escaped,
    at most 300 characters (a path with a line break stays one path, and one line)."""
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", path.decode("utf-8", "replace"))
    return text if len(text) <= 300 else text[:150] + "..." + text[-147:]


def _cache_config(url: str, key: str, value: str) -> bool:
    """What `git init --bare` and a partial fetch by URL write (git records the URL as a promisor remote)."""
    return written_by_init(key, value, bare=True) or (key, value) in {
        ("core.repositoryformatversion", "1"),
        (f"remote.{url}.promisor", "true"),
        (f"remote.{url}.partialclonefilter", "tree:0"),
        ("extensions.partialclone", url),
    }
