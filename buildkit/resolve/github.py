"""Resolve commits and pull requests through the GitHub REST API (github.com or GitHub Enterprise)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests

from buildkit.errors import InputError, UpstreamMismatch, UpstreamUnreachable
from buildkit.files import utc_now
from buildkit.http import Http
from buildkit.lock import CommitFact, PullRequestFact

TOKEN_ENV = "GITHUB_TOKEN"


class GitHub:
    def __init__(self, http: Http, api_base: str, token: str | None = None):
        self.http = http
        self.api = api_base.rstrip("/")
        self._token = token if token is not None else os.environ.get(TOKEN_ENV) or None

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

    def _get(self, path: str, what: str) -> dict[str, Any]:
        url = f"{self.api}{path}"
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        response = self.http.get(url, headers=headers)
        self._raise_for_rate_limit(response)
        if response.status_code == 401:
            raise UpstreamUnreachable(
                f"GitHub API rejected the credentials for {what} (401)", hint=f"check ${TOKEN_ENV}, or unset it"
            )
        if response.status_code in (404, 422):
            raise UpstreamMismatch(f"{what}: not found on GitHub ({response.status_code} from {url})")
        if response.status_code != 200:
            raise UpstreamUnreachable(f"GitHub API answered {response.status_code} for {what} ({url})")
        try:
            data = response.json()
        except ValueError:
            raise UpstreamUnreachable(f"GitHub API sent something that is not JSON for {what} ({url})") from None
        if not isinstance(data, dict):
            raise UpstreamUnreachable(f"GitHub API sent an unexpected answer for {what} ({url})")
        return data

    def _raise_for_rate_limit(self, response: requests.Response) -> None:
        if response.status_code not in (403, 429) or response.headers.get("X-RateLimit-Remaining") != "0":
            return
        reset = response.headers.get("X-RateLimit-Reset", "")
        when = "later"
        if reset.isdigit():
            when = datetime.fromtimestamp(int(reset), UTC).strftime("at %Y-%m-%d %H:%M:%S UTC")
        hint = (
            f"the limit for ${TOKEN_ENV} is used up; wait, or use another token"
            if self._token
            else f"set {TOKEN_ENV} to a GitHub token for a higher limit (anonymous: 60 requests/hour)"
        )
        raise UpstreamUnreachable(f"GitHub API rate limit reached; it resets {when}", hint=hint)

    def commit(self, repo_url: str, ref: str) -> CommitFact:
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/commits/{ref}"
        data = self._get(path, f"{owner}/{repo} ref {ref!r}")
        try:
            sha = data["sha"]
            message = data["commit"]["message"]
            date = data["commit"]["committer"]["date"]
        except (KeyError, TypeError):
            raise UpstreamUnreachable(f"GitHub API answer for {owner}/{repo}@{ref} lacks sha/message/date") from None
        if all(c in "0123456789abcdef" for c in ref) and not sha.startswith(ref):
            raise UpstreamMismatch(f"{owner}/{repo}: {ref!r} resolved to {sha}, which does not start with it")
        return CommitFact(
            repo=repo_url,
            ref=ref,
            commit=sha,
            date=date,
            subject=message.splitlines()[0] if message else "",
            url=data.get("html_url"),
            source=f"GitHub API {self.api}{path}",
            resolved_at=utc_now(),
        )

    def pull(self, repo_url: str, number: int) -> PullRequestFact:
        owner, repo = self._require(repo_url)
        path = f"/repos/{owner}/{repo}/pulls/{number}"
        data = self._get(path, f"{owner}/{repo} PR #{number}")
        if not data.get("merged"):
            state = data.get("state", "unknown")
            raise UpstreamMismatch(
                f"{owner}/{repo} PR #{number} is not merged (state: {state}); no merge commit to build",
                hint="pin vllm.ref to a commit instead, or wait for the merge",
            )
        try:
            return PullRequestFact(
                number=number,
                title=data.get("title", ""),
                state=data.get("state", ""),
                merged_at=data["merged_at"],
                merge_commit=data["merge_commit_sha"],
                url=data.get("html_url") or f"https://github.com/{owner}/{repo}/pull/{number}",
                source=f"GitHub API {self.api}{path}",
                resolved_at=utc_now(),
            )
        except (KeyError, ValueError):
            raise UpstreamUnreachable(f"GitHub API answer for PR #{number} lacks merged_at/merge_commit_sha") from None

    def _require(self, repo_url: str) -> tuple[str, str]:
        found = self.owner_repo(repo_url)
        if not found:
            raise InputError(
                f"{repo_url} is not a GitHub repository URL (https://github.com/OWNER/REPO); "
                "a PR can only be looked up on GitHub"
            )
        return found
