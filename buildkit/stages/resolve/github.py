"""Resolve commits and pull requests through the GitHub REST API (github.com or GitHub Enterprise).

GITHUB_TOKEN is the user's credential (often CI's), so `token_for` decides where it may go: to api.github.com, or
to an API base the user names in the environment ($BUILDKIT_GITHUB_API); never to one that comes from pins.yaml,
which a pull request can edit, and never in cleartext to a host that is not loopback. buildkit/world/http.py keeps it
from following a redirect to another host.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlsplit

from pydantic import AfterValidator, Field, field_validator

from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable, excerpt
from buildkit.models.grammar import FullSha, HttpsUrl, is_loopback_host
from buildkit.models.lock import Changes, CommitFact, PullRequestFact
from buildkit.models.pins import DEFAULT_GITHUB_API, ENV_GITHUB_API
from buildkit.world.git import path_problem
from buildkit.world.http import GITHUB_API, GITHUB_FILE, Http, Limit, Reply
from buildkit.world.shapes import Answer, Line, Timestamp, one_line, parse

TOKEN_ENV = "GITHUB_TOKEN"
_TOKEN_RE = re.compile(r"[!-~]{1,4096}")  # it goes into a header: printable ASCII, no spaces or line breaks


class NotOnGitHub(UpstreamMismatch):
    """GitHub's API has no answer for what was asked (404 or 422): a missing commit, ref or file, or one its API
    cannot show (a compare it will not make, a file this token may not read). Exit 4 unless the caller asks git,
    which answers for the repository it fetches (pins.yaml's git_url_rewrites may send it to a mirror)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def token_for(api_base: str, named_by_pins: bool) -> tuple[str | None, str | None]:
    """$GITHUB_TOKEN when it may be sent to `api_base`, else None and a note saying why (never the token)."""
    token = os.environ.get(TOKEN_ENV) or None
    if token is None:
        return None, None
    if not _TOKEN_RE.fullmatch(token):
        raise InputError(f"${TOKEN_ENV} holds characters a GitHub token cannot have (spaces, line breaks, ...)")
    parts = urlsplit(api_base)
    host = parts.hostname or api_base
    if parts.scheme != "https" and not is_loopback_host(host):
        return None, f"${TOKEN_ENV} is not sent to {host} over plain http; resolving anonymously"
    if named_by_pins and api_base.rstrip("/") != DEFAULT_GITHUB_API:
        return None, (
            f"${TOKEN_ENV} is not sent to {host}: that GitHub API comes from pins.yaml (endpoints.github_api), "
            f"which a change to the repository can point anywhere; resolving anonymously. To trust it, set "
            f"${ENV_GITHUB_API} to it in the environment"
        )
    return token, None


# The fields buildkit reads from GitHub's answers, typed (see shapes.py).
class _Committer(Answer):
    date: Timestamp


class _CommitDetail(Answer):
    message: str
    committer: _Committer

    @field_validator("message")
    @classmethod
    def _subject_is_one_line(cls, message: str) -> str:
        one_line(_subject(message))
        return message


class _Commit(Answer):
    sha: FullSha
    commit: _CommitDetail
    html_url: HttpsUrl | None = None


class _Repo(Answer):
    clone_url: HttpsUrl
    full_name: Line


class _Head(Answer):
    sha: FullSha
    ref: Line
    repo: _Repo | None = None  # null when the fork was deleted


class _Pull(Answer):
    merged: bool
    state: Line = "unknown"
    title: Line = ""
    merged_at: Timestamp | None = None
    merge_commit_sha: FullSha | None = None
    html_url: HttpsUrl | None = None
    head: _Head | None = None


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _git_path(value: str) -> str:
    """A changed path as git names it (world/git.py path_problem), without a control character: the answer names
    files of real trees, and anything else is refused (exit 3), never matched against the compiled-input rules."""
    problem = path_problem(value) or ("a control character" if _CONTROL_RE.search(value) else None)
    if problem is not None:
        raise ValueError(f"expected a git path, found one with {problem}: {excerpt(value, 80)}")
    return value


GitPath = Annotated[str, AfterValidator(_git_path)]


class _ChangedFile(Answer):
    filename: GitPath
    # GitHub's file statuses (docs.github.com/en/rest/commits/commits#compare-two-commits): added, removed,
    # modified, renamed, copied, changed (mode only), unchanged
    status: Literal["added", "removed", "modified", "renamed", "copied", "changed", "unchanged"] = "modified"
    previous_filename: GitPath | None = None  # a rename: both paths changed


class _Sha(Answer):
    sha: FullSha


class _CompareFiles(Answer):
    status: Literal["ahead", "behind", "identical", "diverged"]
    ahead_by: int = Field(ge=0)  # the commits head has that the merge base has not
    merge_base_commit: _Sha
    files: list[_ChangedFile] = Field(max_length=10_000)  # always in GitHub's answer ([] for identical commits)


# GitHub's compare answer lists at most 300 changed files; a longer list is cut there, silently.
COMPARE_FILES_CAP = 300


@dataclass(frozen=True)
class Comparison:
    """`compare/{base}...{head}`: how head relates to base, their merge base, the paths that differ between the
    merge base and head (None when the answer is no list of them: `why` says why, and git must list them), and the
    API URL asked."""

    status: str
    merge_base: str
    paths: Changes | None
    url: str
    why: str | None = None


def changes_of(files: list[_ChangedFile]) -> Changes:
    """Each path that differs, and whether the head has it: a rename removes its old path and adds its new one; a
    path the head has (added, copied, modified) wins over one a rename or removal took away."""
    found: Changes = {}
    for f in files:
        if f.status == "unchanged":
            continue
        if f.previous_filename and f.previous_filename != f.filename:
            found.setdefault(f.previous_filename, "removed")
        found[f.filename] = (
            "removed"
            if f.status == "removed"
            else "added"
            if f.status in ("added", "copied", "renamed")
            else "modified"
        )
    return dict(sorted(found.items()))


class _Compare(Answer):
    status: Literal["ahead", "behind", "identical", "diverged"]


class _CompareCount(Answer):
    status: Literal["ahead", "behind", "identical", "diverged"]
    ahead_by: int = Field(ge=0)


class _TreeEntry(Answer):
    path: str
    mode: str
    type: str
    sha: str


class _Tree(Answer):
    tree: list[_TreeEntry] = Field(max_length=200_000)  # GitHub lists at most 100,000 entries
    truncated: bool


def _subject(message: str) -> str:
    return message.split("\n", 1)[0].removesuffix("\r")


class GitHub:
    def __init__(self, http: Http, api_base: str, token: str | None = None):
        """`token`: sent with every request; pass what `token_for` allows."""
        self.http = http
        self.api = api_base.rstrip("/")
        self._token = token

    def owner_repo(self, repo_url: str) -> tuple[str, str] | None:
        """(owner, repo) when the URL is on github.com or on the configured API's own host (Enterprise)."""
        parts = urlsplit(repo_url)
        api_host = urlsplit(self.api).hostname
        if parts.scheme != "https" or parts.hostname not in ("github.com", api_host):
            return None
        segments = parts.path.strip("/").removesuffix(".git").split("/")
        if len(segments) != 2 or not all(segments):
            return None
        return segments[0], segments[1]

    def _get(self, path: str, what: str, raw: bool = False) -> Any:
        """The answer's JSON; raw: the file's bytes the contents API answers with its raw media type."""
        url = f"{self.api}{path}"
        accept = "application/vnd.github.raw+json" if raw else "application/vnd.github+json"
        headers = {"Accept": accept, "X-GitHub-Api-Version": "2022-11-28"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        limit: Limit = GITHUB_FILE if raw else GITHUB_API
        reply = self.http.get(url, limit=limit, headers=headers)
        self._raise_for_rate_limit(reply)
        if reply.status == 401:
            raise UpstreamUnreachable(
                f"GitHub API rejected the credentials for {what} (401)", hint=f"check ${TOKEN_ENV}, or unset it"
            )
        if reply.status in (404, 422):
            raise NotOnGitHub(f"{what}: not found on GitHub ({reply.status} from {url})", reply.status)
        if reply.status != 200:
            raise UpstreamUnreachable(f"GitHub API answered {reply.status} for {what} ({url})")
        if self._token and self._token.encode() in reply.body:
            # An answer that repeats the token would carry it into messages and the lock.
            raise UpstreamMalformed(f"GitHub API answer for {what} repeats the ${TOKEN_ENV} sent with it; refused")
        return reply.body if raw else reply.json(f"GitHub API answer for {what}")

    def file(self, repo_url: str, path: str, commit: str) -> bytes | None:
        """A file's bytes at a commit (`GET /repos/{owner}/{repo}/contents/{path}?ref={sha}`, raw media type: up
        to 100 MB on GitHub; buildkit reads at most BUILDKIT_HTTP_MAX_GITHUB_FILE), from the API host only (the
        token goes nowhere else); None when the commit has no such file."""
        try:
            return self.read_file(repo_url, path, commit)
        except UpstreamMismatch:  # 404: no such file there
            return None

    def read_file(self, repo_url: str, path: str, commit: str) -> bytes:
        """The same, with GitHub's answer kept when there is no file: NotOnGitHub on 404 or 422 (its message names
        the status and the URL), UpstreamUnreachable on another answer."""
        owner, repo = self._require(repo_url)
        api_path = f"/repos/{owner}/{repo}/contents/{quote(path)}?ref={commit}"
        return bytes(self._get(api_path, f"{owner}/{repo} {path} at {commit[:12]}", raw=True))

    def _raise_for_rate_limit(self, reply: Reply) -> None:
        if reply.status not in (403, 429) or reply.headers.get("X-RateLimit-Remaining") != "0":
            return
        reset = reply.headers.get("X-RateLimit-Reset", "")
        when = "later"
        if re.fullmatch(r"[0-9]{1,12}", reset):
            try:
                when = datetime.fromtimestamp(int(reset), UTC).strftime("at %Y-%m-%d %H:%M:%S UTC")
            except (OverflowError, OSError, ValueError):
                pass  # a reset time past what a clock can show: "later" it is
        hint = (
            f"the limit for ${TOKEN_ENV} is used up; wait, or use another token"
            if self._token
            else f"set {TOKEN_ENV} to a GitHub token for a higher limit (anonymous: 60 requests/hour)"
        )
        raise UpstreamUnreachable(f"GitHub API rate limit reached; it resets {when}", hint=hint)

    def commit(self, repo_url: str, ref: str) -> CommitFact:
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/commits/{ref}"
        what = f"{owner}/{repo} ref {ref!r}"
        found = parse(_Commit, self._get(path, what), f"GitHub API answer for {what}")
        sha = found.sha
        if all(c in "0123456789abcdef" for c in ref) and not sha.startswith(ref):
            raise UpstreamMismatch(f"{owner}/{repo}: {ref!r} resolved to {sha}, which does not start with it")
        return CommitFact(
            repo=repo_url,
            ref=ref,
            commit=sha,
            date=found.commit.committer.date,
            subject=_subject(found.commit.message),
            url=found.html_url,
            source=f"GitHub API {self.api}{path}",
        )

    def branch_commits(self, repo_url: str, branch: str, count: int) -> list[CommitFact]:
        """The newest `count` commits on a branch (or reachable from a tag or SHA), newest first
        (`GET /repos/{owner}/{repo}/commits?sha=...`). `branch` has passed the ref grammar; it is URL-encoded."""
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/commits?sha={quote(branch, safe='')}&per_page={count}"
        what = f"{owner}/{repo} commits on {branch!r}"
        listed = parse(list[_Commit], self._get(path, what), f"GitHub API answer for {what}")
        return [
            CommitFact(
                repo=repo_url,
                ref=found.sha,
                commit=found.sha,
                date=found.commit.committer.date,
                subject=_subject(found.commit.message),
                url=found.html_url,
                source=f"GitHub API {self.api}{path}",
            )
            for found in listed[:count]
        ]

    def compare(self, repo_url: str, base: str, head: str) -> str:
        """How `head` relates to `base` (`GET /repos/{owner}/{repo}/compare/{base}...{head}`): "ahead" or
        "identical" when head contains base; "behind" or "diverged" when it does not. Both are full SHAs."""
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/compare/{base}...{head}?per_page=1"
        what = f"{owner}/{repo} compare {base[:12]}...{head[:12]}"
        return parse(_Compare, self._get(path, what), f"GitHub API answer for {what}").status

    def commits_between(self, repo_url: str, base: str, head: str) -> tuple[str, int, str]:
        """How `head` relates to `base` (as `compare` says it), how many commits `head` has that `base` has not (the
        compare API's ahead_by), and the compare page: one request."""
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/compare/{base}...{head}?per_page=1"
        what = f"{owner}/{repo} compare {base[:12]}...{head[:12]}"
        answer = parse(_CompareCount, self._get(path, what), f"GitHub API answer for {what}")
        host = urlsplit(repo_url).hostname or "github.com"
        return answer.status, answer.ahead_by, f"https://{host}/{owner}/{repo}/compare/{base}...{head}"

    def _head_url(self, pull: _Pull) -> str | None:
        """The PR's head repository, when GitHub names one on this GitHub (for a hint: never a URL from elsewhere)."""
        url = pull.head.repo.clone_url if pull.head is not None and pull.head.repo is not None else None
        return url if url is not None and self.owner_repo(url) else None

    def pull(self, repo_url: str, number: int, ref: str | None = None) -> PullRequestFact:
        """A merged PR (built from its merge commit) or an open one (built from its head, on its head repository).
        A PR closed without merging, or an open one whose head repository was deleted, is UpstreamMismatch, with a
        hint true for the pins: `ref` is vllm.ref when it is pinned beside the PR."""
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/pulls/{number}"
        what = f"{owner}/{repo} PR #{number}"
        pull = parse(_Pull, self._get(path, what), f"GitHub API answer for {what}")
        if pull.merged and (pull.merged_at is None or pull.merge_commit_sha is None):
            raise UpstreamMalformed(f"GitHub API answer for {what}: merged, but without merged_at/merge_commit_sha")
        if not pull.merged and pull.state != "open":
            raise UpstreamMismatch(
                f"{what} was closed without being merged (state: {pull.state})",
                hint=_closed_hint(ref, self._head_url(pull)),
            )
        if not pull.merged and pull.head is None:
            raise UpstreamMalformed(f"GitHub API answer for {what}: an open PR without its head")
        if not pull.merged and pull.head is not None and pull.head.repo is None:
            raise UpstreamMismatch(
                f"{what} is open, but its head repository was deleted: its head {pull.head.sha[:12]} cannot be "
                "fetched from a fork",
                hint=_deleted_fork_hint(ref, pull.head.sha),
            )
        head = pull.head
        if not pull.merged and head is not None and head.repo is not None:
            named = self.owner_repo(head.repo.clone_url)
            if named is None or "/".join(named) != head.repo.full_name:
                url, name = excerpt(head.repo.clone_url, 120), excerpt(head.repo.full_name, 80)
                raise UpstreamMalformed(
                    f"GitHub API answer for {what}: the head repository's clone URL {url} is not {name} on GitHub"
                )
        return PullRequestFact(
            number=number,
            title=pull.title,
            state=pull.state,
            merged_at=pull.merged_at if pull.merged else None,
            merge_commit=pull.merge_commit_sha if pull.merged else None,  # an open PR's is a test merge: not built
            url=pull.html_url or f"https://github.com/{owner}/{repo}/pull/{number}",
            source=f"GitHub API {self.api}{path}",
            head_commit=head.sha if head else None,
            head_repo=head.repo.clone_url if head and head.repo else None,
            head_ref=head.ref if head else None,
        )

    def compare_files(self, repo_url: str, base: str, head: str) -> Comparison:
        """`GET /repos/{owner}/{repo}/compare/{base}...{head}`: head may be a commit of a fork (a fork's commits are
        visible in its parent's network). The paths are those that differ between the merge base and head; None
        when GitHub cut the list at its cap (then git must list them)."""
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/compare/{base}...{head}"
        what = f"{owner}/{repo} compare {base[:12]}...{head[:12]}"
        answer = parse(_CompareFiles, self._get(path, what), f"GitHub API answer for {what}")
        paths = changes_of(answer.files)
        why = None
        if len(answer.files) >= COMPARE_FILES_CAP:
            why = f"GitHub's compare answer lists at most {COMPARE_FILES_CAP} files"
        elif not answer.files and (answer.ahead_by > 0 or answer.status in ("ahead", "diverged")):
            # Head has commits base has not, and no file is listed: GitHub lists none where it does not list
            # them (past the first page; users have been answered ahead_by > 0 with `files: []`,
            # octokit/octokit.net#1749). Commits that change nothing in the end are possible too: git tells.
            why = (
                f"GitHub's compare answer lists no files, though the head has commits the base has not (status "
                f"{answer.status}, ahead_by {answer.ahead_by})"
            )
        merge_base = answer.merge_base_commit.sha
        return Comparison(answer.status, merge_base, None if why else paths, f"{self.api}{path}", why)

    def tree_files(self, repo_url: str, commit: str, keep: Callable[[str, str], bool]) -> tuple[dict[str, str], str]:
        """The blob ids of the files at a commit that `keep(path, mode)` keeps
        (`GET /repos/{owner}/{repo}/git/trees/{sha}?recursive=1`: at most 100,000 entries, 7 MB); UpstreamMismatch
        when GitHub cut the listing (`truncated`: then git must list it)."""
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/git/trees/{commit}?recursive=1"
        what = f"{owner}/{repo} tree at {commit[:12]}"
        answer = parse(_Tree, self._get(path, what), f"GitHub API answer for {what}")
        if answer.truncated:
            raise UpstreamMismatch(f"GitHub API answer for {what}: truncated")
        files = {e.path: e.sha for e in answer.tree if e.type == "blob" and keep(e.path, e.mode)}
        bad = [p for p, sha in files.items() if not re.fullmatch(r"[0-9a-f]{40}", sha)]
        if bad:
            raise UpstreamMalformed(f"GitHub API answer for {what}: {excerpt(bad[0], 80)} has no blob id")
        return files, f"{self.api}{path}"

    def _require(self, repo_url: str) -> tuple[str, str]:
        found = self.owner_repo(repo_url)
        if not found:
            raise InputError(
                f"{repo_url} is not a GitHub repository URL (https://github.com/OWNER/REPO); "
                "a PR can only be looked up on GitHub"
            )
        return found


def _closed_hint(ref: str | None, head_url: str | None) -> str:
    """What to pin for a PR closed unmerged: a commit as a plain ref (drop vllm.pr), on a repository that holds it."""
    where = f", with vllm.repo {head_url} (the PR's head repository) if it is only there" if head_url else ""
    if ref is not None:
        return f"vllm.ref {ref} is pinned already: drop vllm.pr to build it as a plain ref{where}"
    return f"drop vllm.pr and pin the branch or commit you mean to build as vllm.ref{where}"


def _deleted_fork_hint(ref: str | None, head_sha: str) -> str:
    """An open PR whose fork is gone: vllm.pr always points at that fork, so it goes; the commit comes from a fork
    that still holds it."""
    if ref is not None:
        return f"vllm.ref {ref} is pinned already: drop vllm.pr, and pin vllm.repo to a fork that holds that commit"
    return f"drop vllm.pr, and pin vllm.repo to a fork that holds its head {head_sha[:12]} with vllm.ref set to it"
