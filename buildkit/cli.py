"""The buildkit command line: parse options, call one stage, print. No logic lives here.

Imports of pydantic, requests, jinja2 and the docker SDK happen inside the commands that use them, so that
`buildkit --help` starts about as fast as typer itself (measured in bench/cold_start.py).
"""

# No `from __future__ import annotations` here: typer reads every command's annotations (twice) on each start,
# and evaluating them once at import is faster than evaluating strings each time (bench/cold_start.py).
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from buildkit import __version__
from buildkit.errors import EXIT_CODES, OptionError
from buildkit.models.choices import Compression, ProgressMode, ReportFormat
from buildkit.models.paths import Paths
from buildkit.stages.pipeline import STAGES


def _help() -> str:
    pipeline = "".join(f"  {s.name:8} {s.reads} -> {s.writes}\n" for s in STAGES)
    codes = "".join(f"  {code:<3} {meaning}\n" for code, meaning in EXIT_CODES)
    return (
        "Build a reproducible NeMo-RL image with a custom vLLM, and prove how it was built.\n\n"
        f"\b\nPipeline (each stage reads -> writes):\n{pipeline}\n\b\nExit codes:\n{codes}"
    )


class _Group(typer.core.TyperGroup):
    """The commands' group: an interrupted command (Ctrl-C, or SIGTERM and SIGHUP, which main turns into it) ends
    with one line on stderr saying what stopped and what is left, and exit 130. typer itself turns KeyboardInterrupt
    into a silent exit 130."""

    def invoke(self, ctx):
        from buildkit.errors import Interrupted

        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as stop:  # (proc.Interrupted too: its child was stopped first)
            reason = stop.args[0] if stop.args and isinstance(stop.args[0], str) else "Ctrl-C"
            _say_interrupted(ctx.invoked_subcommand, f"interrupted ({reason})")
        except Interrupted as stop:  # raised where the work stopped, saying what it stopped
            _say_interrupted(ctx.invoked_subcommand, stop.message)
        raise typer.Exit(130)


def _say_interrupted(command: str | None, what: str) -> None:
    from buildkit.text.ui import print_interrupted

    print_interrupted(command, what)


app = typer.Typer(
    name="buildkit",
    cls=_Group,
    help=_help(),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain Click help: rich's help screen imports markdown-it and doubles start-up time (bench/cold_start.py).
    rich_markup_mode=None,
)


class _Command(typer.core.TyperCommand):
    """A command whose arguments show their metavar alone (IMAGE): typer appends the Python type (`<str>`), which
    teaches nothing and reads like a placeholder."""

    def __init__(self, *args, params=None, **kwargs) -> None:
        for param in params or []:
            if type(param) is typer.core.TyperArgument:
                param.__class__ = _Argument
        super().__init__(*args, params=params, **kwargs)


class _Argument(typer.core.TyperArgument):
    def display_type_rich(self, ctx) -> None:
        return None


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"buildkit {__version__}\n")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    pass


def _options(parse, **given):
    """A stage's options parsed; a value it refuses (OptionError) is typer's usage error for that option (exit 2)."""
    try:
        return parse(**given)
    except OptionError as exc:
        raise typer.BadParameter(exc.message, param_hint=exc.param_hint) from None


def _paths(pins: Path, lock: Path | None = None, build_dir: Path | None = None, cache_dir: Path | None = None):
    from buildkit.models.discovery import check_build_dir, find_pins

    if pins == Path("pins.yaml") and not pins.exists():
        # Not given (or given as the default name) and not here: the nearest trusted pins.yaml above (as git finds
        # a repository), said on stderr.
        found = find_pins(Path.cwd())
        if found is not None:
            from buildkit.text.ui import note

            note(f"using {found}")
        pins = found or pins
    paths = Paths.of(pins, lock, build_dir, cache_dir)
    check_build_dir(paths.build_dir)
    return paths


def _submodules_from(ctx: typer.Context, on: bool) -> str:
    """Which flag or variable set --submodules/--no-submodules, as messages name it ("default" when neither did)."""
    source = getattr(ctx.get_parameter_source("submodules"), "name", None)  # click's ParameterSource, by name
    if source == "ENVIRONMENT":
        return f"BUILDKIT_SUBMODULES={os.environ.get('BUILDKIT_SUBMODULES', '')}"
    if source == "COMMANDLINE":
        return "--submodules" if on else "--no-submodules"
    return "default"


def _choices(choices: type[Enum]) -> str:
    """The metavar of an option with fixed values: [a|b], as click shows them (typer's own is `<a|b>`)."""
    return "[" + "|".join(choice.value for choice in choices) + "]"


def _one_of(choices: type[Enum]):
    """The parser of an option with fixed values. typer's own echoes a wrong value whole, at any length and with
    any control character (from the command line or the environment); this one quotes it short and escaped."""

    def parse(value):
        if isinstance(value, choices):
            return value
        try:
            return choices(value)
        except ValueError:
            from buildkit.errors import excerpt

            expected = ", ".join(choice.value for choice in choices)
            raise typer.BadParameter(f"expected one of {expected}, found {excerpt(value, 60)}") from None

    return parse


PinsOption = Annotated[
    Path, typer.Option("--pins", "-p", metavar="PATH", help="The pins file.", envvar="BUILDKIT_PINS", show_default=True)
]
LockOption = Annotated[
    Path | None,
    typer.Option(
        "--lock",
        "-l",
        metavar="PATH",
        help="The lock file [default: beside the pins, named after them: pins.lock for pins.yaml, pins-gb200.lock "
        "for pins-gb200.yaml].",
    ),
]


@app.command()
def resolve(
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the lock as JSON on stdout, and nothing else there.")
    ] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 when the lock is stale or upstream disagrees with it."),
    ] = False,
    offline: Annotated[
        bool, typer.Option("--offline", help="No network: validate the pins, and the lock against them.")
    ] = False,
    deep: Annotated[
        bool,
        typer.Option("--deep", help="With --check: download the wheel afresh and compare its sha256 with the lock."),
    ] = False,
    no_wheel_download: Annotated[
        bool,
        typer.Option(
            "--no-wheel-download",
            help="Do not download the wheel: its sha256 comes from the cache if an earlier resolve put it there; "
            "otherwise the lock says the wheel is not content-addressed.",
        ),
    ] = False,
) -> None:
    """Turn every pin into a verified fact and write the lock.

    Resolves the NeMo-RL and vLLM refs to full SHAs (GitHub API for github.com, git for other remotes), checks the
    vLLM PR is merged as the pinned commit, finds the wheel in the per-commit index and verifies it with HEAD, and
    resolves the base image tag to its digests. Lookups run concurrently. Then the wheel is downloaded once and its
    sha256 recorded (the build checks it): kept in the cache dir, reused by later resolves, resumed if interrupted.
    The GPU checks run on it: kernels for build.cuda_arch_list, and vLLM's symbols against the torch of NeMo-RL's
    uv.lock and the glibc/libstdc++ of the base image (its layers read from the top once, then cached).

    Endpoints move with $BUILDKIT_GITHUB_API and $BUILDKIT_WHEEL_INDEX (they win over pins); $GITHUB_TOKEN raises the
    GitHub rate limit, is sent only to api.github.com or $BUILDKIT_GITHUB_API (not to an API named in pins), and
    never appears in output or the lock. Answers are bounded: $BUILDKIT_HTTP_DEADLINE, $BUILDKIT_HTTP_MAX_*
    (docs/reference/environment.md); the wheel by $BUILDKIT_HTTP_MAX_WHEEL and the stall timeout $BUILDKIT_HTTP_STALL.

    \b
    Examples:
      buildkit resolve                 # write pins.lock
      buildkit resolve --check         # CI: lock current, upstream agrees?
      buildkit resolve --check --deep  # ... and the wheel's bytes, afresh
      buildkit resolve --offline       # no network: pins valid, lock consistent?
      buildkit resolve --json | jq .wheel.url
    """
    from buildkit.commands.resolve import run_resolve
    from buildkit.options import ResolveOptions

    opts = ResolveOptions.parse(
        json_out=json_out, check=check, offline=offline, deep=deep, no_wheel_download=no_wheel_download
    )
    run_resolve(_paths(pins, lock), opts)


CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        help="Where sources are cached [default: $BUILDKIT_CACHE_DIR or $XDG_CACHE_HOME/buildkit].",
    ),
]
OnePlatformOption = Annotated[
    str | None,
    typer.Option(
        "--platform",
        metavar="PLATFORM",
        show_default=False,
        help="With build.platforms: only this platform's image and records (build/<os>-<arch>/) [default: each "
        "platform in turn].",
    ),
]
BuildDirOption = Annotated[
    Path | None,
    typer.Option(
        "--build-dir",
        metavar="DIR",
        help="Where records and outputs go [default: beside the pins: build/ for pins.yaml, build-pins-gb200/ for "
        "pins-gb200.yaml].",
    ),
]
SubmodulesOption = Annotated[
    bool,
    typer.Option(
        "--submodules/--no-submodules",
        envvar="BUILDKIT_SUBMODULES",
        help="Check out NeMo-RL's submodules at their recorded commits; BUILDKIT_SUBMODULES=0 skips them for every "
        "command (enough for a smoke build).",
    ),
]


@app.command()
def prepare(
    ctx: typer.Context,
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    build_dir: BuildDirOption = None,
    cache_dir: CacheDirOption = None,
    submodules: SubmodulesOption = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the prepare record as JSON on stdout.")] = False,
) -> None:
    """Fetch NeMo-RL at the locked commit, with submodules, and apply the declared patches.

    Fetches only what is needed (the commit by SHA, shallow; each submodule's recorded commit, shallow) into a
    cache that later runs reuse, resets it to pristine, verifies HEAD, submodules and cleanliness, applies each
    patch from pins.yaml (a patch that no longer fits stops the run with the file, hunk and line), and writes
    build/prepare.json with every patch's diff and the target files' hashes before and after.

    Mirrors: pins.yaml `git_url_rewrites` (git's insteadOf) apply to every fetch, submodules included.
    """
    from buildkit.commands.prepare import prepare_command

    prepare_command(_paths(pins, lock, build_dir, cache_dir), submodules, json_out, _submodules_from(ctx, submodules))


@app.command()
def render(
    ctx: typer.Context,
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", metavar="PATH", help="Where to write the Dockerfile [default: build/Dockerfile]."
        ),
    ] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Show the rendered Dockerfile against upstream's.")] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 on drift findings (pins upstream does not expect).")
    ] = False,
    syntax: Annotated[
        bool,
        typer.Option(
            "--syntax/--no-syntax", help="Keep the `# syntax=` line; --no-syntax for builders without internet."
        ),
    ] = True,
    build_dir: BuildDirOption = None,
    platform: OnePlatformOption = None,
    cache_dir: CacheDirOption = None,
    submodules: SubmodulesOption = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")] = False,
) -> None:
    """Prepare the sources, then render upstream's docker/Dockerfile at the locked commit with the declared changes.

    Each change is a named transformation that must find its target in upstream's file (or render exits 4 naming
    it): base image by digest, dropped extras (with the reason as a comment), the custom vLLM from the locked
    commit and wheel, TORCH_CUDA_ARCH_LIST from pins, NEMO_RL_COMMIT, and provenance labels. Every other upstream
    line is kept. The same lock renders the same bytes. Drift (the pins give what upstream does not expect, such
    as another CUDA major) is a warning here and stops `build` unless --allow-drift.

    \b
    Examples:
      buildkit render                     # build/Dockerfile
      buildkit render --diff | less       # what differs from upstream's
      buildkit render --strict --no-syntax
    """
    from buildkit.commands.render import render_command
    from buildkit.options import RenderOptions

    opts = RenderOptions.parse(
        output=output,
        submodules=submodules,
        diff=diff,
        strict=strict,
        syntax=syntax,
        json_out=json_out,
        submodules_from=_submodules_from(ctx, submodules),
    )
    render_command(_paths(pins, lock, build_dir, cache_dir), opts, platform)


BumpNemoRlOption = Annotated[
    str | None,
    typer.Option(
        "--nemo-rl",
        metavar="REF",
        help="Branch or tag to move nemo_rl.ref to (its commit is pinned) [default: "
        "nemo_rl stays; `main` when --vllm is not given either].",
        show_default=False,
    ),
]
BumpVllmOption = Annotated[
    bool,
    typer.Option(
        "--vllm",
        help="Also move vLLM: an open vllm.pr is followed (its head; its merge commit once merged); otherwise "
        "vllm.ref moves to the newest commit of --vllm-branch that has a wheel (drops vllm.pr).",
    ),
]
BumpVllmBranchOption = Annotated[
    str | None,
    typer.Option(
        "--vllm-branch",
        metavar="BRANCH",
        help="The vLLM branch for --vllm (implies it) [default: main].",
        show_default=False,
    ),
]
BumpDryRunOption = Annotated[bool, typer.Option("--dry-run", help="Do every step, write nothing, print the summary.")]
BumpSummaryOption = Annotated[
    Path | None,
    typer.Option("--summary", metavar="PATH", help="Where to write the summary [default: build/bump.md]."),
]
BumpJsonOutOption = Annotated[
    bool, typer.Option("--json", help="Print the summary as JSON on stdout instead of markdown.")
]
BumpAllowUnrelatedOption = Annotated[
    bool,
    typer.Option(
        "--allow-unrelated",
        help="Move a pin even to a commit that does not contain the pinned one (older, or "
        "after a force-push); the summary says so.",
    ),
]
BumpAllowDriftOption = Annotated[
    bool,
    typer.Option(
        "--allow-drift",
        help="Exit 0 even when `buildkit build` would stop on the bumped pins (drift); without it, exit 7.",
    ),
]


@app.command()
def bump(
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    nemo_rl: BumpNemoRlOption = None,
    vllm: BumpVllmOption = False,
    vllm_branch: BumpVllmBranchOption = None,
    dry_run: BumpDryRunOption = False,
    summary: BumpSummaryOption = None,
    build_dir: BuildDirOption = None,
    cache_dir: CacheDirOption = None,
    submodules: SubmodulesOption = True,
    json_out: BumpJsonOutOption = False,
    allow_unrelated: BumpAllowUnrelatedOption = False,
    allow_drift: BumpAllowDriftOption = False,
) -> None:
    """Move the pins to newer upstream commits, check the move end to end, and summarize it for a reviewer.

    nemo_rl.ref moves to the head of a branch or a tag (pinned as its full SHA); with --vllm, vllm.ref moves to the
    newest commit of the branch with a wheel for wheel.arch/wheel.variant (at most 20 tried, newest first), and
    vllm.pr goes (the summary says whether the new commit contains it). pins.yaml is edited in place: comments,
    order, quoting and layout are kept, only the moved values change. Then, in staging: resolve (the wheel is
    downloaded and hashed), prepare (a declared patch upstream made obsolete is removed from nemo_rl.patches, with
    the reason; one that conflicts stops the bump, exit 4) and render. Only when every step succeeded are
    pins.yaml, pins.lock, build/prepare.json, build/Dockerfile, build/render.json and the summary written, all
    together; on a failure nothing is, and the summary so far is printed. The summary (markdown on stdout, and
    build/bump.md) gives old -> new commits, upstream's Dockerfile changes by stage and moved ARG defaults, each
    patch's status, the wheel, the CUDA checks and the pins diff.

    \b
    Examples:
      buildkit bump --dry-run              # nemo_rl to main's head: what changes?
      buildkit bump --nemo-rl v0.6.0       # to a tag, and write it all
      buildkit bump --nemo-rl main --vllm  # both; vLLM: newest with a wheel
      buildkit bump --vllm --vllm-branch releases/v0.15.0 --json | jq .moves
    """
    from buildkit.commands.bump import bump_command
    from buildkit.options import BumpOptions

    opts = BumpOptions.parse(
        nemo_rl=nemo_rl,
        vllm=vllm,
        vllm_branch=vllm_branch,
        dry_run=dry_run,
        summary=summary,
        submodules=submodules,
        json_out=json_out,
        allow_unrelated=allow_unrelated,
        allow_drift=allow_drift,
    )
    bump_command(_paths(pins, lock, build_dir, cache_dir), opts)


BuilderOption = Annotated[
    str | None,
    typer.Option(
        "--builder",
        metavar="NAME",
        help="buildx builder (local, docker-container, remote, kubernetes) [default: current].",
    ),
]


PushOption = Annotated[bool, typer.Option("--push/--load", help="Push to the tag's registry, or load into Docker.")]
SbomOption = Annotated[bool, typer.Option("--sbom", help="Attach an SBOM attestation (needs the scanner image).")]
CacheFromOption = Annotated[
    list[str], typer.Option("--cache-from", metavar="SPEC", help="buildx --cache-from spec (repeatable).")
]
CacheToOption = Annotated[
    list[str], typer.Option("--cache-to", metavar="SPEC", help="buildx --cache-to spec (repeatable).")
]
SharedCacheOption = Annotated[
    bool,
    typer.Option(
        "--shared-cache/--no-shared-cache",
        help="Import from and export to the registry cache pins.yaml names (build.cache) [default: on].",
        show_default=False,
    ),
]
CompressionOption = Annotated[
    Compression | None,
    typer.Option(
        "--compression",
        metavar=_choices(Compression),
        parser=_one_of(Compression),
        help="The layers of a pushed image [default: build.compression in pins.yaml, else gzip].",
        show_default=False,
    ),
]
ForceCompressionOption = Annotated[
    bool | None,
    typer.Option(
        "--force-compression/--no-force-compression",
        help="Re-compress the base image's layers too; nodes that already pulled the base then pull them again "
        "[default: build.force_compression, else off].",
        show_default=False,
    ),
]
ProgressOption = Annotated[
    ProgressMode,
    typer.Option(
        "--progress",
        metavar=_choices(ProgressMode),
        parser=_one_of(ProgressMode),
        envvar="BUILDKIT_PROGRESS",
        help="As buildx: auto is tty on a terminal, plain otherwise; live is tty.",
    ),
]
DryRunOption = Annotated[bool, typer.Option("--dry-run", help="Print the plan and the exact command; change nothing.")]
SmokeOption = Annotated[
    bool,
    typer.Option(
        "--smoke",
        help="Build the smoke target on a small stand-in base image: no GPU; once the lock is current and the "
        "tree prepared, no network but the stand-in's registry (see Network above).",
    ),
]
SmokeBaseOption = Annotated[
    str, typer.Option("--smoke-base", metavar="IMAGE", help="The stand-in base image for --smoke.")
]
MinFreeGbOption = Annotated[
    float | None,
    typer.Option("--min-free-gb", metavar="GB", help="Free space the builder needs [default: 100; 1 with --smoke]."),
]
SyntaxOption = Annotated[
    bool | None,
    typer.Option(
        "--syntax/--no-syntax",
        help="Keep the `# syntax=` line (the frontend image comes from Docker Hub) [default: kept; left out with "
        "--smoke, which uses the builder's own frontend and needs no internet].",
        show_default=False,
    ),
]
CheckReproducibleOption = Annotated[
    bool,
    typer.Option(
        "--check-reproducible",
        help="After the build, rebuild with no cache from a second clone of NeMo-RL and compare the two images "
        "file by file: exit 0 when identical, 1 naming what differs. Needs disk for two more copies of the image.",
    ),
]
PlatformBuilderOption = Annotated[
    list[str],
    typer.Option(
        "--platform-builder",
        metavar="PLATFORM=NAME",
        show_default=False,
        help="Build one platform of build.platforms on its own builder, e.g. linux/arm64=gb200 for a remote "
        "BuildKit on an arm64 machine (repeatable; the others use --builder).",
    ),
]
RebuildBuilderOption = Annotated[
    str | None,
    typer.Option(
        "--rebuild-builder", metavar="NAME", help="Run the --check-reproducible rebuild on this builder instead."
    ),
]
AllowDriftOption = Annotated[
    bool,
    typer.Option(
        "--allow-drift",
        help="Build even with drift findings (pins upstream does not expect, e.g. another CUDA major; the record "
        "and report "
        "keep the findings). Without it, drift stops the build before anything is written (exit 1).",
    ),
]
JsonOutOption = Annotated[bool, typer.Option("--json", help="Print the build record as JSON on stdout.")]
EmulateOption = Annotated[
    bool,
    typer.Option(
        "--emulate",
        help="Build a platform the builder runs only under QEMU emulation (binfmt_misc). Without it such a platform "
        "stops a release build at preflight: emulation is 4-10x slower for CPU-bound steps (bench/emulation.py), "
        "hours for a real build; a --smoke build goes ahead, said. `buildkit doctor` says where each platform runs.",
    ),
]


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def build(
    ctx: typer.Context,
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    builder: BuilderOption = None,
    push: PushOption = False,
    sbom: SbomOption = False,
    cache_from: CacheFromOption = [],  # noqa: B006
    cache_to: CacheToOption = [],  # noqa: B006
    shared_cache: SharedCacheOption = True,
    compression: CompressionOption = None,
    force_compression: ForceCompressionOption = None,
    progress: ProgressOption = ProgressMode.auto,
    dry_run: DryRunOption = False,
    smoke: SmokeOption = False,
    smoke_base: SmokeBaseOption = "127.0.0.1:5000/buildkit/stand-in-base:1",
    min_free_gb: MinFreeGbOption = None,
    syntax: SyntaxOption = None,
    check_reproducible: CheckReproducibleOption = False,
    rebuild_builder: RebuildBuilderOption = None,
    allow_drift: AllowDriftOption = False,
    build_dir: BuildDirOption = None,
    cache_dir: CacheDirOption = None,
    submodules: SubmodulesOption = True,
    json_out: JsonOutOption = False,
    emulate: EmulateOption = False,
    platform_builder: PlatformBuilderOption = [],  # noqa: B006
) -> None:
    """Build the image: resolve, prepare and render as needed, then `docker buildx build`.

    Runs the earlier stages that are missing or stale, checks the engine (`buildkit doctor`), then runs buildx with
    the rendered Dockerfile, `--build-context nemo-rl=<prepared tree>`, the target, platform and tag, the custom
    vLLM build args from the lock, SOURCE_DATE_EPOCH (the NeMo-RL commit time) with `rewrite-timestamp=true` on the
    exporter, a metadata file and provenance (mode=max) where the driver supports it. Live progress on a terminal,
    the full log in build/logs/, and the record in build/record.json. Anything after `--` goes to buildx unchanged.
    Ctrl-C cancels cleanly (exit 130).

    Several platforms (build.platforms): each is prepared, rendered and built in turn into build/<os>-<arch>/,
    tagged <tag>-<arch> (`nemo-rl:grpo-arm64`); with --push the plain tag then names one image index of them all
    (`docker buildx imagetools create`), and build/index.json records the index and each platform's digest.

    Network: resolve, only when the lock is missing or stale, asks GitHub ($BUILDKIT_GITHUB_API), the wheel index
    ($BUILDKIT_WHEEL_INDEX), the base image's registry and, once, the torch index for the ABI check
    ($BUILDKIT_TORCH_INDEX); prepare fetches NeMo-RL and its submodules only when the tree is not prepared yet;
    buildx pulls the base image, the `# syntax=` frontend and what the Dockerfile downloads. With a
    current lock and a prepared tree, --smoke asks only the stand-in base's registry (127.0.0.1:5000 by default:
    pinned, then pulled by the builder); nothing else. See docs/how-to/no-internet.md.

    \b
    Examples:
      buildkit build --dry-run                  # the exact command
      buildkit build --builder remote-bk        # any buildx builder
      buildkit build --smoke --progress plain   # the CI smoke build
      buildkit build --smoke --check-reproducible  # rebuild, compare
      buildkit build --push --compression zstd  # zstd layers, pushed
      buildkit build -- --no-cache              # extra buildx flags
      buildkit build --push --emulate           # QEMU where not native
      buildkit build --platform-builder linux/arm64=gb200  # its own builder
    """
    from buildkit.commands.build import build_command
    from buildkit.options import BuildOptions

    opts = _options(
        BuildOptions.parse,
        builder=builder,
        push=push,
        sbom=sbom,
        smoke=smoke,
        smoke_base=smoke_base,
        dry_run=dry_run,
        progress=progress,
        cache_from=cache_from,
        cache_to=cache_to,
        shared_cache=shared_cache,
        compression=compression,
        syntax=syntax,
        check_reproducible=check_reproducible,
        rebuild_builder=rebuild_builder,
        submodules=submodules,
        force_compression=force_compression,
        min_free_gb=min_free_gb,
        allow_drift=allow_drift,
        extra=ctx.args,
        json_out=json_out,
        submodules_from=_submodules_from(ctx, submodules),
        emulate=emulate,
        platform_builders=platform_builder,
    )
    build_command(_paths(pins, lock, build_dir, cache_dir), opts)


@app.command()
def doctor(
    ctx: typer.Context,
    pins: PinsOption = Path("pins.yaml"),
    builder: BuilderOption = None,
    min_free_gb: Annotated[
        float, typer.Option("--min-free-gb", metavar="GB", help="Free space the build needs.")
    ] = 100.0,
    push: Annotated[bool, typer.Option("--push", help="Also check registry credentials for pushing.")] = False,
    tag: Annotated[
        str | None,
        typer.Option(
            "--tag",
            metavar="TAG",
            help="Image tag to check credentials for [default: the pins' build.tag, else nemo-rl:latest].",
            show_default=False,
        ),
    ] = None,
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            metavar="PLATFORM",
            help="Platform the builder must offer [default: the pins' build.platform, else linux/amd64].",
            show_default=False,
        ),
    ] = None,
    submodules: SubmodulesOption = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON on stdout.")] = False,
    platform_builder: PlatformBuilderOption = [],  # noqa: B006
) -> None:
    """Check that this machine can build: engine, buildx, builder and driver, platform, disk, credentials.

    The platform and tag are the pins' (pins.yaml here or above, or --pins) unless given; the platform, the target
    and the submodule setting the build would take are printed first, each with where it came from. Exit 0 when
    every check passes, 1 when one fails (each failure says what to do).
    """
    from buildkit.commands.doctor import doctor_command
    from buildkit.options import DoctorOptions, parse_platform_builders

    opts = _options(
        DoctorOptions,
        builder=builder,
        min_free_gb=min_free_gb,
        push=push,
        tag=tag,
        platform=platform,
        submodules=submodules,
        submodules_from=_submodules_from(ctx, submodules),
        json_out=json_out,
        platform_builders=_options(parse_platform_builders, given=platform_builder),
    )
    doctor_command(_found_pins(pins), opts)


def _found_pins(pins: Path) -> Path | None:
    """The pins file a command that does not need one uses: as _paths finds it; None when there is none."""
    if pins == Path("pins.yaml") and not pins.exists():
        from buildkit.models.discovery import find_pins

        return find_pins(Path.cwd())
    return pins


@app.command(cls=_Command)
def verify(
    image: Annotated[
        str | None, typer.Argument(metavar="IMAGE", help="Image to check [default: the last successful build's].")
    ] = None,
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    build_dir: BuildDirOption = None,
    platform: OnePlatformOption = None,
    gpus: Annotated[
        bool,
        typer.Option(
            "--gpus", help="Also check torch sees a GPU of an architecture in build.cuda_arch_list, and its kernels."
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the verify record as JSON on stdout.")] = False,
    provenance: Annotated[
        bool,
        typer.Option(
            "--provenance",
            help="Instead: read the pushed image's BuildKit provenance and buildkit's signed statement from its "
            "registry and check both against the lock (needs --key).",
        ),
    ] = False,
    key: Annotated[
        str | None,
        typer.Option("--key", metavar="KEY", help="With --provenance: the public key (cosign.pub) or KMS URI."),
    ] = None,
    driver: Annotated[
        list[str],
        typer.Option(
            "--driver",
            metavar="VERSION",
            help="A node's NVIDIA driver (580.65.06); repeatable: does "
            "the image's CUDA run there natively, through forward compatibility (data-center GPUs), or not.",
        ),
    ] = [],  # noqa: B006
) -> None:
    """Check the built image against the lock, inside containers with no network.

    Checks: the vLLM version names the locked commit (+g<9 hex>); sglang is not importable; NEMO_RL_COMMIT and
    the provenance labels match the lock; the container fingerprint exists; the patched tools/build-custom-vllm.sh
    is the one the prepare record holds; every shared object of the image's Python environments has kernels for
    build.cuda_arch_list where build.gpu_required says, and vLLM's symbols resolve against the image's torch,
    glibc and libstdc++; each --driver is judged against NVIDIA's tables. --gpus adds: torch sees a GPU of
    compute capability 9.0 and sm_90, and the prediction for its driver holds.
    Checks that cannot apply (vLLM in a smoke image) are skipped with the reason. Writes build/verify.json, which
    `buildkit report` reads. Exit 1 when a check fails.
    """
    from buildkit.commands.verify import verify_command
    from buildkit.options import VerifyOptions

    opts = _options(
        VerifyOptions.parse, image=image, gpus=gpus, json_out=json_out, provenance=provenance, key=key, drivers=driver
    )
    verify_command(_paths(pins, lock, build_dir), opts, platform)


@app.command()
def report(
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    record: Annotated[
        Path | None,
        typer.Option("--record", metavar="PATH", help="Build record [default: build/record.json, if it exists]."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="PATH", help="Write here instead of stdout.")
    ] = None,
    fmt: Annotated[
        ReportFormat,
        typer.Option(
            "--format", "-f", metavar=_choices(ReportFormat), parser=_one_of(ReportFormat), help="The report's format."
        ),
    ] = ReportFormat.markdown,
    results: Annotated[
        Path | None,
        typer.Option(
            "--results", metavar="PATH", help="Training metrics per step (YAML or CSV) for 'Verified results'."
        ),
    ] = None,
    build_dir: BuildDirOption = None,
    platform: OnePlatformOption = None,
) -> None:
    """The provenance report, from the lock and the prepare, build and verify records.

    Every fact comes from those files: components, commits with their subjects, dates and links, the wheel and
    the base image digests, each applied patch as a diff with its reason, the rendered Dockerfile against
    upstream's, the exact build command, builder and versions, the image, the verification results, how to
    reproduce it, and the known issues from pins. A report made before any build says so. The same inputs give
    the same bytes.

    \b
    Examples:
      buildkit report -o report.md
      buildkit report --format json | jq .image.digest
      buildkit report --record build/smoke-record.json --results results.yaml
    """
    from buildkit.commands.report import report_command
    from buildkit.options import ReportOptions

    opts = ReportOptions.parse(record=record, output=output, fmt=fmt, results=results)
    report_command(_paths(pins, lock, build_dir), opts, platform)


@app.command()
def attest(
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    record: Annotated[
        Path | None,
        typer.Option("--record", metavar="PATH", help="Build record [default: the newest, as verify picks it]."),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(
            "--key",
            metavar="KEY",
            help="Sign with this cosign key (a file from `cosign generate-key-pair`, password in $COSIGN_PASSWORD; "
            "or a KMS URI) and attach the envelope to the pushed image.",
        ),
    ] = None,
    builder_id: Annotated[
        str | None,
        typer.Option(
            "--builder-id", metavar="URI", help="runDetails.builder.id: a URI for the platform that ran the build."
        ),
    ] = None,
    build_dir: BuildDirOption = None,
    platform: OnePlatformOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the statement on stdout.")] = False,
    repository: Annotated[
        str | None,
        typer.Option(
            "--repository",
            metavar="NAME",
            help="The subject's repository when the image was copied from build.tag's (shown in the statement).",
        ),
    ] = None,
) -> None:
    """Write the build's SLSA provenance v1 (an in-toto statement); with --key, sign it and attach it.

    The statement comes from the records only: subject = the image name and digest from the build record;
    externalParameters = the validated pins; internalParameters = builder, driver, versions, platform, target and
    build args; resolvedDependencies = NeMo-RL and vLLM commits, the wheel (URL, sha256), the base image digest,
    each patch, the templates and the rendered Dockerfile; byproducts = the record and the log, by digest. Same
    inputs, same bytes. It goes to build/provenance.intoto.json (build/smoke/ for a smoke build); signed, to
    provenance.dsse.json beside it, and onto the image in its registry, where `cosign verify-attestation --type
    slsaprovenance1` checks it. Signing uses no transparency log (docs/how-to/sign-and-verify.md).

    \b
    Examples:
      buildkit attest                              # the statement only
      COSIGN_PASSWORD=... buildkit attest --key cosign.key
      buildkit attest --record build/smoke-record.json --json \\
        | jq .predicate.buildDefinition
    """
    from buildkit.commands.attest import attest_command
    from buildkit.options import AttestOptions

    opts = AttestOptions.parse(record=record, key=key, builder_id=builder_id, json_out=json_out, repository=repository)
    attest_command(_paths(pins, lock, build_dir), opts, platform)


@app.command(cls=_Command)
def export(
    image: Annotated[
        str | None,
        typer.Argument(
            metavar="IMAGE", help="Image in the local Docker to export [default: the newest successful build's]."
        ),
    ] = None,
    pins: PinsOption = Path("pins.yaml"),
    lock: LockOption = None,
    build_dir: BuildDirOption = None,
    platform: OnePlatformOption = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="The .sqsh to write [default: build/<image>.sqsh; build/smoke/ for a smoke build].",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the export record as JSON on stdout.")] = False,
) -> None:
    """Export the image as an enroot squashfs (.sqsh), to run it on Slurm with pyxis.

    The .sqsh holds what `enroot import dockerd://IMAGE` makes: the image's files (its layers stacked, whiteouts
    applied, /dev left out), its ENV in /etc/environment, its working directory, entrypoint and command in /etc/rc,
    its volumes in /etc/fstab, every file root's. It is made with enroot's mksquashfs options (-comp lzo -noD),
    every timestamp set to the build's SOURCE_DATE_EPOCH, so the same image gives the same bytes. The sha256 and
    size go into build/squashfs.json (build/smoke/ for a smoke build), which `buildkit report` shows in its Slurm
    section with the srun line. Needs mksquashfs 4.5 or later (apt-get install squashfs-tools) and free space for
    about twice the image beside the output; the file appears only when it is complete.

    \b
    Examples:
      buildkit export           # the newest build's image -> build/<image>.sqsh
      buildkit export -o /shared/nemo-rl.sqsh
      srun --container-image=/shared/nemo-rl.sqsh \\
        --container-workdir=/opt/nemo-rl --pty bash
    """
    from buildkit.commands.export import export_command
    from buildkit.options import ExportOptions

    opts = ExportOptions.parse(image=image, output=output, json_out=json_out)
    export_command(_paths(pins, lock, build_dir), opts, platform)


@app.command()
def schema() -> None:
    """Print the JSON Schema of pins.yaml, for editors and CI validation.

    Example: buildkit schema > pins.schema.json, then point your editor's YAML language server at it.
    """
    from buildkit.commands.schema import schema_command

    schema_command()


def _stop_as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM (a CI cancel, `timeout`) and SIGHUP (a closed terminal) end a run as Ctrl-C does: buildx is asked to
    cancel, the record says interrupted, temp files go. The signal's name rides along for the log."""
    import signal

    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    import signal

    from buildkit.errors import BuildkitError

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop_as_ctrl_c)
    try:
        app()
    except BuildkitError as err:
        from buildkit.text.ui import print_error

        print_error(err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt as stop:  # before or after a command ran (_Group says it for the commands)
        _say_interrupted(None, f"interrupted ({stop.args[0] if stop.args else 'Ctrl-C'})")
        sys.exit(130)
    except Exception as err:  # noqa: BLE001 -- a bug: say so briefly; the traceback is one variable away
        if os.environ.get("BUILDKIT_DEBUG"):
            raise
        from buildkit.text.ui import without_secrets

        sys.stderr.write(
            f"buildkit: internal error: {type(err).__name__}: {without_secrets(str(err))}\n"
            "  rerun with BUILDKIT_DEBUG=1 for the traceback, and please report it\n"
        )
        sys.exit(70)


if __name__ == "__main__":
    main()
