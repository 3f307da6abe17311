"""How the image installs vLLM, as the pins ask (vllm.install) against what NeMo-RL at the pinned commit does.

NeMo-RL installs vLLM either with build-custom-vllm.sh or, on its release branches, with uv from a git source in its
pyproject.toml (models/uvsource.py reads that mode). `vllm.install: uv-source` on a commit that uses the script asks
prepare to write the release branches' mode: this module locks what it will write, from the source commit and the
checked wheel's core metadata, which stands for the source's only where the source changes none of vLLM's packaging.
"""

from __future__ import annotations

from pathlib import Path

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.gpu import torchreq
from buildkit.models.lock import CommitFact, SourceComparison
from buildkit.models.lock.facts import MAX_REQUIRES, VllmInstall
from buildkit.models.uvsource import dist_metadata

# What setup.py reads for the distribution's metadata (install_requires from requirements/, the version and extras).
_PACKAGING_FILES = ("setup.py", "pyproject.toml", "setup.cfg", "MANIFEST.in")


def install_of(
    asked: str | None,
    detected: VllmInstall | None,
    source: CommitFact,
    wheel_commit: str,
    compare: SourceComparison,
    wheel: tuple[Path, str] | None,
    nemo: str,
) -> VllmInstall | None:
    """The lock's vllm_install: NeMo-RL's own mode (`detected`, already held to the pins), or the uv-source mode
    prepare writes where the pins ask for it and NeMo-RL uses the script. `wheel`: the checked wheel's path and name
    (None when resolve read no bytes)."""
    if asked == "script" and detected is not None:
        raise UpstreamMismatch(
            f"NeMo-RL at {nemo[:12]} builds vLLM with uv from the git source its pyproject.toml names, not with "
            "build-custom-vllm.sh (vllm.install: script)",
            hint="remove vllm.install from pins.yaml, or pin NeMo-RL to a commit that uses build-custom-vllm.sh",
        )
    if asked != "uv-source" or detected is not None:
        return detected
    touched = _packaging_changed(compare)
    if touched:
        raise UpstreamMismatch(
            f"the source {source.commit[:12]} changes vLLM's packaging against the wheel commit {wheel_commit[:12]} "
            f"({', '.join(touched[:5])}{' ...' if len(touched) > 5 else ''}): the wheel's METADATA does not name "
            "the source's dependencies, which the written uv-source mode takes from it",
            hint="pin a wheel commit with those changes (wheel.commit), or a NeMo-RL commit that writes the "
            "uv-source mode itself",
        )
    meta = None  # no bytes read (resolve --check): prepare refuses a lock without them
    if wheel is not None:
        path, filename = wheel
        found = torchreq.read_metadata(path, filename)
        if found is None:
            raise UpstreamMalformed(f"wheel {filename} has no *.dist-info/METADATA: not a wheel uv installs")
        meta = dist_metadata(found[1], f"wheel {filename}: {found[0]}", MAX_REQUIRES)
    commit = source.commit
    return VllmInstall(
        mode="uv-source",
        repo=source.repo,
        ref=commit,
        commit=commit,
        locked=f"{source.repo}?rev={commit}#{commit}",  # as uv writes a git source pinned by rev
        wheel_commit=wheel_commit,
        precompiled=True,
        source=f"written by buildkit prepare into NeMo-RL {nemo} (pins.yaml vllm.install: uv-source)",
        written=True,
        version=meta.version if meta else None,
        requires_dist=list(meta.requires_dist) if meta else None,
        provides_extra=list(meta.provides_extra) if meta and meta.provides_extra else None,
    )


def _packaging_changed(compare: SourceComparison) -> list[str]:
    """The paths between the wheel commit and the source that shape vLLM's metadata; every path, unnamed, where the
    comparison did not list them."""
    if compare.paths == 0:
        return []
    if compare.changed is None:
        return [f"{compare.paths} path(s) not listed"]
    return sorted(p for p in compare.changed if p.startswith("requirements/") or p in _PACKAGING_FILES)
