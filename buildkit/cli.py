"""The buildkit command line: parse options, call one stage, print. No logic lives here.

Imports of pydantic, requests, jinja2 and the docker SDK happen inside the commands that use them, so that
`buildkit --help` starts about as fast as typer itself (measured in bench/cold_start.py).
"""

# No `from __future__ import annotations` here: typer reads every command's annotations (twice) on each start,
# and evaluating them once at import is faster than evaluating strings each time (bench/cold_start.py).
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from buildkit import __version__, flags
from buildkit.errors import EXIT_CODES
from buildkit.models.choices import ProgressMode, ReportFormat
from buildkit.stages.pipeline import STAGES


def _help() -> str:
    pipeline = "".join(f"  {s.name:8} {s.reads} -> {s.writes}\n" for s in STAGES.values())
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


@app.command()
def resolve(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    json_out: flags.ResolveJsonOut = False,
    check: flags.ResolveCheck = False,
    offline: flags.ResolveOffline = False,
    deep: flags.ResolveDeep = False,
    no_wheel_download: flags.ResolveNoWheelDownload = False,
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

    run_resolve(*flags.parsed(ctx, ResolveOptions))


@app.command()
def prepare(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    build_dir: flags.BuildDir = None,
    cache_dir: flags.CacheDir = None,
    submodules: flags.Submodules = True,
    json_out: flags.PrepareJsonOut = False,
) -> None:
    """Fetch NeMo-RL at the locked commit, with submodules, and apply the declared patches.

    Fetches only what is needed (the commit by SHA, shallow; each submodule's recorded commit, shallow) into a
    cache that later runs reuse, resets it to pristine, verifies HEAD, submodules and cleanliness, applies each
    patch from pins.yaml (a patch that no longer fits stops the run with the file, hunk and line), and writes
    build/prepare.json with every patch's diff and the target files' hashes before and after.

    Mirrors: pins.yaml `git_url_rewrites` (git's insteadOf) apply to every fetch, submodules included.
    """
    from buildkit.commands.prepare import prepare_command
    from buildkit.options import PrepareOptions

    prepare_command(*flags.parsed(ctx, PrepareOptions))


@app.command()
def render(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    output: flags.RenderOutput = None,
    diff: flags.RenderDiff = False,
    strict: flags.RenderStrict = False,
    syntax: flags.RenderSyntax = True,
    build_dir: flags.BuildDir = None,
    platform: flags.OnePlatform = None,
    cache_dir: flags.CacheDir = None,
    submodules: flags.Submodules = True,
    json_out: flags.RenderJsonOut = False,
) -> None:
    """Prepare the sources, then render upstream's docker/Dockerfile at the locked commit with the declared changes.

    Each change is a named transformation that must find its target in upstream's file (or render exits 4 naming
    it): base image by digest, dropped extras (with the reason as a comment), the custom vLLM from the locked
    commit and wheel (its commit and URL also in the image's environment; a source that differs from the wheel's
    commit in Python only is laid over that commit's install last, so a moved PR head rebuilds that alone),
    TORCH_CUDA_ARCH_LIST from pins, NEMO_RL_COMMIT, and provenance labels. Every other upstream line is kept. The
    same lock renders the same bytes. Drift (the pins give what upstream does not expect, such as another CUDA
    major) is a warning here and stops `build` unless --allow-drift.

    \b
    Examples:
      buildkit render                     # build/Dockerfile
      buildkit render --diff | less       # what differs from upstream's
      buildkit render --strict --no-syntax
    """
    from buildkit.commands.render import render_command
    from buildkit.options import RenderCommandOptions

    render_command(*flags.parsed(ctx, RenderCommandOptions))


@app.command()
def bump(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    nemo_rl: flags.BumpNemoRl = None,
    vllm: flags.BumpVllm = False,
    vllm_branch: flags.BumpVllmBranch = None,
    dry_run: flags.BumpDryRun = False,
    summary: flags.BumpSummary = None,
    build_dir: flags.BuildDir = None,
    cache_dir: flags.CacheDir = None,
    submodules: flags.Submodules = True,
    json_out: flags.BumpJsonOut = False,
    allow_unrelated: flags.BumpAllowUnrelated = False,
    allow_drift: flags.BumpAllowDrift = False,
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

    bump_command(*flags.parsed(ctx, BumpOptions))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def build(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    builder: flags.Builder = None,
    push: flags.Push = False,
    sbom: flags.Sbom = False,
    attestations: flags.Attestations = True,
    cache_from: flags.CacheFrom = [],  # noqa: B006
    cache_to: flags.CacheTo = [],  # noqa: B006
    shared_cache: flags.SharedCache = True,
    compression: flags.LayerCompression = None,
    force_compression: flags.ForceCompression = None,
    progress: flags.Progress = ProgressMode.auto,
    dry_run: flags.DryRun = False,
    smoke: flags.Smoke = False,
    smoke_base: flags.SmokeBase = "127.0.0.1:5000/buildkit/stand-in-base:1",
    min_free_gb: flags.MinFreeGb = None,
    syntax: flags.Syntax = None,
    check_reproducible: flags.CheckReproducible = False,
    rebuild_builder: flags.RebuildBuilder = None,
    allow_drift: flags.AllowDrift = False,
    build_dir: flags.BuildDir = None,
    cache_dir: flags.CacheDir = None,
    submodules: flags.Submodules = True,
    json_out: flags.JsonOut = False,
    emulate: flags.Emulate = False,
    platform_builder: flags.PlatformBuilder = [],  # noqa: B006
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

    build_command(*flags.parsed(ctx, BuildOptions, extra=ctx.args))


@app.command()
def doctor(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    builder: flags.Builder = None,
    min_free_gb: flags.DoctorMinFreeGb = 100.0,
    push: flags.DoctorPush = False,
    tag: flags.DoctorTag = None,
    platform: flags.DoctorPlatform = None,
    submodules: flags.Submodules = True,
    json_out: flags.DoctorJsonOut = False,
    platform_builder: flags.PlatformBuilder = [],  # noqa: B006
) -> None:
    """Check that this machine can build: engine, buildx, builder and driver, platform, disk, credentials.

    The platform and tag are the pins' (pins.yaml here or above, or --pins) unless given; the platform, the target
    and the submodule setting the build would take are printed first, each with where it came from. Exit 0 when
    every check passes, 1 when one fails (each failure says what to do).
    """
    from buildkit.commands.doctor import doctor_command
    from buildkit.options import DoctorOptions

    doctor_command(flags.found_pins(ctx.params["pins"]), flags.parsed_options(ctx, DoctorOptions))


@app.command(cls=flags.Command)
def verify(
    ctx: typer.Context,
    image: flags.VerifyImage = None,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    build_dir: flags.BuildDir = None,
    platform: flags.OnePlatform = None,
    gpus: flags.VerifyGpus = False,
    json_out: flags.VerifyJsonOut = False,
    provenance: flags.VerifyProvenance = False,
    key: flags.VerifyKey = None,
    drivers: flags.VerifyDriver = [],  # noqa: B006
    sqsh: flags.VerifySqsh = None,
) -> None:
    """Check the built image against the lock, inside containers with no network.

    Checks: the vLLM version names the locked commit (+g<9 hex>); sglang is not importable; NEMO_RL_COMMIT and
    the provenance labels match the lock; the image's environment names the locked wheel (its commit and URL);
    the container fingerprint exists; the patched tools/build-custom-vllm.sh is the one the prepare record holds;
    every shared object of the image's Python environments has kernels for build.cuda_arch_list where
    build.gpu_required says, and vLLM's symbols resolve against the image's torch, glibc and libstdc++; each
    --driver is judged against NVIDIA's tables. --gpus adds: torch sees a GPU of compute capability 9.0 and sm_90.
    Checks that cannot apply are skipped with the reason. Writes build/verify.json. Exit 1 when a check fails.
    """
    from buildkit.commands.verify import verify_command
    from buildkit.options import VerifyOptions

    verify_command(*flags.parsed(ctx, VerifyOptions))


@app.command()
def report(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    record: flags.ReportRecord = None,
    output: flags.ReportOutput = None,
    fmt: flags.ReportFmt = ReportFormat.markdown,
    results: flags.ReportResults = None,
    build_dir: flags.BuildDir = None,
    platform: flags.OnePlatform = None,
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

    report_command(*flags.parsed(ctx, ReportOptions))


@app.command()
def attest(
    ctx: typer.Context,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    record: flags.AttestRecord = None,
    key: flags.AttestKey = None,
    builder_id: flags.AttestBuilderId = None,
    build_dir: flags.BuildDir = None,
    platform: flags.OnePlatform = None,
    json_out: flags.AttestJsonOut = False,
    repository: flags.AttestRepository = None,
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

    attest_command(*flags.parsed(ctx, AttestOptions))


@app.command(cls=flags.Command)
def export(
    ctx: typer.Context,
    image: flags.ExportImage = None,
    pins: flags.Pins = Path("pins.yaml"),
    lock: flags.Lock = None,
    build_dir: flags.BuildDir = None,
    platform: flags.OnePlatform = None,
    output: flags.ExportOutput = None,
    to: flags.ExportTo = None,
    key: flags.ExportKey = None,
    json_out: flags.ExportJsonOut = False,
) -> None:
    """Export the image as an enroot squashfs (.sqsh), to run it on Slurm with pyxis.

    The .sqsh holds what `enroot import dockerd://IMAGE` makes: the image's files (layers stacked, whiteouts applied,
    /dev left out), ENV in /etc/environment, working directory, entrypoint and command in /etc/rc, volumes in
    /etc/fstab, every file root's; made with enroot's mksquashfs options (-comp lzo -noD), every timestamp the build's
    SOURCE_DATE_EPOCH: the same image gives the same bytes. Its sha256 goes into build/squashfs.json, which the report
    shows with the srun line. Needs mksquashfs 4.5+ (squashfs-tools) and space for about twice the image beside the
    output; the file appears only when complete. --to DIR publishes by digest (docs/how-to/slurm.md).

    \b
    Examples:
      buildkit export           # the newest build's image -> build/<image>.sqsh
      buildkit export --to /shared/images   # -> nemo-rl@sha256-<hex>.sqsh
      srun --container-image=/shared/images/nemo-rl@sha256-<hex>.sqsh --pty bash
    """
    from buildkit.commands.export import export_command
    from buildkit.options import ExportOptions

    export_command(*flags.parsed(ctx, ExportOptions))


@app.command()
def schema() -> None:
    """Print the JSON Schema of pins.yaml, for editors and CI validation.

    Example: buildkit schema > pins.schema.json, then point your editor's YAML language server at it.
    """
    from buildkit.commands.schema import schema_command

    schema_command()


def main() -> None:
    from buildkit.errors import BuildkitError
    from buildkit.stopping import STOPPED, stop_on_signals

    stop_on_signals()
    try:
        app()
    except SystemExit as done:  # typer ends every run so; a stop whose KeyboardInterrupt was lost ends with 130
        if STOPPED.is_set() and done.code in (0, None):
            _say_interrupted(None, "interrupted (a signal arrived where it could not stop the command at once)")
            sys.exit(130)
        raise
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
