"""The build of a lock, as buildx is given it: SOURCE_DATE_EPOCH, where the wheel sits inside the build, the build
args, the shared cache, and the plan (`BuildPlan`) with its exact argv. Pure: the build stage runs it, the report and
`build --dry-run` show it, the provenance checks hold what was built to it.

Everything that reaches the argv comes from the lock (grammar-checked) or from typed options; buildx runs as an
argv list, never through a shell. SOURCE_DATE_EPOCH goes in the environment (buildx copies it into the build).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from buildkit.errors import InputError
from buildkit.models.labels import commit_time
from buildkit.models.lock import Lock
from buildkit.models.overlay import INSTALLED_ARG, vllm_layers


def source_date_epoch(lock: Lock) -> int:
    """SOURCE_DATE_EPOCH for the build: the NeMo-RL commit time, so equal locks give equal timestamps."""
    return int(commit_time(lock).timestamp())


WHEEL_DIR = "/opt/vllm-wheel"  # where the build mounts the wheel stage
_WHEEL_FILENAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl")  # fullmatch: a plain file name


def wheel_path(lock: Lock) -> str:
    """The wheel inside the build: the file BuildKit fetched (and checked) in the vllm-wheel stage."""
    if not _WHEEL_FILENAME_RE.fullmatch(lock.wheel.filename):
        raise InputError(f"lock: wheel.filename {lock.wheel.filename!r} is not a plain wheel file name")
    return f"{WHEEL_DIR}/{lock.wheel.filename}"


@dataclass(frozen=True)
class BuildPlan:
    dockerfile: Path
    tree: Path  # the prepared NeMo-RL tree: named context `nemo-rl`, and the main context as upstream's `.`
    target: str
    platform: str
    tag: str
    build_args: tuple[tuple[str, str], ...]
    metadata_file: Path
    source_date_epoch: int
    builder: str | None = None
    provenance: bool = True
    sbom: bool = False
    cache_from: tuple[str, ...] = ()
    cache_to: tuple[str, ...] = ()
    push: bool = False
    export: bool = True  # load into Docker (or push, with `push`); a rebuild for comparison only writes a layout
    oci_layout: Path | None = None  # also write the image as an OCI layout directory (reproducibility check)
    no_cache: bool = False
    compression: str = "gzip"  # of pushed layers and the OCI layout: gzip or zstd (the lock's build.compression)
    force_compression: bool = False
    extra: tuple[str, ...] = field(default_factory=tuple)
    # A pushed build with a vLLM overlay (stages/build/installed.py): "probe" builds the install's stage into BuildKit
    # alone (no push, no rewrite: its digest names what the steps made), "push" pushes it by digest with the rewrite;
    # `installed_image` is that pushed image, which the overlay's stage then starts FROM.
    installed: Literal["probe", "push"] | None = None
    installed_image: str | None = None

    def env(self) -> dict[str, str]:
        # Full provenance in the metadata file too, whether or not an attestation can be attached (buildx 0.14+).
        return {"SOURCE_DATE_EPOCH": str(self.source_date_epoch), "BUILDX_METADATA_PROVENANCE": "max"}


def build_args(lock: Lock) -> tuple[tuple[str, str], ...]:
    """The build args render's Dockerfile takes: the vLLM the install RUN installs is the wheel commit's where the
    source is laid over it (models/overlay.py), else the source."""
    if lock.vllm_install is not None:  # uv builds vLLM from NeMo-RL's git source: build-custom-vllm.sh stays off
        return (("NEMO_RL_COMMIT", lock.nemo_rl.commit),)
    layers = vllm_layers(lock)
    return (
        ("BUILD_CUSTOM_VLLM", "1"),
        ("BUILD_CUSTOM_VLLM_URL", layers.install_repo),
        ("BUILD_CUSTOM_VLLM_REF", layers.install_commit),
        # The file the vllm-wheel stage fetched from the locked URL (and checked against the locked sha256).
        ("BUILD_CUSTOM_VLLM_PRECOMPILED_WHEEL_LOCATION", wheel_path(lock)),
        ("NEMO_RL_COMMIT", lock.nemo_rl.commit),
    )


def shared_cache(lock: Lock, target: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(--cache-from, --cache-to) for the lock's registry build cache: one tag per target, every stage's layers
    (mode=max), and an export that cannot fail the build (ignore-error: a cache is an optimisation)."""
    cache = lock.build.cache
    if cache is None:
        return (), ()
    ref = f"{cache.ref}:{target}"  # both grammar-checked: no ',' or '=' can reach buildx's CSV
    cache_from = (f"type=registry,ref={ref}",)
    if not cache.export:
        return cache_from, ()
    return cache_from, (f"type=registry,ref={ref},mode=max,image-manifest=true,oci-mediatypes=true,ignore-error=true",)


def plan_for_lock(
    lock: Lock,
    paths,
    smoke: bool = False,
    shared_cache_use: bool = True,
    cache_from: tuple[str, ...] = (),
    cache_to: tuple[str, ...] = (),
    compression: str | None = None,
    force_compression: bool | None = None,
    **options,
) -> BuildPlan:
    """The build of a lock: its Dockerfile, prepared tree and metadata file where the pipeline keeps them; platform,
    build args, SOURCE_DATE_EPOCH, the shared cache and the layer compression from the lock (options given here
    win); the smoke target and tag with `smoke`."""

    target = "smoke" if smoke else lock.build.target
    locked_from, locked_to = shared_cache(lock, target) if shared_cache_use else ((), ())
    return BuildPlan(
        dockerfile=paths.dockerfile(smoke).resolve(),
        tree=paths.tree(lock.nemo_rl.commit).resolve(),
        target=target,
        platform=lock.build.platform,
        tag=lock.build.tag + ("-smoke" if smoke else ""),
        build_args=build_args(lock),
        metadata_file=paths.metadata(smoke).resolve(),
        source_date_epoch=source_date_epoch(lock),
        cache_from=locked_from + tuple(cache_from),
        cache_to=locked_to + tuple(cache_to),
        compression=compression or lock.build.compression,
        force_compression=lock.build.force_compression if force_compression is None else force_compression,
        **options,
    )


def argv(plan: BuildPlan) -> list[str]:
    args = ["docker", "buildx", "build"]
    if plan.builder:
        args += ["--builder", plan.builder]
    args += [
        "--file",
        str(plan.dockerfile),
        "--build-context",
        f"nemo-rl={plan.tree}",
        "--platform",
        plan.platform,
    ]
    if plan.installed is None:
        args += ["--tag", plan.tag]
    if plan.target:
        args += ["--target", plan.target]
    for name, value in plan.build_args:
        args += ["--build-arg", f"{name}={value}"]
    if plan.installed_image:
        args += ["--build-arg", f"{INSTALLED_ARG}={plan.installed_image}"]
    args += ["--metadata-file", str(plan.metadata_file)]
    args.append("--provenance=mode=max" if plan.provenance else "--provenance=false")
    if plan.sbom:
        args.append("--sbom=true")
    for spec in plan.cache_from:
        args += ["--cache-from", spec]
    for spec in plan.cache_to:
        args += ["--cache-to", spec]
    # Every exporter rewrites file times in the layers to SOURCE_DATE_EPOCH (BuildKit 0.13+): with the lock's
    # epoch, builds at different times give the same layers.
    if plan.installed == "probe":
        args += ["--output", f"type=image,name={repository(plan.tag)},push=false"]
    elif plan.installed == "push":
        output = f"type=image,name={repository(plan.tag)},push-by-digest=true,push=true,rewrite-timestamp=true"
        args += ["--output", output + _compression(plan)]
    elif plan.export:
        if plan.push:
            args += ["--output", "type=image,push=true,rewrite-timestamp=true" + _compression(plan)]
        else:
            # Docker's classic image store (20.10) loads gzip layers only: compression is for pushed images.
            args += ["--output", "type=docker,rewrite-timestamp=true"]
    if plan.oci_layout is not None:
        layout = f"type=oci,dest={_csv_safe(plan.oci_layout)},tar=false,rewrite-timestamp=true"
        args += ["--output", layout + _compression(plan)]
    if plan.no_cache:
        args.append("--no-cache")
    args.append("--progress=rawjson")  # one JSON status per line: buildkit.text.progress follows it
    args += list(plan.extra)
    args.append(str(plan.tree))
    return args


def repository(tag: str) -> str:
    """The repository of a `name:tag` reference (a registry's port is not a tag)."""
    name, _, last = tag.rpartition(":")
    return name if name and "/" not in last else tag


def _compression(plan: BuildPlan) -> str:
    """Exporter options for zstd layers (OCI media types: Docker's own manifest types have no zstd)."""
    if plan.compression == "gzip" and not plan.force_compression:
        return ""
    if plan.compression not in ("gzip", "zstd"):
        raise InputError(f"compression {plan.compression!r}: expected gzip or zstd")
    text = f",compression={plan.compression}" + (",oci-mediatypes=true" if plan.compression == "zstd" else "")
    return text + (",force-compression=true" if plan.force_compression else "")


def _csv_safe(path: Path) -> str:
    """A path inside buildx's comma-separated --output value: refused if it would change the value's meaning."""
    text = str(path)
    if any(c in text for c in ",\"'\n\r="):
        raise InputError(f"{text}: the build directory's path may not hold , = or quotes (buildx --output syntax)")
    return text


def shell_command(plan: BuildPlan) -> str:
    """The exact command, as a person would type it (for --dry-run and the report)."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env().items())
    return f"{env} {shlex.join(argv(plan))}"
