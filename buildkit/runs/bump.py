"""`buildkit bump`: move the pins to a newer upstream and show a reviewer what that changes.

    pins.yaml --edit in place--> new pins text --validate--> resolve -> prepare -> render   (all in staging)
                                                              \\-> the summary: commits, Dockerfile stages,
                                                                  patches, wheel, CUDA checks, the pins diff

nemo_rl.ref moves to a branch head or tag (its full SHA is pinned); with `vllm_branch`, vllm.ref moves to the
newest commit of that branch with a wheel for the pinned arch and variant (and vllm.pr, whose merge commit it no
longer is, goes). A declared patch that upstream made obsolete is taken out of nemo_rl.patches (the reviewer sees
it go in the pins diff, with the reason in the summary); one that conflicts stops the bump (exit 4) with the hunk
and line. Nothing is written until every step has succeeded; then pins.yaml, the lock, the prepare and render
records, the Dockerfile and the summary are written together (files.write_all_atomic). A failure raises
BumpFailed, which carries the summary so far and the cause's exit code.
"""

from __future__ import annotations

import difflib
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.version import Version

from buildkit.dockerfile.patches import PatchConflict, PatchObsolete, patch_facts
from buildkit.dockerfile.stagediff import compare
from buildkit.errors import BuildkitError, InputError, UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable
from buildkit.files import write_all_atomic
from buildkit.gpu.torchreq import TorchMismatch
from buildkit.models.checks import known_checks
from buildkit.models.drift import cuda_of_tag
from buildkit.models.lock import (
    CommitFact,
    Lock,
    composition,
    consistency_problems,
    cuda_major,
    differences,
    lock_sha256,
    read_lock,
)
from buildkit.models.paths import Paths
from buildkit.models.pins import pins_from_text, read_pins_text
from buildkit.models.pinsedit import PinsEditor
from buildkit.options import BumpRequest, PrepareOptions, RenderOptions, ResolveOptions
from buildkit.runs.bumpsummary import (
    BumpReport,
    CommitInfo,
    ConflictInfo,
    Move,
    PatchStatus,
    PullRequestNote,
    SkippedCommit,
    WheelInfo,
    markdown,
)
from buildkit.stages import pipeline
from buildkit.stages.context import Context, Inputs, platform_contexts
from buildkit.stages.prepare import git_config
from buildkit.stages.render import MAX_UPSTREAM_DOCKERFILE, UPSTREAM_PATH, upstream_dockerfile
from buildkit.stages.resolve import NoWheelFound, Resolver
from buildkit.stages.resolve.git import GitHistory
from buildkit.stages.resolve.github import NotOnGitHub
from buildkit.stages.resolve.ours import check_lock_is_ours
from buildkit.world.git import run_git

OnNote = Callable[[str], None]
DEFAULT_NEMO_RL_REF = "main"  # what `buildkit bump` with no option moves nemo_rl to
_CU_RE = re.compile(r"cu(?P<major>[0-9]{1,2})(?P<minor>[0-9])")  # fullmatch: cu130 -> CUDA 13.0


class BumpFailed(BuildkitError):
    """A step failed: the cause's message, hint and exit code, and the report of what was found before it."""

    def __init__(self, cause: BuildkitError, report: BumpReport):
        super().__init__(cause.message, cause.hint)
        self.exit_code = cause.exit_code
        self.cause = cause
        self.report = report


def _info(fact: CommitFact) -> CommitInfo:
    return CommitInfo(commit=fact.commit, date=fact.date, subject=fact.subject, url=fact.url)


def lock_cuda_facts(lock: Lock) -> list[str]:
    """The new lock's CUDA facts for the summary's CUDA section: the base image's CUDA_VERSION, the wheel's CUDA and
    how it is known, and resolve's check (a mismatch stopped resolve: it never reaches here)."""
    base, wheel, check = lock.base_image, lock.wheel, lock.cuda
    return [
        f"base image: CUDA_VERSION {base.cuda_version or 'not declared'} (config {base.config_digest or 'not read'})",
        f"wheel: CUDA {wheel.cuda or 'unknown'} ({wheel.cuda_source})",
        f"check: {check.outcome}: {check.detail}",
    ]


def drift_advice(lock: Lock, upstream_base: str | None) -> list[str]:
    """Every pins.yaml change the next `resolve` and `build` need when upstream moved its base image to another
    CUDA major: the base image, and the wheel variant with it (a wheel of the old major on the new base stops
    resolve, exit 4)."""
    theirs = cuda_of_tag(upstream_base or "")
    if theirs is None:
        return ["`base_image`: an image of upstream's CUDA major (its ARG BASE_IMAGE default names none)"]
    major = theirs[0]
    out = [f"`base_image`: an image of CUDA {major} (upstream's default: `{upstream_base}`)"]
    if lock.wheel.cuda is None or int(lock.wheel.cuda.split(".")[0]) != major:
        now = f"CUDA {lock.wheel.cuda}" if lock.wheel.cuda else "of unknown CUDA"
        out.append(
            f"`wheel.variant`: a variant built for CUDA {major}, e.g. `cu{major}0` (CUDA {major}.0); the "
            f"pinned variant `{lock.wheel.variant}` is {now}"
        )
    return out


def torch_advice(exc: TorchMismatch, pins, old_lock: Lock | None, nemo_to: str) -> list[str]:
    """Every change the next bump needs when the wheel was built for another torch release line than the new
    uv.lock installs: a wheel variant and base image of that torch's CUDA (its local part, +cu130), when theirs
    differ, then vLLM moved to a commit whose wheel requires that torch."""
    locked = Version(exc.locked.version)  # (torchreq read it as a Version before raising)
    line = ".".join(str(n) for n in locked.release[:2])
    out = []
    cu = _CU_RE.fullmatch(locked.local or "")
    if cu is not None:
        major = int(cu["major"])
        variant = _CU_RE.fullmatch(pins.wheel.variant)
        wheel_cuda = f"{variant['major']}.{variant['minor']}" if variant else old_lock.wheel.cuda if old_lock else None
        if wheel_cuda is None or cuda_major(wheel_cuda) != major:
            now = f"CUDA {wheel_cuda}" if wheel_cuda else "of unknown CUDA"
            out.append(
                f"`wheel.variant`: `{locked.local}`, the CUDA of torch {exc.locked.version} (the pinned variant "
                f"`{pins.wheel.variant}` is {now})"
            )
        base_cuda = old_lock.base_image.cuda_version if old_lock else None
        if base_cuda is None or cuda_major(base_cuda) != major:
            now = f"CUDA {base_cuda}" if base_cuda else "of unknown CUDA"
            out.append(
                f"`base_image`: an image of CUDA {major} (the pinned one is {now}; upstream's "
                "docker/Dockerfile names its own in ARG BASE_IMAGE)"
            )
    out.append(
        f"`vllm.ref`: a commit whose wheel requires torch {line}: `buildkit bump --nemo-rl {nemo_to} "
        "--vllm-branch main` moves it to main's newest commit with a wheel for the pinned variant (resolve "
        "checks that wheel's torch again)"
    )
    return out


def bump(paths: Paths, request: BumpRequest, on_note: OnNote | None = None, on_progress=None) -> BumpReport:
    """Do the bump (see the module's doc). Returns the report; raises BumpFailed with the report so far."""
    report = BumpReport(pins=str(paths.pins), dry_run=request.dry_run)
    runner = _Bump(paths, request, report, on_note or (lambda _: None), on_progress)
    try:
        runner.run()
    except BuildkitError as exc:
        report.outcome = "failed"
        report.error = exc.message
        raise BumpFailed(exc, report) from None
    finally:
        runner.close()
    return report


@dataclass(frozen=True)
class _Compared:
    """How `head` relates to `base` in the words of GitHub's compare `status`, the commits `head` has that `base` has
    not (its `ahead_by`), and GitHub's compare page (None when git answered)."""

    status: str
    ahead_by: int
    page: str | None


class _Bump:
    def __init__(self, paths: Paths, request: BumpRequest, report: BumpReport, on_note: OnNote, on_progress):
        self.paths = paths
        self.request = request
        self.report = report
        self.on_note = on_note
        self.on_progress = on_progress
        self._compared: dict[tuple[str, str, str], _Compared] = {}
        self._histories: dict[str, GitHistory] = {}  # repository URL -> its commits, fetched once for every question

    def close(self) -> None:
        for history in self._histories.values():
            history.close()

    def run(self) -> None:
        paths, request, report = self.paths, self.request, self.report
        self.old_text = read_pins_text(paths.pins)
        old_pins = pins_from_text(self.old_text, paths.pins)
        patch_facts(old_pins, paths.project_dir)  # the declared patches are readable diffs before anything else
        resolver = Resolver(old_pins, cache_dir=paths.cache_dir)
        for note in resolver.notes:
            self.on_note(note)
        old_lock = _old_lock(paths)
        if not request.dry_run:  # before the network: a lock of other pins is never replaced (a dry run writes none)
            check_lock_is_ours(paths, old_lock, old_pins, self.on_note)

        old_nemo, new_nemo, edits = self._move_nemo_rl(resolver, old_pins, old_lock)
        if request.vllm_branch and self._pr_moves(resolver, old_pins, old_lock):
            edits += self._follow_pr(resolver, old_pins, old_lock)
        elif request.vllm_branch:
            edits += self._move_vllm(resolver, old_pins, old_lock)
        new_text, ctx = self._staged(edits, old_pins)
        lock = ctx.lock
        report.wheel = WheelInfo(
            commit=lock.vllm.commit,
            filename=lock.wheel.filename,
            url=lock.wheel.url,
            arch=lock.wheel.arch,
            variant=lock.wheel.variant,
            size=lock.wheel.size,
            sha256=lock.wheel.sha256,
        )
        report.vllm_source = composition(lock)
        report.vllm_compiled = list(lock.vllm_compare.compiled)
        for each in platform_contexts(ctx.using(RenderOptions())):  # each platform's (build/<os>-<arch>/ for several)
            pipeline.run_stage("render", each)
        record = each.made.render.record  # drift is upstream's Dockerfile against the pins: the same for each
        report.drift = record.drift
        report.build_would_stop = [f"drift: {finding}" for finding in record.drift]
        report.cuda = lock_cuda_facts(lock)
        report.advice = drift_advice(lock, record.upstream_base_image) if record.drift else []
        report.checks = known_checks(lock, image="no image built from these pins yet: buildkit build")
        report.torch = [lock.torch.detail] if lock.torch else ["not checked: resolve did not read the wheel's bytes"]
        upstream = upstream_dockerfile(ctx.made.prepare, lock.nemo_rl.commit)
        assert ctx.inputs is not None
        self._dockerfile_changes(old_nemo, new_nemo, upstream, ctx.inputs.pins)

        if new_text == self.old_text and old_lock is not None and not differences(old_lock, lock):
            report.outcome = "unchanged"  # an open PR's head moves the lock alone: then it is written
        elif request.dry_run:
            report.outcome = "dry run"
        else:
            assert record.lock_sha256 == lock_sha256(lock)
            self._write([(paths.pins, new_text), (paths.lock, lock.to_json()), *ctx.held])

    def _write(self, files: list[tuple[Path, str]]) -> None:
        """Every file of the bump and its summary, all together (nothing is written unless every step succeeded)."""
        summary = self.request.summary or self.paths.bump_summary
        self.report.written = [str(path) for path, _ in files] + [str(summary)]
        self.report.outcome = "bumped"
        write_all_atomic([*files, (summary, markdown(self.report))])

    # -- steps -------------------------------------------------------------------------------------------------

    def _move_nemo_rl(self, resolver, old_pins, old_lock: Lock | None) -> tuple[CommitFact, CommitFact, list[Callable]]:
        """nemo_rl's move (to the request's ref, else main unless only vLLM moves): old and new commit, pins edits."""
        request = self.request
        nemo_to = request.nemo_rl or (DEFAULT_NEMO_RL_REF if request.vllm_branch is None else None)
        edits: list[Callable] = []
        nemo = old_pins.nemo_rl
        old_nemo = _locked(old_lock, "nemo_rl", nemo.repo, nemo.ref) or resolver.commit(nemo.repo, nemo.ref)
        move = Move(pin="nemo_rl", to=nemo_to or nemo.ref, old=_info(old_nemo))
        self.report.moves.append(move)
        new_nemo = old_nemo
        if nemo_to:
            new_nemo = resolver.commit(nemo.repo, nemo_to)
            self._check_descends(resolver, move, nemo.repo, old_nemo, new_nemo, old_pins)
            edits.append(lambda e: e.set_commit(("nemo_rl", "ref"), new_nemo.commit))
            self._stale_comment("nemo_rl", "ref")
        move.new = _info(new_nemo)
        self._count(move, resolver, nemo.repo, old_pins)
        return old_nemo, new_nemo, edits

    def _staged(self, edits: list[Callable], old_pins) -> tuple[str, Context[PrepareOptions]]:
        """The edited pins text, and the pipeline's context after resolve and prepare ran on it with their writes
        held: a patch that prepare finds obsolete is removed from the pins, and prepare runs again."""
        paths = self.paths
        removed: dict[str, str] = {}  # obsolete patch file -> reason
        lock = None
        while True:
            new_text = _edited(self.old_text, paths.pins, edits, old_pins, removed)
            self.report.pins_diff = _diff(self.old_text, new_text, paths.pins.name)
            new_pins = pins_from_text(new_text, paths.pins)
            facts = patch_facts(new_pins, paths.project_dir)
            lock = self._resolve(new_pins, facts) if lock is None else _repinned(lock, new_pins, facts)
            inputs = Inputs(paths, new_pins, facts, lock)
            ctx = Context(paths, PrepareOptions(self.request.submodules), inputs, hold=True)
            if self._prepare(ctx, old_pins, removed):
                break
        self._check_lock(new_pins, lock, facts)
        return new_text, ctx

    # -- steps -------------------------------------------------------------------------------------------------

    def _pr_moves(self, resolver, old_pins, old_lock: Lock | None) -> bool:
        """Whether --vllm follows the pinned PR: it is open, or was open when the lock was written (now merged)."""
        vllm = old_pins.vllm
        if not self.request.follow_pr or vllm.pr is None:
            return False
        self._pull = resolver.github.pull(vllm.repo, vllm.pr, vllm.ref)
        was_open = bool(
            old_lock and old_lock.vllm_pr and old_lock.vllm_pr.number == vllm.pr and not old_lock.vllm_pr.merged
        )
        return not self._pull.merged or was_open

    def _follow_pr(self, resolver, old_pins, old_lock: Lock | None) -> list[Callable]:
        """The pinned PR as it is now: an open PR's head (new commits or a force-push: said which), or, once merged,
        its merge commit. vllm.ref, when pinned, follows; the PR stays pinned."""
        vllm, report = old_pins.vllm, self.report
        assert vllm.pr is not None
        pull = self._pull
        old = old_lock.vllm if old_lock and old_lock.vllm_pr and old_lock.vllm_pr.number == vllm.pr else None
        if pull.merged:
            assert pull.merge_commit is not None
            new = resolver.commit(vllm.repo, pull.merge_commit)
            what = f"PR #{vllm.pr} was merged as {pull.merge_commit}: its merge commit and its own wheel"
        else:
            assert pull.head_repo is not None and pull.head_commit is not None
            new = resolver.commit(pull.head_repo, pull.head_commit)
            what = f"PR #{vllm.pr} is open; its head is {pull.head_commit}"
        old = old or new
        move = Move(pin="vllm", to=f"PR #{vllm.pr}", old=_info(old), new=_info(new))
        report.moves.append(move)
        if old.commit != new.commit:
            # A force-push is how a PR branch moves too: said, never a stop.
            move.relation = self._relation(resolver, vllm.upstream, old.commit, new.commit, old_pins)
            how = {"descendant": "new commits", "older": "moved back", "unrelated": "a force-push"}.get(
                move.relation or "", "moved"
            )
            what += f" (was {old.commit[:12]}: {how})"
        report.pr_followed = what
        if vllm.ref and new.commit != old.commit:
            return [lambda e: e.set_commit(("vllm", "ref"), new.commit)]
        return []

    def _move_vllm(self, resolver, old_pins, old_lock: Lock | None) -> list[Callable]:
        report, vllm, branch = self.report, old_pins.vllm, self.request.vllm_branch
        assert branch is not None, "only when vLLM moves"
        if vllm.ref:
            old = _locked(old_lock, "vllm", vllm.repo, vllm.ref) or resolver.commit(vllm.repo, vllm.ref)
        else:
            old = old_lock.vllm if old_lock and old_lock.vllm_pr and old_lock.vllm_pr.number == vllm.pr else None
            old = old or resolver.commit(vllm.repo, resolver.github.pull(vllm.repo, vllm.pr).merge_commit)
        move = Move(pin="vllm", to=branch, old=_info(old))
        report.moves.append(move)
        try:
            search = resolver.newest_with_wheel(vllm.repo, branch, on_skip=self.on_note)
        except NoWheelFound as exc:
            report.vllm_skipped = [SkippedCommit(commit=_info(c), reason=r) for c, r in exc.skipped]
            raise
        report.vllm_skipped = [SkippedCommit(commit=_info(c), reason=r) for c, r in search.skipped]
        new = search.commit
        move.new = _info(new)
        self._check_descends(resolver, move, vllm.repo, old, new, old_pins)
        self._count(move, resolver, vllm.repo, old_pins)
        edits: list[Callable] = []
        if new.commit == old.commit:  # already the newest with a wheel: the PR (if any) still names it
            if vllm.ref:
                edits.append(lambda e: e.set_commit(("vllm", "ref"), new.commit))
            return edits
        if vllm.ref:
            edits.append(lambda e: e.set_commit(("vllm", "ref"), new.commit))
            if vllm.pr:
                edits.append(lambda e: e.delete_entry(("vllm", "pr")))
        else:
            edits.append(lambda e: e.replace_entry(("vllm", "pr"), "ref", new.commit))
        self._stale_comment("vllm", "ref" if vllm.ref else "pr")
        if vllm.pr:
            report.pull_request = self._pull_request(resolver, old_pins, old_lock, new.commit)
        return edits

    def _check_descends(self, resolver, move: Move, repo: str, old: CommitFact, new: CommitFact, pins) -> None:
        """A pin moves forward: to a commit that contains the pinned one. Moving to an older commit, or to one
        unrelated to it (history rewritten by a force-push), stops the bump (exit 4) unless allow_unrelated."""
        if old.commit == new.commit:
            return
        move.relation = self._relation(resolver, repo, old.commit, new.commit, pins)
        if move.relation == "descendant" or self.request.allow_unrelated:
            return
        what = (
            "older than it (an ancestor of the pinned commit)"
            if move.relation == "older"
            else "unrelated to it (neither contains the other: upstream's history was rewritten?)"
        )
        raise UpstreamMismatch(
            f"{move.pin}: {move.to} is {new.commit[:12]}, which is {what}; the pin is {old.commit[:12]}",
            hint="check upstream; `buildkit bump --allow-unrelated` moves the pin anyway",
        )

    def _pull_request(self, resolver, old_pins, old_lock: Lock | None, new_commit: str) -> PullRequestNote:
        """Whether the new vLLM commit still contains the PR pins.yaml named (informative: a failure to find out
        is said, and does not stop the bump)."""
        vllm = old_pins.vllm
        note = PullRequestNote(number=vllm.pr)
        try:
            if old_lock and old_lock.vllm_pr and old_lock.vllm_pr.number == vllm.pr:
                note.merge_commit = old_lock.vllm_pr.merge_commit
            else:
                note.merge_commit = resolver.github.pull(vllm.repo, vllm.pr).merge_commit
            if note.merge_commit is None:
                note.detail = f"could not be checked: PR #{vllm.pr} is not merged (it has no merge commit)"
                return note
            compared = self._compare(resolver, vllm.repo, note.merge_commit, new_commit, old_pins)
        except (UpstreamMismatch, UpstreamUnreachable, InputError) as exc:
            note.detail = f"could not be checked: {exc.message}"
            return note
        note.compare, note.by = compared.status, "GitHub compare" if compared.page else "git"
        note.contained = note.compare in ("ahead", "identical")
        return note

    def _resolve(self, pins, facts) -> Lock:
        """The resolve stage on the staged pins, writing nothing (the bump writes the lock with the rest)."""
        ctx = Context(
            self.paths,
            ResolveOptions("fresh", staged=(pins, facts)),
            on_note=self.on_note,
            on_progress=self.on_progress,
        )
        try:
            pipeline.run_stage("resolve", ctx)
            return ctx.lock
        except TorchMismatch as exc:
            # The summary says what the other torch means and every change the next bump needs, then it stops.
            self.report.torch = [exc.message]
            self.report.torch_stops = True
            self.report.advice = torch_advice(exc, pins, _old_lock(self.paths), self.report.moves[0].to)
            raise

    def _prepare(self, ctx: Context[PrepareOptions], old_pins, removed: dict[str, str]) -> bool:
        """The pipeline's prepare stage, its writes held; False when a patch turned out obsolete (it is added to
        `removed`: go again)."""
        lock = ctx.lock
        declared = [p.file for p in old_pins.nemo_rl.patches]
        try:
            pipeline.run_stage("prepare", ctx)
        except PatchObsolete as exc:
            if exc.patch_file in removed or exc.patch_file not in declared:
                raise  # cannot happen: a removed patch is not applied again
            removed[exc.patch_file] = exc.reason
            self.on_note(f"{exc.patch_file} is obsolete at {lock.nemo_rl.commit[:12]}: removing it from the pins")
            return False
        except PatchConflict as exc:
            self.report.patches = _statuses(declared, removed, failed=exc)
            raise
        except UpstreamMismatch:
            self.report.patches = _statuses(declared, removed, failed=None)
            raise
        self.report.patches = _statuses(declared, removed, failed=None, done=True)
        return True

    def _check_lock(self, pins, lock: Lock, facts) -> None:
        problems = consistency_problems(pins, lock, facts)
        if problems:  # a bug in buildkit if it happens: the lock is made from these pins
            raise AssertionError(f"the bumped lock does not match the bumped pins: {problems}")

    def _dockerfile_changes(self, old: CommitFact, new: CommitFact, new_text: str, pins) -> None:
        report = self.report
        if old.commit == new.commit:
            report.dockerfile_note = "nemo_rl did not move"
            return
        old_text = _file_at(pins.nemo_rl.repo, old.commit, pins.git_url_rewrites)
        if old_text is None:
            report.dockerfile_note = f"docker/Dockerfile does not exist at {old.commit[:12]}"
            return
        report.dockerfile = compare(
            old_text,
            new_text,
            f"upstream docker/Dockerfile at {old.commit[:12]}",
            f"upstream docker/Dockerfile at {new.commit[:12]}",
        )

    # -- how two commits relate: GitHub's compare API, else git ----------------------------------------------------

    def _compare(self, resolver, repo: str, base: str, head: str, pins) -> _Compared:
        """GitHub's compare API for a GitHub repository; git for another, or where the API has no answer (a
        mirror's commit, history it will not compare), said in one note. Asked once for each pair."""
        key = (repo, base, head)
        if key not in self._compared:
            found = None
            if resolver.github.owner_repo(repo):
                try:
                    found = _Compared(*resolver.github.commits_between(repo, base, head))
                except NotOnGitHub as exc:
                    self.on_note(f"{exc.message}: compared with git instead")
            if found is None:
                history = self._history(repo, pins, base, head)
                found = _Compared(history.status(base, head), history.count(base, head), None)
            self._compared[key] = found
        return self._compared[key]

    def _history(self, repo: str, pins, *commits: str) -> GitHistory:
        """The commits' history, commits alone (`--filter=tree:0`), from the repository prepare fetches
        (pins.yaml's git_url_rewrites apply: a GitHub URL may be fetched from a mirror), in a scratch repository
        removed when the bump ends."""
        history = self._histories.get(repo)
        if history is None:
            rewrites = [(r.url, r.instead_of) for r in pins.git_url_rewrites]
            history = GitHistory(self.paths.cache_dir, repo, None, rewrites, commits, fetch_filter="tree:0")
            self._histories[repo] = history
            return history
        for commit in commits:
            history.add(repo, commit)
        return history

    def _relation(self, resolver, repo: str, old: str, new: str, pins) -> Literal["descendant", "older", "unrelated"]:
        """How `new` relates to `old`: it contains it ("ahead", "identical"), old contains it ("behind"), or
        neither ("diverged")."""
        status = self._compare(resolver, repo, old, new, pins).status
        relations: dict[str, Literal["descendant", "older"]] = {
            "ahead": "descendant",
            "identical": "descendant",
            "behind": "older",
        }
        return relations.get(status, "unrelated")

    def _count(self, move: Move, resolver, repo: str, pins) -> None:
        """How many commits the move takes in, and GitHub's compare page (when GitHub answered). Informative: a
        failure is said in the summary and does not stop the bump."""
        if move.old is None or move.new is None or move.old.commit == move.new.commit:
            if move.old is not None and move.new is not None:
                move.commits = 0
            return
        try:
            compared = self._compare(resolver, repo, move.old.commit, move.new.commit, pins)
        except BuildkitError as exc:
            move.count_note = f"commit count not known: {exc.message}"
            return
        move.commits, move.compare_url = compared.ahead_by, compared.page
        if compared.page is None and resolver.github.owner_repo(repo):
            move.count_note = "counted with git: GitHub's compare API had no answer"

    def _stale_comment(self, *path: str) -> None:
        """A comment line right above a value that moves may describe the old one: the summary points at it."""
        lines = self.old_text.splitlines()
        line = PinsEditor(self.old_text, str(self.paths.pins)).line_of(path)
        if line and line >= 2 and lines[line - 2].lstrip().startswith("#"):
            self.report.comments_to_check.append(f"line {line - 1}, above {'.'.join(path)}: {lines[line - 2].strip()}")


# -- helpers -----------------------------------------------------------------------------------------------------


def _old_lock(paths: Paths) -> Lock | None:
    """The lock as it is, to tell the old commits without asking upstream; None when there is none usable."""
    if not paths.lock.exists():
        return None
    try:
        return read_lock(paths.lock)
    except InputError:
        return None


def _locked(lock: Lock | None, pin: str, repo: str, ref: str) -> CommitFact | None:
    """The lock's fact for a pin, when the lock was made from that very repository and ref."""
    fact = getattr(lock, pin, None) if lock else None
    return fact if fact is not None and fact.repo == repo and fact.ref == ref else None


def _edited(text: str, path: Path, edits: list[Callable], old_pins, removed: dict[str, str]) -> str:
    editor = PinsEditor(text, str(path))
    for edit in edits:
        edit(editor)
    gone = {i for i, p in enumerate(old_pins.nemo_rl.patches) if p.file in removed}
    editor.remove_items(("nemo_rl", "patches"), gone)
    return editor.text()


def _repinned(lock: Lock, pins, facts) -> Lock:
    """The lock with the patches that remain: upstream's facts do not depend on them, so nothing is asked again."""
    return lock.model_copy(update={"patches": facts, "pins_sha256": pins.sha256()})


def _statuses(declared: list[str], removed: dict[str, str], failed, done: bool = False) -> list[PatchStatus]:
    """Each declared patch, in order: obsolete ones with their reason; before the one that failed, applied; the
    one that failed, with where; after it, not checked."""
    out: list[PatchStatus] = []
    seen_failure = False
    for file in declared:
        if file in removed:
            out.append(PatchStatus(file=file, status="obsolete", reason=removed[file]))
        elif failed is not None and file == failed.patch_file:
            seen_failure = True
            conflict = failed.conflict
            info = None
            if conflict is not None:
                info = ConflictInfo(
                    path=conflict.path,
                    hunk=conflict.hunk,
                    header=conflict.header,
                    line=conflict.line,
                    expected=conflict.expected,
                    found=conflict.found,
                    missing=conflict.missing,
                )
            out.append(PatchStatus(file=file, status="conflicts", reason=failed.message, conflict=info))
        elif seen_failure or (failed is None and not done):
            out.append(PatchStatus(file=file, status="not checked"))
        else:
            out.append(PatchStatus(file=file, status="applies"))
    return out


def _diff(old: str, new: str, name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}"))


def _file_at(repo: str, commit: str, rewrites) -> str | None:
    """docker/Dockerfile at an earlier commit: fetched by SHA, shallow, into a scratch repository that is removed
    (the prepared trees in the cache are the locked commits'). None when the commit has no such file."""
    config = git_config(rewrites, repo)
    with tempfile.TemporaryDirectory(prefix="buildkit-bump-") as scratch:
        repo_dir = Path(scratch) / "old.git"
        run_git(["init", "-q", "--bare", str(repo_dir)])
        # Without blobs where the server allows filters: the one file wanted is fetched when read (a server that
        # does not sends them all, which works too).
        fetch = ["fetch", "-q", "--depth=1", "--filter=blob:none", "--no-tags", "--", repo, commit]
        run_git(fetch, cwd=repo_dir, config=config)
        # The trees are there: whether the file is comes without a fetch; reading it may fetch (and fail: exit 3).
        if not run_git(["ls-tree", commit, "--", UPSTREAM_PATH], cwd=repo_dir).strip():
            return None
        try:
            size = int(run_git(["cat-file", "-s", f"{commit}:{UPSTREAM_PATH}"], cwd=repo_dir, config=config))
        except ValueError:
            raise UpstreamMalformed(f"git gave no size for {UPSTREAM_PATH} at {commit[:12]}") from None
        if size > MAX_UPSTREAM_DOCKERFILE:
            raise UpstreamMalformed(
                f"upstream {UPSTREAM_PATH} at {commit[:12]} is {size} bytes; more than buildkit reads"
            )
        return run_git(["show", f"{commit}:{UPSTREAM_PATH}"], cwd=repo_dir, config=config)
