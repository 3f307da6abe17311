"""Render templates/Dockerfile.j2 from the lock, and record what the report needs to know about it.

Jinja2 with StrictUndefined: a missing value is an error, never an empty string. The same lock renders the same
bytes. The render record (build/render.json) holds upstream's docker/Dockerfile hash, the diff of the rendered file
against it and the drift findings, so that the report never has to read a source tree.
"""

from __future__ import annotations

import difflib
import re
import time
from pathlib import Path
from typing import Any

import jinja2

from buildkit import __version__
from buildkit.dockerfile.text import apply_edits, parse
from buildkit.dockerfile.transforms import Inputs as TransformInputs
from buildkit.dockerfile.transforms import read_script, transform
from buildkit.dockerfile.unpinned import unpinned_inputs
from buildkit.errors import CheckFailed, GitFailed, InputError, UpstreamMalformed, UpstreamMismatch
from buildkit.files import read_record, sha256_bytes, sha256_file
from buildkit.models.drift import base_image_drift, uv_drift
from buildkit.models.labels import commit_time, image_labels
from buildkit.models.lock import Lock, lock_sha256
from buildkit.models.overlay import CHECKOUT, INSTALLED_ARG, VllmLayers, vllm_layers
from buildkit.models.paths import Paths
from buildkit.models.pins import GitUrlRewrite, fetched_from
from buildkit.models.plan import WHEEL_DIR, wheel_path
from buildkit.models.records import header
from buildkit.models.records.render import RenderRecord, Transformation
from buildkit.models.results import Rendered
from buildkit.options import RenderOptions
from buildkit.stages.context import Context, StageStatus, one_platform
from buildkit.text.templates import template_dir, template_environment
from buildkit.world.git import run_git


def context(
    lock: Lock,
    syntax: bool,
    smoke_base: str | None,
    patched: list[tuple[str, str]] | None,
    layers: VllmLayers,
    fetch: str,
) -> dict[str, Any]:
    """What the template reads; `layers` and `fetch` (where BuildKit fetches the source) as render_dockerfile made
    them."""
    return {
        "syntax": syntax,
        "smoke_base": smoke_base,
        "patched": patched or [],
        "buildkit_version": __version__,
        "lock_sha256": lock_sha256(lock),
        "base_image": lock.base_image.pinned,
        "nemo_rl": {"repo": lock.nemo_rl.repo, "commit": lock.nemo_rl.commit},
        "vllm": {"repo": lock.vllm.repo, "commit": lock.vllm.commit},
        "install": {
            "repo": layers.install_repo,
            "commit": layers.install_commit,
            "mode": "uv-source" if lock.vllm_install else "script",
        },
        "source_fetch": fetch,  # where BuildKit fetches the source (pins.yaml git_url_rewrites apply)
        "installed_arg": INSTALLED_ARG,
        "overlay": {
            "present": layers.has_overlay,
            "paths": list(layers.overlay),
            "removed": list(layers.removed),
            "caches": layers.stale_caches(),
            "checkout": CHECKOUT,
        },
        "vllm_wheel": {"commit": lock.vllm_wheel.commit},
        "wheel": wheel_context(lock),
        "cuda_arch_list": lock.build.cuda_arch_list,
        "target": lock.build.target,
        "drop_extras": {extra.name: extra.reason for extra in lock.build.drop_extras},
        "version": lock.build.tag.rsplit(":", 1)[1],
        "created": commit_time(lock).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "image_labels": image_labels(lock),
    }


UPSTREAM_PATH = "docker/Dockerfile"
_SHA256_RE = re.compile(r"[0-9a-f]{64}")  # fullmatch


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


def _source_fetch(lock: Lock, layers: VllmLayers, rewrites: list[GitUrlRewrite]) -> str:
    """Where BuildKit fetches vLLM's source for the overlay (pins.yaml git_url_rewrites apply); a file:// one is
    refused, BuildKit fetches none."""
    fetch = fetched_from(lock.vllm.repo, rewrites)
    if layers.has_overlay and fetch.startswith("file://"):
        raise InputError(
            f"vLLM's source {fetch} is a file:// repository, which BuildKit does not fetch: the vLLM overlay cannot "
            "reach it",
            hint="serve the mirror over git:// or http(s):// on this machine, and point git_url_rewrites at that",
        )
    return fetch


def _blocks(lock: Lock, syntax: bool, smoke_base: str | None, patched, directory: Path | None, layers, fetch):
    """The template's macros as a function from a macro name (and arguments) to its lines."""
    directory = directory or template_dir()
    env = template_environment(directory)
    try:
        module = env.get_template("Dockerfile.j2").make_module(
            context(lock, syntax, smoke_base, patched, layers, fetch)
        )
    except jinja2.TemplateNotFound as exc:
        raise InputError(f"template not found: {directory / str(exc)}") from None
    except jinja2.UndefinedError as exc:
        raise InputError(f"templates/Dockerfile.j2 uses a value the lock does not provide: {exc}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(f"templates/Dockerfile.j2:{exc.lineno}: {exc.message}") from None

    def blocks(name: str, *args: str) -> list[str]:
        macro = getattr(module, name, None)
        if macro is None:
            raise InputError(f"templates/Dockerfile.j2 has no macro {name}")
        try:
            text = str(macro(*args))
        except jinja2.UndefinedError as exc:
            raise InputError(f"templates/Dockerfile.j2 uses a value the lock does not provide: {exc}") from None
        text = text.strip("\n")
        return text.split("\n") if text else []

    return blocks


def render_dockerfile(
    lock: Lock,
    upstream: str,
    *,
    script_text: str | None = None,
    syntax: bool = True,
    smoke_base: str | None = None,
    patched: list[tuple[str, str]] | None = None,
    directory: Path | None = None,
    rewrites: list[GitUrlRewrite] | None = None,
) -> tuple[str, list[Transformation]]:
    """Upstream's Dockerfile (text) with every transformation applied, the header on top and, with `smoke_base`
    (an image pinned by digest), the `smoke` target at the end, which checks that each `patched` file (path, sha256
    after patching) is in the image as prepared. Returns the text and what each transformation did."""

    layers = vllm_layers(lock)
    blocks = _blocks(lock, syntax, smoke_base, patched, directory, layers, _source_fetch(lock, layers, rewrites or []))
    doc = parse(upstream, f"upstream docker/Dockerfile at {lock.nemo_rl.commit[:12]}")
    wheel = wheel_context(lock)
    inputs = TransformInputs(
        commit=lock.nemo_rl.commit,
        nemo_rl_repo=lock.nemo_rl.repo,
        base_image=lock.base_image.pinned,
        cuda_arch_list=lock.build.cuda_arch_list,
        drop_extras={extra.name: extra.reason for extra in lock.build.drop_extras},
        target=lock.build.target,
        wheel_dir=wheel["dir"],
        wheel_path=wheel["path"],
        vllm_repo=layers.install_repo,
        vllm_commit=layers.install_commit,
        layers=layers,
        uv_source=lock.vllm_install is not None,
        syntax=syntax,
        script_text=script_text,
    )
    changes = transform(doc, inputs, blocks)
    applied = apply_edits(doc, [e for c in changes for e in c.edits], blocks("header"), blocks("smoke"))
    done = [
        Transformation(
            name=c.name,
            summary=c.summary,
            upstream_lines=applied.touched.get(c.name, []),
            inserted_after=applied.inserted.get(c.name, []),
        )
        for c in changes
    ]
    return applied.text, done


def unified_diff(upstream: str, rendered: str, upstream_name: str, rendered_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            upstream.splitlines(keepends=True), rendered.splitlines(keepends=True), upstream_name, rendered_name
        )
    )


def template_sha256(directory: Path | None = None) -> str:
    """One hash over every template the Dockerfile is made from (name and bytes, in name order)."""
    directory = directory or template_dir()
    parts = [f"{p.name}\0{sha256_file(p)}" for p in sorted(directory.glob("*.j2")) if p.name != "report.md.j2"]
    return sha256_bytes("\n".join(parts).encode())


MAX_UPSTREAM_DOCKERFILE = 1024 * 1024


def upstream_dockerfile(prepared, commit: str) -> str:
    """docker/Dockerfile at the locked commit, from the prepared tree's git objects (immutable: a declared patch
    may not change it; the transformations do). Untrusted text: size, encoding and parsing are checked later."""

    for patch in prepared.patches:
        if any(t.path == UPSTREAM_PATH for t in patch.targets):
            raise InputError(
                f"{patch.file} changes {UPSTREAM_PATH}, which render transforms itself",
                hint="drop that part of the patch: Dockerfile changes are transformations"
                " (buildkit/dockerfile/transforms.py)",
            )
    try:
        size = int(run_git(["cat-file", "-s", f"{commit}:{UPSTREAM_PATH}"], cwd=Path(prepared.tree)))  # "N\n"
        if size > MAX_UPSTREAM_DOCKERFILE:
            raise UpstreamMalformed(
                f"upstream {UPSTREAM_PATH} at {commit[:12]} is {size} bytes; more than buildkit reads"
            )
        return run_git(["show", f"{commit}:{UPSTREAM_PATH}"], cwd=Path(prepared.tree))
    except GitFailed:
        raise UpstreamMismatch(
            f"upstream has no {UPSTREAM_PATH} at {commit}; render transforms upstream's Dockerfile"
        ) from None
    except ValueError:
        raise UpstreamMalformed(f"git gave no size for {UPSTREAM_PATH} at {commit[:12]}") from None


def render_stage(
    lock: Lock,
    prepared,
    dockerfile: Path,
    *,
    syntax: bool,
    smoke_base: str | None = None,
    rewrites: list[GitUrlRewrite] | None = None,
):
    """(Dockerfile text, RenderRecord) for a lock and its prepare record: upstream's docker/Dockerfile at the locked
    commit, transformed; the drift findings compare what upstream expects with what the pins give."""

    begun = time.monotonic()
    patched = [(t.path, t.after) for patch in prepared.patches for t in patch.targets]
    upstream = upstream_dockerfile(prepared, lock.nemo_rl.commit)
    script = read_script(Path(prepared.tree))
    text, done = render_dockerfile(
        lock,
        upstream,
        script_text=script,
        syntax=syntax,
        smoke_base=smoke_base,
        patched=patched,
        rewrites=rewrites,
    )
    upstream_base = upstream_base_image(upstream)
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
        drift=base_image_drift(upstream_base, lock.base_image.ref, lock.base_image.cuda_version)
        + uv_drift(upstream, prepared.uv_source.uv if prepared.uv_source else None),
        transformations=done,
        upstream_base_image=upstream_base,
        unpinned=unpinned_inputs(parse(text, "build/Dockerfile"), "smoke" if smoke_base else lock.build.target, script),
        header=header("render", None, lock_sha256(lock), smoke_base is not None),
        seconds=round(time.monotonic() - begun, 3),
    )
    return text, record


def upstream_base_image(upstream: str) -> str | None:
    """Upstream's own default for ARG BASE_IMAGE (base_image_by_digest found it before this is asked)."""

    doc = parse(upstream, "upstream docker/Dockerfile")
    for ins in doc.global_instructions():
        if ins.cmd == "ARG" and len(ins.value) == 1 and ins.value[0].startswith("BASE_IMAGE="):
            return ins.value[0].split("=", 1)[1] or None
    return None


# -- the pipeline's stage (stages/pipeline.py) --------------------------------------------------------------------


def current(ctx: Context[RenderOptions]) -> StageStatus:
    """Rendered when the render record names this lock and the Dockerfile on disk is the one it rendered."""
    smoke = ctx.options.smoke
    dockerfile = ctx.paths.dockerfile(smoke)
    rendered = read_record(ctx.paths.render_record(smoke), RenderRecord)
    if rendered is not None and rendered.lock_sha256 == lock_sha256(ctx.lock) and rendered.matches(dockerfile):
        return StageStatus("render", True, f"{dockerfile} was rendered from this lock")
    return StageStatus("render", False, f"would render {dockerfile}")


def run(ctx: Context[RenderOptions]) -> None:
    """The Dockerfile (upstream's, transformed) and its record (upstream's hash, the diff, the transformations, the
    drift), from the prepared tree. A transformation that cannot find its target stops the stage (exit 4). With
    refuse_drift, drift findings stop the stage before anything is written."""
    one_platform(ctx.lock)
    opts = ctx.options
    dockerfile = opts.output or ctx.paths.dockerfile(opts.smoke)
    rewrites = ctx.inputs.pins.git_url_rewrites if ctx.inputs else []
    text, record = render_stage(
        ctx.lock, ctx.made.prepare, dockerfile, syntax=opts.syntax, smoke_base=opts.smoke_base, rewrites=rewrites
    )
    if opts.refuse_drift and record.drift:
        raise CheckFailed(
            f"the pins drift from upstream docker/Dockerfile at {record.nemo_rl_commit[:12]} "
            f"({len(record.drift)} finding(s)):" + "".join(f"\n  - {finding}" for finding in record.drift),
            hint="fix the pins (e.g. base_image) for this upstream; to go on anyway: `buildkit build --allow-drift` "
            "(or `buildkit render` without --strict)",
        )
    ctx.write(dockerfile, text)
    ctx.write(Paths.render_record_beside(dockerfile), record.to_json())
    ctx.made.render = Rendered(text, record)
