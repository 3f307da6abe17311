"""Render templates/Dockerfile.j2 from the lock, and record what the report needs to know about it.

Jinja2 with StrictUndefined: a missing value is an error, never an empty string. The same lock renders the same
bytes. The render record (build/render.json) holds upstream's docker/Dockerfile hash, the diff of the rendered file
against it and the drift findings, so that the report never has to read a source tree.
"""

from __future__ import annotations

import difflib
import importlib.resources
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NoReturn

import jinja2
from pydantic import BaseModel, ConfigDict

from buildkit import __version__
from buildkit.errors import InputError
from buildkit.files import sha256_bytes, sha256_file
from buildkit.lock import Lock, lock_sha256

# ARGs the template adds on purpose (later upstream has them too), and its own stages: not drift.
TEMPLATE_ADDS_ARGS = frozenset(
    {
        "BUILD_CUSTOM_VLLM_URL",
        "BUILD_CUSTOM_VLLM_REF",
        "BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION",
        "SOURCE_DATE_EPOCH",
    }
)
TEMPLATE_ADDS_STAGES = frozenset({"smoke", "vllm-wheel"})


# What the release target's steps fetch as it is on build day: the report lists these instead of claiming that the
# lock pins everything. The smoke target fetches nothing of the kind.
UNPINNED_INPUTS = (
    "apt packages (jq, curl, git, rsync, wget, less, vim, gnupg, nsight-systems-cli) from the base image's Ubuntu "
    "mirrors and NVIDIA's devtools repository, at whatever versions `apt-get update` finds",
    "NVIDIA's CUDA repository key, fetched over plain HTTP by `apt-key adv --fetch-keys`",
    "CMake 3.31.1 from GitHub releases, by version (no checksum)",
    "uv from its installer script (`curl ... | sh`) and Python from `uv python install`, by version (no checksum)",
    "vLLM's source, cloned at the locked commit by tools/build-custom-vllm.sh inside a RUN (pinned by commit, but "
    "not a build input BuildKit sees), and torch from the PyTorch index by version",
    "Python packages that `uv lock` re-resolves on build day after build-custom-vllm.sh points pyproject.toml at the "
    "local vLLM (the other uv sync steps are --locked, their hashes checked by uv)",
    "NeMo-RL's history: the release stage runs `git fetch --unshallow` against GitHub when the tree is shallow (it "
    "is), so the image's .git holds what GitHub serves that day",
)


def _fail(message: str) -> NoReturn:
    raise InputError(f"templates/Dockerfile.j2: {message}")


def commit_time(lock: Lock) -> datetime:
    try:
        when = datetime.fromisoformat(lock.nemo_rl.date)
    except ValueError:
        raise InputError(f"lock: nemo_rl.date {lock.nemo_rl.date!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


def source_date_epoch(lock: Lock) -> int:
    """SOURCE_DATE_EPOCH for the build: the NeMo-RL commit time, so equal locks give equal timestamps."""
    return int(commit_time(lock).timestamp())


def template_dir() -> Path:
    """templates/ as shipped in the wheel (buildkit/templates), or at the top of a source checkout."""
    shipped = Path(str(importlib.resources.files("buildkit") / "templates"))
    if (shipped / "Dockerfile.j2").is_file():
        return shipped
    return Path(__file__).resolve().parent.parent / "templates"


def context(
    lock: Lock, syntax: bool, smoke_base: str | None = None, patched: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "syntax": syntax,
        "smoke_base": smoke_base,
        "patched": patched or [],
        "buildkit_version": __version__,
        "lock_sha256": lock_sha256(lock),
        "base_image": lock.base_image.pinned,
        "nemo_rl": {"repo": lock.nemo_rl.repo, "commit": lock.nemo_rl.commit},
        "vllm": {"repo": lock.vllm.repo, "commit": lock.vllm.commit},
        "wheel": wheel_context(lock),
        "cuda_arch_list": lock.build.cuda_arch_list,
        "target": lock.build.target,
        "drop_extras": {extra.name: extra.reason for extra in lock.build.drop_extras},
        "version": lock.build.tag.rsplit(":", 1)[1],
        "created": commit_time(lock).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


WHEEL_DIR = "/opt/vllm-wheel"  # where the build mounts the wheel stage
_WHEEL_FILENAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl")  # fullmatch: a plain file name
_SHA256_RE = re.compile(r"[0-9a-f]{64}")  # fullmatch


def wheel_path(lock: Lock) -> str:
    """The wheel inside the build: the file BuildKit fetched (and checked) in the vllm-wheel stage."""
    if not _WHEEL_FILENAME_RE.fullmatch(lock.wheel.filename):
        raise InputError(f"lock: wheel.filename {lock.wheel.filename!r} is not a plain wheel file name")
    return f"{WHEEL_DIR}/{lock.wheel.filename}"


def wheel_context(lock: Lock) -> dict[str, Any]:
    sha256 = lock.wheel.sha256
    if sha256 is not None and not _SHA256_RE.fullmatch(sha256):
        raise InputError(f"lock: wheel.sha256 {sha256!r} is not 64 lowercase hex digits")
    return {
        "url": lock.wheel.url,
        "filename": lock.wheel.filename,
        "sha256": sha256,
        "dir": WHEEL_DIR,
        "path": wheel_path(lock),
    }


def template_environment(directory: Path | None = None, finalize=None) -> jinja2.Environment:
    """The one Jinja2 setup for buildkit's templates: a missing value is an error, never an empty string."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory or template_dir()),
        finalize=finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # a Dockerfile and markdown, not HTML; values are grammar-checked instead
    )


def render_dockerfile(
    lock: Lock,
    *,
    syntax: bool = True,
    smoke_base: str | None = None,
    patched: list[tuple[str, str]] | None = None,
    directory: Path | None = None,
) -> str:
    """The Dockerfile; with `smoke_base` (an image pinned by digest) it also has the `smoke` target, which checks
    that each `patched` file (path, sha256 after patching) is in the image as prepared."""
    directory = directory or template_dir()
    env = template_environment(directory)
    env.globals["fail"] = _fail
    try:
        return env.get_template("Dockerfile.j2").render(**context(lock, syntax, smoke_base, patched))
    except jinja2.TemplateNotFound as exc:
        raise InputError(f"template not found: {directory / str(exc)}") from None
    except jinja2.UndefinedError as exc:
        raise InputError(f"templates/Dockerfile.j2 uses a value the lock does not provide: {exc}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(f"templates/Dockerfile.j2:{exc.lineno}: {exc.message}") from None


def unified_diff(upstream: str, rendered: str, upstream_name: str, rendered_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            upstream.splitlines(keepends=True), rendered.splitlines(keepends=True), upstream_name, rendered_name
        )
    )


class RenderRecord(BaseModel):
    """What `render` produced and what it found upstream: the report's only source about the Dockerfile."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    record_version: Literal[1] = 1
    buildkit_version: str
    lock_sha256: str
    nemo_rl_commit: str
    dockerfile: str  # the file name in the build directory, e.g. "Dockerfile"
    dockerfile_sha256: str
    template_sha256: str
    syntax: bool
    smoke_base: str | None
    upstream_path: str = "docker/Dockerfile"
    upstream_sha256: str
    diff: str  # the rendered Dockerfile against upstream's, unified
    drift: list[str]
    unpinned: list[str] = []  # inputs the rendered target fetches unpinned (UNPINNED_INPUTS; none for smoke)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def matches(self, dockerfile: Path) -> bool:
        """Whether the file on disk is still the one this record describes."""
        try:
            return sha256_file(dockerfile) == self.dockerfile_sha256
        except OSError:
            return False


def template_sha256(directory: Path | None = None) -> str:
    """One hash over every template the Dockerfile is made from (name and bytes, in name order)."""
    directory = directory or template_dir()
    parts = [f"{p.name}\0{sha256_file(p)}" for p in sorted(directory.glob("*.j2")) if p.name != "report.md.j2"]
    return sha256_bytes("\n".join(parts).encode())


def render_stage(lock: Lock, prepared, dockerfile: Path, *, syntax: bool, smoke_base: str | None = None):
    """(Dockerfile text, RenderRecord) for a lock and its prepare record: upstream's docker/Dockerfile is read from
    the prepared tree's git objects at the locked commit (immutable; patches never touch it)."""
    from buildkit.drift import drift, shape_of
    from buildkit.errors import GitFailed
    from buildkit.gitcmd import run_git

    patched = [(t.path, t.after) for patch in prepared.patches for t in patch.targets]
    text = render_dockerfile(lock, syntax=syntax, smoke_base=smoke_base, patched=patched)
    try:
        upstream = run_git(["show", f"{lock.nemo_rl.commit}:docker/Dockerfile"], cwd=Path(prepared.tree))
    except GitFailed:
        raise InputError(
            f"upstream has no docker/Dockerfile at {lock.nemo_rl.commit}; the template expects one"
        ) from None
    dropped = {extra.name for extra in lock.build.drop_extras}
    ours = shape_of(text, str(dockerfile))
    ours.stages = [stage for stage in ours.stages if stage not in TEMPLATE_ADDS_STAGES]
    findings = drift(shape_of(upstream, "upstream docker/Dockerfile"), ours, dropped, TEMPLATE_ADDS_ARGS)
    record = RenderRecord(
        buildkit_version=__version__,
        lock_sha256=lock_sha256(lock),
        nemo_rl_commit=lock.nemo_rl.commit,
        dockerfile=dockerfile.name,
        dockerfile_sha256=sha256_bytes(text.encode()),
        template_sha256=template_sha256(),
        syntax=syntax,
        smoke_base=smoke_base,
        upstream_sha256=sha256_bytes(upstream.encode()),
        diff=unified_diff(upstream, text, "upstream docker/Dockerfile", "build/Dockerfile"),
        drift=findings,
        unpinned=[] if smoke_base else list(UNPINNED_INPUTS),
    )
    return text, record
