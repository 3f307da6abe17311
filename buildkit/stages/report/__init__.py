"""The provenance report: every fact taken from the lock and the records the earlier stages wrote, nothing typed in.

`gather()` reads them and `facts()` turns them into one plain dictionary; the JSON report is that dictionary, the
markdown report renders it with templates/report.md.j2. The verdict, its checks and the rows of its tables come from
checks.py. The report is a pure function of those files: it reads no source tree, no cache and no clock, so the same
inputs give the same bytes on any machine.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from buildkit import __version__
from buildkit.errors import InputError, excerpt
from buildkit.files import (
    MAX_PATCH_BYTES,
    MAX_RESULTS_BYTES,
    read_local,
    read_record,
    sha256_bytes,
)
from buildkit.models.choices import ReportFormat
from buildkit.models.grammar import one_line_text
from buildkit.models.labels import commit_time
from buildkit.models.lock import Lock, composition, lock_sha256
from buildkit.models.lock.platforms import platform_rows
from buildkit.models.overlay import vllm_layers
from buildkit.models.paths import Paths
from buildkit.models.plan import plan_for_lock, shell_command, source_date_epoch
from buildkit.models.records import Build, belongs
from buildkit.models.records.attest import AttestRecord
from buildkit.models.records.build import BuildRecord, latest_build
from buildkit.models.records.index import IndexRecord
from buildkit.models.records.prepare import PrepareRecord
from buildkit.models.records.render import RenderRecord
from buildkit.models.records.resolve import ResolveRecord
from buildkit.models.records.squashfs import SquashfsRecord, srun_line
from buildkit.models.records.verify import VerifyRecord
from buildkit.models.results import Reported
from buildkit.models.yamlload import load_yaml
from buildkit.options import ReportOptions
from buildkit.stages.context import Context, load_inputs
from buildkit.stages.report.checks import built_target, counted, legend, matrix, named_rows, verdict, verdict_matrix
from buildkit.text import markdown
from buildkit.text.markdown import safe_url
from buildkit.text.templates import template_environment
from buildkit.text.timeline import gantt, stage_gantt

# Compute capability -> the GPUs people know it by.
GPU_FAMILIES = {
    "8.0": "Ampere (A100)",
    "8.6": "Ampere (A10, RTX 30)",
    "8.9": "Ada (L4, L40)",
    "9.0": "Hopper (H100, H20)",
    "10.0": "Blackwell (B200)",
    "12.0": "Blackwell (RTX 50)",
}


def gpus_of(cuda_arch_list: str) -> list[str]:
    out = []
    for arch in cuda_arch_list.replace(";", " ").split():
        base = arch.removesuffix("+PTX").rstrip("af")
        out.append(f"compute capability {arch}: {GPU_FAMILIES.get(base, 'see NVIDIA’s CUDA GPU list')}")
    return out


def read_results(path: Path) -> dict[str, Any]:
    """Training metrics per step, from YAML ({host?, command?, config?, log?, notes?, steps?, metrics: {name:
    [values]}}) or CSV
    (header `metric,<step>,<step>...`, one row per metric)."""
    try:
        text = read_local(path, "the results file", MAX_RESULTS_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such results file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: the results file is not UTF-8 text (byte {exc.start})") from None
    if path.suffix.lower() == ".csv":
        try:
            rows = [r for r in csv.reader(io.StringIO(text)) if r and any(cell.strip() for cell in r)]
        except csv.Error as exc:  # a field over the csv module's limit (128 KiB), a NUL byte
            raise InputError(f"{path}: not a readable CSV file: {excerpt(str(exc))}") from None
        if len(rows) < 2:
            raise InputError(f"{path}: expected a header `metric,<step>...` and one row per metric")
        steps = [cell.strip() for cell in rows[0][1:]]
        metrics = {row[0].strip(): [cell.strip() for cell in row[1:]] for row in rows[1:]}
        data: dict[str, Any] = {"steps": steps, "metrics": metrics}
    else:
        # Values stay as written; anchors and aliases (alias bombs), duplicate keys and huge documents are refused.
        data = load_yaml(text, path, keep_strings=True)[0] or {}
        if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
            raise InputError(f"{path}: expected a mapping with `metrics: {{name: [value per step]}}`")
    metrics = data["metrics"]
    width = max((len(v) for v in metrics.values() if isinstance(v, list)), default=0)
    steps = [str(s) for s in data.get("steps") or range(1, width + 1)]
    table = {}
    for name, values in metrics.items():
        if not isinstance(values, list) or len(values) != len(steps):
            raise InputError(f"{path}: metric {name!r} needs one value per step ({len(steps)})")
        try:
            table[one_line_text(str(name))] = [one_line_text(str(v)) for v in values]
        except ValueError as exc:
            raise InputError(f"{path}: {exc}") from None
    out: dict[str, Any] = {"steps": steps, "metrics": table, "source": path.name}
    # Optional text, shown verbatim: where it ran, the training command and config, a log excerpt, notes.
    for key in ("host", "command", "config", "log", "notes"):
        if data.get(key):
            text = str(data[key]).strip()
            if len(text) > 20000 or "````" in text:
                raise InputError(f"{path}: {key} must be under 20,000 characters, without a ```` fence")
            out[key] = text
    return out


def run(ctx: Context[ReportOptions]) -> None:
    """The report the options ask for (ReportOptions), written to their output when they name one (else the CLI
    prints it); `Reported` in ctx.made.report. Notes on the records left out go to ctx.note."""
    opts = ctx.options
    data, used = gather(ctx.paths, opts.record, opts.results, on_note=ctx.on_note)
    text = json.dumps(data, indent=2) + "\n" if opts.format == "json" else render_markdown(data)
    if opts.output is not None:
        ctx.write(opts.output, text)
    ctx.made.report = Reported(text, used)


def gather(
    paths: Paths, record_path: Path | None, results_path: Path | None, on_note=None
) -> tuple[dict[str, Any], str | None]:
    """The report's facts from the lock and the records, and the build record it used (None: nothing built).

    The build record is the one given, else the newest of build/record.json and build/smoke-record.json (as
    `buildkit verify` picks it). Every other record is taken only when its header says it belongs to that build:
    the same lock, smoke or release as it is, and (for the records of an image) the same image; a record of another
    build is left out and `on_note` says so."""
    lock = load_inputs(paths).lock  # only a lock that agrees with the pins is reported
    lock_sha = lock_sha256(lock)
    note = on_note or (lambda text: None)
    prepare = read_record(paths.prepare_record, PrepareRecord)
    if prepare is not None and prepare.lock_sha256 != lock_sha:
        note(f"{paths.prepare_record}: prepared for another lock; left out")
        prepare = None
    record_path, record = _build_record(paths, record_path, lock_sha, note)
    smoke = bool(record and record.smoke)
    build = record.build() if record else Build(lock_sha, smoke)  # the record's lock is this one

    def take(path: Path, model):
        found = read_record(path, model)
        if found is not None and not belongs(found, build):
            note(f"{path}: a record of another build; left out")
            return None
        return found

    # A smoke build's report reads the smoke render (its target, its unpinned inputs), never the release one.
    rendered = take(paths.render_record(smoke), RenderRecord)
    verify = take(paths.verify_record, VerifyRecord)
    provenance_checked = take(paths.provenance_verify_record, VerifyRecord)
    exported = take(paths.squashfs_record(smoke), SquashfsRecord)
    attested = take(paths.attest_record(smoke), AttestRecord)
    results = read_results(results_path) if results_path else None
    used = _shown_path(record_path, paths.project_dir) if record_path else None
    data = facts(
        lock,
        prepare,
        record,
        verify,
        results,
        rendered,
        paths=paths,
        record_name=used,
        exported=exported,
        provenance_checked=provenance_checked,
        attested=attested,
        resolved=resolve_record(paths, lock_sha256(lock), note),
        smoke=smoke,
    )
    return data, used


def _build_record(
    paths: Paths, record_path: Path | None, lock_sha: str, note: Callable[[str], None]
) -> tuple[Path | None, BuildRecord | None]:
    """The build record the report describes and where it is: the one given (which must be a build of this lock),
    else the newest build of this lock; (None, None) when there is none."""
    if record_path is not None:
        record = read_record(record_path, BuildRecord)
        if record is None:
            raise InputError(f"{record_path}: no such build record")
        if record.lock_sha256 != lock_sha:
            raise InputError(
                f"{record_path}: a build of another lock (sha256 {record.lock_sha256[:12]}..., the lock is "
                f"{lock_sha[:12]}...)",
                hint="report with the pins and lock it was built from, or build again",
            )
        return record_path, record
    latest = latest_build(paths)
    record_path, record = latest if latest else (None, None)
    if record is not None and record.lock_sha256 != lock_sha:
        note(f"{record_path}: a build of another lock; left out (build again to report one)")
        return None, None
    return record_path, record


def _shown_path(path: Path, project_dir: Path) -> str:
    """A path as the report shows it: relative to the project when inside it, so reports compare across machines."""
    try:
        return str(path.resolve().relative_to(project_dir.resolve()))
    except ValueError:
        return path.name


def _declared_diffs(lock: Lock, project_dir: Path | None) -> list[dict[str, Any]]:
    """The declared patches with their text, read from the project and checked against the lock's sha256."""
    out = []
    for patch in lock.patches:
        text = None
        if project_dir is not None:
            try:
                data = read_local(project_dir / patch.file, "a patch", MAX_PATCH_BYTES, within=project_dir)
                text = data.decode("utf-8") if sha256_bytes(data) == patch.sha256 else None
            except (OSError, InputError, UnicodeDecodeError):
                text = None
        out.append({**patch.model_dump(mode="json"), "diff": text})
    return out


def _heredoc(command: str, text: str, tag: str) -> str:
    """`command <<'TAG'` with the text, under a terminator the text does not hold as a line."""
    lines = set(text.splitlines())
    word, n = tag, 1
    while word in lines:
        n += 1
        word = f"{tag}_{n}"
    return f"{command} <<'{word}'\n{text.rstrip(chr(10))}\n{word}"


def by_hand(lock: Lock, prepare: PrepareRecord | None, rendered: RenderRecord | None, smoke: bool) -> list[str]:
    """The build without buildkit, as one script that works from an empty directory: the sources cloned and patched,
    upstream's Dockerfile with the rendered changes applied (the diff, inline), and buildx on those relative paths
    (nothing under this machine's home or cache)."""
    n = lock.nemo_rl
    lines = [
        "mkdir nemo-rl-build && cd nemo-rl-build",
        f"git clone {shlex.quote(n.repo)} nemo-rl",
        f"git -C nemo-rl checkout --detach {n.commit}",
    ]
    if prepare is None or prepare.submodules is not None:
        lines.append("git -C nemo-rl submodule update --init --recursive --depth 1")
    for number, patch in enumerate(prepare.patches if prepare else [], 1):
        lines.append(_heredoc("git -C nemo-rl apply", patch.diff, f"PATCH_{number}"))
    if prepare is None and lock.patches:
        lines += [f"git -C nemo-rl apply ../{shlex.quote(p.file)}  # from this repository" for p in lock.patches]
    if prepare and (uv := prepare.uv_source):  # vllm.install: uv-source, as prepare wrote it
        lines += [_heredoc("git -C nemo-rl apply", uv.diff, "UV_SOURCE"), f"uv lock --project nemo-rl  # uv {uv.uv}"]
    lines.append(f"git -C nemo-rl show {n.commit}:docker/Dockerfile > Dockerfile")
    if rendered is not None and rendered.diff:
        lines.append(_heredoc("patch Dockerfile", rendered.diff, "DOCKERFILE_DIFF"))
    else:
        lines.append("# then the changes `buildkit render` makes (not rendered from this lock yet)")
    plan = plan_for_lock(lock, Paths.named(Path("pins.yaml")), smoke=smoke, provenance=False)
    plan = replace(
        plan,
        dockerfile=Path("Dockerfile"),
        tree=Path("nemo-rl"),
        metadata_file=Path("metadata.json"),
        cache_from=(),
        cache_to=(),
    )
    lines.append(shell_command(plan))
    return lines


def stage_times(prepare, rendered, record, verify, exported, resolved=None) -> list[dict[str, Any]]:
    """How long each stage took, as its record says (None where the record does not say)."""

    def seconds(found, attribute: str = "seconds"):
        return getattr(found, attribute, None) if found is not None else None

    return [
        {"stage": "resolve", "seconds": resolve_seconds(resolved), "detail": ""},
        {"stage": "prepare", "seconds": seconds(prepare), "detail": "reused" if prepare and prepare.reused else ""},
        {"stage": "render", "seconds": seconds(rendered), "detail": ""},
        {"stage": "build", "seconds": seconds(record), "detail": record.outcome if record else ""},
        {"stage": "verify", "seconds": seconds(verify), "detail": ""},
        {"stage": "export", "seconds": seconds(exported), "detail": ""},
    ]


def rendered_path(rendered: RenderRecord, paths: Paths | None, smoke: bool) -> str:
    """The Dockerfile a render record describes, as the report shows it: the file beside the record (build/Dockerfile,
    build/smoke/Dockerfile, build/linux-arm64/smoke/Dockerfile ...)."""
    if paths is None:
        return f"build/{'smoke/' if smoke else ''}{rendered.dockerfile}"
    return _shown_path(paths.render_record(smoke).parent / rendered.dockerfile, paths.project_dir)


def layer_count(record: BuildRecord | None) -> dict[str, Any] | None:
    """How many layers the image has and how many of them are empty, said one way wherever the report says it:
    the image's own count (the build record's), and the layers with content in its history (the same layers the
    layer list shows; an empty layer has size 0 there, as a step that made no layer does).
    None: no image facts."""
    if record is None or record.outcome != "succeeded":
        return None
    total = record.image.layers
    content = sum(1 for entry in record.image.history if entry.size > 0) if record.image.history else None
    if total is None and content is None:
        return None
    empty = total - content if total is not None and content is not None and total >= content else None
    if total is None:
        text = f"{content} layers with content (the image's own count not recorded)"
    elif empty is None:
        text = f"{total} layers" if content is None else f"{total} layers (its history lists {content} with content)"
    else:
        text = f"{total} layers, {empty or 'none'} empty"
    return {"total": total, "with_content": content, "empty": empty, "text": text}


def layers(record: BuildRecord | None) -> list[dict[str, Any]] | None:
    """The image's layers, largest first, each with the instruction that made it (None: not known)."""
    if record is None or not record.image.history:
        return None
    out = []
    for entry in record.image.history:
        if entry.size == 0:
            continue  # ENV, CMD, LABEL...: history entries that made no layer, and layers of 0 bytes
        made_by = entry.created_by.removeprefix("/bin/sh -c #(nop) ").strip()
        out.append({"size": entry.size, "created_by": made_by[:300] + ("..." if len(made_by) > 300 else "")})
    return sorted(out, key=lambda layer: -layer["size"])


def _link(url: str | None, repo: str) -> str | None:
    return safe_url(url, {"github.com", (urlsplit(repo).hostname or "github.com").lower()})


def resolve_record(paths: Paths, lock_sha: str, on_note=None) -> ResolveRecord | None:
    """The resolve record beside the lock when it names this lock, else None: a missing record, one of another lock
    or a broken one leaves resolve's times "not recorded" (`on_note` says why) and never stops the report."""
    note = on_note or (lambda text: None)
    try:
        found = read_record(paths.resolve_record, ResolveRecord)
    except InputError as exc:
        note(f"{exc}; resolve's times left out")
        return None
    if found is not None and found.lock_sha256 != lock_sha:
        note(f"{paths.resolve_record}: a record of another lock; resolve's times left out")
        return None
    return found


def resolve_seconds(record: ResolveRecord | None) -> float | None:
    """How long resolve took: as the record measured it, else from its start and end (whole seconds)."""
    if record is None:
        return None
    if record.seconds is not None:
        return record.seconds
    try:
        begun, ended = (datetime.fromisoformat(t) for t in (record.started_at, record.finished_at))
        took = (ended - begun).total_seconds()
    except (ValueError, TypeError):  # not ISO 8601, or one time with a zone and one without
        return None
    return took if took >= 0 else None


def resolve_times(lock: Lock, record: ResolveRecord | None) -> dict[str, str]:
    """When the lock's facts were read ("lock": when resolve finished): from the resolve record of this lock, else
    from an older lock that still held them; {} when neither says."""
    if record is not None:
        return {**record.read_at, "lock": record.finished_at}
    return lock.times_as_read()


def facts(
    lock: Lock,
    prepare: PrepareRecord | None = None,
    record: BuildRecord | None = None,
    verify: VerifyRecord | None = None,
    results: dict[str, Any] | None = None,
    rendered: RenderRecord | None = None,
    paths: Paths | None = None,
    record_name: str | None = None,
    exported: SquashfsRecord | None = None,
    provenance_checked: VerifyRecord | None = None,
    attested=None,
    resolved: ResolveRecord | None = None,
    smoke: bool | None = None,
) -> dict[str, Any]:
    """The report's facts, one plain dictionary (the JSON report). `smoke`: whether the build described is a smoke
    build (default: what the build record says; False before any build)."""
    w, b = lock.wheel, lock.base_image
    times = resolve_times(lock, resolved)
    smoke = bool(record and record.smoke) if smoke is None else smoke
    # buildkit.gpu: the image's own files when verify read them, else the wheel's at resolve; absent when neither
    gpu = verify.gpu if verify and verify.gpu else lock.gpu
    return {
        "report_version": 2,
        "buildkit_version": __version__,
        "lock_sha256": lock_sha256(lock),
        "overview": _overview(lock, record, times),
        "components": _components(lock),
        "commits": _commits(lock, times),
        "links": _links(lock),
        "wheel": {**w.model_dump(mode="json"), "resolved_at": times.get("wheel")},
        "base_image": {**b.model_dump(mode="json"), "resolved_at": times.get("base_image")},
        "cuda": lock.cuda.model_dump(mode="json"),
        **({"gpu": gpu.model_dump(mode="json")} if gpu else {}),
        **_source_facts(lock, prepare, rendered, paths, smoke),
        **_record_facts(record, record_name, verify, provenance_checked),
        "verdict": verdict(lock, record, rendered, verify, provenance_checked, exported, attested),
        "attestation": attested.model_dump(mode="json") if attested else None,
        "timeline": gantt(record.steps) if record else None,
        "stages": (stages := stage_times(prepare, rendered, record, verify, exported, resolved)),
        "stages_chart": stage_gantt(stages),
        "layers": layers(record),
        "layer_count": layer_count(record),
        "slurm": exported.model_dump(mode="json") | {"srun": srun_line(exported)} if exported else None,
        "reproducibility": {
            "source_date_epoch": record.source_date_epoch if record else source_date_epoch(lock),
            "created": commit_time(lock).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "check": record.reproducibility.model_dump(mode="json") if record and record.reproducibility else None,
            "unpinned": rendered.unpinned if rendered else None,
        },
        "reproduction": {
            "needs": needs(lock, rendered, record, smoke),
            "buildkit": ["buildkit resolve --check", "buildkit build" + (" --smoke" if smoke else "")],
            "manual": by_hand(lock, prepare, rendered, smoke),
            "run": run_line(lock, record),
        },
        "skipped": skipped(prepare, rendered, verify, record),
        "results": results,
        "known_issues": [k.model_dump(mode="json") for k in lock.known_issues],
    }


def _overview(lock: Lock, record: BuildRecord | None, times: dict[str, str]) -> dict[str, Any]:
    """What the report is about: the image the build record made (its tag and target), else what the lock would
    build (`built` False)."""
    return {
        "image": record.image.tag if record else lock.build.tag,
        "target": built_target(record) or lock.build.target,
        "platform": lock.build.platform,
        "cuda_arch_list": lock.build.cuda_arch_list,
        "gpus": gpus_of(lock.build.cuda_arch_list),
        "resolved_at": times.get("lock"),
        "built": record is not None and record.outcome == "succeeded",
        "built_at": record.ended if record else None,
        "smoke": bool(record and record.smoke),
        # Which buildkit did each: the version stamped at install moves with every commit (pyproject.toml), so the
        # build's, the lock's and the report's own can differ.
        "built_by": record.buildkit_version if record else None,
        "resolved_by": lock.buildkit_version,
    }


def needs(lock: Lock, rendered: RenderRecord | None, record: BuildRecord | None, smoke: bool) -> str:
    """What reproducing this build needs, in buildkit's words (`...` pairs are code): a release build needs room for
    CUDA, PyTorch and vLLM (build's preflight asks 100 GB free), the upstreams its Dockerfile downloads from, and
    GPUs to run the image; a smoke build needs the stand-in base image, the wheel and no GPU."""
    split = urlsplit(lock.wheel.url)
    wheel = f"{split.scheme}://{split.netloc}" if split.netloc else lock.wheel.url
    resolve = (
        f"`buildkit resolve --check` asks the GitHub API, the wheel index and the registry of `{lock.base_image.ref}`"
    )
    if not smoke:
        return (
            "Needs Docker with buildx, about 100 GB free where the builder keeps its data (build's preflight asks "
            "that much: `--min-free-gb`), and network access to the base image's registry, the vLLM repository, "
            "the wheel index and the Python package indexes the Dockerfile uses; running the image needs NVIDIA "
            f"GPUs ({'; '.join(gpus_of(lock.build.cuda_arch_list))}). {resolve}."
        )
    base = rendered.smoke_base if rendered and rendered.smoke_base else None
    reads = [
        f"the stand-in base image `{base}` from its registry" if base else "the stand-in base image (`--smoke-base`)"
    ]
    if rendered is not None and rendered.syntax:
        reads.append("the `# syntax=` frontend image from Docker Hub")
    reads.append(f"the wheel from `{wheel}`")
    size = f" ({lock.wheel.size / 2**20:,.1f} MiB)" if lock.wheel.size else ""
    made = f" and the image ({_human_size(record.image.size)})" if record and record.image.size else ""
    return (
        f"Needs Docker with buildx and room where the builder keeps its data for the wheel{size}{made}; build's "
        "preflight asks 1 GB free for a smoke build (`--min-free-gb`). buildx reads "
        f"{', '.join(reads[:-1])} and {reads[-1]} (unless the builder has them cached), and nothing else. {resolve}. "
        "No GPU: the smoke image holds no CUDA runtime, Python environment or vLLM, so nothing in it runs on one."
    )


def run_line(lock: Lock, record: BuildRecord | None) -> str | None:
    """`docker run` for the image the build made (before any build: the one `buildkit build` makes, said so); None
    when there is none to run on GPUs (a failed build, or a smoke image: no Python environment and no vLLM)."""
    if record is not None and (record.outcome != "succeeded" or record.smoke):
        return None
    tag = record.image.tag if record is not None else lock.build.tag
    return f"docker run --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 -it {tag} bash"


def skipped(prepare, rendered, verify, record) -> list[str]:
    """What this build left out and why, from its records: submodules, the `# syntax=` frontend image, the GPU
    checks inside the image."""
    out = []
    if prepare is not None and prepare.submodules is None:
        out.append(
            "NeMo-RL's submodules: not fetched (prepare ran with --no-submodules or BUILDKIT_SUBMODULES=0); "
            "the image holds none of their files"
        )
    if rendered is not None and not rendered.syntax:
        # A smoke render leaves the line out unless given --syntax (it must build offline); a release render keeps
        # it unless given --no-syntax. The record says which render it was (smoke_base), not which flags it had.
        why = (
            "a smoke build renders its Dockerfile without it unless given --syntax (it must build with no internet)"
            if rendered.smoke_base
            else "render ran with --no-syntax"
        )
        out.append(f"the `# syntax=` frontend image: {why}, so BuildKit used the builder's own Dockerfile frontend")
    if record is not None and record.outcome == "succeeded":
        if verify is None:
            out.append("the checks inside the image: `buildkit verify` has not run on it")
        elif record.smoke:
            out.append(
                "the GPU checks (kernels, ABI, driver) inside the image: a smoke image has no CUDA, Python "
                "environment or vLLM"
            )
        elif not verify.gpus:
            out.append("the checks on a GPU: not asked (`buildkit verify --gpus`)")
    return out


def _components(lock: Lock) -> list[dict[str, str]]:
    n, v, pr, w, b = lock.nemo_rl, lock.vllm, lock.vllm_pr, lock.wheel, lock.base_image
    pr_text = (
        f"merge commit of PR #{pr.number} ({pr.title}), merged {pr.merged_at}"
        if pr and pr.merged
        else f"head of open PR #{pr.number} ({pr.title})"
        if pr
        else f"pinned ref {v.ref}"
    )
    return [
        {"component": "NeMo-RL", "source": n.repo, "version": n.commit, "how": f"pinned ref {n.ref}; {n.source}"},
        {"component": "vLLM (custom)", "source": v.repo, "version": v.commit, "how": f"{pr_text}; {v.source}"},
        {
            "component": "Precompiled vLLM wheel",
            "source": w.index,
            "version": f"{w.filename}",
            "how": f"the wheel of {lock.vllm_wheel.commit} ({lock.vllm_wheel.chosen_by}); listed in {w.listed_in}; "
            f"verified by {w.verified_by}",
        },
        {
            "component": "Base image",
            "source": b.ref,
            "version": b.pinned,
            "how": f"tag resolved through {b.source}; {b.platform} manifest {b.manifest_digest}",
        },
    ]


def _commits(lock: Lock, times: dict[str, str]) -> dict[str, Any]:
    n, v, pr = lock.nemo_rl, lock.vllm, lock.vllm_pr
    return {
        "nemo_rl": {**n.model_dump(mode="json"), "resolved_at": times.get("nemo_rl")},
        "vllm": {**v.model_dump(mode="json"), "resolved_at": times.get("vllm")},
        "vllm_pr": {**pr.model_dump(mode="json"), "resolved_at": times.get("vllm_pr")} if pr else None,
        "vllm_wheel": lock.vllm_wheel.model_dump(mode="json"),
        # `changed` only where the lock lists it, as the lock writes it
        "vllm_compare": lock.vllm_compare.model_dump(
            mode="json", exclude={"changed"} if lock.vllm_compare.changed is None else None
        ),
        "vllm_composition": composition(lock),
        "vllm_layers": vllm_layers(lock).reported(),
    }


def _links(lock: Lock) -> dict[str, str | None]:
    """Links only to https:// pages on GitHub (or the repository's own host): never what upstream says blindly."""
    n, v, pr = lock.nemo_rl, lock.vllm, lock.vllm_pr
    github = "https://github.com/"
    return {
        "nemo_rl_commit": _link(n.url, n.repo)
        or (f"{n.repo.removesuffix('.git')}/commit/{n.commit}" if n.repo.startswith(github) else None),
        "vllm_commit": _link(v.url, v.repo)
        or (f"{v.repo.removesuffix('.git')}/commit/{v.commit}" if v.repo.startswith(github) else None),
        "vllm_pr": _link(pr.url, v.repo) if pr else None,
    }


def _source_facts(lock: Lock, prepare, rendered, paths: Paths | None, smoke: bool) -> dict[str, Any]:
    """The patches (and a written uv-source mode), the dropped extras, the rendered Dockerfile, the prepared tree."""
    return {
        "modifications": [p.model_dump(mode="json") for p in prepare.patches] if prepare else [],
        "uv_source": prepare.uv_source.model_dump(mode="json") if prepare and prepare.uv_source else None,
        "declared_patches": _declared_diffs(lock, paths.project_dir if paths else None),
        "dropped_extras": [e.model_dump(mode="json") for e in lock.build.drop_extras],
        "dockerfile": (
            rendered.model_dump(
                mode="json",
                include={"dockerfile_sha256", "upstream_path", "upstream_sha256", "drift", "transformations"},
            )
            | {"path": rendered_path(rendered, paths, smoke)}
            if rendered
            else None
        ),
        "dockerfile_diff": rendered.diff if rendered else None,
        "prepare": (
            {k: getattr(prepare, k) for k in ("tree", "prepared_at", "reused", "fetched", "fetched_bytes")}
            | {"submodules": [s.model_dump() for s in prepare.submodules] if prepare.submodules is not None else None}
            if prepare
            else None
        ),
    }


def _record_facts(record, record_name, verify, provenance_checked) -> dict[str, Any]:
    """The build record, the image and the verification records, as the report shows them."""
    return {
        "build_record": record_name,
        "build": (
            record.model_dump(mode="json", exclude={"image", "argv", "reproducibility"}) | {"argv": record.argv}
            if record
            else None
        ),
        "image": record.image.model_dump(mode="json") if record else None,
        "verification": verify.model_dump(mode="json", exclude={"gpu"}) if verify else None,
        "provenance_verification": provenance_checked.model_dump(mode="json") if provenance_checked else None,
    }


def _human_size(size: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} B"


def render_markdown(data: dict[str, Any]) -> str:
    """The markdown report: every value escaped unless a filter of buildkit.text.markdown says how it is shown."""
    env = template_environment(finalize=markdown.finalize)
    env.filters.update(
        code=markdown.code,
        cell=markdown.cell,
        ccell=markdown.code_cell,
        fence=markdown.fence,
        paragraphs=markdown.paragraphs,
        link=markdown.link,
        spans=markdown.spans,
        spans_cell=lambda value: markdown.spans(value, in_cell=True),
    )
    env.filters["mib"] = lambda size: f"{size / 2**20:,.1f} MiB" if isinstance(size, int) else "unknown"
    env.filters["bytes"] = _human_size
    checks = data["verdict"]["checks"]
    shown = {
        "verdict_rows": [{**r, "cell": markdown.Markdown(r["cell"])} for r in matrix(checks)],
        "verify_rows": named_rows(checks, "verify: "),
        "provenance_rows": named_rows(data["verdict"]["provenance_checks"], "provenance: "),
        "legend": markdown.Markdown(legend()),
        "counted": counted(data["verdict"]["counts"]),
    }
    return env.get_template("report.md.j2").render(**data, **shown)


# -- several platforms (build.platforms) ----------------------------------------------------------------------------


def several(paths: Paths, reports: dict[str, str], fmt: ReportFormat, smoke: bool) -> str:
    """The report of a lock of several platforms. Its first screen is the verdict matrix: one column per platform,
    one row per check (the same rows as each platform's own verdict), each cell that platform's result. Then what
    differs between the platforms (from the lock), the image index (from build/index.json, when a build of them all
    ran), and each platform's own report, folded, its headings one level down."""
    lock = load_inputs(paths, whole=True).lock
    rows = platform_rows(lock)
    index = read_record(paths.index_record(smoke), IndexRecord)
    if index is not None and index.lock_sha256 != lock_sha256(lock):
        index = None
    names = list(reports)
    # Each platform's verdict, as its own report has it: the JSON report holds it; the markdown one is gathered
    # again from the same files (no notes: the platform's own report said them).
    verdicts = {
        p: json.loads(text)["verdict"] if fmt == "json" else gather(paths.for_platform(p), None, None)[0]["verdict"]
        for p, text in reports.items()
    }
    table = verdict_matrix(verdicts)
    if fmt == "json":
        data = {
            "lock_sha256": lock_sha256(lock),
            "verdict": {
                "rows": [{"check": r["check"], "results": r["results"]} for r in table],
                "counts": {p: v["counts"] for p, v in verdicts.items()},
            },
            "platforms": {p: json.loads(text) for p, text in reports.items()},
            "differences": [{"fact": r.fact, "values": r.values} for r in rows if r.differs],
            "same": [{"fact": r.fact, "value": next(iter(r.values.values()))} for r in rows if not r.differs],
            "index": index.model_dump(mode="json") if index else None,
        }
        return json.dumps(data, indent=2) + "\n"
    out = [
        f"# NeMo-RL image for {len(names)} platforms: {', '.join(names)}",
        "",
        f"One lock ({markdown.code(paths.lock.name)}, sha256 {markdown.code(lock_sha256(lock)[:12])}...) with one "
        "NeMo-RL commit, one vLLM source and wheel commit, and one set of patches; each platform built in a folder "
        "of its own.",
        "",
        "## Verdict",
        "",
        "| | " + " | ".join(markdown.cell(p) for p in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for p_row in _identity_rows(verdicts):
        out.append(p_row)
    for check in table:
        out.append(f"| {markdown.cell(check['check'])} | " + " | ".join(check["cells"][p] for p in names) + " |")
    out.append("| Checks | " + " | ".join(counted(verdicts[p]["counts"]) for p in names) + " |")
    out += [
        "",
        f"{legend()} Each cell's detail is in that platform's own verdict: its report, folded below.",
        "",
        "## What differs between the platforms",
        "",
        "| fact | " + " | ".join(markdown.cell(p) for p in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for r in rows:
        if r.differs:
            cells = " | ".join(markdown.code_cell(r.values[p]) for p in names)
            out.append(f"| {markdown.cell(r.fact)} | {cells} |")
    same = [r.fact for r in rows if not r.differs]
    same_text = ", ".join(markdown.text(f) for f in same) or "nothing else"
    out += ["", f"The same on every platform: {same_text}.", ""]
    out += ["## Image index", ""]
    if index is None:
        out.append(
            "No build of every platform recorded for this lock (`buildkit build` writes "
            f"{markdown.code(paths.index_record(smoke).name)})."
        )
    else:
        pushed = index.tag + "@" + index.index_digest if index.index_digest else None
        out += [f"Index: {markdown.code(pushed) if pushed else markdown.text(index.index)}", ""]
        for i in index.platforms:
            out.append(f"- {markdown.text(i.platform)}: {markdown.code(i.tag)} {markdown.code(i.digest or '?')}")
    for platform, text in reports.items():
        body = demoted(text).rstrip("\n")
        out += [
            "",
            f"# {markdown.text(platform)}",
            "",
            "<details>",
            f"<summary>The report of {markdown.text(platform)} ({len(body.splitlines())} lines): its verdict with "
            "each check's detail, the build, the image, the sources and how to reproduce it</summary>",
            "",
            body,
            "",
            "</details>",
        ]
    return "\n".join(out) + "\n"


def _identity_rows(verdicts: dict[str, dict[str, Any]]) -> list[str]:
    """The verdict matrix's first rows: what each platform's build made (its tag, kind and outcome), its digest and
    its target."""
    built = {p: v["built"] for p, v in verdicts.items()}

    def cells(value) -> str:
        return " | ".join(value(b) for b in built.values())

    return [
        "| Built | "
        + cells(
            lambda b: (
                f"{markdown.code_cell(b['tag'])} ({b['kind']}): **{b['outcome']}**"
                if b["outcome"]
                else f"nothing built yet: run {markdown.code('buildkit build')}"
            )
        )
        + " |",
        "| Digest | "
        + cells(lambda b: markdown.code_cell(b["digest"]) if b["digest"] else ("none" if b["outcome"] else "no image"))
        + " |",
        "| Target | " + cells(lambda b: markdown.code_cell(b["target"]) if b["target"] else "none") + " |",
    ]


def demoted(text: str) -> str:
    """Markdown with every ATX heading one level down, fenced code left as it is."""
    out, fence = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        opening = re.match(r"(`{3,}|~{3,})", stripped)
        if not fence and opening:
            fence = opening.group(1)
        elif fence and stripped.startswith(fence) and set(stripped) == {fence[0]}:
            fence = ""
        elif not fence and re.match(r"#{1,5} ", line):
            line = "#" + line
        out.append(line)
    return "\n".join(out) + "\n"
