"""Render templates/Dockerfile.j2 from the lock alone. Jinja2 with StrictUndefined: a missing value is an error,
never an empty string. The same lock renders the same bytes."""

from __future__ import annotations

import difflib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2

from buildkit import __version__
from buildkit.errors import InputError
from buildkit.lock import Lock, lock_sha256

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "templates"

# ARGs the template adds on purpose (later upstream has them too), so the drift check does not flag them.
TEMPLATE_ADDS_ARGS = frozenset(
    {"BUILD_CUSTOM_VLLM_URL", "BUILD_CUSTOM_VLLM_REF", "BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION"}
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


def context(lock: Lock, syntax: bool, smoke_base: str | None = None) -> dict[str, Any]:
    return {
        "syntax": syntax,
        "smoke_base": smoke_base,
        "buildkit_version": __version__,
        "lock_sha256": lock_sha256(lock),
        "base_image": lock.base_image.pinned,
        "nemo_rl": {"repo": lock.nemo_rl.repo, "commit": lock.nemo_rl.commit},
        "vllm": {"repo": lock.vllm.repo, "commit": lock.vllm.commit},
        "wheel_url": lock.wheel.url,
        "cuda_arch_list": lock.build.cuda_arch_list,
        "target": lock.build.target,
        "drop_extras": {extra.name: extra.reason for extra in lock.build.drop_extras},
        "version": lock.build.tag.rsplit(":", 1)[1],
        "created": commit_time(lock).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def template_environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    """The one Jinja2 setup for buildkit's templates: a missing value is an error, never an empty string."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dir),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # a Dockerfile and markdown, not HTML; values are grammar-checked instead
    )


def render_dockerfile(
    lock: Lock, *, syntax: bool = True, smoke_base: str | None = None, template_dir: Path = TEMPLATE_DIR
) -> str:
    """The Dockerfile; with `smoke_base` (an image pinned by digest) it also has the `smoke` target."""
    env = template_environment(template_dir)
    env.globals["fail"] = _fail
    try:
        return env.get_template("Dockerfile.j2").render(**context(lock, syntax, smoke_base))
    except jinja2.TemplateNotFound as exc:
        raise InputError(f"template not found: {template_dir / str(exc)}") from None
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
