"""A pushed build with a vLLM overlay, in up to three buildx runs, so that a moved PR head costs the overlay alone.

BuildKit's image exporter, with `rewrite-timestamp=true` (which buildkit's reproducible builds use), rewrites the
timestamps of every layer of the image again on every export, cached ones included: for NeMo-RL that is every layer
above the CUDA base, gigabytes, on each push. It leaves only the base image's layers as they are (BuildKit's
exporter/containerimage/writer.go, rewriteRemoteWithEpoch: layers whose diffIDs are the base image's). So the install
becomes a base image of its own:

1. probe: the install's stage (`<target>-vllm-installed`), built into BuildKit alone: no push, no rewrite, no
   attestation. Its digest names what the install's steps made (cached steps give the same digest), and costs a
   cached build's solve.
2. push: where no earlier build recorded that probe digest with an image the registry still holds, the same stage
   pushed by digest with the rewrite (and provenance): the install's layers are rewritten once per install.
3. final: the target, its overlay's stage FROM that image (build arg VLLM_INSTALLED_IMAGE): BuildKit rewrites the
   overlay's layers alone.

The final image has the same layers and config as one build of the target; its manifest lacks BuildKit's
`buildkit/rewritten-timestamp` annotation on the install's layers (they come from the registry), so its digest is
its own. Its BuildKit provenance names the install image as its base; verify reads that image's provenance too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from buildkit.errors import BuildkitError
from buildkit.models.grammar import DIGEST_RE
from buildkit.models.overlay import installed_stage
from buildkit.models.plan import BuildPlan, repository
from buildkit.models.records.build import BuildRecord
from buildkit.world.http import Http
from buildkit.world.registry import Registry


def in_three(plan: BuildPlan, overlay: bool, check_reproducible: bool) -> bool:
    """A pushed build of a target with a vLLM overlay (the reproducibility check builds as one run: it compares
    two builds of the same argv)."""
    return overlay and plan.push and plan.export and not check_reproducible and plan.installed is None


def _metadata(plan: BuildPlan, run: str) -> Path:
    return plan.metadata_file.with_name(f"{plan.metadata_file.stem}.installed-{run}.json")


def probe_plan(plan: BuildPlan) -> BuildPlan:
    """The install's stage into BuildKit alone; the shared cache (if any) is read and written here, where the
    install's steps run."""
    return replace(
        plan,
        target=installed_stage(plan.target),
        installed="probe",
        provenance=False,  # an attestation holds times: the digest would differ on each run
        sbom=False,
        metadata_file=_metadata(plan, "probe"),
    )


def _cached(plan: BuildPlan) -> BuildPlan:
    """The runs after the probe take its steps from the cache, even for a build asked to run without it: a step that
    ran again could make other bytes than those the probe's digest names (a download, a time)."""
    extra = tuple(a for a in plan.extra if a != "--no-cache" and not a.startswith("--no-cache-filter"))
    return replace(plan, no_cache=False, extra=extra, cache_to=())


def push_plan(plan: BuildPlan) -> BuildPlan:
    """The install's stage pushed by digest, its layers rewritten to SOURCE_DATE_EPOCH, with provenance."""
    return replace(
        _cached(plan), target=installed_stage(plan.target), installed="push", metadata_file=_metadata(plan, "push")
    )


def final_plan(plan: BuildPlan, image: str) -> BuildPlan:
    """The target, its overlay's stage FROM the pushed install image."""
    return replace(_cached(plan), installed_image=image)


def digest_of(metadata: dict) -> str | None:
    found = metadata.get("containerimage.digest")
    return found if isinstance(found, str) and DIGEST_RE.fullmatch(found) else None


def image_of(plan: BuildPlan, digest: str) -> str:
    return f"{repository(plan.tag)}@{digest}"


def reusable(plan: BuildPlan, previous: BuildRecord | None, probe_digest: str, http: Http | None = None) -> str | None:
    """The install image an earlier build of this target pushed for the same probe digest, where the registry still
    holds it (for this build's platform); None otherwise."""
    installed = previous.installed if previous else None
    if installed is None or installed.probe_digest != probe_digest:
        return None
    if repository(installed.image.split("@", 1)[0]) != repository(plan.tag):
        return None  # pushed to another repository: the final image's base must be beside it
    try:
        Registry(http or Http()).resolve(installed.image, plan.platform)
    except BuildkitError:
        return None  # gone, or unreachable now: pushed again
    return installed.image
