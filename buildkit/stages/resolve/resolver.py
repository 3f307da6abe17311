"""Turn pins into a lock. Independent lookups run concurrently, so wall time follows the longest chain of
dependent requests (the registry's challenge -> token -> manifest), not the sum of all requests.

Dependencies between lookups:
  nemo_rl commit          independent
  base image              independent
  vllm PR                 independent
  vllm commit             needs the PR's merge commit only when no ref is pinned
  wheel                   needs the full vLLM commit (known at once when the pin is a full SHA)

The wheel's bytes are downloaded and hashed as soon as the wheel is found, while the other lookups (the registry's
chain, five requests deep, is the longest) go on. A failed lookup stops the download; its part stays in the cache
for the next run to continue. The base image's CUDA_VERSION and the wheel's CUDA are compared: by the wheel's name
as soon as the base image is known (a disagreeing name stops resolve and the download, whatever it has fetched),
then by the libcudart its bytes need. Different majors stop resolve; no lock is written.

Once the wheel's bytes are there, the GPU checks read them (buildkit/gpu/check.py): kernels for the pinned GPUs,
and vLLM's undefined symbols against the torch NeMo-RL's uv.lock installs at the locked commit (uv.lock read
through the GitHub API, or git for another remote, beside the other lookups; torch's symbols from the cache, else
its wheel downloaded and checked against uv.lock's sha256). A failed check stops resolve; no lock is written.

The lock holds facts only; when each was read goes into `self.record` (buildkit/models/records/resolve.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from buildkit import __version__
from buildkit.budget import TORCH_DOWNLOAD, Budget
from buildkit.errors import UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable
from buildkit.files import utc_now
from buildkit.gpu import abi, torchreq
from buildkit.gpu.check import System, wheel_check
from buildkit.gpu.torchlock import MAX_UV_LOCK_BYTES, LockedTorch, torch_of_uv_lock
from buildkit.models.compiled import Extraction
from buildkit.models.lock import (
    SKIPPED_REASON,
    CommitFact,
    ImageFact,
    Lock,
    PatchFact,
    PlatformFacts,
    PullRequestFact,
    WheelFact,
    lock_sha256,
)
from buildkit.models.lock.facts import VllmInstall
from buildkit.models.pins import Pins
from buildkit.models.records.resolve import ResolveRecord
from buildkit.models.uvsource import MAX_PYPROJECT_BYTES, uv_source
from buildkit.stages.resolve import baselibs, cuda, download
from buildkit.stages.resolve.download import Hashed, OnProgress
from buildkit.stages.resolve.git import GitResolver
from buildkit.stages.resolve.github import GitHub, NotOnGitHub, token_for
from buildkit.stages.resolve.install import install_of
from buildkit.stages.resolve.precompiled import precompiled_files
from buildkit.stages.resolve.source import MAX_WHEEL_TRIES, Choice, Chooser, source_ref
from buildkit.stages.resolve.wheels import FoundWheel, resolve_wheel, wheel_fact
from buildkit.world.cache import default_cache_dir
from buildkit.world.http import Http
from buildkit.world.registry import Registry

T = TypeVar("T")
# What resolve does with the wheel's bytes: download them (or reuse the cache), take their hash from the cache only
# (--no-wheel-download), or leave them alone (--check, which compares what HEAD says).
WheelBytes = Literal["download", "cache", "none"]


@dataclass(frozen=True)
class WheelSearch:
    """The newest commit of a branch with a wheel for the pinned arch and variant, and the newer ones without."""

    commit: CommitFact
    wheel: FoundWheel
    skipped: list[tuple[CommitFact, str]]  # (commit, why it has no usable wheel), newest first


class NoWheelFound(UpstreamMismatch):
    """None of the commits tried has a wheel (exit 4); `skipped` says why each was passed over."""

    def __init__(self, message: str, skipped: list[tuple[CommitFact, str]], hint: str | None = None):
        super().__init__(message, hint=hint)
        self.skipped = skipped


class Resolver:
    def __init__(
        self,
        pins: Pins,
        http: Http | None = None,
        cache_dir: Path | None = None,
        patches: list[PatchFact] | None = None,
        *,
        wheel_bytes: WheelBytes = "download",
        on_progress: OnProgress | None = None,
        pins_file: str | None = None,
    ):
        """wheel_bytes: see WheelBytes; without a hash the lock says the wheel is not content-addressed.
        on_progress hears about the download. pins_file: what the lock names as its pins (ours.pins_file_of)."""
        self.pins = pins
        self.pins_file = pins_file
        self.patches = patches or []
        self.http = http or Http()
        api = pins.github_api()
        token, note = token_for(api, pins.github_api_named_by_pins())
        self.notes = [note] if note else []  # for the user, once: the command prints them
        self.github = GitHub(self.http, api, token)
        self.cache_dir = cache_dir or default_cache_dir()
        self.git = GitResolver(self.cache_dir)
        self.registry = Registry(self.http)
        self.wheel_bytes = wheel_bytes
        self.wheel_path: Path | None = None  # the downloaded wheel, once hash_wheel has it
        self.on_progress = on_progress
        self.record: ResolveRecord | None = None  # set by resolve()

    def commit(self, repo: str, ref: str) -> CommitFact:
        """The commit `ref` names: GitHub's API, else git on the repository fetched (a mirror through pins.yaml's
        git_url_rewrites, where GitHub has no answer for it: 404), said. Without a mirror GitHub's 404 stands."""
        if self.github.owner_repo(repo):
            try:
                return self.github.commit(repo, ref)
            except NotOnGitHub as exc:
                if not self.mirrored(repo):
                    raise
                self.git.notes.append(f"{exc.message}: read with git instead")
        return self.git.resolve(repo, ref, self.rewrites())

    def branch_commits(self, repo: str, branch: str, count: int) -> list[CommitFact]:
        """The newest `count` commits of a branch: GitHub's API, else git as for commit()."""
        if self.github.owner_repo(repo):
            try:
                return self.github.branch_commits(repo, branch, count)
            except NotOnGitHub as exc:
                if not self.mirrored(repo):
                    raise
                self.git.notes.append(f"{exc.message}: listed with git instead")
        return self.git.branch_commits(repo, branch, count, self.rewrites())

    def mirrored(self, repo: str) -> bool:
        """Whether pins.yaml's git_url_rewrites send `repo` to a mirror (which may hold what GitHub does not)."""
        return any(repo.startswith(r.instead_of) for r in self.pins.git_url_rewrites)

    def rewrites(self) -> list[str]:
        """pins.yaml's git_url_rewrites as git's `-c` options."""
        return [arg for r in self.pins.git_url_rewrites for arg in ("-c", f"url.{r.url}.insteadOf={r.instead_of}")]

    def newest_with_wheel(
        self, repo: str, branch: str, tries: int = MAX_WHEEL_TRIES, on_skip: Callable[[str], None] | None = None
    ) -> WheelSearch:
        """The newest of the branch's `tries` newest commits that has a wheel for the pins' arch and variant (found
        and checked with HEAD like resolve's; not downloaded). A commit without one is skipped with the reason."""
        pins = self.pins
        commits = self.branch_commits(repo, branch, tries)
        skipped: list[tuple[CommitFact, str]] = []
        for fact in commits:
            try:
                found = resolve_wheel(self.http, pins.wheel_index(), fact.commit, pins.wheel.arch, pins.wheel.variant)
            except UpstreamMismatch as exc:
                skipped.append((fact, exc.message))
                if on_skip:
                    on_skip(f"vllm {fact.commit[:12]} has no usable wheel: {exc.message}")
                continue
            return WheelSearch(fact, found, skipped)
        raise NoWheelFound(
            f"none of the {len(commits)} newest commits on {branch} of {repo} has a vllm wheel for linux "
            f"{pins.wheel.arch}, variant {pins.wheel.variant} (tried {len(commits)}, at most {tries})",
            skipped,
            hint="try again when the wheels are published, or another wheel.variant",
        )

    def contains(self, repo: str, ancestor: str, head: str) -> str | None:
        """GitHub's word on whether `head` contains `ancestor` ("ahead"/"identical": it does; "behind"/"diverged":
        it does not); None for a repository that is not on GitHub (a PR exists only there)."""
        if not self.github.owner_repo(repo):
            return None
        return self.github.compare(repo, ancestor, head)

    def resolve(self) -> Lock:
        """The lock; `self.record` then holds when each of its facts was read (the resolve record)."""
        started, begun = utc_now(), time.monotonic()
        # Each more platform: its base image, its base libraries, its torch, and its wheel's chain.
        workers = 6 + 4 * len(self.pins.build.targets())
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resolve") as pool:
            run = _Lookups(self, pool)
            nemo = run.nemo_rl()
            base = run.base_image()
            run.other_base_images()
            pr = run.pull_request()
            vllm = run.vllm(pr)
            choice = run.wheel_choice(vllm, pr)
            wheel = run.after(choice, lambda: choice.result().found)
            hashed = run.wheel_download(wheel)
            uv_lock = run.uv_lock(nemo)
            install = run.install(nemo, uv_lock)
            torch = run.torch(uv_lock)
            system = run.base_system(base)
            other_facts = run.other_platforms(choice, uv_lock)
            # Report the first failure in pin order, once every lookup has settled; the download is stopped then.
            pinned: list[Future | None] = [nemo, install, vllm, pr, choice, wheel, base, uv_lock, torch, system]
            found, got = run.settle(pinned, other_facts, base, wheel, hashed)
        facts = self.checked(
            found, got, base.result(), _result_of(torch), _result_of(system), choice.result().extraction
        )
        for platform, other in run.others.items():  # their notes (the GPU checks'), said with the primary's
            self.git.notes += [f"{platform}: {note}" for note in other.git.notes]
        if got is not None:
            run.read_at["wheel"] = got.at
        others = {platform: future.result() for platform, future in other_facts.items()}
        held_to_uv_source(install.result(), vllm.result(), choice.result().wheel.commit, nemo.result().commit)
        how = install_of(
            self.pins.vllm.install,
            install.result(),
            vllm.result(),
            choice.result().wheel.commit,
            choice.result().compare,
            (self.wheel_path, found.filename) if self.wheel_path else None,
            nemo.result().commit,
        )
        lock = self._lock(nemo.result(), vllm.result(), _result_of(pr), choice.result(), facts, others, how)
        self.record = ResolveRecord(
            lock_sha256=lock_sha256(lock),
            started_at=started,
            finished_at=utc_now(),
            seconds=round(time.monotonic() - begun, 3),
            read_at=dict(sorted(run.read_at.items())),
            notes=list(self.git.notes),
        )
        return lock

    def _lock(
        self,
        nemo_rl: CommitFact,
        vllm: CommitFact,
        pr: PullRequestFact | None,  # held to the ref by the chooser
        choice: Choice,
        facts: PlatformFacts,
        others: dict[str, PlatformFacts],
        install: VllmInstall | None = None,
    ) -> Lock:
        """The lock of what resolve read: the primary platform's facts, and each more platform's."""
        pins = self.pins
        return Lock(
            buildkit_version=__version__,
            pins_sha256=pins.sha256(),
            pins_file=self.pins_file,
            nemo_rl=nemo_rl,
            vllm=vllm,
            vllm_pr=pr,
            vllm_wheel=choice.wheel,
            vllm_compare=choice.compare,
            wheel=facts.wheel,
            base_image=facts.base_image,
            cuda=facts.cuda,
            build=pins.build,
            patches=self.patches,
            known_issues=pins.known_issues,
            gpu=facts.gpu,
            vllm_files=facts.vllm_files,
            vllm_python=choice.python,
            torch=facts.torch,
            other_platforms=others or None,
            vllm_install=install,
        )

    def for_platform(self, platform: str) -> Resolver:
        """A resolver of one more platform of build.platforms: the same upstreams and cache, its own wheel arch
        and GPUs (its notes are said with this one's)."""
        other = Resolver(
            self.pins.for_platform(platform),
            http=self.http,
            cache_dir=self.cache_dir,
            patches=self.patches,
            wheel_bytes=self.wheel_bytes,
            # which platform's wheel or layers it is, on the same display
            on_progress=None if self.on_progress is None else download.of_platform(self.on_progress, platform),
        )
        other.registry = self.registry  # one login per registry for every platform's manifests and layers
        return other

    def platform_facts(
        self,
        found: FoundWheel,
        base: ImageFact,
        cancel: threading.Event,
        torch: Future[LockedTorch | str] | None,
        system: Future[System | str] | None,
        extraction: Extraction | None = None,
    ) -> PlatformFacts:
        """This platform's wheel (found with the primary's, of the one wheel commit), its bytes, and the checks on
        them against its manifest of the base image and the torch NeMo-RL's uv.lock installs for its arch (both
        read beside the download: `torch` and `system`, None when resolve reads no bytes)."""
        named, name_source = cuda.cuda_of_name(found)
        cuda.check_majors(base, named, found.filename, name_source)  # before its bytes are read, as the primary's
        got = self._bytes_of(found, cancel)
        if got is not None and got.found is not None:
            found = got.found
        return self.checked(
            found, got, base, torch.result() if torch else None, system.result() if system else None, extraction
        )

    def checked(
        self,
        found: FoundWheel,
        got: Hashed | None,
        base: ImageFact,
        torch: LockedTorch | str | None,
        system: System | str | None,
        extraction: Extraction | None = None,
    ) -> PlatformFacts:
        """The checks of the wheel's bytes, for this resolver's platform: its fact, CUDA against the base image's,
        the torch its METADATA names against uv.lock's, the GPU checks (kernels, ABI), and the members precompiled
        mode takes from it (setup.py's `extraction`, else buildkit's rules)."""
        gpu, torch_check, hashes = None, None, dict[str, str]()
        with said_from_cache(got):
            wheel = self.wheel_fact(found, got)
            cuda_check = cuda.check(base, wheel)
            if self.wheel_path:
                # The torch the wheel names against uv.lock's, from its METADATA: before the ABI check, which would
                # download torch (900 MB) to find out the same thing symbol by symbol.
                requires = torchreq.requires_torch(self.wheel_path, found.filename)
                torch_check = torchreq.check(requires, torch, found.filename)
                gpu, notes = wheel_check(
                    self.wheel_path,
                    found.filename,
                    self.pins.build,
                    torch,
                    self.torch_symbols,
                    system,
                    hashes,
                    download.gpu_progress(self.on_progress, found.filename),
                )
                # Said with the git notes, which the command prints after resolve (and the record keeps).
                self.git.notes += notes
        files = None
        if self.wheel_path:
            files, notes = precompiled_files(self.wheel_path, hashes, extraction)
            self.git.notes += notes
        return PlatformFacts(
            wheel=wheel, base_image=base, cuda=cuda_check, gpu=gpu, vllm_files=files, torch=torch_check
        )

    def read_uv_lock(self, commit: str) -> tuple[str, bytes | str]:
        """NeMo-RL's uv.lock at `commit` (with the commit), read through the GitHub API (the token goes to the API
        host only) or with git (_nemo_file); a string in its place says why there is none."""
        repo = self.pins.nemo_rl.repo
        try:
            raw = self._nemo_file(repo, commit, "uv.lock", MAX_UV_LOCK_BYTES)
        except UpstreamMalformed:
            raise  # past a limit, or not what the protocol promises: exit 3, never "not checked"
        except (UpstreamMismatch, UpstreamUnreachable) as exc:
            return commit, f"not checked: could not read NeMo-RL's uv.lock at {commit[:12]}: {exc.message}"
        if raw is None:  # git: the commit's tree holds no uv.lock
            return commit, f"not checked: NeMo-RL has no uv.lock at {commit[:12]} (git, {repo})"
        return commit, raw

    def _nemo_file(self, repo: str, commit: str, path: str, limit: int) -> bytes | None:
        """A file of NeMo-RL at `commit` through the GitHub API; with git for another remote, or where the API has no
        answer (its 404 cannot tell a missing file from one it will not show: a mirror's commit, a file this token
        may not read). git reads the repository prepare fetches (pins.yaml's git_url_rewrites apply), one blob; the
        fallback is said in one note. None: git finds no such file."""
        rewrites = self.rewrites()
        if not self.github.owner_repo(repo):
            return self.git.file(repo, commit, path, limit, rewrites)
        try:
            return self.github.read_file(repo, path, commit)
        except NotOnGitHub as exc:
            self.git.notes.append(f"{exc.message}: NeMo-RL's {path} read with git instead")
            github_said = exc.message
        try:
            return self.git.file(repo, commit, path, limit, rewrites)
        except UpstreamMalformed:
            raise
        except (UpstreamMismatch, UpstreamUnreachable) as exc:  # the reason names both answers
            raise UpstreamMismatch(f"{github_said}; with git: {exc.message}") from None

    def uv_source_of(self, commit: str, uv_lock: bytes | None = None) -> VllmInstall | None:
        """How NeMo-RL at `commit` installs vLLM when uv builds it from a git source (its pyproject.toml and uv.lock:
        `uv_lock`, the bytes read for torch, else read here when needed); None when pyproject.toml names no git source
        for vLLM (build-custom-vllm.sh installs it), or cannot be read (said in a note: the build's script path is
        then the one checked)."""
        repo = self.pins.nemo_rl.repo
        try:
            pyproject = self._nemo_file(repo, commit, "pyproject.toml", MAX_PYPROJECT_BYTES)
        except (UpstreamMismatch, UpstreamUnreachable) as exc:
            self.git.notes.append(
                f"NeMo-RL's pyproject.toml at {commit[:12]} not read ({exc.message}): vLLM is taken to be installed "
                "by build-custom-vllm.sh"
            )
            return None
        if pyproject is None or b"git" not in pyproject:
            return None  # no file, or no git source in it: the script installs vLLM
        found = uv_source(
            pyproject,
            lambda: uv_lock if uv_lock is not None else self._nemo_file(repo, commit, "uv.lock", MAX_UV_LOCK_BYTES),
            commit[:12],
            MAX_UV_LOCK_BYTES,
        )
        if found is None:
            return None
        return VllmInstall(
            mode="uv-source",
            repo=found.repo,
            ref=found.ref,
            commit=found.commit,
            locked=found.locked,
            wheel_commit=found.wheel_commit,
            precompiled=found.precompiled,
            source=f"pyproject.toml and uv.lock of {repo} at {commit}",
        )

    def torch_of(self, uv_lock: tuple[str, bytes | str]) -> LockedTorch | str:
        """The torch uv.lock installs for this resolver's arch (its reason when read_uv_lock found none)."""
        commit, raw = uv_lock
        if isinstance(raw, str):
            return raw
        torch = torch_of_uv_lock(raw, f"NeMo-RL's uv.lock at {commit[:12]}", self.pins.wheel.arch)
        return torch or f"not checked: NeMo-RL's uv.lock at {commit[:12]} lists no torch"

    def base_system(self, base: ImageFact, cancel: threading.Event | None = None) -> System | str:
        """The newest glibc/libstdc++ symbol versions the base image provides, read from its layers (once per base:
        cached by its manifest digest) unless resolve may not download (--no-wheel-download); a string says why
        not. `cancel` (set on Ctrl-C, SIGTERM, or another lookup's failure) stops the read promptly."""
        if self.wheel_bytes != "download" and baselibs.cached(self.cache_dir, base) is None:
            return "not checked: the base image's libraries are not in the cache (--no-wheel-download)"

        def on_layer(read: int, layers: int, done: int, total: int) -> None:
            if self.on_progress is not None:
                self.on_progress(download.DownloadEvent("base", f"layer {read + 1} of {layers}", done, total))

        try:
            found = baselibs.read(self.registry, base, self.cache_dir, on_layer, cancel)
        except UpstreamMalformed:  # (first: LimitExceeded is one, and a bomb is never "not checked")
            raise  # bytes that are not what the manifest says, or past a limit: the build would meet them too
        except UpstreamUnreachable as exc:  # a dropped connection in gigabytes of layers: the lock is still good
            return f"not checked: the base image's layers could not be read ({exc.message}); rerun resolve to check"
        system = baselibs.system(found)
        if not isinstance(system, str):
            self.git.notes.append(baselibs.describe(found))
        return system

    def torch_symbols(self, torch: LockedTorch) -> set[str] | str:
        """The names torch's libraries define: from the cache, else from its wheel, downloaded now (checked against
        uv.lock's sha256) unless resolve may not download (--no-wheel-download); a string says why not."""
        if self.wheel_bytes != "download":  # a missing or unusable cache entry is not a reason to download
            names = abi.cached_torch(self.cache_dir, torch.sha256)
            return (
                names
                if names is not None
                else (f"not checked: torch {torch.version}'s symbols are not in the cache (--no-wheel-download)")
            )

        found = FoundWheel(
            index=torch.index,
            variant="torch",
            arch=self.pins.wheel.arch,
            filename=torch.filename,
            version=torch.version,
            url=torch.url,
            size=torch.size,
            etag=None,
            last_modified=None,
            index_sha256=torch.sha256,
            listed_in="uv.lock",
            verified_by="GET",
        )
        try:
            # A total deadline besides the stall timer (budget.TORCH_DOWNLOAD: BUILDKIT_TORCH_DEADLINE).
            deadline = Budget(f"torch {torch.version}'s wheel {torch.filename}", TORCH_DOWNLOAD)
            return abi.torch_defined(
                lambda: download.fetch(self.http, self.cache_dir, found, budget=deadline).path,
                torch.sha256,
                self.cache_dir,
                self.pins.wheel.arch,
            )
        finally:
            # Its symbols are cached by its sha256, and without an ETag its bytes are never reused: 900 MB freed.
            download.discard(self.cache_dir, found)

    def _bytes_of(self, found: FoundWheel, cancel: threading.Event) -> Hashed | None:
        """The wheel's bytes hashed: downloaded (or reused from the cache), from the cache only, or not at all,
        as wheel_bytes says."""
        if self.wheel_bytes == "download":
            return download.fetch_by_get(self.http, self.cache_dir, found, self.on_progress, cancel=cancel)
        if self.wheel_bytes == "cache":
            return download.cached(self.cache_dir, found, self.on_progress)
        return None

    def hash_wheel(self, found: FoundWheel) -> WheelFact:
        """The wheel's fact with the sha256 of its bytes (cached, or downloaded now, as wheel_bytes allows)."""
        return self.wheel_fact(found, self._bytes_of(found, threading.Event()))

    def wheel_fact(self, found: FoundWheel, hashed: Hashed | None) -> WheelFact:
        """The wheel's fact with the sha256 of its bytes, when there are any, and its CUDA, read from them."""
        if hashed is None:  # ("none" is --check's: that fact is compared with the lock, never written)
            unread = "--no-wheel-download" if self.wheel_bytes == "cache" else "resolve --check"
            return wheel_fact(found, None, SKIPPED_REASON, *cuda.wheel_cuda(found, None, unread))
        self.wheel_path = hashed.path  # the GPU checks read it next (buildkit.gpu)
        return wheel_fact(found, hashed.sha256, None, *cuda.wheel_cuda(found, hashed.path, ""))


class _Lookups:
    """One resolve's lookups on its pool, one method each: a lookup starts once those it needs have finished well
    (chained, never a worker blocked waiting), `read_at` says when each finished, and `cancel` is set on any failure.
    The primary platform's lookups are the resolver's; build.platforms after the first have resolvers of their own."""

    def __init__(self, resolver: Resolver, pool: ThreadPoolExecutor):
        self.resolver, self.pins, self.pool = resolver, resolver.pins, pool
        self.read_at: dict[str, str] = {}
        self.cancel = threading.Event()  # set when resolve fails: the download stops, its part stays for the next run
        self.others: dict[str, Resolver] = {}  # each more platform's resolver
        self.other_base: dict[str, Future[ImageFact]] = {}
        self.other_torch: dict[str, Future[LockedTorch | str] | None] = {}
        self.other_system: dict[str, Future[System | str] | None] = {}
        self.found_for: dict[str, dict[str, FoundWheel]] = {}  # wheel commit -> each more platform's wheel

    def timed(self, name: str, fn: Callable[[], T]) -> Callable[[], T]:
        """fn, noting in `read_at` when it finished."""

        def run() -> T:
            out = fn()
            self.read_at[name] = utc_now()
            return out

        return run

    def after(self, dep: Future | None, fn: Callable[[], T]) -> Future[T]:
        # Chain without blocking a worker: schedule fn once dep has finished well.
        if dep is None:
            return self.pool.submit(fn)
        out: Future[T] = Future()

        def run(done: Future) -> None:
            if done.exception() is not None:
                out.set_exception(done.exception())
                return
            try:
                inner = self.pool.submit(fn)
            except RuntimeError as exc:  # the pool shut down (Ctrl-C while a lookup ran): nothing to chain
                out.set_exception(exc)
                return
            inner.add_done_callback(lambda f: _copy_result(f, out))

        dep.add_done_callback(run)
        return out

    def resolver_of(self, platform: str | None) -> Resolver:
        """The resolver of a more platform, or the primary's (None)."""
        return self.resolver if platform is None else self.others[platform]

    def nemo_rl(self) -> Future[CommitFact]:
        """NeMo-RL's pinned commit."""
        pins = self.pins
        return self.pool.submit(
            self.timed("nemo_rl", lambda: self.resolver.commit(pins.nemo_rl.repo, pins.nemo_rl.ref))
        )

    def base_image(self, platform: str | None = None) -> Future[ImageFact]:
        """The base image's manifest for a more platform, or (None) for the primary one."""
        pins = self.pins
        name = "base_image" if platform is None else f"base_image {platform}"
        target = pins.build.platform if platform is None else platform
        return self.pool.submit(self.timed(name, lambda: self.resolver.registry.resolve(pins.base_image, target)))

    def other_base_images(self) -> None:
        # build.platforms after the first: each one's manifest of the base image beside the primary's, then,
        # once the wheel commit is chosen, its wheel, bytes and checks beside the primary's download.
        self.others = {platform: self.resolver.for_platform(platform) for platform, _ in self.pins.build.targets()[1:]}
        self.other_base = {platform: self.base_image(platform) for platform in self.others}

    def pull_request(self) -> Future[PullRequestFact] | None:
        """vllm.pr's pull request (None when none is pinned)."""
        pins, number = self.pins, self.pins.vllm.pr
        if not number:
            return None
        return self.pool.submit(
            self.timed("vllm_pr", lambda: self.resolver.github.pull(pins.vllm.repo, number, pins.vllm.ref))
        )

    def vllm(self, pr: Future[PullRequestFact] | None) -> Future[CommitFact]:
        """The source commit: the pinned ref's, else the PR's merge commit or head (once the PR is read)."""

        def source_commit() -> CommitFact:
            repo, ref = source_ref(self.pins, _result_of(pr))
            return self.resolver.commit(repo, ref)

        return self.after(pr, self.timed("vllm", source_commit))

    def wheel_choice(self, vllm: Future[CommitFact], pr: Future[PullRequestFact] | None) -> Future[Choice]:
        """The wheel's commit, its wheel and the proof of the composition, once the source commit is known."""
        resolver = self.resolver
        chooser = Chooser(self.pins, resolver.github, resolver.cache_dir, self.find_wheel, resolver.git.notes.append)
        return self.after(vllm, self.timed("wheel", lambda: chooser.choose(vllm.result(), _result_of(pr))))

    def find_wheel(self, commit: str) -> FoundWheel:
        """The primary platform's wheel of `commit`; each more platform's goes into `found_for`."""
        # Downloading, the GET is the existence check; otherwise HEAD. One wheel commit serves every
        # platform: a commit without a wheel for one of them is passed over. Every platform's lookup runs
        # at once, so a second platform adds no round trip here (bench/platforms.py).
        resolver, pins = self.resolver, self.pins

        def lookup(arch: str) -> FoundWheel:
            return resolve_wheel(
                resolver.http,
                pins.wheel_index(),
                commit,
                arch,
                pins.wheel.variant,
                head=resolver.wheel_bytes != "download",
            )

        with ThreadPoolExecutor(max_workers=1 + len(self.others), thread_name_prefix="wheels") as lookups:
            mine = lookups.submit(lookup, pins.wheel.arch)
            theirs = {p: lookups.submit(lookup, other.pins.wheel.arch) for p, other in self.others.items()}
            found = mine.result()
            self.found_for[commit] = {p: future.result() for p, future in theirs.items()}
        return found

    def wheel_download(self, wheel: Future[FoundWheel]) -> Future[Hashed | None]:
        # The download starts as soon as the wheel is found, beside the registry chain (the longest): resolve's
        # wall time is that chain, not the chain and then the download (bench/resolve_depth.py).
        return self.after(wheel, lambda: self.resolver._bytes_of(wheel.result(), self.cancel))

    def uv_lock(self, nemo: Future[CommitFact]) -> Future[tuple[str, bytes | str]] | None:
        # NeMo-RL's uv.lock names the torch vLLM's symbols must resolve against: read once, beside the download;
        # each platform takes its arch's torch from it.
        if self.resolver.wheel_bytes == "none":
            return None
        return self.after(nemo, self.timed("uv_lock", lambda: self.resolver.read_uv_lock(nemo.result().commit)))

    def install(
        self, nemo: Future[CommitFact], uv_lock: Future[tuple[str, bytes | str]] | None
    ) -> Future[VllmInstall | None]:
        """How NeMo-RL at the pinned commit installs vLLM (its pyproject.toml and uv.lock), beside the rest once the
        commit is known, and after uv.lock's read for torch where there is one, to take its bytes (one read)."""

        def read() -> VllmInstall | None:
            got = uv_lock.result()[1] if uv_lock is not None else None
            return self.resolver.uv_source_of(nemo.result().commit, got if isinstance(got, bytes) else None)

        return self.after(uv_lock or nemo, self.timed("vllm_install", read))

    def torch(
        self, uv_lock: Future[tuple[str, bytes | str]] | None, platform: str | None = None
    ) -> Future[LockedTorch | str] | None:
        """The torch uv.lock installs for the platform's arch, once uv.lock is read (None when it is not read)."""
        if uv_lock is None:
            return None
        resolver = self.resolver_of(platform)
        return self.after(uv_lock, lambda: resolver.torch_of(uv_lock.result()))

    def base_system(self, base: Future[ImageFact], platform: str | None = None) -> Future[System | str] | None:
        """The glibc and libstdc++ the platform's base image provides, from its layers (cached by its digest): once
        its manifest is known, beside the rest (None when resolve reads no bytes)."""
        if self.resolver.wheel_bytes == "none":
            return None
        resolver = self.resolver_of(platform)
        name = "base_libraries" if platform is None else f"base_libraries {platform}"
        return self.after(base, self.timed(name, lambda: resolver.base_system(base.result(), self.cancel)))

    def other_platforms(
        self, choice: Future[Choice], uv_lock: Future[tuple[str, bytes | str]] | None
    ) -> dict[str, Future[PlatformFacts]]:
        # Each more platform the same way, beside the primary's: its torch, its base image's libraries as soon
        # as its manifest is known, and its wheel's download as soon as the wheel commit is chosen.
        self.other_torch = {p: self.torch(uv_lock, p) for p in self.others}
        self.other_system = {p: self.base_system(self.other_base[p], p) for p in self.others}
        return {platform: self.platform_facts(platform, choice) for platform in self.others}

    def platform_facts(self, platform: str, choice: Future[Choice]) -> Future[PlatformFacts]:
        """A more platform's wheel (of the chosen commit), its bytes and their checks, once the commit is chosen."""

        def facts() -> PlatformFacts:
            found = self.found_for[choice.result().wheel.commit][platform]
            return self.others[platform].platform_facts(
                found,
                self.other_base[platform].result(),
                self.cancel,
                self.other_torch[platform],
                self.other_system[platform],
                choice.result().extraction,
            )

        return self.after(choice, self.timed(f"wheel {platform}", facts))

    def settle(
        self,
        pinned: list[Future | None],
        other_facts: dict[str, Future[PlatformFacts]],
        base: Future[ImageFact],
        wheel: Future[FoundWheel],
        hashed: Future[Hashed | None],
    ) -> tuple[FoundWheel, Hashed | None]:
        """Every lookup settled, the first failure raised in pin order (the primary's, in `pinned`'s order, then
        the other platforms'); then the wheel's name checked against the base image's CUDA, and its bytes."""
        futures: list[Future] = [f for f in pinned if f]
        futures += [*self.other_base.values(), *other_facts.values()]
        futures += [f for f in (*self.other_torch.values(), *self.other_system.values()) if f is not None]
        try:
            wait(futures)  # (in the try: Ctrl-C here stops the download too)
            for future in futures:
                if (error := future.exception()) is not None:
                    raise error
            base_fact, found = base.result(), wheel.result()
            named, name_source = cuda.cuda_of_name(found)
            # The name's CUDA is refused as soon as the base image's is known, whatever the download has done
            # by then: its bytes are never trusted for a wheel whose name already disagrees.
            cuda.check_majors(base_fact, named, found.filename, name_source)
            if self.resolver.on_progress is not None:
                self.resolver.on_progress(download.DownloadEvent("resolved", found.filename, 0, None))
            got = hashed.result()
            if got is not None and got.found is not None:
                found = got.found  # as the downloading GET described it
        except BaseException:
            self.cancel.set()
            raise
        return found, got


@contextmanager
def said_from_cache(hashed: Hashed | None) -> Iterator[None]:
    """A refusal of the wheel's bytes says when they came from the cache, where an earlier resolve (one that failed,
    perhaps on these very bytes) left them, and how to read them afresh: otherwise `--no-wheel-download` refuses
    them again and again with nothing to say why."""
    try:
        yield
    except (UpstreamMismatch, UpstreamMalformed) as exc:
        if hashed is None or not hashed.reused:
            raise
        exc.message = f"{exc.message} (the wheel's bytes came from the cache: {hashed.path})"
        exc.args = (exc.message,)
        again = (
            f"to download them again, delete {hashed.path.parent} and run `buildkit resolve` without "
            "--no-wheel-download"
        )
        exc.hint = f"{exc.hint}; {again}" if exc.hint else again
        raise


def _copy_result(source: Future, target: Future) -> None:
    if source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())


def held_to_uv_source(install: VllmInstall | None, source: CommitFact, wheel_commit: str, nemo: str) -> None:
    """Where NeMo-RL builds vLLM from a uv git source, that is the image's vLLM: the pins must name the commit its
    uv.lock pins, on that repository, and the wheel commit its pyproject.toml sets, or the lock would prove another
    vLLM than the image holds (exit 4, naming what to pin)."""
    if install is None:
        return
    same_repo = _plain(install.repo) == _plain(source.repo)
    same_wheel = install.wheel_commit in (None, wheel_commit)
    if same_repo and install.commit == source.commit and same_wheel:
        return
    wheel = f"\n  wheel:\n    commit: {install.wheel_commit}" if install.wheel_commit else ""
    raise UpstreamMismatch(
        f"NeMo-RL at {nemo[:12]} builds vLLM with uv from {install.repo} at {install.commit[:12]} (uv.lock)"
        + (f" with the wheel of {install.wheel_commit[:12]} (pyproject.toml)" if install.wheel_commit else "")
        + f"; the pins give {source.repo} at {source.commit[:12]} with the wheel of {wheel_commit[:12]}",
        hint=f"pin what NeMo-RL builds, in pins.yaml:\n  vllm:\n    repo: {install.repo}\n    ref: "
        f"{install.commit}{wheel}",
    )


def _plain(url: str) -> str:
    return url.rstrip("/").removesuffix(".git").lower()


def _result_of(future: Future[T] | None) -> T | None:
    return future.result() if future else None
