"""Test projects beyond the `project` fixture: pins pointed at other images of the loopback registry or at the
engine's stand-in base, a smoke build done, and the report's golden project (recorded records, no engine)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.engine import STAND_IN_BASE
from tests.fake_upstreams import BASE_REPO
from tests.nemo_repo import use_remote

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "report"  # recorded by tests/fixtures/report/record.py


def smoke_project(project, remote):
    """The pins with the stand-in base image from the engine's registry as the base image too."""
    root, cli = project
    text = (root / "pins.yaml").read_text()
    start = text.index("base_image: ") + len("base_image: ")
    end = text.index("\n", start)
    (root / "pins.yaml").write_text(text[:start] + STAND_IN_BASE + text[end:])
    return use_remote(project, remote)


def smoke_built(project, remote):
    """A smoke build of the smoke project (needs the engine)."""
    root, cli = smoke_project(project, remote)
    built = cli("build", "--smoke", "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    return root, cli


def golden_project(tmp_path):
    """A copy of the report's recorded project: its records and lock, without the expected outputs."""
    project = tmp_path / "project"
    shutil.copytree(GOLDEN, project, ignore=shutil.ignore_patterns("expected.*", "README.md", "*.py", "__pycache__"))
    return project


def use_base(root, upstreams, tag: str, **image) -> str:
    """Pins naming another image of the loopback registry (added with `image`: cuda_version=..., env=...)."""
    upstreams.registry.add_image(BASE_REPO, tag, **image)
    base = f"{upstreams.registry.netloc}/{BASE_REPO}:{tag}"
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace(upstreams.base_image, base))
    return base


def use_variant(root, variant: str) -> None:
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace("variant: default", f"variant: {variant}"))
