"""The pins schema: what to build, as a person writes it in pins.yaml.

Loading validates everything (unknown keys rejected, every value checked against buildkit.models.grammar) and reports
each problem with file, line, key path, what was expected and what was found.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator
from pydantic_core import ErrorDetails

from buildkit.errors import InputError, excerpt
from buildkit.files import read_local
from buildkit.models.grammar import (
    CacheRepository,
    CudaArchList,
    ExtraName,
    FullSha,
    GitRef,
    GitUrl,
    HttpsUrl,
    ImageRef,
    ImageTag,
    OneLine,
    Platform,
    RepoPath,
    StageName,
    Variant,
    https_url,
)
from buildkit.models.yamlload import MAX_BYTES, load_yaml

DEFAULT_GITHUB_API = "https://api.github.com"
DEFAULT_WHEEL_INDEX = "https://wheels.vllm.ai"
ENV_GITHUB_API = "BUILDKIT_GITHUB_API"
ENV_WHEEL_INDEX = "BUILDKIT_WHEEL_INDEX"

ARCH_OF_PLATFORM = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class AtKey(ValueError):
    """A model validator's refusal that belongs to one key (`loc`, below the model that raised it: ("wheel", "arch")
    from Pins): the message names that key and its line, not the model's first line (pydantic gives a model
    validator's error the model's own location)."""

    def __init__(self, loc: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class Source(_Strict):
    """A git repository at a ref."""

    repo: GitUrl = Field(description="Git URL: https://, file:///path, or http:// / git:// on loopback.")
    ref: GitRef | None = Field(
        default=None, description="Commit SHA (full or 7-39 hex prefix), branch or tag. Resolved to a full SHA."
    )


class PatchPin(_Strict):
    file: RepoPath = Field(description="Patch file (unified diff, paths a/ b/), relative to pins.yaml.")
    reason: OneLine = Field(description="Why upstream is changed; carried into the prepare record and the report.")


class NemoRl(Source):
    ref: GitRef = Field(description="Commit SHA (full or 7-39 hex prefix), branch or tag.")
    patches: list[PatchPin] = Field(
        default_factory=list, description="Declared modifications, applied in order; each must apply cleanly."
    )


class GitUrlRewrite(_Strict):
    """git's `url.<url>.insteadOf <instead_of>`: fetch from a mirror without editing the pinned URLs."""

    url: GitUrl = Field(description="The mirror prefix to use, e.g. file:///srv/mirror/.")
    instead_of: GitUrl = Field(description="The prefix it replaces, e.g. https://github.com/.")


def git_settings(rewrites: list[GitUrlRewrite], repo: str) -> list[tuple[str, str]]:
    """The git configuration of every git buildkit runs (prepare's, and uv's when it locks the uv-source mode):
    the URL rewrites, and file:// transport only where the pins ask for it (submodules may not use it by default,
    CVE-2022-39253; allowed only for the user's own mirrors)."""
    settings = [(f"url.{rewrite.url}.insteadOf", rewrite.instead_of) for rewrite in rewrites]
    if repo.startswith("file://") or any(r.url.startswith("file://") for r in rewrites):
        settings.append(("protocol.file.allow", "always"))
    return settings


def fetched_from(url: str, rewrites: list[GitUrlRewrite]) -> str:
    """The URL git fetches `url` from under the rewrites: the longest `instead_of` prefix wins, as git's insteadOf."""
    found = [r for r in rewrites if url.startswith(r.instead_of)]
    if not found:
        return url
    best = max(found, key=lambda r: len(r.instead_of))
    return best.url + url[len(best.instead_of) :]


DEFAULT_VLLM_REPO = "https://github.com/vllm-project/vllm.git"


class Vllm(Source):
    """The vLLM source: `repo` (vLLM or any fork of it) at `ref`, or pull request `pr` of `repo`."""

    repo: GitUrl = Field(description="vLLM's repository or a fork of it (`https://github.com/<user>/vllm.git`).")
    pr: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="GitHub pull request number of `repo`, open or merged. Merged: the source is its merge commit "
        "(`ref`, when given, must equal it). Open: the source is its head commit on its head repository (a fork; "
        "`ref`, when given, must equal the head).",
    )
    upstream: GitUrl = Field(
        default=DEFAULT_VLLM_REPO,
        description="vLLM's own repository, whose branch holds the commits that have precompiled wheels.",
    )
    upstream_branch: GitRef = Field(default="main", description="The branch of `upstream` with per-commit wheels.")
    install: Literal["script", "uv-source"] | None = Field(
        default=None,
        description="How the image installs vLLM. Absent: as NeMo-RL at the pinned commit does (build-custom-vllm.sh, "
        "or uv from the git source its pyproject.toml names). 'uv-source': where NeMo-RL uses the script, prepare "
        "writes its release branches' way (pyproject.toml: the source as a uv git source, precompiled mode with the "
        "wheel, the wheel's dependency metadata; uv.lock: `uv lock`). 'script': refuse a NeMo-RL commit that does not "
        "use the script.",
    )

    @model_validator(mode="after")
    def _ref_or_pr(self) -> Vllm:
        if self.ref is None and self.pr is None:
            raise ValueError("give vllm.ref, vllm.pr, or both")  # neither key is there to point at
        if self.install == "uv-source" and self.repo.split(":", 1)[0] not in ("https", "file"):
            # uv's git sources: https://, ssh:// or file:// (uv 0.11: "Unsupported Git URL scheme `git:`").
            raise AtKey(
                ("repo",),
                "vllm.install: uv-source writes vllm.repo as a uv git source, and uv fetches "
                "https:// and file:// (not http:// or git://)",
            )
        return self


class Wheel(_Strict):
    commit: Literal["auto"] | FullSha = Field(
        default="auto",
        description="Whose precompiled wheel carries vLLM's compiled files. 'auto': the source commit when it is on "
        "vllm.upstream_branch and has a wheel; else the source's merge base with that branch, or the newest "
        "first-parent ancestor of it that has one (bounded tries). A full SHA pins it by hand; it must be an "
        "ancestor of the source. Never a moving nightly.",
    )
    accept_compiled_changes: OneLine | None = Field(
        default=None,
        description="Why the build may go on although the source changes files vLLM's compiled code is built from "
        "(a reviewer's reason; the report shows it). Unset: such a change stops resolve (exit 8).",
    )
    arch: Literal["x86_64", "aarch64"] = Field(default="x86_64", description="Wheel CPU architecture.")
    variant: Variant = Field(
        default="default",
        description="Wheel variant in the per-commit index: 'default' (the commit's top-level index; CUDA 12.9 "
        "today) or a variant directory such as cu129, cu130, cpu.",
    )


class DroppedExtra(_Strict):
    name: ExtraName
    reason: OneLine = Field(description="Why it is dropped; written into the Dockerfile as a comment.")


class BuildCache(_Strict):
    """A build cache in a registry, shared by every builder that builds this lock."""

    ref: CacheRepository = Field(
        description="Registry repository, no tag, e.g. 127.0.0.1:5000/nemo-rl/cache. Each target gets its own tag "
        "(`:release`, `:smoke`). Builds import it and export to it (mode=max: every stage's layers)."
    )
    export: bool = Field(
        default=True, description="Export to the cache after each build (false: import only, e.g. for CI on PRs)."
    )


class PlatformBuild(_Strict):
    """One platform of build.platforms: the GPUs its nodes have."""

    cuda_arch_list: CudaArchList = Field(description="TORCH_CUDA_ARCH_LIST for this platform's GPUs ('10.0': GB200).")


class Build(_Strict):
    @model_validator(mode="before")
    @classmethod
    def _primary_platform(cls, data: Any) -> Any:
        """build.platforms (issue 30): each platform with its GPUs. The first one listed is the primary: its
        platform and cuda_arch_list fill build.platform and build.cuda_arch_list, which every single-platform reader
        keeps reading; the one form or the other, never both."""
        if not isinstance(data, dict) or data.get("platforms") is None:
            return data
        given = [key for key in ("platform", "cuda_arch_list") if key in data]
        if given:
            raise AtKey(
                (given[0],),
                f"build.platforms replaces build.{given[0]}: give each platform's cuda_arch_list under "
                "build.platforms, or use the single-platform form without build.platforms",
            )
        platforms = data["platforms"]
        if not isinstance(platforms, dict) or not platforms:
            raise AtKey(
                ("platforms",),
                "expected a mapping of at least one platform (linux/amd64: {cuda_arch_list: '9.0'})",
            )
        first, primary = next(iter(platforms.items()))
        arch_list = primary.get("cuda_arch_list") if isinstance(primary, dict) else None
        return {**data, "platform": first, "cuda_arch_list": arch_list}

    target: StageName = Field(default="release", description="Dockerfile stage to build.")
    platform: Platform = Field(default="linux/amd64")
    cuda_arch_list: CudaArchList = Field(description="TORCH_CUDA_ARCH_LIST, e.g. '9.0' for H20/H100.")
    tag: ImageTag = Field(description="name:tag for the built image.")
    drop_extras: list[DroppedExtra] = Field(default_factory=list, description="uv extras left out of the image.")
    cache: BuildCache | None = Field(default=None, description="Registry build cache shared by builders.")
    compression: Literal["gzip", "zstd"] = Field(
        default="gzip",
        description="Compression of the layers a pushed image gets (zstd: smaller, faster to pull; needs "
        "containerd 1.5+ / Docker 23+ on the nodes). Only the layers this build makes: see force_compression.",
    )
    gpu_required: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./*?+-]{1,200}$")]] = Field(
        default_factory=lambda: ["vllm/_C.abi3.so", "vllm/_moe_C.abi3.so"],
        description="Shared objects (paths in the wheel, * allowed) that must hold a kernel for every GPU in "
        "cuda_arch_list; resolve and verify stop otherwise. The others are shown, not required.",
    )
    force_compression: bool = Field(
        default=False,
        description="Re-compress the base image's layers too. They then differ from the base image's own, so nodes "
        "that already pulled the base pull them again.",
    )
    platforms: dict[Platform, PlatformBuild] | None = Field(
        default=None,
        description="Several platforms from one lock, each with its GPUs (linux/amd64: {cuda_arch_list: '9.0'}, "
        "linux/arm64: {cuda_arch_list: '10.0'}); replaces build.platform and build.cuda_arch_list. The wheel's arch "
        "follows each platform; everything else is one pin for all.",
    )

    def targets(self) -> list[tuple[str, str]]:
        """(platform, cuda_arch_list) of every platform built, the primary first."""
        if self.platforms is None:
            return [(self.platform, self.cuda_arch_list)]
        return [(platform, each.cuda_arch_list) for platform, each in self.platforms.items()]

    def for_platform(self, platform: str) -> Build:
        """The single-platform build of one of the targets (its GPUs, the rest shared)."""
        arch_list = dict(self.targets())[platform]
        return self.model_copy(update={"platform": platform, "cuda_arch_list": arch_list, "platforms": None})


# Build settings added after locks of version 2 were first written: dumped (so hashed, and written into the lock)
# only when set, so that pins and locks that do not use them keep the bytes and hashes they had before.
_WRITTEN_WHEN_SET = {
    "platforms": None,
    "cache": None,
    "compression": "gzip",
    "force_compression": False,
    "gpu_required": ["vllm/_C.abi3.so", "vllm/_moe_C.abi3.so"],
}


# Source and wheel keys added with lock version 5, hashed only when set: pins that do not use them keep their hash.
_SOURCE_WRITTEN_WHEN_SET: dict[str, dict[str, Any]] = {
    "vllm": {"upstream": DEFAULT_VLLM_REPO, "upstream_branch": "main", "install": None},
    "wheel": {"commit": "auto", "accept_compiled_changes": None},
}


def dump_build(build: Build) -> dict[str, Any]:
    data = build.model_dump(mode="json")
    for key, default in _WRITTEN_WHEN_SET.items():
        if data[key] == default:
            del data[key]
    if build.platforms is not None:  # the primary's platform and GPUs are in build.platforms, as written
        del data["platform"], data["cuda_arch_list"]
    return data


class KnownIssue(_Strict):
    title: OneLine
    detail: str = Field(default="", max_length=2000)


class Endpoints(_Strict):
    github_api: HttpsUrl | None = Field(
        default=None, description=f"GitHub REST API base (default {DEFAULT_GITHUB_API}); ${ENV_GITHUB_API} wins."
    )
    wheel_index: HttpsUrl | None = Field(
        default=None, description=f"vLLM wheel index (default {DEFAULT_WHEEL_INDEX}); ${ENV_WHEEL_INDEX} wins."
    )


class Pins(_Strict):
    """pins.yaml: the inputs of a buildkit build."""

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_version(cls, data: Any) -> Any:
        # Literal[1] takes `true` (True == 1 in Python): a boolean is never a number here.
        if isinstance(data, dict) and isinstance(data.get("schema_version"), bool):
            found = str(data["schema_version"]).lower()
            raise AtKey(("schema_version",), f"expected the integer 1, found {found}")
        return data

    schema_version: Literal[1] = 1
    nemo_rl: NemoRl
    vllm: Vllm
    wheel: Wheel = Field(default_factory=Wheel)
    base_image: ImageRef = Field(description="Base image with an explicit tag (and optionally @sha256 digest).")
    build: Build
    known_issues: list[KnownIssue] = Field(default_factory=list)
    endpoints: Endpoints = Field(default_factory=Endpoints)
    git_url_rewrites: list[GitUrlRewrite] = Field(
        default_factory=list, description="Mirrors for git fetches (git's insteadOf), applied to submodules too."
    )

    @model_validator(mode="before")
    @classmethod
    def _arch_follows_platforms(cls, data: Any) -> Any:
        """With build.platforms, the wheel's arch follows each platform: wheel.arch is the primary's, never
        written by hand."""
        build = data.get("build") if isinstance(data, dict) else None
        if not isinstance(build, dict) or not isinstance(build.get("platforms"), dict) or not build["platforms"]:
            return data
        wheel = data.get("wheel") if isinstance(data.get("wheel"), dict) else {}
        if "arch" in wheel:
            raise AtKey(
                ("wheel", "arch"),
                "wheel.arch follows build.platforms (each platform's wheel is its own arch): leave it out",
            )
        primary = next(iter(build["platforms"]))
        return {**data, "wheel": {**wheel, "arch": ARCH_OF_PLATFORM.get(str(primary), "x86_64")}}

    def for_platform(self, platform: str) -> Pins:
        """These pins as a single-platform build of one of build.platforms (its GPUs and its wheel's arch)."""
        return self.model_copy(
            update={
                "build": self.build.for_platform(platform),
                "wheel": self.wheel.model_copy(update={"arch": ARCH_OF_PLATFORM[platform]}),
            }
        )

    @model_validator(mode="after")
    def _arch_matches_platform(self) -> Pins:
        """Said at the key written by hand: wheel.arch, or build.platform when wheel.arch is the default."""
        expected = ARCH_OF_PLATFORM[self.build.platform]
        if expected == self.wheel.arch:
            return self
        if "arch" in self.wheel.model_fields_set:
            raise AtKey(
                ("wheel", "arch"),
                f"{self.wheel.arch!r} does not match build.platform {self.build.platform!r} (expected {expected!r})",
            )
        raise AtKey(
            ("build", "platform"),
            f"{self.build.platform!r} needs wheel.arch {expected!r} (wheel.arch is {self.wheel.arch!r} when not "
            "given): set it under wheel",
        )

    def sha256(self) -> str:
        """Hash of the validated content: comments and formatting do not make a lock stale."""
        data = {**self.model_dump(mode="json"), "build": dump_build(self.build)}
        for section, defaults in _SOURCE_WRITTEN_WHEN_SET.items():  # keys added later: hashed only when set
            data[section] = {k: v for k, v in data[section].items() if defaults.get(k, ...) != v}
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def github_api(self) -> str:
        return (_url_from_env(ENV_GITHUB_API) or self.endpoints.github_api or DEFAULT_GITHUB_API).rstrip("/")

    def github_api_named_by_pins(self) -> bool:
        """Whether the GitHub API base comes from this file, which a change to the repository can edit (and so
        earns no token), rather than from the environment or the default."""
        return not _url_from_env(ENV_GITHUB_API) and self.endpoints.github_api is not None

    def wheel_index(self) -> str:
        return (_url_from_env(ENV_WHEEL_INDEX) or self.endpoints.wheel_index or DEFAULT_WHEEL_INDEX).rstrip("/")


def _url_from_env(name: str) -> str | None:
    """An endpoint from the environment, held to the same grammar as in pins (https://, http:// on loopback)."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return https_url(value)
    except ValueError as exc:
        raise InputError(f"${name}: {exc}") from None


def json_schema() -> dict[str, Any]:
    schema = Pins.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "buildkit pins.yaml"
    return schema


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at a pydantic error location, or of its nearest parent."""
    node, line = root, None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if node is None:
                # An unknown key: point at the key itself.
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            node = None
    return node.start_mark.line + 1 if node is not None else line


def _describe(err: ErrorDetails) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key (check the spelling; `buildkit schema` lists every key)"
    if kind == "missing":
        return "required key is missing"
    if kind == "string_type":
        return f"expected a string (quote it in YAML), found {excerpt(err['input'])}"
    if kind.endswith("_type") or kind in ("literal_error", "greater_than_equal", "less_than_equal"):
        return f"{msg}, found {excerpt(err['input'])}"
    return msg  # the grammars quote what they found through excerpt() already


MAX_PROBLEMS_SHOWN = 20


def format_validation_error(path: Path, exc: ValidationError, root: yaml.Node | None) -> str:
    errors = exc.errors()
    lines = [f"{path}: {len(errors)} problem(s):"]
    for err in errors[:MAX_PROBLEMS_SHOWN]:
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, AtKey):  # a model validator's refusal of one of its keys: that key, at its line
            loc += cause.loc
        key = ".".join(str(p) for p in loc) or "(top level)"
        if len(key) > 120:  # a hostile key name is quoted short like any other value
            key = key[:117] + "..."
        line = _line_of(root, loc)
        where = f"{path}:{line}" if line else str(path)
        lines.append(f"  {where}: {key}: {_describe(err)}")
    if len(errors) > MAX_PROBLEMS_SHOWN:
        lines.append(f"  ... and {len(errors) - MAX_PROBLEMS_SHOWN} more")
    return "\n".join(lines)


def load_pins(path: Path) -> Pins:
    return pins_from_text(read_pins_text(path), path)


def read_pins_text(path: Path) -> str:
    """The text of a pins file, read bounded and decoded as UTF-8 (load_pins and bump both start here)."""
    try:
        raw = read_local(path, "the pins file", MAX_BYTES)  # pins.yaml could be a symlink to /dev/zero or a FIFO
    except FileNotFoundError:
        raise InputError(
            f"{path}: no such file",
            hint="pass --pins PATH, or run inside the project (pins.yaml is looked for here and in the directories "
            "above, up to the repository's top)",
        ) from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES:,} bytes; a pins file is a few KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def pins_from_text(text: str, path: Path) -> Pins:
    """Pins from the text of a pins file (`path` names it in messages): the guarded loader, then the schema."""
    data, root = load_yaml(text, path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of keys (nemo_rl, vllm, ...), found {type(data).__name__}")
    try:
        return Pins.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(path, exc, root)) from None
