"""`buildkit build --check-reproducible`: is the image a function of the lock alone? Rebuild it from a clean cache
(`--no-cache`), from a second clone of NeMo-RL in a fresh cache directory (so another path, other clone times), and
optionally on a second builder; then compare the two images file by file (buildkit.image.diff).

The first image is the build the user asked for, which also writes an OCI layout; the rebuild writes only its OCI
layout. Equal images: the layouts are deleted (they are as large as the image) and the record keeps the digests.
Different images: both layouts stay in build/repro/ for a closer look, and the record names what differs.
`check_reproducible` runs it all after the build: the prepare stage again (from the registry), the rebuild, the
comparison, and the build record rewritten with the outcome.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from buildkit.errors import BuildFailed, Interrupted
from buildkit.files import utc_now, write_atomic
from buildkit.image.diff import compare, summary
from buildkit.models.plan import BuildPlan
from buildkit.models.records.build import BuildRecord, Rebuild, ReproCheck
from buildkit.options import PrepareOptions
from buildkit.stages.build import first_layout, run_buildx
from buildkit.stages.context import Context, Inputs
from buildkit.stages.pipeline import run_stage


def check_reproducible(
    inputs: Inputs,
    plan: BuildPlan,
    record: BuildRecord,
    record_path: Path,
    *,
    rebuild_builder: str | None,
    submodules: bool,
    log_path: Path,
    on_prepared,
    on_line,
) -> BuildRecord:
    """After a build that also wrote an OCI layout: the prepare stage again, in a fresh cache directory (its record
    is not written), a rebuild from it with no cache (on `rebuild_builder` if given), the two images compared, and
    the build record rewritten with the outcome (identical or not). A rebuild that fails raises BuildFailed and
    leaves the record as the build wrote it."""
    with second_cache_dir() as cache:
        paths = inputs.paths._replace(cache_dir=Path(cache))
        ctx = Context(paths, PrepareOptions(submodules), inputs._replace(paths=paths), hold=True)
        run_stage("prepare", ctx)
        second = ctx.made.prepare
        on_prepared(second)
        check = rebuild_and_compare(
            replace(plan, builder=rebuild_builder or plan.builder),
            Path(second.tree),
            inputs.paths.repro_dir(record.smoke),
            log_path,
            rebuild_builder or record.builder,
            on_line,
        )
    updated = record.model_copy(update={"reproducibility": check})
    write_atomic(record_path, updated.to_json())
    return updated


def rebuild_and_compare(
    plan: BuildPlan,
    second_tree: Path,
    repro_dir: Path,
    log_path: Path,
    builder_name: str,
    on_line,
) -> ReproCheck:
    """Rebuild `plan` (whose first build already wrote `first_layout(repro_dir)`) from `second_tree` with no cache,
    and compare. Raises BuildFailed when the rebuild itself fails."""
    repro_dir = repro_dir.resolve()
    second = repro_dir / "second"
    rebuild_plan = replace(
        plan,
        tree=second_tree,
        export=False,
        push=False,
        oci_layout=second,
        no_cache=True,
        provenance=False,  # the attestation holds build times; the image is what is compared
        sbom=False,
        cache_from=(),
        cache_to=(),
        metadata_file=repro_dir / "second.metadata.json",
    )
    facts = _rebuild(rebuild_plan, log_path, builder_name, on_line, first_layout(repro_dir))
    comparison = compare(first_layout(repro_dir), second, plan.platform)
    kept: list[str] = []
    if comparison.identical:
        shutil.rmtree(first_layout(repro_dir), ignore_errors=True)
        shutil.rmtree(second, ignore_errors=True)
        rebuild_plan.metadata_file.unlink(missing_ok=True)
    else:
        kept = [str(first_layout(repro_dir)), str(second)]
    return ReproCheck(
        identical=comparison.identical,
        manifest_digest=comparison.manifest_digest_a if comparison.identical else None,
        config_digest=comparison.config_digest_a if comparison.identical else None,
        rebuild=facts,
        summary=summary(comparison),
        comparison=comparison,
        layouts_kept=kept,
    )


def _rebuild(rebuild_plan: BuildPlan, log_path: Path, builder_name: str, on_line, first: Path) -> Rebuild:
    """The rebuild run, and what the record says of it; Interrupted or BuildFailed when it made no image."""
    started = utc_now()
    result = run_buildx(rebuild_plan, log_path, on_line)
    outcome = result.outcome
    facts = Rebuild(
        builder=builder_name,
        no_cache=True,
        second_clone=True,
        started=started,
        ended=utc_now(),
        seconds=round(result.seconds, 3),
        outcome=outcome,
        steps_total=result.progress.total,
        steps_cached=result.progress.cached,
        log=str(log_path),
    )
    if outcome == "interrupted":
        raise Interrupted("interrupted: buildx cancelled the rebuild of the reproducibility check")
    if outcome != "succeeded":
        cause = result.progress.cause()
        raise BuildFailed(
            "the rebuild for the reproducibility check failed"
            + (f" at {cause.name}: {cause.error}" if cause and cause.error else ""),
            hint=f"full log: {log_path}; the first build's OCI layout is left in {first}",
        )
    return facts


def second_cache_dir() -> tempfile.TemporaryDirectory:
    """Where the second clone goes: a fresh cache directory, removed afterwards."""
    return tempfile.TemporaryDirectory(prefix="buildkit-rebuild-")
