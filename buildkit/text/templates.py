"""buildkit's Jinja2 templates (templates/: the Dockerfile's header and smoke target, the report): where they are, and
the one environment that renders them."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import jinja2


def template_dir() -> Path:
    """templates/ as shipped in the wheel (buildkit/templates), or at the top of a source checkout."""
    shipped = Path(str(importlib.resources.files("buildkit") / "templates"))
    if (shipped / "Dockerfile.j2").is_file():
        return shipped
    return Path(__file__).resolve().parents[2] / "templates"


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
