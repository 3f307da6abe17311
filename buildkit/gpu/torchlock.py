"""The torch NeMo-RL's uv.lock installs (resolve reads uv.lock at the locked commit and checks vLLM's wheel against
that torch: buildkit/gpu/check.py).

uv.lock (TOML, uv's lock format 1) lists `[[package]]` tables with `name`, `version`, `source = { registry = URL }`
and `wheels = [{ url, hash = "sha256:...", size }]`. At NeMo-RL 946862e7 it holds torch 2.9.0 from PyPI and
2.9.0+cu129 from https://download.pytorch.org/whl/cu129 (the `pytorch-cu129` index of its pyproject.toml): the
CUDA build (a `+cu` local version) is the one the image installs. $BUILDKIT_TORCH_INDEX moves that index (a mirror,
a test server): the wheel's path below the registry is kept, or its file name is put under the new index.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from buildkit.budget import UV_LOCK, Budget
from buildkit.errors import InputError, UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.models.grammar import https_url
from buildkit.models.tomlshape import package_tables

ENV_TORCH_INDEX = "BUILDKIT_TORCH_INDEX"
MAX_UV_LOCK_BYTES = 64 << 20
PYTHON_TAG = "cp312"  # NeMo-RL's image runs Python 3.12
_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+!_-]{0,63}")  # fullmatch: 2.9.0, 2.9.0+cu129
_HASH_RE = re.compile(r"sha256:[0-9a-f]{64}")  # fullmatch


@dataclass(frozen=True)
class LockedTorch:
    version: str
    index: str
    url: str
    filename: str
    sha256: str
    size: int | None


def locked_torch(uv_lock: Path, arch: str, python_tag: str = PYTHON_TAG) -> LockedTorch | None:
    """The torch wheel uv.lock installs for linux `arch` and `python_tag`; None when it lists no torch."""
    try:
        with uv_lock.open("rb") as f:
            raw = f.read(MAX_UV_LOCK_BYTES + 1)
    except FileNotFoundError:
        return None
    return torch_of_uv_lock(raw, str(uv_lock), arch, python_tag)


def torch_of_uv_lock(raw: bytes, what: str, arch: str, python_tag: str = PYTHON_TAG) -> LockedTorch | None:
    """The same from uv.lock's bytes (resolve reads them from GitHub at the locked commit); `what` names them."""
    if len(raw) > MAX_UV_LOCK_BYTES:
        raise UpstreamMalformed(f"{what}: more than {MAX_UV_LOCK_BYTES:,} bytes: not a uv.lock buildkit reads")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UpstreamMalformed(f"{what}: not a readable uv.lock: not UTF-8 (byte {exc.start})") from None
    packages = []
    for block in torch_blocks(text, Budget(what, UV_LOCK)):
        try:
            listed = tomllib.loads(block).get("package")
        except tomllib.TOMLDecodeError as exc:
            raise UpstreamMalformed(f"{what}: not a readable uv.lock: {exc}") from None
        if listed is not None and not isinstance(listed, list):
            raise UpstreamMalformed(f"{what}: `package` is not a list of tables: not a uv.lock")
        packages += [p for p in listed or [] if isinstance(p, dict)]
    packages = [p for p in packages if p.get("name") == "torch"]
    if not packages:
        return None
    packages.sort(key=lambda p: "+cu" not in str(p.get("version", "")))  # the CUDA build first
    for package in packages:
        source = package.get("source")
        registry = source.get("registry") if isinstance(source, dict) else None
        version = package.get("version")
        if not isinstance(registry, str) or not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
            continue  # torch from a path, a git repository, or a version no index publishes
        wheels = package.get("wheels")
        for wheel in wheels if isinstance(wheels, list) else []:
            if not isinstance(wheel, dict):
                continue
            url, digest = wheel.get("url"), wheel.get("hash", "")
            if not isinstance(url, str) or not isinstance(digest, str) or not _HASH_RE.fullmatch(digest):
                continue
            try:
                https_url(url)
            except ValueError:
                raise UpstreamMalformed(f"{what}: torch's wheel URL is not an https:// URL: {excerpt(url)}") from None
            filename = unquote(url.rsplit("/", 1)[-1])
            try:
                _name, _version, _build, tags = parse_wheel_filename(filename)
            except InvalidWheelFilename:
                continue
            if any(
                t.interpreter == python_tag and t.platform.endswith(f"_{arch}") and t.platform.startswith("manylinux")
                for t in tags
            ):
                size = wheel.get("size")
                return LockedTorch(
                    version,
                    registry,
                    _moved(url, registry),
                    filename,
                    digest.removeprefix("sha256:"),
                    size if isinstance(size, int) and 0 < size < 1 << 40 else None,
                )
    raise UpstreamMismatch(
        f"{what}: torch has no wheel for {python_tag} linux {arch}", hint="check NeMo-RL's uv.lock at the locked commit"
    )


def torch_blocks(text: str, budget: Budget) -> list[str]:
    """uv.lock's preamble and the tables that name torch, shape-checked (models/tomlshape.py package_tables)."""
    return package_tables(text, "torch", budget)


def _moved(url: str, registry: str) -> str:
    index = os.environ.get(ENV_TORCH_INDEX)
    if not index:
        return url
    try:
        index = https_url(index).rstrip("/")  # https://, or http:// on loopback: the grammar of every endpoint
    except ValueError as exc:
        raise InputError(
            f"${ENV_TORCH_INDEX}: {exc}",
            hint=f"set ${ENV_TORCH_INDEX} to the torch index's https:// URL (a mirror), or unset it",
        ) from None
    if registry and url.startswith(registry.rstrip("/") + "/"):
        return index + url[len(registry.rstrip("/")) :]
    return f"{index}/{url.rsplit('/', 1)[-1]}"
