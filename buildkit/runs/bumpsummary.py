"""The bump's report: what `buildkit bump` found and did (BumpReport, which --json prints), and its summary as
markdown for a reviewer, a pure function of the BumpReport.

Every value from outside (commit subjects, upstream lines, messages, refs) goes through buildkit/text/markdown.py:
escaped as text, in code spans longer than any backtick run inside, or in a fenced block, so no heading, row,
link or HTML can come out of it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit.dockerfile.stagediff import DockerfileChanges
from buildkit.text.markdown import cell, code, code_cell, fence, link, safe_url, spans, text


class CommitInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    commit: str
    date: str
    subject: str
    url: str | None = None


class Move(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pin: Literal["nemo_rl", "vllm"]
    to: str  # the branch or tag asked for
    old: CommitInfo | None
    new: CommitInfo | None = None
    # How new relates to old: "descendant" (it contains old), "older" (old contains it), "unrelated" (neither:
    # a force-push?); None when unchanged or not checked. The summary says so, and names an older date.
    relation: Literal["descendant", "older", "unrelated"] | None = None
    commits: int | None = None  # commits in new that old does not have (None: not known, see count_note)
    compare_url: str | None = None  # GitHub's compare page old...new (when GitHub's compare API answered)
    count_note: str = ""  # why the count is not known; with a count, how it was had when not as asked


class SkippedCommit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    commit: CommitInfo
    reason: str


class PullRequestNote(BaseModel):
    """The PR pins.yaml named for vLLM: dropped, since the new commit is not its merge commit."""

    model_config = ConfigDict(extra="forbid")
    number: int
    merge_commit: str | None = None
    compare: str | None = None  # GitHub's compare status of the new commit against the merge commit
    by: Literal["GitHub compare", "git"] = "GitHub compare"  # git: where GitHub's compare API had no answer
    contained: bool | None = None  # None: not known (see detail)
    detail: str = ""


class ConflictInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    hunk: int | None
    header: str
    line: int | None
    expected: str
    found: str
    missing: bool


class PatchStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    status: Literal["applies", "obsolete", "conflicts", "not checked"]
    reason: str = ""  # obsolete: why; conflicts: the message
    conflict: ConflictInfo | None = None


class WheelInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    commit: str
    filename: str
    url: str
    arch: str
    variant: str
    size: int | None
    sha256: str | None


class BumpReport(BaseModel):
    """What the bump found, as far as it got: the summary (markdown or --json) is made from this alone."""

    model_config = ConfigDict(extra="forbid")
    pins: str
    dry_run: bool
    outcome: Literal["bumped", "unchanged", "dry run", "failed"] = "failed"
    error: str | None = None
    moves: list[Move] = []
    vllm_skipped: list[SkippedCommit] = []
    pull_request: PullRequestNote | None = None
    pr_followed: str | None = None  # what the pinned PR is now (bump --vllm with vllm.pr pinned)
    vllm_source: str | None = None  # where the image's vLLM Python and kernels come from (lock.composition)
    vllm_compiled: list[str] = []  # compiled inputs that differ between the wheel's commit and the source
    patches: list[PatchStatus] = []
    wheel: WheelInfo | None = None
    dockerfile: DockerfileChanges | None = None
    dockerfile_note: str = ""  # why there are no stage changes to show, when there are none
    drift: list[str] | None = None  # None: render did not run
    build_would_stop: list[str] = []  # why `buildkit build` would stop on the bumped pins (drift)
    cuda: list[str] = []
    torch: list[str] = []  # the wheel's torch against the new uv.lock's (lock.torch, or resolve's mismatch)
    torch_stops: bool = False  # the wheel names another torch release line: resolve stopped (exit 4)
    advice: list[str] = []  # every pins.yaml change the next command needs, when build would stop
    checks: list[dict[str, str]] = []  # the new lock's rows of every known check (models/checks.py)
    pins_diff: str | None = None
    comments_to_check: list[str] = []
    written: list[str] = []


def _commit(info: CommitInfo | None) -> str:
    if info is None:
        return "not reached"
    return f"{code_cell(info.commit[:12])} {cell(info.date[:10])} {cell(info.subject)}"


def _would_stop(report: BumpReport) -> list[str]:
    """What would stop `buildkit build` on the bumped pins, said before anything else."""
    if not report.build_would_stop or report.outcome == "failed":
        return []
    out = ["**`buildkit build` would stop on these pins** (bump exits 7; `--allow-drift` accepts them):", ""]
    out += [f"- {text(reason)}" for reason in report.build_would_stop]
    out += [
        "",
        "To build, change pins.yaml (all of it: each alone stops resolve or build), or build with `--allow-drift`:",
        "",
    ]
    out += [f"- {spans(line)}" for line in report.advice]
    return out + [""]


def _between(move) -> str:
    if move.commits is None:
        return text(move.count_note or "commit count not known")
    count = f"{move.commits} commit{'s' if move.commits != 1 else ''}"
    url = safe_url(move.compare_url, {"github.com"} | ({move.compare_url.split("/")[2]} if move.compare_url else set()))
    if url:
        return f"{count} ({link(url, 'compare on GitHub')})"
    return f"{count} ({text(move.count_note)})" if move.count_note else count


def _outcome(report: BumpReport) -> str:
    if report.outcome == "failed":
        error = text(report.error or "unknown error")
        return f"**failed**: {error}. Nothing was written; below is what was found before the failure."
    return {
        "bumped": "**bumped**: the files below were written.",
        "dry run": "**dry run**: nothing was written.",
        "unchanged": "**unchanged**: pins.yaml already names these commits; nothing was written.",
    }[report.outcome]


def _not_forward(report: BumpReport) -> list[str]:
    """Moves that do not go forward (allowed with --allow-unrelated), and new commits dated before the old ones."""
    out = []
    for move in report.moves:
        if move.old is None or move.new is None or move.old.commit == move.new.commit:
            continue
        if move.relation == "older":
            out.append(f"- **{move.pin} moved back**: the new commit is an ancestor of the old one.")
        elif move.relation == "unrelated":
            out.append(f"- **{move.pin} moved to an unrelated commit**: neither contains the other.")
        if _when(move.new.date) < _when(move.old.date):
            out.append(
                f"- {move.pin}: the new commit is older than the old one ({text(move.new.date[:10])} < "
                f"{text(move.old.date[:10])})."
            )
    return [*out, ""] if out else []


def _when(date: str) -> datetime:
    """A commit date (ISO 8601 with its offset) as an aware time, so offsets compare rightly; unknown: the epoch."""
    try:
        parsed = datetime.fromisoformat(date)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _commits(report: BumpReport) -> list[str]:
    out = ["## Commits", "", "| pin | moved to | old | new |", "|---|---|---|---|"]
    for move in report.moves:
        new = _commit(move.new) if move.new is not None else "not reached"
        if move.new is not None and move.old is not None and move.new.commit == move.old.commit:
            new = "unchanged"
        out.append(f"| {move.pin} | {code_cell(move.to)} | {_commit(move.old)} | {new} |")
    out.append("")
    out += _not_forward(report)
    for move in report.moves:
        if move.new is not None and move.old is not None and move.new.commit != move.old.commit:
            out.append(
                f"- {move.pin}: {_between(move)} from {code(move.old.commit[:12])} to {code(move.new.commit[:12])}"
            )
    if any(m.new is not None and m.old is not None and m.new.commit != m.old.commit for m in report.moves):
        out.append("")
    if report.vllm_skipped:
        out.append(f"vLLM commits passed over, newest first ({len(report.vllm_skipped)}), for want of a usable wheel:")
        out.append("")
        for skipped in report.vllm_skipped:
            info = skipped.commit
            what = f"{code(info.commit[:12])} {text(info.date[:10])} {text(info.subject)}"
            out.append(f"- {what}: {text(skipped.reason)}")
        out.append("")
    if report.pr_followed:
        out += [f"Followed: {text(report.pr_followed)}.", ""]
    if report.vllm_source:
        out += [f"vLLM: {text(report.vllm_source)}.", ""]
    for path in report.vllm_compiled:
        out.append(f"- compiled input changed (accepted in pins.yaml): {text(path)}")
    if report.vllm_compiled:
        out.append("")
    pr = report.pull_request
    if pr is not None:
        head = f"`vllm.pr` #{pr.number} is removed from pins.yaml: the new vLLM commit is not its merge commit."
        merge = code(pr.merge_commit[:12]) if pr.merge_commit else "its merge commit"
        how = f"{'GitHub compare' if pr.by == 'GitHub compare' else 'compared with git'}: {text(pr.compare)}"
        if pr.contained is True:
            out.append(f"{head} The PR is contained in it: {merge} is an ancestor ({how}).")
        elif pr.contained is False:
            out.append(
                f"{head} **The PR is not contained in it**: {merge} is not an ancestor ({how}); check that the "
                "new commit still has what the PR brought."
            )
        else:
            out.append(f"{head} Whether it contains the PR {text(pr.detail)}.")
        out.append("")
    return out


def _dockerfile(report: BumpReport) -> list[str]:
    out = ["## Upstream docker/Dockerfile, by stage", ""]
    changes = report.dockerfile
    nemo = next((m for m in report.moves if m.pin == "nemo_rl"), None)
    if changes is None:
        out += [text(report.dockerfile_note or "not reached"), ""]
        return out
    if nemo and nemo.old and nemo.new:
        out += [f"{code(nemo.old.commit[:12])} → {code(nemo.new.commit[:12])}", ""]
    if changes.stages:
        out += ["| stage | change | lines |", "|---|---|---|"]
        for stage in changes.stages:
            lines = " ".join(part for part in (_plus(stage.added), _minus(stage.removed)) if part)
            out.append(f"| {code_cell(stage.stage)} | {stage.change} | {lines} |")
        out.append("")
    else:
        out += ["No stage changed.", ""]
    if changes.unchanged:
        out += ["Unchanged stages: " + ", ".join(code(s) for s in changes.unchanged) + ".", ""]
    if changes.global_added or changes.global_removed:
        lines = " ".join(p for p in (_plus(changes.global_added), _minus(changes.global_removed)) if p)
        out += [f"Before the first FROM (global ARGs, comments): {lines}.", ""]
    if changes.args:
        out += ["ARG defaults that moved:", "", "| ARG | where | old | new |", "|---|---|---|---|"]
        for arg in changes.args:
            old = code_cell(arg.old) if arg.old is not None else "none"
            new = code_cell(arg.new) if arg.new is not None else "none"
            out.append(f"| {code_cell(arg.name)} | {cell(arg.where)} | {old} | {new} |")
        out.append("")
    return out


def _plus(n: int) -> str:
    return f"+{n}" if n else ""


def _minus(n: int) -> str:
    return f"−{n}" if n else ""


def _patch_row(patch: PatchStatus) -> str:
    if patch.status == "obsolete":
        return f"| {code_cell(patch.file)} | obsolete: removed from pins.yaml | {cell(patch.reason)} |"
    if patch.status == "conflicts":
        c = patch.conflict
        if c is not None and c.missing:
            return f"| {code_cell(patch.file)} | conflicts | {code_cell(c.path)} does not exist upstream any more |"
        if c is not None and c.hunk is not None:
            detail = (
                f"{code_cell(c.path)} {code_cell(c.header)}: the patch expects {code_cell(c.expected)}, "
                f"upstream has {code_cell(c.found)}"
            )
            return f"| {code_cell(patch.file)} | conflicts at hunk {c.hunk}, line {c.line} | {detail} |"
        return f"| {code_cell(patch.file)} | conflicts | {cell(patch.reason)} |"
    return f"| {code_cell(patch.file)} | {patch.status} |  |"


def _patches(report: BumpReport) -> list[str]:
    out = ["## Patches", ""]
    if not report.patches:
        return out + [("none declared" if report.outcome != "failed" else "not reached"), ""]
    out += ["| patch | status | detail |", "|---|---|---|", *(_patch_row(p) for p in report.patches), ""]
    return out


def _wheel(report: BumpReport) -> list[str]:
    out = ["## vLLM wheel", ""]
    wheel = report.wheel
    if wheel is None:
        vllm = next((m for m in report.moves if m.pin == "vllm"), None)
        if vllm is not None and vllm.new is None and report.vllm_skipped:
            out.append(f"Not found: none of the {len(report.vllm_skipped)} commits tried has one.")
        else:
            out.append("not reached")
        return out + [""]
    size = f"{wheel.size / 2**20:.1f} MiB" if wheel.size is not None else "size unknown"
    sha = f"sha256 {code(wheel.sha256)}" if wheel.sha256 else "not content-addressed"
    out.append(
        f"For vLLM {code(wheel.commit[:12])}: {code(wheel.filename)} ({text(wheel.arch)}, variant "
        f"{text(wheel.variant)}, {size}), {sha}."
    )
    return out + [""]


def _cuda(report: BumpReport) -> list[str]:
    out = ["## CUDA checks", ""]
    if report.drift is None:
        return out + ["not reached (render did not run)", ""]
    if report.drift:
        out += [f"- drift: {text(finding)}" for finding in report.drift]
        out.append("- `buildkit build` stops on drift unless `--allow-drift`: see the changes above")
    else:
        out.append("- no drift: upstream's `BASE_IMAGE` default and the pinned base image name the same CUDA major")
    out += [f"- {text(fact)}" for fact in report.cuda]
    return out + [""]


def _torch(report: BumpReport) -> list[str]:
    """The torch the wheel was built for against the new uv.lock's; when they differ, every change the next
    command needs."""
    out = ["## torch", ""]
    if not report.torch:
        return out + ["not reached", ""]
    out += [f"- {text(line)}" for line in report.torch]
    if report.torch_stops and report.advice:
        out += ["", "To resolve, change pins.yaml and bump again (all of it: each alone stops resolve):", ""]
        out += [f"- {spans(line)}" for line in report.advice]
    return out + [""]


def _checks(report: BumpReport) -> list[str]:
    """Every check buildkit knows, for the new lock: the report's verdict rows (models/checks.py)."""
    out = ["## Checks", ""]
    if not report.checks:
        return out + ["not reached (no lock was made)", ""]
    out += ["| check | result | detail |", "|---|---|---|"]
    out += [f"| {cell(c['check'])} | {c['status']} | {spans(c['detail'], in_cell=True)} |" for c in report.checks]
    return out + [""]


def _pins(report: BumpReport) -> list[str]:
    out = ["## pins.yaml", ""]
    if report.pins_diff is None:
        return out + ["not reached", ""]
    if not report.pins_diff:
        return out + ["no change", ""]
    out += [fence(report.pins_diff, "diff"), ""]
    if report.comments_to_check:
        out += ["Comments are kept as written; these sit above a value that moved and may describe the old one:", ""]
        out += [f"- {text(line)}" for line in report.comments_to_check]
        out.append("")
    return out


def _files(report: BumpReport) -> list[str]:
    out = ["## Files", ""]
    if not report.written:
        return out + ["Nothing written." + (" (dry run)" if report.dry_run else ""), ""]
    return out + [f"- {code(path)}" for path in report.written] + [""]


def markdown(report: BumpReport) -> str:
    lines = ["# buildkit bump", "", *_would_stop(report), _outcome(report), ""]
    for section in (_commits, _dockerfile, _patches, _wheel, _torch, _cuda, _checks, _pins, _files):
        lines += section(report)
    return "\n".join(lines).rstrip("\n") + "\n"
