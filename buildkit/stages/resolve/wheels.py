"""Find the precompiled vLLM wheel for a commit in the per-commit index. That it exists is proved by the GET that
downloads it (resolve/download.py, which hashes the bytes), or with HEAD when its bytes are not read
(--no-wheel-download, --check); `wheel_fact` joins both into the lock's WheelFact.

Index layout (wheels.vllm.ai): `{index}/{commit}[/{variant}]/vllm/metadata.json`, with the PEP 503 page
`.../vllm/index.html` beside it. A commit lists wheels for several architectures and variants: choose by
parsed platform tag and variant, never by position.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from urllib.parse import quote, unquote, urldefrag, urljoin

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from buildkit.errors import UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable, excerpt
from buildkit.models.grammar import https_url
from buildkit.models.lock import SHA256_HEX_RE, WheelFact
from buildkit.world.http import WHEEL_INDEX, Http, Reply, content_length, redact
from buildkit.world.shapes import Answer, Line, parse

_HEADER_TEXT_RE = re.compile(r"[\x20-\x7e]{1,256}")  # ETag, Last-Modified: printable ASCII
# fullmatch; * = size unknown
CONTENT_RANGE_RE = re.compile(r"bytes (?P<start>[0-9]{1,19})-[0-9]{1,19}/(?P<size>[0-9]{1,19}|\*)")
_GIT_HASH_RE = re.compile(r"g[0-9a-f]{7,40}")  # fullmatch
MISSING_HINT = (
    "vLLM publishes per-commit wheels for main-branch commits, and some are missing (vllm issues 16217, 30295); "
    "pin a commit that has one, or another wheel.variant"
)


class _MetadataEntry(Answer):
    """One wheel in metadata.json; the fields buildkit reads."""

    filename: Line
    path: Line  # relative to the metadata's directory
    variant: Line | None = None


@dataclass(frozen=True)
class Listed:
    filename: str
    url: str
    variant: str | None  # None: the index did not say (PEP 503 page)
    sha256: str | None  # the #sha256= fragment as the PEP 503 page gives it, unchecked


@dataclass(frozen=True)
class FoundWheel:
    """The wheel the index lists for the commit, as HEAD saw it: every WheelFact field but the measured hash."""

    index: str
    variant: str
    arch: str
    filename: str
    version: str
    url: str
    size: int | None
    etag: str | None
    last_modified: str | None
    index_sha256: str | None
    listed_in: str
    verified_by: str
    listed_variant: str | None = None  # what metadata.json says the entry's variant is (not in the lock)


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
    reply = http.get(meta_url, limit=WHEEL_INDEX)
    broken: UpstreamMalformed | None = None
    if reply.status == 200:
        what = f"the wheel index's {redact(meta_url)}"
        try:
            entries = parse(list[_MetadataEntry], reply.json(what), what)
            listed = [
                # Keep escapes the index already made in `path`.
                Listed(e.filename, urljoin(meta_url, quote(e.path, safe="/%")), e.variant, sha256=None)
                for e in entries
            ]
            return meta_url, listed
        except UpstreamMalformed as exc:
            broken = exc  # the PEP 503 page is the standard answer; this error is kept in case it is missing
    page_url = f"{base}/vllm/index.html"
    reply = http.get(page_url, limit=WHEEL_INDEX)
    if reply.status == 200:
        parser = _Links()
        parser.feed(reply.text())
        listed = []
        for href in parser.hrefs:
            url, fragment = urldefrag(urljoin(page_url, href))
            name = unquote(url.rsplit("/", 1)[-1])
            if name.endswith(".whl"):
                sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
                listed.append(Listed(filename=name, url=url, variant=None, sha256=sha))
        return page_url, listed
    if reply.status in (403, 404):
        if broken:
            raise broken
        raise UpstreamMismatch(f"no wheel index for this commit: {meta_url} and {page_url} are missing", MISSING_HINT)
    raise UpstreamUnreachable(f"wheel index answered {reply.status} for {redact(page_url)}")


def _arch_matches(platform_tag: str, arch: str) -> bool:
    return platform_tag.endswith(f"_{arch}") and platform_tag.startswith(("manylinux", "linux_"))


def wheel_variant(version: Version) -> str | None:
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
        named_variant = item.variant if item.variant is not None else wheel_variant(version)
        # Inside a variant directory the files are that variant, or unsuffixed when it aliases the default.
        if named_variant not in (None, wanted_variant):
            continue
        chosen.append((item, version))
    if not chosen:
        raise UpstreamMismatch(
            f"no vllm wheel for linux {arch}, variant {variant}, at commit {commit}; the index lists: "
            + _names([i.filename for i in listed]),
            MISSING_HINT,
        )
    if len(chosen) > 1:
        raise UpstreamMismatch(
            f"several vllm wheels fit linux {arch}, variant {variant}: " + _names([i.filename for i, _ in chosen])
        )
    item, version = chosen[0]
    if f"g{commit[:9]}" not in (version.local or "").split("."):
        raise UpstreamMismatch(
            f"wheel {item.filename} has version {version}, whose local part does not name commit "
            f"g{commit[:9]}: it is not a build of the pinned commit"
        )
    return item, version


def _names(filenames: list[str]) -> str:
    """The first names, about 200 characters of them: an index can list thousands, and long ones."""
    shown: list[str] = []
    for name in filenames:
        name = name if len(name) <= 100 else name[:97] + "..."
        if shown and sum(len(n) + 2 for n in shown) + len(name) > 200:
            break
        shown.append(name)
    more = len(filenames) - len(shown)
    return (", ".join(shown) or "none") + (f" and {more} more" if more else "")


def _verify_exists(http: Http, url: str) -> tuple[str, int | None, str | None, str | None]:
    """HEAD the wheel (following redirects); if HEAD is refused, GET one byte. The download is download.py's."""
    reply = http.head(url, allow_redirects=True)
    method = "HEAD"
    if reply.status in (403, 405, 501):
        method = "GET Range: bytes=0-0"
        reply = http.get(url, limit=None, headers={"Range": "bytes=0-0"})  # only the headers are wanted
    if reply.status == 404:
        raise UpstreamMismatch(f"the index lists the wheel, but it is missing: {url} answered 404", MISSING_HINT)
    if reply.status not in (200, 206):
        raise UpstreamUnreachable(f"{method} {redact(url)} answered {reply.status}")
    size: int | None = None
    if reply.status == 206:
        m = CONTENT_RANGE_RE.fullmatch(reply.headers.get("Content-Range", ""))
        if not m:
            raise _bad_header(method, url, reply, "Content-Range")
        size = int(m["size"]) if m["size"] != "*" else None
    else:
        try:
            size = content_length(reply.headers.get("Content-Length"))
        except ValueError:
            raise _bad_header(method, url, reply, "Content-Length") from None
    return method, size, _header_text(method, url, reply, "ETag"), _header_text(method, url, reply, "Last-Modified")


def _header_text(method: str, url: str, reply: Reply, name: str) -> str | None:
    return header_text(method, url, reply.headers, name)


def header_text(method: str, url: str, headers: Mapping[str, str], name: str) -> str | None:
    """A header that goes into the lock as it is: printable ASCII, not too long."""
    value = headers.get(name)
    if value is not None and not _HEADER_TEXT_RE.fullmatch(value):
        raise UpstreamMalformed(f"{method} {redact(url)}: malformed {name} header {excerpt(value, 80)} in the answer")
    return value


def _bad_header(method: str, url: str, reply: Reply, name: str) -> UpstreamMalformed:
    value = excerpt(reply.headers.get(name), 80)
    return UpstreamMalformed(f"{method} {redact(url)}: malformed {name} header {value} in the answer")


def resolve_wheel(http: Http, index: str, commit: str, arch: str, variant: str, *, head: bool = True) -> FoundWheel:
    """The commit's wheel for arch and variant, chosen from the index and checked with HEAD (no download). Without
    `head` it is only chosen (size, ETag and Last-Modified unknown): the GET that downloads it checks it then."""
    base = f"{index}/{commit}" if variant == "default" else f"{index}/{commit}/{variant}"
    listed_in, listed = _listing(http, base)
    item, version = choose_wheel(listed, commit, arch, variant)
    try:
        url = https_url(item.url)
    except ValueError as exc:
        raise UpstreamMismatch(f"the index points the wheel at a URL buildkit will not use: {exc}") from None
    index_sha256 = None
    if item.sha256 is not None:
        index_sha256 = item.sha256.lower()  # hex digits in either case are the same hash
        if not SHA256_HEX_RE.fullmatch(index_sha256):
            raise UpstreamMalformed(
                f"the wheel index {redact(listed_in)} gives {item.filename} a malformed #sha256= "
                f"{excerpt(item.sha256, 80)}"
            )
    method, size, etag, last_modified = _verify_exists(http, url) if head else ("GET", None, None, None)
    return FoundWheel(
        index=index,
        variant=variant,
        arch=arch,
        filename=item.filename,
        version=str(version),
        url=url,
        size=size,
        etag=etag,
        last_modified=last_modified,
        index_sha256=index_sha256,
        listed_in=listed_in,
        verified_by=method,
        listed_variant=item.variant,
    )


def wheel_fact(
    found: FoundWheel, sha256: str | None, not_content_addressed: str | None, cuda: str | None, cuda_source: str
) -> WheelFact:
    """The lock's fact: what the index and the GET (or HEAD) said, the sha256 measured by downloading (or why there
    is none), and the CUDA the wheel is built for (resolve/cuda.py)."""
    fields = {k: v for k, v in asdict(found).items() if k != "listed_variant"}
    return WheelFact(
        **fields,
        sha256=sha256,
        content_addressed=sha256 is not None,
        not_content_addressed=not_content_addressed,
        cuda=cuda,
        cuda_source=cuda_source,
    )
