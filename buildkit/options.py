"""Every command's and every stage's options, in one place: each class is what one command parses its command line
into (`parse`, whose keywords are the command's parameters), frozen and checked before any work, so a wrong value
stops the command before anything is fetched or written (an OptionError is typer's usage error, exit 2, naming the
option). A stage runs from a `Context[O]` whose `options` is its own class (ResolveOptions, PrepareOptions,
RenderOptions, BuildOptions, VerifyOptions, ...); a command that runs several stages holds each one's (BuildOptions
holds resolve's, prepare's and render's). Choices are enums (models/choices.py), which typer shows and checks.

Below the stages: may import world, gpu, models, text and the base, never a stage or the CLI.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple
from urllib.parse import urlsplit

from buildkit.errors import InputError, OptionError, excerpt
from buildkit.files import check_replaceable, is_stdout
from buildkit.gpu import driver
from buildkit.models.choices import Compression, ProgressMode, ReportFormat
from buildkit.models.grammar import IMAGE_REF_RE, git_ref
from buildkit.models.lock import PatchFact
from buildkit.models.pins import ARCH_OF_PLATFORM, Pins
from buildkit.models.slsa import DEFAULT_BUILDER_ID
from buildkit.world import buildx, cosign

# What the resolve stage does with the lock: "write" (`buildkit resolve`: resolve, and write the lock unless it says
# what the lock says), "check" (`--check`: write nothing; the result says where upstream disagrees), "offline" (the
# pins, and the lock against them; no network), "if-stale" (`build`: a current lock is kept, a missing or stale one
# resolved and written), "fresh" (`bump`: resolve the staged pins and write nothing).
ResolveMode = Literal["write", "check", "offline", "if-stale", "fresh"]


@dataclass(frozen=True)
class ResolveOptions:
    """The resolve stage's options (`buildkit resolve`'s, checked together by `parse` before any work). deep (with
    check): the wheel's bytes are downloaded afresh and their sha256 compared with the lock. download_wheel False:
    the lock's wheel is hashed only if the cache has it (else: not content-addressed). staged: the pins to resolve
    and their patches when they are not the pins file's (bump's edited pins)."""

    mode: ResolveMode = "if-stale"
    json_out: bool = False
    deep: bool = False
    download_wheel: bool = True
    check: bool = False  # --check (with --offline too: no lock is then a failure)
    staged: tuple[Pins, list[PatchFact]] | None = None

    @classmethod
    def parse(
        cls, *, json_out: bool, check: bool, offline: bool, deep: bool, no_wheel_download: bool
    ) -> ResolveOptions:
        if deep and (not check or offline):
            raise OptionError("needs --check, and the network (not --offline)", param_hint="--deep")
        if no_wheel_download and (check or offline):
            raise OptionError("only applies when resolve writes the lock", param_hint="--no-wheel-download")
        mode: ResolveMode = "offline" if offline else "check" if check else "write"
        return cls(mode, json_out, deep, not no_wheel_download, check)


@dataclass(frozen=True)
class PrepareOptions:
    """The prepare stage's options: whether NeMo-RL's submodules are checked out, and which flag or variable said so
    (as messages name it)."""

    submodules: bool = True
    submodules_from: str = "default"
    json_out: bool = False  # `buildkit prepare --json`: the record on stdout


@dataclass(frozen=True)
class RenderOptions:
    """The render stage's options. smoke: the smoke target's Dockerfile (build/smoke/), FROM smoke_base (the stand-in
    base image pinned by digest: the build pins it once the lock names the platform). refuse_drift: drift findings
    stop the stage before anything is written (`build` without --allow-drift, `render --strict`)."""

    smoke: bool = False
    smoke_base: str | None = None
    syntax: bool = True
    refuse_drift: bool = False
    output: Path | None = None  # None: build/Dockerfile


@dataclass(frozen=True)
class RenderCommandOptions:
    """`buildkit render`'s options, checked (`parse`) before any work: prepare's and render's, and how the command
    answers."""

    prepare: PrepareOptions
    render: RenderOptions
    streamed: bool  # `-o -`: written where it goes by default, and streamed to stdout
    diff: bool
    json_out: bool
    platform: str | None = None

    @classmethod
    def parse(
        cls,
        *,
        output: Path | None,
        submodules: bool,
        diff: bool,
        strict: bool,
        syntax: bool,
        json_out: bool,
        submodules_from: str = "default",
        platform: str | None = None,
    ) -> RenderCommandOptions:
        streamed = is_stdout(output)
        if streamed and (json_out or diff):
            raise InputError("-o - writes the Dockerfile to standard output: it cannot go with --json or --diff")
        output = None if streamed else output
        if output is not None:
            check_replaceable(output)  # before the work: a device or FIFO is never replaced
        render = RenderOptions(syntax=syntax, refuse_drift=strict, output=output)
        return cls(PrepareOptions(submodules, submodules_from), render, streamed, diff, json_out, platform)


class BumpRequest(NamedTuple):
    nemo_rl: str | None  # branch or tag; None: nemo_rl stays (unless vllm_branch is None too: then main)
    vllm_branch: str | None  # None: vllm stays
    dry_run: bool
    summary: Path | None  # default: build/bump.md
    submodules: bool = True
    allow_unrelated: bool = False  # move a pin even to a commit that does not contain the pinned one
    follow_pr: bool = False  # --vllm without a branch: a pinned vllm.pr is followed (its head, or its merge commit)


def check_ref(value: str, option: str) -> str:
    """A branch, tag or SHA from the command line, held to the pins' ref grammar before git or a URL sees it."""
    try:
        return git_ref(value)
    except ValueError as exc:
        raise InputError(f"{option}: {exc}") from None


@dataclass(frozen=True)
class BumpOptions:
    """`buildkit bump`'s options, checked (`parse`) before any work: what to move (`request`) and how to answer."""

    request: BumpRequest
    json_out: bool
    allow_drift: bool

    @classmethod
    def parse(
        cls,
        *,
        nemo_rl: str | None,
        vllm: bool,
        vllm_branch: str | None,
        dry_run: bool,
        summary: Path | None,
        submodules: bool,
        json_out: bool,
        allow_unrelated: bool,
        allow_drift: bool,
    ) -> BumpOptions:
        explicit_branch = vllm_branch is not None
        vllm_branch = vllm_branch or ("main" if vllm else None)  # --vllm-branch implies --vllm
        request = BumpRequest(
            nemo_rl=check_ref(nemo_rl, "--nemo-rl") if nemo_rl is not None else None,
            vllm_branch=check_ref(vllm_branch, "--vllm-branch") if vllm_branch is not None else None,
            dry_run=dry_run,
            summary=summary,
            submodules=submodules,
            allow_unrelated=allow_unrelated,
            follow_pr=vllm and vllm_branch == "main" and not explicit_branch,
        )
        return cls(request, json_out, allow_drift)


@dataclass(frozen=True)
class BuildOptions:
    """`buildkit build`'s options, parsed and validated (`parse`) before any work: the build stage's own, and those
    of the stages build runs before it (`resolve`, `prepare`, `render`), each the class its stage declares."""

    prepare: PrepareOptions
    render: RenderOptions  # smoke_base unpinned: the build pins it once the lock names the platform
    builder: str | None
    push: bool
    sbom: bool
    cache_from: tuple[str, ...]
    cache_to: tuple[str, ...]
    progress: ProgressMode
    dry_run: bool
    smoke: bool
    min_free_gb: float | None
    extra: tuple[str, ...]
    check_reproducible: bool = False
    rebuild_builder: str | None = None
    shared_cache: bool = True  # the lock's build.cache, if it names one
    compression: Compression | None = None  # None: the lock's build.compression
    force_compression: bool | None = None
    json_out: bool = False
    emulate: bool = False  # build a platform the builder runs only under QEMU (an order of magnitude slower)
    platform_builders: tuple[tuple[str, str], ...] = ()  # --platform-builder PLATFORM=NAME: that platform's builder
    resolve: ResolveOptions = ResolveOptions("if-stale")  # a current lock is kept; a missing or stale one resolved
    attestations: bool = True  # False: no buildx attestation in the pushed index (consumers that do not skip them)

    def builder_for(self, platform: str) -> str | None:
        """The builder a platform builds on: its --platform-builder, else --builder (None: the current one)."""
        return dict(self.platform_builders).get(platform, self.builder)

    @classmethod
    def parse(
        cls,
        *,
        progress: ProgressMode | str | None,
        compression: Compression | str | None,
        cache_from: list[str],
        cache_to: list[str],
        extra: list[str],
        smoke: bool,
        smoke_base: str,
        syntax: bool | None,
        allow_drift: bool = False,
        submodules: bool = True,
        submodules_from: str = "default",
        platform_builder: list[str] | None = None,
        **given,
    ) -> BuildOptions:
        """The options as typed, checked: a wrong value is a usage error (exit 2) naming the option. (The CLI's
        typer checks the choices first; a caller that gives strings has them checked here.) syntax None: the
        default, which is no `# syntax=` line for --smoke (it must work offline)."""
        progress = progress or "auto"  # BUILDKIT_PROGRESS set but empty, as buildx reads it
        if progress not in ProgressMode.__members__:
            raise OptionError(
                f"expected auto, tty, plain, quiet or rawjson, found {excerpt(progress, 60)}",
                param_hint="--progress/$BUILDKIT_PROGRESS",
            )
        if compression not in (None, *Compression.__members__):
            raise OptionError("expected gzip or zstd", param_hint="--compression")
        render = RenderOptions(
            smoke=smoke,
            smoke_base=smoke_base if smoke else None,
            syntax=syntax if syntax is not None else not smoke,
            refuse_drift=not allow_drift,
        )
        opts = cls(
            prepare=PrepareOptions(submodules, submodules_from),
            render=render,
            smoke=smoke,
            progress=ProgressMode(progress),
            compression=Compression(compression) if compression else None,
            cache_from=tuple(cache_from),
            cache_to=tuple(cache_to),
            extra=tuple(extra),
            platform_builders=parse_platform_builders(platform_builder or []),
            **given,
        )
        if opts.sbom and not opts.attestations:
            raise OptionError("an SBOM attestation is one of buildx's attestations", param_hint="--no-attestations")
        if opts.rebuild_builder and not opts.check_reproducible:
            raise OptionError("only with --check-reproducible", param_hint="--rebuild-builder")
        for name in (opts.builder, opts.rebuild_builder):
            if name:
                buildx.validate_builder_name(name)
        return opts

    @property
    def view_mode(self) -> str:
        """tty, plain, quiet or rawjson: `auto` is tty on a terminal."""
        mode = {"live": "tty"}.get(self.progress.value, self.progress.value)
        if mode == "auto":
            mode = "tty" if sys.stderr.isatty() else "plain"
        return mode

    @property
    def min_free(self) -> float:
        return self.min_free_gb if self.min_free_gb is not None else (1.0 if self.smoke else 100.0)

    def plan_options(self, provenance: bool) -> dict:
        """What plan_for_lock takes from the options."""
        return {
            "builder": self.builder,
            "provenance": provenance,
            "sbom": self.sbom,
            "cache_from": tuple(self.cache_from),
            "cache_to": tuple(self.cache_to),
            "shared_cache_use": self.shared_cache,
            "compression": str(self.compression) if self.compression else None,
            "force_compression": self.force_compression,
            "push": self.push,
            "extra": tuple(self.extra),
        }


def parse_platform_builders(given: list[str]) -> tuple[tuple[str, str], ...]:
    """--platform-builder linux/arm64=gb200: each a platform buildkit builds for and a builder name, once each."""
    pairs: dict[str, str] = {}
    for text in given:
        platform, sep, name = text.partition("=")
        if not sep or platform not in ARCH_OF_PLATFORM:
            raise OptionError(
                f"expected PLATFORM=NAME with PLATFORM one of {', '.join(ARCH_OF_PLATFORM)}, found {excerpt(text, 60)}",
                param_hint="--platform-builder",
            )
        if platform in pairs:
            raise OptionError(f"{platform} given twice", param_hint="--platform-builder")
        if not buildx.BUILDER_NAME_RE.fullmatch(name):
            raise OptionError(
                f"expected a builder name like 'gb200' after {platform}=, found {excerpt(name, 60)}",
                param_hint="--platform-builder",
            )
        pairs[platform] = name
    return tuple(pairs.items())


@dataclass(frozen=True)
class DoctorOptions:
    """`buildkit doctor`'s options. platform and tag None: the pins' (build.platform, build.tag) when a pins file is
    found, else linux/amd64 and nemo-rl:latest."""

    builder: str | None
    min_free_gb: float
    push: bool
    tag: str | None
    platform: str | None
    submodules: bool = True
    submodules_from: str = "default"
    json_out: bool = False
    platform_builders: tuple[tuple[str, str], ...] = ()  # --platform-builder: a platform checked on its own builder

    @classmethod
    def parse(cls, *, platform_builder: list[str], **given) -> DoctorOptions:
        return cls(platform_builders=parse_platform_builders(platform_builder), **given)


@dataclass(frozen=True)
class VerifyOptions:
    """`buildkit verify`'s options, checked (`parse`) before any work."""

    image: str | None
    gpus: bool
    json_out: bool
    provenance: bool
    key: str | None
    drivers: tuple[str, ...]
    platform: str | None = None  # with build.platforms: only this platform's image
    sqsh: Path | None = None  # a published squashfs, checked offline against the evidence beside it

    @classmethod
    def parse(
        cls,
        *,
        image: str | None,
        gpus: bool,
        json_out: bool,
        provenance: bool,
        key: str | None,
        drivers: list[str],
        platform: str | None = None,
        sqsh: Path | None = None,
    ) -> VerifyOptions:
        if provenance and gpus:
            raise OptionError("not with --provenance", param_hint="--gpus")
        if sqsh is not None:
            if image or gpus or provenance or drivers or platform:
                raise InputError(
                    "--sqsh checks a file alone: not with IMAGE, --gpus, --provenance, --driver, --platform"
                )
            if not key:
                raise InputError("--sqsh needs --key: the public key the evidence beside the file was signed with")
            cosign.check_public_key(key)
            return cls(None, False, json_out, False, key, (), None, sqsh)
        for value in drivers:
            try:
                driver.parse_driver(value)
            except ValueError as exc:
                raise OptionError(str(exc), param_hint="--driver") from None
        if provenance:
            if not key:
                raise InputError("--provenance needs --key: the public key buildkit's statement was signed with")
            cosign.check_public_key(key)  # bad input before any check: a missing or private key is not a failed check
        return cls(image, gpus, json_out, provenance, key, tuple(drivers), platform)


@dataclass(frozen=True)
class ReportOptions:
    """`buildkit report`'s options, checked (`parse`) before any work."""

    record: Path | None
    output: Path | None  # None or `-`: standard output
    format: ReportFormat
    results: Path | None
    platform: str | None = None  # with build.platforms: only this platform's report

    @classmethod
    def parse(
        cls,
        *,
        record: Path | None,
        output: Path | None,
        fmt: ReportFormat | str,
        results: Path | None,
        platform: str | None = None,
    ) -> ReportOptions:
        if fmt not in ReportFormat.__members__:
            raise InputError(f"--format: expected markdown or json, found {fmt!r}")
        if output is not None and not is_stdout(output):
            check_replaceable(output)  # a device or FIFO is never replaced
        written = None if output is None or is_stdout(output) else output
        return cls(record, written, ReportFormat(fmt), results, platform)


_BUILDER_ID_RE = re.compile(r"[a-z][a-z0-9+.-]*:[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]{1,500}")


def checked_builder_id(value: str | None) -> str:
    """runDetails.builder.id: a URI naming the platform trusted to run the build (a CI run's URL, say)."""
    if value is None:
        return DEFAULT_BUILDER_ID
    if not _BUILDER_ID_RE.fullmatch(value) or urlsplit(value).scheme != urlsplit(value).scheme.lower():
        raise InputError(f"--builder-id: expected an absolute URI (scheme:...), found {value[:120]!r}")
    return value


def checked_repository(value: str) -> str:
    """--repository: an image name (registry and path, the distribution grammar), no tag or digest."""
    m = IMAGE_REF_RE.fullmatch(value)
    if not m or m.group("tag") or m.group("digest"):
        raise InputError(f"--repository: expected an image name without tag or digest, found {excerpt(value, 120)}")
    return value


@dataclass(frozen=True)
class AttestOptions:
    """`buildkit attest`'s options, checked (`parse`) before anything is read: the builder ID a URI, the key one
    cosign can use, the repository a name without tag or digest."""

    record: Path | None
    key: str | None
    builder_id: str  # runDetails.builder.id
    json_out: bool
    repository: str | None
    platform: str | None = None  # with build.platforms: only this platform's statement

    @classmethod
    def parse(
        cls,
        *,
        record: Path | None,
        key: str | None,
        builder_id: str | None,
        json_out: bool,
        repository: str | None,
        platform: str | None = None,
    ) -> AttestOptions:
        builder = checked_builder_id(builder_id)
        if key is not None:
            cosign.check_key(key)  # a missing key is bad input before anything else is read
        named = checked_repository(repository) if repository is not None else None
        return cls(record, key, builder, json_out, named, platform)


@dataclass(frozen=True)
class ExportOptions:
    """`buildkit export`'s options, checked (`parse`) before any work."""

    image: str | None
    output: Path | None  # None: build/<image>.sqsh (also with `-o -`, which then streams it)
    streamed: bool  # `-o -`: made where it goes by default, then streamed to stdout
    json_out: bool
    platform: str | None = None  # with build.platforms: only this platform's image
    to: Path | None = None  # publish into this directory, named by the platform manifest's digest
    key: str | None = None  # with `to`: sign the evidence beside each file (an SBOM, a Sigstore bundle)

    @classmethod
    def parse(
        cls,
        *,
        image: str | None,
        output: Path | None,
        json_out: bool,
        platform: str | None = None,
        to: Path | None = None,
        key: str | None = None,
    ) -> ExportOptions:
        streamed = is_stdout(output)
        if streamed and json_out:
            raise InputError("-o - writes the squashfs to standard output: it cannot go with --json")
        if to is not None and output is not None:
            raise InputError("--to DIR names the file by its digest: it cannot go with -o", hint="give one of them")
        if key is not None:
            if to is None:
                raise InputError("--key signs the evidence beside a published file: it needs --to DIR")
            cosign.check_key(key)  # a missing key is bad input before anything is made
        return cls(image, None if streamed else output, streamed, json_out, platform, to, key)
