"""The provenance report: every fact taken from the lock and the records the earlier stages wrote, nothing typed in.

`gather()` reads them and `facts()` turns them into one plain dictionary; the JSON report is that dictionary, the
markdown report renders it with templates/report.md.j2. The report is a pure function of those files: it reads no
source tree, no cache and no clock, so the same inputs give the same bytes on any machine.
"""

from __future__ import annotations

import csv
import io
import shlex
from pathlib import Path
from typing import Any

from buildkit import __version__
from buildkit.build import BuildRecord
from buildkit.errors import InputError
from buildkit.files import read_record, sha256_bytes
from buildkit.grammar import one_line_text
from buildkit.lock import Lock, lock_sha256
from buildkit.pipeline import Paths, latest_build, load_inputs
from buildkit.render import RenderRecord, commit_time, source_date_epoch, template_environment
from buildkit.source import PrepareRecord
from buildkit.squashfs import SquashfsRecord, srun_line
from buildkit.squashfs import record_path as squashfs_record_path
from buildkit.verify import VerifyRecord
from buildkit.yamlload import load_yaml

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
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the results file: {exc.strerror}") from None
    if path.suffix.lower() == ".csv":
        rows = [r for r in csv.reader(io.StringIO(text)) if r and any(cell.strip() for cell in r)]
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


def gather(paths: Paths, record_path: Path | None, results_path: Path | None) -> tuple[dict[str, Any], str | None]:
    """The report's facts from the lock and the records, and the build record it used (None: nothing built).

    The build record is the one given, else the newest of build/record.json and build/smoke-record.json (as
    `buildkit verify` picks it); the render record is the one beside that build's Dockerfile."""
    lock = load_inputs(paths).lock  # only a lock that agrees with the pins is reported
    prepare = read_record(paths.prepare_record, PrepareRecord)
    if record_path is not None:
        record = read_record(record_path, BuildRecord)
        if record is None:
            raise InputError(f"{record_path}: no such build record")
    else:
        latest = latest_build(paths)
        record_path, record = latest if latest else (None, None)
    smoke = bool(record and record.smoke)
    rendered = read_record(paths.render_record(smoke), RenderRecord) or read_record(
        paths.render_record(False), RenderRecord
    )
    if rendered is not None and rendered.lock_sha256 != lock_sha256(lock):
        rendered = None  # rendered from another lock
    verify = read_record(paths.verify_record, VerifyRecord)
    if verify and (record is None or verify.image != record.image.tag):
        verify = None  # it checked another image
    exported = read_record(squashfs_record_path(paths, smoke), SquashfsRecord)
    if exported and not _exported_this(exported, record, lock):
        exported = None  # a squashfs of another image
    results = read_results(results_path) if results_path else None
    used = _shown_path(record_path, paths.project_dir) if record_path else None
    data = facts(lock, prepare, record, verify, results, rendered, paths=paths, record_name=used, exported=exported)
    return data, used


def _exported_this(exported: SquashfsRecord, record: BuildRecord | None, lock: Lock) -> bool:
    """Whether `buildkit export` made its squashfs of this build's image (of this lock, when nothing was built)."""
    if record is None:
        return exported.lock_sha256 == lock_sha256(lock)
    return exported.config_digest == record.image.config_digest or exported.image_id == record.image.id


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
                data = (project_dir / patch.file).read_bytes()
                text = data.decode("utf-8") if sha256_bytes(data) == patch.sha256 else None
            except OSError:
                text = None
        out.append({**patch.model_dump(mode="json"), "diff": text})
    return out


def _planned_command(lock: Lock, paths: Paths | None) -> str:
    """The buildx command a build of this lock runs (what `buildkit build --dry-run` prints)."""
    from buildkit.build import plan_for_lock, shell_command

    return shell_command(plan_for_lock(lock, paths or Paths.of(Path("pins.yaml"))))


def _link(url: str | None, repo: str) -> str | None:
    from urllib.parse import urlsplit

    from buildkit.markdown import safe_url

    return safe_url(url, {"github.com", (urlsplit(repo).hostname or "github.com").lower()})


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
) -> dict[str, Any]:
    n, v, pr, w, b = lock.nemo_rl, lock.vllm, lock.vllm_pr, lock.wheel, lock.base_image
    github = "https://github.com/"
    commits = {
        "nemo_rl": {**n.model_dump(mode="json", exclude={"resolved_at"}), "resolved_at": n.resolved_at},
        "vllm": {**v.model_dump(mode="json", exclude={"resolved_at"}), "resolved_at": v.resolved_at},
        "vllm_pr": pr.model_dump(mode="json") if pr else None,
    }
    pr_text = f"merge commit of PR #{pr.number} ({pr.title}), merged {pr.merged_at}" if pr else f"pinned ref {v.ref}"
    components = [
        {"component": "NeMo-RL", "source": n.repo, "version": n.commit, "how": f"pinned ref {n.ref}; {n.source}"},
        {"component": "vLLM (custom)", "source": v.repo, "version": v.commit, "how": f"{pr_text}; {v.source}"},
        {
            "component": "Precompiled vLLM wheel",
            "source": w.index,
            "version": f"{w.filename}",
            "how": f"listed in {w.listed_in}; verified by {w.verified_by}",
        },
        {
            "component": "Base image",
            "source": b.ref,
            "version": b.pinned,
            "how": f"tag resolved through {b.source}; {b.platform} manifest {b.manifest_digest}",
        },
    ]
    built = record is not None and record.outcome == "succeeded"
    buildkit_commands = ["buildkit resolve --check", "buildkit build" + (" --smoke" if record and record.smoke else "")]
    patches = [p.file for p in (prepare.patches if prepare else [])] or [p.file for p in lock.patches]
    manual = [
        f"git clone {shlex.quote(n.repo)} nemo-rl && cd nemo-rl && git checkout {n.commit}",
        "git submodule update --init --depth 1",
        *[f"git apply ../{shlex.quote(p)}" for p in patches],
    ]
    return {
        "report_version": 1,
        "buildkit_version": __version__,
        "lock_sha256": lock_sha256(lock),
        "overview": {
            "image": lock.build.tag,
            "target": lock.build.target,
            "platform": lock.build.platform,
            "cuda_arch_list": lock.build.cuda_arch_list,
            "gpus": gpus_of(lock.build.cuda_arch_list),
            "resolved_at": lock.resolved_at,
            "built": built,
            "built_at": record.ended if record else None,
            "smoke": bool(record and record.smoke),
        },
        "components": components,
        "commits": commits,
        # Links only to https:// pages on GitHub (or the repository's own host): never what upstream says blindly.
        "links": {
            "nemo_rl_commit": _link(n.url, n.repo)
            or (f"{n.repo.removesuffix('.git')}/commit/{n.commit}" if n.repo.startswith(github) else None),
            "vllm_commit": _link(v.url, v.repo)
            or (f"{v.repo.removesuffix('.git')}/commit/{v.commit}" if v.repo.startswith(github) else None),
            "vllm_pr": _link(pr.url, v.repo) if pr else None,
        },
        "wheel": w.model_dump(mode="json"),
        "base_image": b.model_dump(mode="json"),
        "cuda": lock.cuda.model_dump(mode="json"),
        # buildkit.gpu: the image's own files when verify read them, else the wheel's at resolve; absent when neither
        **({"gpu": gpu.model_dump(mode="json")} if (gpu := verify.gpu if verify and verify.gpu else lock.gpu) else {}),
        "modifications": [p.model_dump(mode="json") for p in prepare.patches] if prepare else [],
        "declared_patches": _declared_diffs(lock, paths.project_dir if paths else None),
        "dropped_extras": [e.model_dump(mode="json") for e in lock.build.drop_extras],
        "dockerfile": (
            rendered.model_dump(
                mode="json",
                include={"dockerfile_sha256", "upstream_path", "upstream_sha256", "drift", "transformations"},
            )
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
        "build_record": record_name,
        "build": (
            record.model_dump(mode="json", exclude={"image", "argv", "reproducibility"}) | {"argv": record.argv}
            if record
            else None
        ),
        "image": record.image.model_dump(mode="json") if record else None,
        "verification": verify.model_dump(mode="json", exclude={"gpu"}) if verify else None,
        "slurm": exported.model_dump(mode="json") | {"srun": srun_line(exported)} if exported else None,
        "reproducibility": {
            "source_date_epoch": record.source_date_epoch if record else source_date_epoch(lock),
            "created": commit_time(lock).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "check": record.reproducibility.model_dump(mode="json") if record and record.reproducibility else None,
            "unpinned": rendered.unpinned if rendered else None,
        },
        "reproduction": {
            "buildkit": buildkit_commands,
            "manual": manual,
            "buildx": record.command if record else _planned_command(lock, paths),
            "buildx_from_record": record is not None,
        },
        "results": results,
        "known_issues": [k.model_dump(mode="json") for k in lock.known_issues],
    }


def render_markdown(data: dict[str, Any]) -> str:
    """The markdown report: every value escaped unless a filter of buildkit.markdown says how it is shown."""
    from buildkit import markdown

    env = template_environment(finalize=markdown.finalize)
    env.filters.update(
        code=markdown.code, cell=markdown.cell, ccell=markdown.code_cell, fence=markdown.fence,
        paragraphs=markdown.paragraphs, link=markdown.link,
    )  # fmt: skip
    env.filters["mib"] = lambda size: f"{size / 2**20:,.1f} MiB" if isinstance(size, int) else "unknown"
    return env.get_template("report.md.j2").render(**data)
