"""The evidence `buildkit export --to DIR --key KEY` leaves beside a published squashfs (issue 43), so that a login
node with no registry can check the file (`buildkit verify --sqsh`):

- `<name>.cdx.json`: a CycloneDX 1.6 SBOM of what the file holds, from what buildkit knows rather than name guessing:
  the image (by its platform manifest digest), the base image by digest, NeMo-RL at its commit, vLLM as the source
  built (a `pkg:github` purl at the commit, where the repository is GitHub's), the precompiled wheel with its
  sha256 and the commit it was built from, each of the wheel's shared objects with its SASS and PTX architectures
  (resolve's GPU check read them from the wheel's bytes), and the Python packages the image's environments hold,
  from each `*.dist-info` that has a RECORD (name and version from its METADATA).
- `<name>.sigstore.json`: the SLSA statement `buildkit attest` wrote for the build, with the squashfs file (its
  sha256), the SBOM (its sha256) and the image's platform manifest digest added to its subjects, signed with the key
  as a Sigstore bundle (cosign attest-blob --new-bundle-format: the DSSE envelope and the key's hint; no
  transparency log).

Both are pure functions of their inputs (no clock: the SBOM's time is SOURCE_DATE_EPOCH, its serial number a UUID
of its content), so the same export gives the same bytes.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from email.parser import HeaderParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from buildkit import __version__
from buildkit.errors import InputError
from buildkit.models.lock import Lock
from buildkit.models.records.build import BuildRecord
from buildkit.models.slsa import canonical

SPEC = "1.6"
MAX_PACKAGES = 20_000  # dist-info directories read; NeMo-RL's image holds a few thousand across its venvs
MAX_METADATA = 1 << 20  # bytes of one METADATA read (the headers come first; the description after is not needed)
_GITHUB_RE = re.compile(r"https://github\.com/(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+?)(?:\.git)?/?")
_DIST_INFO_RE = re.compile(r"(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+-]+)\.dist-info")
_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,200}[A-Za-z0-9])?")  # a distribution name (PEP 508)
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.!+_-]{0,100}")


def source_purl(repo: str, commit: str) -> str:
    """vLLM or NeMo-RL as built: `pkg:github/<owner>/<repo>@<commit>` on GitHub, else a generic purl with the
    repository as its vcs_url (package-url's spec: the vcs_url qualifier)."""
    m = _GITHUB_RE.fullmatch(repo)
    if m:
        return f"pkg:github/{m.group('owner').lower()}/{m.group('repo').lower()}@{commit}"
    name = urlsplit(repo).path.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") or "source"
    return f"pkg:generic/{quote(name, safe='')}@{commit}?vcs_url={quote(f'git+{repo}@{commit}', safe='')}"


def oci_purl(name: str, digest: str) -> str:
    """An image by digest: `pkg:oci/<last>@sha256%3A<hex>?repository_url=<registry/path>`."""
    return f"pkg:oci/{name.rsplit('/', 1)[-1]}@{quote(digest, safe='')}?repository_url={quote(name, safe='/:')}"


def python_packages(rootfs: Path) -> list[dict[str, Any]]:
    """Each distribution installed in the image: a `*.dist-info` directory (never followed through a symlink) that
    has a RECORD, named and versioned by its METADATA (the directory's name when METADATA cannot say)."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for info in _dist_infos(rootfs):
        if not (info / "RECORD").is_file() or (info / "RECORD").is_symlink():
            continue
        named = _metadata(info / "METADATA") or _from_dir_name(info.name)
        if named is None:
            continue
        name, version = named
        where = "/" + str(info.relative_to(rootfs))
        found[(name.lower(), version, where)] = {
            "type": "library",
            "bom-ref": f"pypi:{name.lower()}@{version}:{where}",
            "name": name,
            "version": version,
            "purl": f"pkg:pypi/{re.sub(r'[-_.]+', '-', name).lower()}@{quote(version, safe='.+!')}",
            "properties": [{"name": "buildkit:dist-info", "value": where}],
        }
    return [found[key] for key in sorted(found)]


def _dist_infos(rootfs: Path) -> Iterator[Path]:
    count = 0
    for top, dirs, _files in os.walk(rootfs):  # never follows symlinks
        for name in list(dirs):
            if name.endswith(".dist-info"):
                dirs.remove(name)  # nothing below it is another distribution
                if (Path(top) / name).is_symlink():
                    continue  # where it points is not the image's own (or is listed where it is)
                count += 1
                if count > MAX_PACKAGES:
                    raise InputError(f"the image holds more than {MAX_PACKAGES} .dist-info directories")
                yield Path(top) / name


def _metadata(path: Path) -> tuple[str, str] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        head = file.read(MAX_METADATA).split(b"\n\n", 1)[0].decode("utf-8", "replace")
    headers = HeaderParser().parsestr(head)
    name, version = headers.get("Name", ""), headers.get("Version", "")
    return (name, version) if _NAME_RE.fullmatch(name) and _VERSION_RE.fullmatch(version) else None


def _from_dir_name(dir_name: str) -> tuple[str, str] | None:
    m = _DIST_INFO_RE.fullmatch(dir_name)
    return (m.group("name"), m.group("version")) if m and _NAME_RE.fullmatch(m.group("name")) else None


def _wheel(lock: Lock) -> dict[str, Any]:
    """The precompiled wheel: its sha256, URL and commit, and each shared object with its SASS and PTX (resolve's
    GPU check read them from the wheel's bytes)."""
    wheel = lock.wheel
    libraries = [
        {
            "type": "file",
            "bom-ref": f"wheel-file:{row.library}",
            "name": row.library,
            "properties": [
                {"name": "buildkit:cuda:sass", "value": ",".join(row.sass) or "none"},
                {"name": "buildkit:cuda:ptx", "value": ",".join(row.ptx) or "none"},
            ],
        }
        for row in (lock.gpu.libraries if lock.gpu else [])
    ]
    component: dict[str, Any] = {
        "type": "library",
        "bom-ref": "vllm-wheel",
        "name": "vllm",
        "version": wheel.filename.split("-")[1] if wheel.filename.count("-") >= 2 else wheel.filename,
        "description": f"the precompiled wheel {wheel.filename}, built from vLLM {lock.vllm_wheel.commit}",
        "externalReferences": [{"type": "distribution", "url": wheel.url}],
        "properties": [
            {"name": "buildkit:wheel:commit", "value": lock.vllm_wheel.commit},
            {"name": "buildkit:wheel:filename", "value": wheel.filename},
            # Where the lock has no GPU check, no shared object is listed: said, not left to be read as "none".
            *([] if lock.gpu else [{"name": "buildkit:cuda", "value": "not read: the lock holds no GPU check"}]),
        ],
        **({"components": libraries} if libraries else {}),
    }
    if wheel.sha256:
        component["hashes"] = [{"alg": "SHA-256", "content": wheel.sha256}]
    return component


def sbom(
    lock: Lock, record: BuildRecord | None, image: str, manifest_digest: str, packages: list[dict[str, Any]], base: str
) -> dict[str, Any]:
    """The CycloneDX 1.6 BOM of the image `image` (its repository) at `manifest_digest`, built on `base`
    (name@digest: the lock's base image, or a smoke build's stand-in)."""
    epoch = record.source_date_epoch if record else 0
    base_name, base_digest = base.split("@", 1)
    components = [
        {
            "type": "container",
            "bom-ref": "base-image",
            "name": base_name,
            "version": base_digest,
            "purl": oci_purl(base_name, base_digest),
        },
        {
            "type": "application",
            "bom-ref": "nemo-rl",
            "name": "nemo-rl",
            "version": lock.nemo_rl.commit,
            "purl": source_purl(lock.nemo_rl.repo, lock.nemo_rl.commit),
        },
        {
            "type": "library",
            "bom-ref": "vllm-source",
            "name": "vllm",
            "version": lock.vllm.commit,
            "description": "vLLM's source as built (a fork's head where the lock pins one)",
            "purl": source_purl(lock.vllm.repo, lock.vllm.commit),
        },
        _wheel(lock),
        *packages,
    ]
    content = canonical({"image": image, "digest": manifest_digest, "components": components})
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC,
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, content.decode())}",
        "version": 1,
        "metadata": {
            "timestamp": datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "buildkit", "version": __version__}]},
            "component": {
                "type": "container",
                "bom-ref": "image",
                "name": image,
                "version": manifest_digest,
                "purl": oci_purl(image, manifest_digest),
            },
        },
        "components": components,
        "dependencies": [{"ref": "image", "dependsOn": ["base-image", "nemo-rl", "vllm-source", "vllm-wheel"]}],
    }


def statement_for(
    build_statement: dict[str, Any],
    image: str,
    manifest_digest: str,
    files: list[tuple[str, str]],
) -> dict[str, Any]:
    """buildkit's statement of the build with the published files (name, sha256) and the image's platform manifest
    digest added to its subjects."""
    subjects = [*build_statement["subject"]]
    platform = {"name": image, "digest": {"sha256": manifest_digest.removeprefix("sha256:")}}
    if platform not in subjects:
        subjects.append(platform)
    subjects += [{"name": name, "digest": {"sha256": sha}} for name, sha in files]
    return {**build_statement, "subject": subjects}
