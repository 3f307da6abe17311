"""Drift: what upstream's Dockerfile expects that the pins do not give, found while rendering.

A transformation that cannot find its target is an error (buildkit/dockerfile/transforms.py), so the rendered Dockerfile
always follows upstream at the locked commit. What remains is drift in the inputs: the pins may name a base image
built for another CUDA than the one upstream builds on at that commit. Our side is the CUDA_VERSION resolve read
from the base image's config (the lock's base_image.cuda_version), or its tag when the config sets none; upstream's
side is the tag of its ARG BASE_IMAGE default (an image it does not pin: only the name is known). And with
vllm.install: uv-source, the uv that wrote uv.lock against the uv upstream's Dockerfile installs to read it.

A finding does not stop `render`; it stops `build` unless `--allow-drift` is given, and the render record and the
report keep it.
"""

from __future__ import annotations

import re

from buildkit.errors import excerpt

_CUDA_TAG_RE = re.compile(r"(?:^|[^0-9A-Za-z])cuda-?(?P<major>[0-9]{1,3})\.(?P<minor>[0-9]{1,3})", re.IGNORECASE)


def cuda_of_tag(ref: str) -> tuple[int, int] | None:
    """CUDA major.minor as an image tag names it (cuda-dl-base:25.05-cuda12.9-devel-...), None if it names none."""
    tag = ref.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    match = _CUDA_TAG_RE.search(tag)
    return (int(match["major"]), int(match["minor"])) if match else None


def base_image_drift(upstream_default: str | None, pinned_ref: str, measured: str | None = None) -> list[str]:
    """A finding when upstream's own BASE_IMAGE default and the pinned base image name different CUDA majors.
    `measured`: the base image's CUDA_VERSION from its config (preferred to its tag)."""
    if not upstream_default:
        return []
    theirs = cuda_of_tag(upstream_default)
    if measured is not None:
        ours, shown, how = int(measured.split(".")[0]), measured, "its config's CUDA_VERSION"
    else:
        tagged = cuda_of_tag(pinned_ref)
        if tagged is None:
            return []
        ours, shown, how = tagged[0], f"{tagged[0]}.{tagged[1]}", "read from its tag"
    if theirs is None or theirs[0] == ours:
        return []
    return [
        f"upstream builds on CUDA {theirs[0]}.{theirs[1]} (its ARG BASE_IMAGE default "
        f"{excerpt(upstream_default)}) but the pinned base image {excerpt(pinned_ref)} is CUDA {shown} ({how})"
    ]


_UV_VERSION_RE = re.compile(r"^ARG UV_VERSION=([0-9]{1,4}(?:\.[0-9]{1,6}){1,3})[ \t]*$", re.MULTILINE)


def uv_drift(upstream: str, written_by: str | None) -> list[str]:
    """A finding when prepare's `uv lock` (vllm.install: uv-source; `written_by`: its uv version) is not the uv
    upstream's Dockerfile installs (its `ARG UV_VERSION=` default), which reads the written uv.lock with
    `uv sync --frozen`: a newer uv may write a lock the older one refuses."""
    found = _UV_VERSION_RE.findall(upstream)
    if written_by is None or len(set(found)) != 1 or found[0] == written_by:
        return []
    return [
        f"uv.lock was written by uv {written_by} (vllm.install: uv-source), and upstream's Dockerfile installs uv "
        f"{found[0]} (ARG UV_VERSION), which reads it in `uv sync --frozen`: install uv {found[0]} "
        f"(`pip install uv=={found[0]}`), then run `buildkit prepare` again"
    ]
