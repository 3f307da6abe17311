"""Strict grammars for every value that can reach a Dockerfile or a command line.

Each check returns the value unchanged or raises ValueError with what was expected; pydantic turns that into
a message naming the key. Keep these tight: a value that passes here is later written into Dockerfiles and
argv lists without further quoting.

Patterns are unanchored and always used with `fullmatch`: Python's `$` also matches before a final newline, so
`re.match(r"^release$", "release\\n")` would let a line break into a Dockerfile. The JSON Schema gets `^...$`
added, which in ECMA-262 means the whole string. `[0-9]`, not `\\d`, which also matches non-ASCII digits.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, WithJsonSchema

from buildkit.errors import excerpt

FULL_SHA_RE = re.compile(r"[0-9a-f]{40}")
SHA_PREFIX_RE = re.compile(r"[0-9a-f]{7,40}")
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")

# git check-ref-format, narrowed: no leading '-', no '..', '//', '@{', trailing '/', '.', or '.lock'.
_REF_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}")

# The distribution reference grammar (github.com/distribution/reference, regexp.go).
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_HOST = rf"(?:{_DOMAIN_NAME}|{_IPV6})"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # ASCII, as in the distribution grammar
_NAME = rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
IMAGE_REF_RE = re.compile(rf"{_NAME}(?::(?P<tag>{_TAG}))?(?:@(?P<digest>sha256:[0-9a-f]{{64}}))?")

STAGE_RE = re.compile(r"[a-z][a-z0-9_.-]{0,62}")
PLATFORM_RE = re.compile(r"linux/(?:amd64|arm64)")
CUDA_ARCH_LIST_RE = re.compile(r"[0-9]{1,2}\.[0-9][af]?(?:\+PTX)?(?:[ ;][0-9]{1,2}\.[0-9][af]?(?:\+PTX)?)*")
EXTRA_RE = re.compile(r"[a-z0-9]+(?:[-_.][a-z0-9]+)*")
VARIANT_RE = re.compile(r"default|[a-z0-9]{2,16}")
# Allowed URL characters: RFC 3986 unreserved, percent-escapes, and the few delimiters paths use. No quotes,
# whitespace, '$', '`', '\\', ';', '&', '|', '<', '>' -- nothing a shell or a Dockerfile would interpret.
_URL_CHARS_RE = re.compile(r"[A-Za-z0-9._~:/%+,=@\[\]-]+")
REPO_PATH_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*")
# CUDA_VERSION as image configs set it: nvidia/cuda three parts (12.9.1), NGC images (cuda-dl-base, pytorch) four
# (12.9.0.043: the last part is NVIDIA's build number, zero-padded, kept as written), older images two (11.8).
# tests/unit/stages/test_resolve_grammar.py holds the real values with where each was published.
CUDA_VERSION_RE = re.compile(r"[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,4}){0,2}")
WHEEL_CUDA_RE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?")  # major.minor, or a major alone (from libcudart.so.N)
_TEXT_RE = re.compile(r"[^\x00-\x1f\x7f-\x9f\ud800-\udfff]{1,300}")  # no C0, DEL, C1, lone surrogate


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def full_sha(value: str) -> str:
    if not FULL_SHA_RE.fullmatch(value):
        raise ValueError(f"expected a full commit SHA (40 lowercase hex digits), found {excerpt(value)}")
    return value


def git_ref(value: str) -> str:
    """A commit SHA or a 7-39 hex prefix, or a branch or tag name."""
    if SHA_PREFIX_RE.fullmatch(value):
        return value
    bad = (
        not _REF_NAME_RE.fullmatch(value)
        or ".." in value
        or "//" in value
        or "@{" in value
        or value.endswith(("/", ".", ".lock"))
    )
    if bad:
        raise ValueError(
            "expected a commit SHA (40 lowercase hex), a SHA prefix (7-39 lowercase hex), or a branch or tag "
            f"name (letters, digits, '._/+-', not starting with '-'), found {excerpt(value)}"
        )
    return value


def _check_url(value: str, schemes: set[str], what: str) -> str:
    parts = urlsplit(value)
    if not _URL_CHARS_RE.fullmatch(value):
        raise ValueError(
            f"expected {what} without spaces, quotes, '?query', '#fragment' or shell characters, found {excerpt(value)}"
        )
    if parts.scheme not in schemes:
        raise ValueError(f"expected {what} ({'/'.join(sorted(schemes))}), found {excerpt(value)}")
    if parts.username or parts.password:
        raise ValueError(f"credentials do not belong in pins; use environment variables, found them in {what}")
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"expected a file:///absolute/path, found {excerpt(value)}")
        return value
    if not parts.hostname:
        raise ValueError(f"expected {what} with a host name, found {excerpt(value)}")
    if parts.scheme in ("http", "git") and not is_loopback_host(parts.hostname):
        raise ValueError(
            f"plain {parts.scheme}:// is allowed only for loopback hosts (127.0.0.1, localhost, ::1); "
            f"use https://, found {excerpt(value)}"
        )
    return value


def https_url(value: str) -> str:
    """An https:// URL; plain http:// only for loopback hosts (tests, local mirrors)."""
    return _check_url(value, {"https", "http"}, "an https:// URL")


def git_url(value: str) -> str:
    """A git remote: https://, file:///path, or http:// / git:// on a loopback host."""
    return _check_url(value, {"https", "http", "git", "file"}, "a git URL")


def image_ref(value: str) -> str:
    m = IMAGE_REF_RE.fullmatch(value)
    if not m or len(value) > 512:
        raise ValueError(
            "expected an image reference like registry.example.com/path/name:tag "
            f"(distribution reference grammar: lowercase path, tag [A-Za-z0-9_.-]), found {excerpt(value)}"
        )
    if not m.group("tag") and not m.group("digest"):
        raise ValueError(f"expected an image reference with an explicit :tag or @sha256 digest, found {excerpt(value)}")
    return value


def image_tag(value: str) -> str:
    """The name:tag the built image gets; no digest (the build produces that)."""
    m = IMAGE_REF_RE.fullmatch(value)
    if not m or not m.group("tag") or m.group("digest"):
        raise ValueError(f"expected an image name with a tag, like nemo-rl:v0.5.0-spec-decode, found {excerpt(value)}")
    return value


def cache_repository(value: str) -> str:
    """A registry repository for the shared build cache: no tag (buildkit adds one per target), no digest, and an
    explicit registry host. By Docker's rule the first component is a host only when it holds a '.' or a ':' or is
    `localhost`; otherwise buildx reads `nemo-rl/cache` as docker.io/nemo-rl/cache, someone else's Docker Hub
    namespace, and would import whatever cache is there."""
    m = IMAGE_REF_RE.fullmatch(value)
    if not m or len(value) > 255 or m.group("tag") or m.group("digest"):
        raise ValueError(
            "expected a registry repository without a tag, like 127.0.0.1:5000/nemo-rl/cache or "
            f"ghcr.io/org/nemo-rl-cache (buildkit tags it per target), found {excerpt(value)}"
        )
    domain = m.group("domain") or ""
    if not ("." in domain or ":" in domain or domain == "localhost"):
        raise ValueError(
            "expected a registry repository that starts with its registry host (a name with a '.' or a ':port', "
            "or localhost), like 127.0.0.1:5000/nemo-rl/cache or ghcr.io/org/nemo-rl-cache: without one, Docker "
            f"reads it as a Docker Hub repository (docker.io/...), found {excerpt(value)}"
        )
    return value


def digest(value: str) -> str:
    if not DIGEST_RE.fullmatch(value):
        raise ValueError(f"expected a digest sha256:<64 lowercase hex>, found {excerpt(value)}")
    return value


def _regex_check(regex: re.Pattern[str], what: str):
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"expected {what}, found {excerpt(value)}")
        return value

    return check


def one_line_text(value: str) -> str:
    if not _TEXT_RE.fullmatch(value):
        raise ValueError(
            "expected one line of text (1-300 characters, no control characters or lone surrogates), "
            f"found {excerpt(value)}"
        )
    return value


def _typed(check, pattern: str, description: str):
    """A str checked by `check` (precise messages) whose JSON Schema carries `pattern` for editors."""
    # JSON Schema patterns are ECMA-262: anchored (there `$` is the very end), no Python-style named groups.
    ecma = "^(?:" + re.sub(r"\(\?P<\w+>", "(?:", pattern) + ")$"
    return Annotated[
        str,
        AfterValidator(check),
        WithJsonSchema({"type": "string", "pattern": ecma, "description": description}),
    ]


def _pattern(regex: re.Pattern[str], what: str, description: str):
    return _typed(_regex_check(regex, what), regex.pattern, description)


_LOOPBACK_OR_HTTPS = r"(?:https://|http://(?:127\.|localhost[:/]|localhost$|\[::1\]))[A-Za-z0-9._~:/%+,=@\[\]-]*"
_GIT_URL = r"(?:https://|file:///|(?:http|git)://(?:127\.|localhost[:/]|\[::1\]))[A-Za-z0-9._~:/%+,=@\[\]-]*"

FullSha = _typed(full_sha, FULL_SHA_RE.pattern, "Full commit SHA: 40 lowercase hex digits.")
GitRef = _typed(
    git_ref,
    r"[0-9a-f]{7,40}|[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}",
    "Commit SHA (full or 7-39 hex prefix), or branch or tag name.",
)
HttpsUrl = _typed(https_url, _LOOPBACK_OR_HTTPS, "https:// URL; http:// only for loopback hosts.")
GitUrl = _typed(git_url, _GIT_URL, "Git URL: https://, file:///path, or http:// / git:// on a loopback host.")
ImageRef = _typed(image_ref, IMAGE_REF_RE.pattern, "Image reference with an explicit :tag and/or @sha256 digest.")
ImageTag = _typed(image_tag, IMAGE_REF_RE.pattern, "Image name:tag for the built image.")
CacheRepository = _typed(
    cache_repository, IMAGE_REF_RE.pattern, "Registry repository (with its registry host, no tag) for the build cache."
)
Digest = _typed(digest, DIGEST_RE.pattern, "sha256:<64 lowercase hex>")
StageName = _pattern(STAGE_RE, "a Dockerfile stage name like 'release'", "Dockerfile stage name.")
Platform = _pattern(PLATFORM_RE, "linux/amd64 or linux/arm64", "Build platform.")
CudaArchList = _pattern(
    CUDA_ARCH_LIST_RE, "a TORCH_CUDA_ARCH_LIST like '9.0' or '9.0 10.0+PTX'", "TORCH_CUDA_ARCH_LIST value."
)
ExtraName = _pattern(EXTRA_RE, "a lowercase extra name like 'sglang'", "uv extra name.")
Variant = _pattern(VARIANT_RE, "'default' or a wheel variant name like cu129, cu130, cpu", "Wheel variant.")
RepoPath = _typed(
    _regex_check(REPO_PATH_RE, "a relative path like patches/x.patch (no '..', no leading '/' or '.')"),
    REPO_PATH_RE.pattern,
    "Relative path inside the project.",
)
# A path of a git tree: '/'-separated components, none empty, '.' or '..', no control character (the grammar
# resolve holds GitHub's and git's answers to: buildkit/world/git.py path_problem).
GIT_PATH_RE = re.compile(r"(?!\.\.?(?:/|$))[^/\x00-\x1f\x7f]+(?:/(?!\.\.?(?:/|$))[^/\x00-\x1f\x7f]+)*")
GitPath = _pattern(GIT_PATH_RE, "a path of a git tree (vllm/config.py)", "A path in a git tree.")
OneLine = _typed(one_line_text, _TEXT_RE.pattern, "One line of text, no control characters.")
CudaVersion = _pattern(
    CUDA_VERSION_RE, "a CUDA version like 12.9.1 or 12.9.0.043", "CUDA_VERSION as an image config sets it."
)
WheelCuda = _pattern(WHEEL_CUDA_RE, "a CUDA version like 12.9 (or a major, 12)", "The CUDA a wheel is built for.")


@dataclass(frozen=True)
class ImageName:
    registry: str  # as written in the reference, e.g. nvcr.io, 127.0.0.1:5000, docker.io
    repository: str
    tag: str | None
    digest: str | None

    @property
    def api_base(self) -> str:
        host = "registry-1.docker.io" if self.registry == "docker.io" else self.registry
        scheme = "http" if is_loopback_host(host_only(host)) else "https"
        return f"{scheme}://{host}"

    @property
    def name(self) -> str:
        return self.repository if self.registry == "docker.io" else f"{self.registry}/{self.repository}"

    def at(self, reference: str) -> str:
        """The name with a tag or a digest, as Docker writes them: `name:tag`, `name@sha256:...` (a digest always
        holds a ':', a tag never does)."""
        return f"{self.name}{'@' if ':' in reference else ':'}{reference}"


def parse_image_ref(ref: str) -> ImageName:
    m = IMAGE_REF_RE.fullmatch(ref)
    if not m:
        raise ValueError(f"not an image reference: {ref!r}")
    domain, path = m.group("domain"), m.group("path")
    # Docker's normalisation: a first component without '.' or ':' (and not localhost) is a Docker Hub path.
    if domain and ("." in domain or ":" in domain or domain == "localhost"):
        registry = domain
    else:
        registry = "docker.io"
        path = f"{domain}/{path}" if domain else path
        if "/" not in path:
            path = f"library/{path}"
    return ImageName(registry=registry, repository=path, tag=m.group("tag"), digest=m.group("digest"))


def host_only(registry: str) -> str:
    if registry.startswith("["):
        return registry.split("]")[0] + "]"
    return registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
