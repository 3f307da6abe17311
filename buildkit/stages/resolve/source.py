"""The vLLM source, and the commit whose precompiled wheel carries its compiled files: two pins (issue 28).

vLLM's `VLLM_USE_PRECOMPILED=1` takes the Python files from the checkout and the compiled files from the wheel of
another commit; NeMo-RL's build-custom-vllm.sh does the same. That is only correct when no file vLLM's compiled
code is built from differs between the two commits, so resolve proves it:

- The source: `vllm.repo` at `vllm.ref`, or pull request `vllm.pr` (merged: its merge commit; open: its head
  commit, on its head repository, a fork).
- The wheel's commit (`wheel.commit`): a full SHA pins it by hand (it must be an ancestor of the source); `auto`
  takes the source itself when it is on `vllm.upstream_branch` and has a wheel, else the source's merge base with
  that branch, or the newest first-parent ancestor of the merge base with a wheel for the pinned arch and variant
  (at most MAX_WHEEL_TRIES, each one said). Never the moving nightly.
- The proof: the paths that differ between the wheel's commit and the source (GitHub's compare API when both
  repositories are on GitHub; git on a blobless fetch otherwise, or when GitHub's answer stops at 300 files), held
  to vLLM's compiled inputs (buildkit/models/compiled.py). A hit stops resolve, exit 8, unless
  `wheel.accept_compiled_changes` gives a reviewer's reason (the lock and the report carry it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from buildkit.errors import CompiledSourceChanged, UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable, excerpt
from buildkit.models.compiled import (
    Extraction,
    compiled_changes,
    extraction_of,
    is_vllm_file,
    rule_for,
    torch_requirement,
)
from buildkit.models.lock import Changes, CommitFact, PullRequestFact, PythonFiles, SourceComparison, WheelCommitFact
from buildkit.models.lock.facts import MAX_CHANGED, MAX_LISTED
from buildkit.models.lock.facts import WheelChoice as ChosenBy
from buildkit.models.pins import ARCH_OF_PLATFORM, Pins
from buildkit.stages.resolve.git import GitHistory
from buildkit.stages.resolve.github import Comparison, GitHub, NotOnGitHub
from buildkit.stages.resolve.wheels import MISSING_HINT, FoundWheel
from buildkit.world.http import AnswerTooLarge

MAX_WHEEL_TRIES = 20  # commits tried for a wheel: ancestors of the merge base here, a branch's newest in bump
MAX_SHOWN = 8  # compiled paths named in the one-line message
Method = Literal["same commit", "GitHub compare", "git diff"]
FindWheel = Callable[[str], FoundWheel]  # the wheel of a commit for the pinned arch and variant, or UpstreamMismatch


@dataclass(frozen=True)
class Choice:
    wheel: WheelCommitFact
    found: FoundWheel
    compare: SourceComparison
    python: PythonFiles | None = None  # the source's Python files, for verify (None: not listed, said why)
    extraction: Extraction | None = None  # what precompiled mode takes, from setup.py at the wheel commit


def source_ref(pins: Pins, pr: PullRequestFact | None) -> tuple[str, str]:
    """(repository, ref) the source commit is read from: the pinned ref (on an open PR's head repository, when a PR
    is open), else a merged PR's merge commit, or an open PR's head on its head repository."""
    head_repo = pr.head_repo if pr is not None and not pr.merged else None
    if pins.vllm.ref is not None:
        return head_repo or pins.vllm.repo, pins.vllm.ref  # check_pr then holds it to the PR
    assert pr is not None  # pins.yaml gives vllm.ref or vllm.pr (validated)
    if pr.merged:
        assert pr.merge_commit is not None
        return pins.vllm.repo, pr.merge_commit
    assert pr.head_commit is not None and head_repo is not None  # github.pull refuses an open PR without them
    return head_repo, pr.head_commit


def check_pr(pins: Pins, pr: PullRequestFact, source: CommitFact) -> None:
    """vllm.ref beside vllm.pr must name the commit the PR is built from: its merge commit, or an open PR's head."""
    built = pr.merge_commit if pr.merged else pr.head_commit
    if pins.vllm.ref is None or built == source.commit:
        return
    if pr.merged:
        raise UpstreamMismatch(
            f"vllm.ref {pins.vllm.ref} resolves to {source.commit}, but PR #{pr.number} was merged as {built}",
            hint="pin the PR's merge commit, or drop one of vllm.ref / vllm.pr",
        )
    raise UpstreamMismatch(
        f"vllm.ref {pins.vllm.ref} resolves to {source.commit}, but PR #{pr.number} is open; its head is now {built}",
        hint="drop vllm.ref to build what the PR is now (`buildkit bump --vllm` moves the pins), or drop vllm.pr to "
        "build that commit as a plain ref",
    )


class Chooser:
    """Chooses the wheel's commit and proves the composition, through GitHub or git as the repositories allow."""

    def __init__(
        self, pins: Pins, github: GitHub, cache_dir: Path, find_wheel: FindWheel, on_note: Callable[[str], None]
    ):
        self.pins, self.github, self.cache_dir = pins, github, cache_dir
        self.find_wheel, self.note = find_wheel, on_note
        self._history: GitHistory | None = None
        v = pins.vllm
        self.upstream, self.branch = v.upstream, v.upstream_branch

    def choose(self, source: CommitFact, pr: PullRequestFact | None) -> Choice:
        try:
            # GitHub's listing of the source's Python files beside the comparison and the wheel lookups: one round
            # trip off resolve's path (bench/resolve_depth.py); git's listing, when needed, after them.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tree") as side:
                listed = side.submit(self._listed_by_github, source)
                choice = self._choose(source, pr)
                by_git, python = listed.result()
            python = self._python_files(source) if by_git else python
            return replace(choice, python=python, extraction=self._extraction(choice.wheel.commit, source))
        finally:
            if self._history is not None:
                self._history.close()

    def _choose(self, source: CommitFact, pr: PullRequestFact | None) -> Choice:
        if pr is not None:
            check_pr(self.pins, pr, source)  # a pinned ref that is not what the PR builds: said before any proof
        on_github = bool(self.github.owner_repo(self.upstream) and self.github.owner_repo(source.repo))
        pinned = self.pins.wheel.commit
        if pinned != "auto":
            paths, method, how = self._paths(pinned, source, on_github)  # an ancestor of the source, or refused
            found = self.find_wheel(pinned)
            wheel = WheelCommitFact(
                commit=pinned,
                upstream=self.upstream,
                branch=self.branch,
                merge_base=None,
                chosen_by="pinned",
                detail=f"wheel.commit {pinned} as pinned",
            )
            return Choice(wheel, found, self._prove(paths, method, how, pinned, source))
        merge_base, base_paths, base_method, how = self._merge_base(source, on_github)
        tried: list[str] = []
        first = ""
        for wheel_commit in self._ancestors(merge_base, on_github, source):  # the merge base first
            try:
                found = self.find_wheel(wheel_commit)
                break
            except UpstreamMismatch as exc:
                first = first or exc.message
                tried.append(f"{wheel_commit[:12]}: {excerpt(exc.message, 100)}")
                self.note(f"vllm {wheel_commit[:12]} has no usable wheel: {exc.message}")
        else:
            raise UpstreamMismatch(
                f"none of the {len(tried)} commit(s) from the merge base {merge_base[:12]} back along {self.branch} "
                f"(at most {MAX_WHEEL_TRIES}) has a vllm wheel for linux {self._arches()}, variant "
                f"{self.pins.wheel.variant}; the merge base's: {first}",
                hint=f"{MISSING_HINT}; or pin wheel.commit to an older commit of {self.branch} with one (an "
                "ancestor of the source)",
            )
        chosen: ChosenBy
        if wheel_commit == source.commit:
            chosen, detail = "the source commit", f"the source commit {wheel_commit[:12]} is on {self.branch}"
        elif wheel_commit == merge_base:
            chosen, detail = "the merge base", f"the source's merge base with {self.branch}"
        else:
            chosen = "an ancestor of the merge base"
            detail = f"{len(tried)} newer commit(s) from the merge base on had no wheel ({'; '.join(tried)})"
        wheel = WheelCommitFact(
            commit=wheel_commit,
            upstream=self.upstream,
            branch=self.branch,
            merge_base=merge_base,
            chosen_by=chosen,
            detail=detail[:900],
        )
        if wheel_commit == merge_base:
            paths, method = base_paths, base_method
        else:
            paths, method, how = self._paths(wheel_commit, source, on_github)
        return Choice(wheel, found, self._prove(paths, method, how, wheel_commit, source))

    def _arches(self) -> str:
        """The wheel arches every wheel commit must have: one per platform of build.platforms."""
        return " and ".join(dict.fromkeys(ARCH_OF_PLATFORM[platform] for platform, _ in self.pins.build.targets()))

    # --- the history, through GitHub or git ----------------------------------------------------------------------

    def _merge_base(self, source: CommitFact, on_github: bool) -> tuple[str, Changes, Method, str]:
        """The source's merge base with the branch, the paths from it to the source, and how they were listed."""
        answer = self._compare_files(self.branch, source.commit) if on_github else None
        if answer is not None:
            if answer.status in ("behind", "identical"):  # the source is on the branch: it is its own merge base
                if answer.merge_base != source.commit:
                    raise UpstreamMalformed(
                        f"GitHub API answer for {answer.url}: {answer.status}, but its merge base "
                        f"{answer.merge_base[:12]} is not the source {source.commit[:12]}"
                    )
                return answer.merge_base, {}, "same commit", answer.url
            if answer.paths is not None:
                return answer.merge_base, answer.paths, "GitHub compare", answer.url
            self.note(f"{answer.why}: {self.branch}...{source.commit[:12]} listed with git instead")
        history = self._git(source)
        merge_base = history.merge_base(source.commit)
        if merge_base is None:
            raise UpstreamMismatch(
                f"{source.repo} at {source.commit[:12]} shares no history with {self.branch} of {self.upstream}: "
                "it is not a fork of vLLM",
                hint="pin vllm.repo to a fork of vLLM, or vllm.upstream to the repository it was forked from",
            )
        return merge_base, history.changed(merge_base, source.commit), "git diff", history.command

    def _ancestors(self, merge_base: str, on_github: bool, source: CommitFact) -> Iterator[str]:
        """The merge base, then (only when it has no wheel: listing costs a request) its ancestors along the branch.
        GitHub lists a commit's history by date, which on vLLM's main (squash merges: one line) is first-parent
        order; git walks first parents, also where GitHub has no answer (a mirror's commit: 404), said."""
        yield merge_base
        listed: list[str] | None = None
        if on_github:
            try:
                listed = [c.commit for c in self.github.branch_commits(self.upstream, merge_base, MAX_WHEEL_TRIES)]
            except NotOnGitHub as exc:
                self.note(f"{exc.message}: the history of {merge_base[:12]} listed with git instead")
            if listed is not None and listed[:1] != [merge_base]:
                raise UpstreamMalformed(f"GitHub API: the history of {merge_base[:12]} does not start with it")
        if listed is None:
            listed = self._git(source).first_parents(merge_base, MAX_WHEEL_TRIES)
        yield from listed[1:]

    def _paths(self, wheel_commit: str, source: CommitFact, on_github: bool) -> tuple[Changes, Method, str]:
        """The paths that differ between the wheel's commit and the source, which must contain it."""
        if wheel_commit == source.commit:
            return {}, "same commit", "the same commit"
        answer = self._compare_files(wheel_commit, source.commit) if on_github else None
        if answer is not None:
            if answer.status not in ("ahead", "identical"):
                raise _not_ancestor(wheel_commit, source, answer.status)
            if answer.paths is not None:
                return answer.paths, "GitHub compare", answer.url
            self.note(f"{answer.why}: {wheel_commit[:12]}...{source.commit[:12]} listed with git instead")
        history = self._git(source)
        if not history.contains(wheel_commit, source.commit):
            raise _not_ancestor(wheel_commit, source, "not an ancestor")
        return history.changed(wheel_commit, source.commit), "git diff", history.command

    def _compare_files(self, base: str, head: str) -> Comparison | None:
        """GitHub's compare of base...head; None, said in one note, where it has no answer (404: a mirror's commit,
        history it will not compare): git compares them instead, on the repositories it fetches (git_url_rewrites
        apply), and says so if they do not hold them."""
        try:
            return self.github.compare_files(self.upstream, base, head)
        except NotOnGitHub as exc:
            self.note(f"{exc.message}: compared with git instead")
            return None

    def _git(self, source: CommitFact) -> GitHistory:
        if self._history is None:
            rewrites = [(r.url, r.instead_of) for r in self.pins.git_url_rewrites]
            self._history = GitHistory(self.cache_dir, self.upstream, self.branch, rewrites)
        self._history.add(source.repo, source.commit)
        return self._history

    def _listed_by_github(self, source: CommitFact) -> tuple[bool, PythonFiles | None]:
        """(by git, files): vLLM's Python files at the source commit by blob id from GitHub's tree API; by git when
        git must list them (GitHub cut its listing, or the source is elsewhere); None, said, when they cannot be
        had."""
        if not self.github.owner_repo(source.repo):
            return True, None
        try:
            files, how = self.github.tree_files(source.repo, source.commit, is_vllm_file)
            return False, _listing(source, how, files)
        except (UpstreamMismatch, AnswerTooLarge) as exc:  # cut by GitHub, or past buildkit's limit
            self.note(f"vLLM's Python files listed with git instead: {exc.message}")
            return True, None
        except UpstreamMalformed:
            raise  # a hostile answer is refused, never passed over
        except UpstreamUnreachable as exc:
            self._not_listed(source, exc)
            return False, None

    def _not_listed(self, source: CommitFact, exc: UpstreamMismatch | UpstreamUnreachable) -> None:
        """A listing that cannot be had is said, and verify says why its check did not run; it never stops
        resolve (the composition's proof is the comparison)."""
        self.note(f"vLLM's Python files at {source.commit[:12]} not listed (verify cannot check them): {exc.message}")

    def _python_files(self, source: CommitFact) -> PythonFiles | None:
        """vLLM's Python files at the source commit by blob id, from git's tree (the fetch the comparison made)."""
        try:
            history = self._git(source)
            files = history.tree_files(source.commit, is_vllm_file)
            return _listing(source, f"git ls-tree -r {source.commit}", files)
        except UpstreamMalformed:
            raise  # a hostile answer is refused, never passed over
        except (UpstreamMismatch, UpstreamUnreachable) as exc:
            self._not_listed(source, exc)
            return None

    def _extraction(self, commit: str, source: CommitFact) -> Extraction | None:
        """What precompiled mode takes from the wheel, as setup.py at the wheel's commit declares it (GitHub's
        contents API, else git on the repositories fetched: a mirror's commit); None, said, when setup.py cannot be
        read or has another shape (the lock's vllm_files then follow buildkit's rules)."""
        why = "it has no files_to_copy list with re.compile patterns beside it"
        try:
            text = self._file(self.upstream, commit, "setup.py")
            if not text and self.github.owner_repo(self.upstream):  # GitHub has none: a mirror's commit, maybe
                text = (self._git(source).file(commit, "setup.py") or b"").decode("utf-8", "replace")
        except (UpstreamMismatch, UpstreamUnreachable) as exc:
            text, why = "", exc.message
        else:
            why = why if text else "there is none"
        found = extraction_of(text) if text else None
        if found is None:
            self.note(
                f"setup.py at {commit[:12]} not read for what precompiled mode takes ({excerpt(why, 120)}): "
                "the wheel's shared objects and from-wheel Python are listed instead"
            )
        return found

    # --- the proof -------------------------------------------------------------------------------------------------

    def _prove(
        self, paths: Changes, method: Method, how: str, wheel_commit: str, source: CommitFact
    ) -> SourceComparison:
        hits = [f"{path} ({rule.why})" for path, rule in compiled_changes(paths)]
        for path in paths:  # a torch pin matters only when the torch it requires changed
            rule = rule_for(path)
            if rule is not None and rule.kind == "torch-pin":
                hits += self._torch_change(path, wheel_commit, source)
        accepted = self.pins.wheel.accept_compiled_changes if hits else None
        if hits and accepted is None:
            more = f" and {len(hits) - MAX_SHOWN} more" if len(hits) > MAX_SHOWN else ""
            shown = ", ".join(hits[:MAX_SHOWN]) + more
            raise CompiledSourceChanged(
                f"the vLLM source {source.commit[:12]} changes {len(hits)} file(s) that vLLM's compiled code is built "
                f"from, relative to {wheel_commit[:12]} whose wheel would carry it: {shown}",
                hint="pin wheel.commit to a commit whose compiled code matches the source, build vLLM from source, "
                "or, reviewed, set wheel.accept_compiled_changes to why the wheel's kernels are right",
            )
        return SourceComparison(
            method=method,
            source=how,
            paths=len(paths),
            compiled=hits,
            accepted=accepted,
            changed=paths if 0 < len(paths) <= MAX_CHANGED else None,
        )

    def _torch_change(self, path: str, wheel_commit: str, source: CommitFact) -> list[str]:
        try:
            before, after = (
                torch_requirement(self._file(repo, commit, path))
                for repo, commit in ((self.upstream, wheel_commit), (source.repo, source.commit))
            )
        except (ValueError, UpstreamMalformed) as exc:  # unreadable: the change cannot be ruled out
            return [f"{path} (its torch requirement could not be read: {excerpt(str(exc), 100)})"]
        if before == after:
            return []
        return [
            f"{path} (the torch the extensions are built against: {' '.join(before) or 'none'} -> "
            f"{' '.join(after) or 'none'})"
        ]

    def _file(self, repo: str, commit: str, path: str) -> str:
        if self.github.owner_repo(repo):
            raw = self.github.file(repo, path, commit)
        else:
            assert self._history is not None
            raw = self._history.file(commit, path)
        return (raw or b"").decode("utf-8", "replace")


def _listing(source: CommitFact, how: str, files: dict[str, str]) -> PythonFiles:
    """Every file under vllm/ at the source commit, as the lock keeps it; more than the lock holds is refused."""
    if len(files) > MAX_LISTED:
        raise UpstreamMalformed(
            f"{source.repo} at {source.commit[:12]} has {len(files):,} files under vllm/, more than buildkit lists "
            f"({MAX_LISTED:,}; vLLM 0.14.0 has 1,703): not a vLLM tree",
            hint="pin vllm.repo and vllm.ref to vLLM's source",
        )
    return PythonFiles(commit=source.commit, source=how, files=files, scope="package")


def _not_ancestor(wheel_commit: str, source: CommitFact, status: str) -> UpstreamMismatch:
    return UpstreamMismatch(
        f"wheel.commit {wheel_commit[:12]} is not an ancestor of the vLLM source {source.commit[:12]} ({status}): its "
        "compiled files are not the source's history",
        hint="pin wheel.commit to a commit the source contains (its merge base with main), or `auto`",
    )
