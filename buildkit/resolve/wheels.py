"""Find the precompiled vLLM wheel for a commit in the per-commit index, and prove it exists without downloading it.

Index layout (wheels.vllm.ai): `{index}/{commit}[/{variant}]/vllm/metadata.json`, with the PEP 503 page
`.../vllm/index.html` beside it. A commit lists wheels for several architectures and variants: choose by
parsed platform tag and variant, never by position.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import quote, unquote, urldefrag, urljoin

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from buildkit.errors import UpstreamMismatch, UpstreamUnreachable
from buildkit.files import utc_now
from buildkit.grammar import https_url
from buildkit.http import Http
from buildkit.lock import WheelFact

_CONTENT_RANGE_RE = re.compile(r"bytes [0-9]{1,19}-[0-9]{1,19}/([0-9]{1,19})")  # fullmatch
_GIT_HASH_RE = re.compile(r"g[0-9a-f]{7,40}")  # fullmatch
MISSING_HINT = (
    "vLLM publishes per-commit wheels for main-branch commits, and some are missing (vllm issues 16217, 30295); "
    "pin a commit that has one, or another wheel.variant"
)


@dataclass(frozen=True)
class Listed:
    filename: str
    url: str
    variant: str | None  # None: the index did not say (PEP 503 page)
    sha256: str | None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _listing(http: Http, base: str) -> tuple[str, list[Listed]]:
    """The wheels the index lists for one commit+variant: metadata.json first, the PEP 503 page as fallback."""
    meta_url = f"{base}/vllm/metadata.json"
    response = http.get(meta_url)
    if response.status_code == 200:
        try:
            entries = json.loads(response.text)
            listed = [
                Listed(
                    filename=e["filename"],
                    # `path` is relative to the metadata's directory; keep escapes the index already made.
                    url=urljoin(meta_url, quote(e["path"], safe="/%")),
                    variant=e.get("variant"),
                    sha256=None,
                )
                for e in entries
            ]
            return meta_url, listed
        except (ValueError, KeyError, TypeError):
            pass  # a broken metadata.json: the PEP 503 page is the standard answer
    page_url = f"{base}/vllm/index.html"
    response = http.get(page_url)
    if response.status_code == 200:
        parser = _Links()
        parser.feed(response.text)
        listed = []
        for href in parser.hrefs:
            url, fragment = urldefrag(urljoin(page_url, href))
            name = unquote(url.rsplit("/", 1)[-1])
            if name.endswith(".whl"):
                sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
                listed.append(Listed(filename=name, url=url, variant=None, sha256=sha))
        return page_url, listed
    if response.status_code in (403, 404):
        raise UpstreamMismatch(f"no wheel index for this commit: {meta_url} and {page_url} are missing", MISSING_HINT)
    raise UpstreamUnreachable(f"wheel index answered {response.status_code} for {page_url}")


def _arch_matches(platform_tag: str, arch: str) -> bool:
    return platform_tag.endswith(f"_{arch}") and platform_tag.startswith(("manylinux", "linux_"))


def _wheel_variant(version: Version) -> str | None:
    """The variant a version names in its local part: '+g<hash>.cu130' -> cu130, '+cu129' -> cu129."""
    parts = [p for p in (version.local or "").split(".") if p and not _GIT_HASH_RE.fullmatch(p)]
    return parts[0] if parts else None


def choose_wheel(listed: list[Listed], commit: str, arch: str, variant: str) -> tuple[Listed, Version]:
    wanted_variant = None if variant == "default" else variant
    chosen: list[tuple[Listed, Version]] = []
    for item in listed:
        try:
            name, version, _build, tags = parse_wheel_filename(item.filename)
        except InvalidWheelFilename:
            continue
        if name != "vllm" or not any(_arch_matches(t.platform, arch) for t in tags):
            continue
        named_variant = item.variant if item.variant is not None else _wheel_variant(version)
        # Inside a variant directory the files are that variant, or unsuffixed when it aliases the default.
        if named_variant not in (None, wanted_variant):
            continue
        chosen.append((item, version))
    names = ", ".join(i.filename for i in listed) or "none"
    if not chosen:
        raise UpstreamMismatch(
            f"no vllm wheel for linux {arch}, variant {variant}, at commit {commit}; the index lists: {names}",
            MISSING_HINT,
        )
    if len(chosen) > 1:
        raise UpstreamMismatch(
            f"several vllm wheels fit linux {arch}, variant {variant}: " + ", ".join(i.filename for i, _ in chosen)
        )
    item, version = chosen[0]
    if f"g{commit[:9]}" not in (version.local or "").split("."):
        raise UpstreamMismatch(
            f"wheel {item.filename} has version {version}, whose local part does not name commit "
            f"g{commit[:9]}: it is not a build of the pinned commit"
        )
    return item, version


def _verify_exists(http: Http, url: str) -> tuple[str, int | None, str | None, str | None]:
    """HEAD the wheel (following redirects); if HEAD is refused, GET one byte. Never download the wheel."""
    response = http.head(url, allow_redirects=True)
    method = "HEAD"
    if response.status_code in (403, 405, 501):
        method = "GET Range: bytes=0-0"
        response = http.get(url, headers={"Range": "bytes=0-0"}, stream=True, allow_redirects=True)
        response.close()  # only the headers are wanted
    if response.status_code == 404:
        raise UpstreamMismatch(f"the index lists the wheel, but it is missing: {url} answered 404", MISSING_HINT)
    if response.status_code not in (200, 206):
        raise UpstreamUnreachable(f"{method} {url} answered {response.status_code}")
    size: int | None = None
    if response.status_code == 206:
        m = _CONTENT_RANGE_RE.fullmatch(response.headers.get("Content-Range", ""))
        size = int(m.group(1)) if m else None
    elif response.headers.get("Content-Length", "").isdigit():
        size = int(response.headers["Content-Length"])
    return method, size, response.headers.get("ETag"), response.headers.get("Last-Modified")


def resolve_wheel(http: Http, index: str, commit: str, arch: str, variant: str) -> WheelFact:
    base = f"{index}/{commit}" if variant == "default" else f"{index}/{commit}/{variant}"
    listed_in, listed = _listing(http, base)
    item, version = choose_wheel(listed, commit, arch, variant)
    try:
        url = https_url(item.url)
    except ValueError as exc:
        raise UpstreamMismatch(f"the index points the wheel at a URL buildkit will not use: {exc}") from None
    method, size, etag, last_modified = _verify_exists(http, url)
    return WheelFact(
        index=index,
        variant=variant,
        arch=arch,
        filename=item.filename,
        version=str(version),
        url=url,
        size=size,
        etag=etag,
        last_modified=last_modified,
        sha256=item.sha256,
        listed_in=listed_in,
        verified_by=method,
        resolved_at=utc_now(),
    )
