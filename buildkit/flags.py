"""The command line's options, each declared once: its flag, metavar, help and environment variable, as typer
reads them from a parameter's annotation (`pins: flags.Pins = Path("pins.yaml")` in cli.py). A parameter's name is
the keyword its options class's `parse` takes (buildkit/options.py), so cli.py passes the parsed command line on
whole. Named after the command where two commands' flags of one name differ in help (`--json`)."""

# No `from __future__ import annotations`: typer reads these at start-up (cli.py says why).
import inspect
import os
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from buildkit.errors import OptionError
from buildkit.models.choices import Compression, ProgressMode, ReportFormat
from buildkit.models.paths import Paths


def _options(parse, **given):
    """A stage's options parsed; a value it refuses (OptionError) is typer's usage error for that option (exit 2)."""
    try:
        return parse(**given)
    except OptionError as exc:
        raise typer.BadParameter(exc.message, param_hint=exc.param_hint) from None


def _paths(pins: Path, lock: Path | None = None, build_dir: Path | None = None, cache_dir: Path | None = None):
    from buildkit.models.discovery import check_build_dir

    found = found_pins(pins)
    if found is not None and found != pins:  # the nearest trusted pins.yaml above, said on stderr
        from buildkit.text.ui import note

        note(f"using {found}")
    paths = Paths.of(found or pins, lock, build_dir, cache_dir)
    check_build_dir(paths.build_dir)
    return paths


_WHERE = ("pins", "lock", "build_dir", "cache_dir")  # the parameters that say where the files are (Paths)


def parsed(ctx: typer.Context, kind, **more):
    """(paths, options): the command line as the command's options class parses it (each parameter's name is a
    keyword of its `parse`), then the paths it names: a wrong value stops the command before pins are looked for."""
    opts = parsed_options(ctx, kind, **more)
    return _paths(**{name: ctx.params[name] for name in _WHERE if name in ctx.params}), opts


def parsed_options(ctx: typer.Context, kind, **more):
    given = {name: value for name, value in ctx.params.items() if name not in _WHERE} | more
    parse = getattr(kind, "parse", kind)
    takes = inspect.signature(parse).parameters
    if "submodules" in given and ("submodules_from" in takes or any(p.kind == p.VAR_KEYWORD for p in takes.values())):
        given["submodules_from"] = _submodules_from(ctx, given["submodules"])
    return _options(parse, **given)


def _submodules_from(ctx: typer.Context, on: bool) -> str:
    """Which flag or variable set --submodules/--no-submodules, as messages name it ("default" when neither did)."""
    source = getattr(ctx.get_parameter_source("submodules"), "name", None)  # click's ParameterSource, by name
    if source == "ENVIRONMENT":
        return f"BUILDKIT_SUBMODULES={os.environ.get('BUILDKIT_SUBMODULES', '')}"
    if source == "COMMANDLINE":
        return "--submodules" if on else "--no-submodules"
    return "default"


def found_pins(pins: Path) -> Path | None:
    """The pins file: the one given, else (the default name, not here) the nearest trusted pins.yaml above, as git
    finds a repository; None when there is none."""
    if pins == Path("pins.yaml") and not pins.exists():
        from buildkit.models.discovery import find_pins

        return find_pins(Path.cwd())
    return pins


class Command(typer.core.TyperCommand):
    """A command whose arguments show their metavar alone (IMAGE): typer appends the Python type (`<str>`), which
    teaches nothing and reads like a placeholder."""

    def __init__(self, *args, params=None, **kwargs) -> None:
        for param in params or []:
            if type(param) is typer.core.TyperArgument:
                param.__class__ = Argument
        super().__init__(*args, params=params, **kwargs)


class Argument(typer.core.TyperArgument):
    def display_type_rich(self, ctx) -> None:
        return None


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


Pins = Annotated[
    Path, typer.Option("--pins", "-p", metavar="PATH", help="The pins file.", envvar="BUILDKIT_PINS", show_default=True)
]
Lock = Annotated[
    Path | None,
    typer.Option(
        "--lock",
        "-l",
        metavar="PATH",
        help="The lock file [default: beside the pins, named after them: pins.lock for pins.yaml, pins-gb200.lock "
        "for pins-gb200.yaml].",
    ),
]
CacheDir = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        metavar="DIR",
        help="Where sources are cached [default: $BUILDKIT_CACHE_DIR or $XDG_CACHE_HOME/buildkit].",
    ),
]
OnePlatform = Annotated[
    str | None,
    typer.Option(
        "--platform",
        metavar="PLATFORM",
        show_default=False,
        help="With build.platforms: only this platform's image and records (build/<os>-<arch>/) [default: each "
        "platform in turn].",
    ),
]
BuildDir = Annotated[
    Path | None,
    typer.Option(
        "--build-dir",
        metavar="DIR",
        help="Where records and outputs go [default: beside the pins: build/ for pins.yaml, build-pins-gb200/ for "
        "pins-gb200.yaml].",
    ),
]
Submodules = Annotated[
    bool,
    typer.Option(
        "--submodules/--no-submodules",
        envvar="BUILDKIT_SUBMODULES",
        help="Check out NeMo-RL's submodules at their recorded commits; BUILDKIT_SUBMODULES=0 skips them for every "
        "command (enough for a smoke build).",
    ),
]
BumpNemoRl = Annotated[
    str | None,
    typer.Option(
        "--nemo-rl",
        metavar="REF",
        help="Branch or tag to move nemo_rl.ref to (its commit is pinned) [default: "
        "nemo_rl stays; `main` when --vllm is not given either].",
        show_default=False,
    ),
]
BumpVllm = Annotated[
    bool,
    typer.Option(
        "--vllm",
        help="Also move vLLM: an open vllm.pr is followed (its head; its merge commit once merged); otherwise "
        "vllm.ref moves to the newest commit of --vllm-branch that has a wheel (drops vllm.pr).",
    ),
]
BumpVllmBranch = Annotated[
    str | None,
    typer.Option(
        "--vllm-branch",
        metavar="BRANCH",
        help="The vLLM branch for --vllm (implies it) [default: main].",
        show_default=False,
    ),
]
BumpDryRun = Annotated[bool, typer.Option("--dry-run", help="Do every step, write nothing, print the summary.")]
BumpSummary = Annotated[
    Path | None,
    typer.Option("--summary", metavar="PATH", help="Where to write the summary [default: build/bump.md]."),
]
BumpJsonOut = Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout instead of markdown.")]
BumpAllowUnrelated = Annotated[
    bool,
    typer.Option(
        "--allow-unrelated",
        help="Move a pin even to a commit that does not contain the pinned one (older, or "
        "after a force-push); the summary says so.",
    ),
]
BumpAllowDrift = Annotated[
    bool,
    typer.Option(
        "--allow-drift",
        help="Exit 0 even when `buildkit build` would stop on the bumped pins (drift); without it, exit 7.",
    ),
]
Builder = Annotated[
    str | None,
    typer.Option(
        "--builder",
        metavar="NAME",
        help="buildx builder (local, docker-container, remote, kubernetes) [default: current].",
    ),
]
Push = Annotated[bool, typer.Option("--push/--load", help="Push to the tag's registry, or load into Docker.")]
Sbom = Annotated[bool, typer.Option("--sbom", help="Attach an SBOM attestation (needs the scanner image).")]
Attestations = Annotated[
    bool,
    typer.Option(
        "--attestations/--no-attestations",
        help="Attach buildx's provenance attestation (mode=max) where the result can hold it. --no-attestations "
        "leaves the pushed index without buildx's unknown/unknown entries, for consumers that do not skip them; "
        "verify --provenance then finds no BuildKit provenance.",
    ),
]
CacheFrom = Annotated[
    list[str], typer.Option("--cache-from", metavar="SPEC", help="buildx --cache-from spec (repeatable).")
]
CacheTo = Annotated[list[str], typer.Option("--cache-to", metavar="SPEC", help="buildx --cache-to spec (repeatable).")]
SharedCache = Annotated[
    bool,
    typer.Option(
        "--shared-cache/--no-shared-cache",
        help="Import from and export to the registry cache pins.yaml names (build.cache) [default: on].",
        show_default=False,
    ),
]
LayerCompression = Annotated[
    Compression | None,
    typer.Option(
        "--compression",
        metavar=_choices(Compression),
        parser=_one_of(Compression),
        help="The layers of a pushed image [default: build.compression in pins.yaml, else gzip].",
        show_default=False,
    ),
]
ForceCompression = Annotated[
    bool | None,
    typer.Option(
        "--force-compression/--no-force-compression",
        help="Re-compress the base image's layers too; nodes that already pulled the base then pull them again "
        "[default: build.force_compression, else off].",
        show_default=False,
    ),
]
Progress = Annotated[
    ProgressMode,
    typer.Option(
        "--progress",
        metavar=_choices(ProgressMode),
        parser=_one_of(ProgressMode),
        envvar="BUILDKIT_PROGRESS",
        help="As buildx: auto is tty on a terminal, plain otherwise; live is tty.",
    ),
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the plan and the exact command; change nothing.")]
Smoke = Annotated[
    bool,
    typer.Option(
        "--smoke",
        help="Build the smoke target on a small stand-in base image: no GPU; once the lock is current and the "
        "tree prepared, no network but the stand-in's registry (see Network above).",
    ),
]
SmokeBase = Annotated[str, typer.Option("--smoke-base", metavar="IMAGE", help="The stand-in base image for --smoke.")]
MinFreeGb = Annotated[
    float | None,
    typer.Option("--min-free-gb", metavar="GB", help="Free space the builder needs [default: 100; 1 with --smoke]."),
]
Syntax = Annotated[
    bool | None,
    typer.Option(
        "--syntax/--no-syntax",
        help="Keep the `# syntax=` line (the frontend image comes from Docker Hub) [default: kept; left out with "
        "--smoke, which uses the builder's own frontend and needs no internet].",
        show_default=False,
    ),
]
CheckReproducible = Annotated[
    bool,
    typer.Option(
        "--check-reproducible",
        help="After the build, rebuild with no cache from a second clone of NeMo-RL and compare the two images "
        "file by file: exit 0 when identical, 1 naming what differs. Needs disk for two more copies of the image.",
    ),
]
PlatformBuilder = Annotated[
    list[str],
    typer.Option(
        "--platform-builder",
        metavar="PLATFORM=NAME",
        show_default=False,
        help="Build one platform of build.platforms on its own builder, e.g. linux/arm64=gb200 for a remote "
        "BuildKit on an arm64 machine (repeatable; the others use --builder).",
    ),
]
RebuildBuilder = Annotated[
    str | None,
    typer.Option(
        "--rebuild-builder", metavar="NAME", help="Run the --check-reproducible rebuild on this builder instead."
    ),
]
AllowDrift = Annotated[
    bool,
    typer.Option(
        "--allow-drift",
        help="Build even with drift findings (pins upstream does not expect, e.g. another CUDA major; the record "
        "and report "
        "keep the findings). Without it, drift stops the build before anything is written (exit 1).",
    ),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print the build record as JSON on stdout.")]
Emulate = Annotated[
    bool,
    typer.Option(
        "--emulate",
        help="Build a platform the builder runs only under QEMU emulation (binfmt_misc). Without it such a platform "
        "stops a release build at preflight: emulation is 4-10x slower for CPU-bound steps (bench/emulation.py), "
        "hours for a real build; a --smoke build goes ahead, said. `buildkit doctor` says where each platform runs.",
    ),
]
ResolveJsonOut = Annotated[
    bool, typer.Option("--json", help="Print the lock as JSON on stdout, and nothing else there.")
]
ResolveCheck = Annotated[
    bool,
    typer.Option("--check", help="Write nothing; exit 1 when the lock is stale or upstream disagrees with it."),
]
ResolveOffline = Annotated[
    bool, typer.Option("--offline", help="No network: validate the pins, and the lock against them.")
]
ResolveDeep = Annotated[
    bool,
    typer.Option("--deep", help="With --check: download the wheel afresh and compare its sha256 with the lock."),
]
ResolveNoWheelDownload = Annotated[
    bool,
    typer.Option(
        "--no-wheel-download",
        help="Do not download the wheel: its sha256 comes from the cache if an earlier resolve put it there; "
        "otherwise the lock says the wheel is not content-addressed.",
    ),
]
PrepareJsonOut = Annotated[bool, typer.Option("--json", help="Print the prepare record as JSON on stdout.")]
RenderOutput = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="PATH", help="Where to write the Dockerfile [default: build/Dockerfile]."),
]
RenderDiff = Annotated[bool, typer.Option("--diff", help="Show the rendered Dockerfile against upstream's.")]
RenderStrict = Annotated[
    bool, typer.Option("--strict", help="Exit 1 on drift findings (pins upstream does not expect).")
]
RenderSyntax = Annotated[
    bool,
    typer.Option("--syntax/--no-syntax", help="Keep the `# syntax=` line; --no-syntax for builders without internet."),
]
RenderJsonOut = Annotated[bool, typer.Option("--json", help="Print a JSON summary on stdout.")]
DoctorMinFreeGb = Annotated[float, typer.Option("--min-free-gb", metavar="GB", help="Free space the build needs.")]
DoctorPush = Annotated[bool, typer.Option("--push", help="Also check registry credentials for pushing.")]
DoctorTag = Annotated[
    str | None,
    typer.Option(
        "--tag",
        metavar="TAG",
        help="Image tag to check credentials for [default: the pins' build.tag, else nemo-rl:latest].",
        show_default=False,
    ),
]
DoctorPlatform = Annotated[
    str | None,
    typer.Option(
        "--platform",
        metavar="PLATFORM",
        help="Platform the builder must offer [default: the pins' build.platform, else linux/amd64].",
        show_default=False,
    ),
]
DoctorJsonOut = Annotated[bool, typer.Option("--json", help="Print the checks as JSON on stdout.")]
VerifyImage = Annotated[
    str | None, typer.Argument(metavar="IMAGE", help="Image to check [default: the last successful build's].")
]
VerifyGpus = Annotated[
    bool,
    typer.Option(
        "--gpus", help="Also check torch sees a GPU of an architecture in build.cuda_arch_list, and its kernels."
    ),
]
VerifyJsonOut = Annotated[bool, typer.Option("--json", help="Print the verify record as JSON on stdout.")]
VerifyProvenance = Annotated[
    bool,
    typer.Option(
        "--provenance",
        help="Instead: read the pushed image's BuildKit provenance and buildkit's signed statement from its "
        "registry and check both against the lock (needs --key).",
    ),
]
VerifyKey = Annotated[
    str | None,
    typer.Option("--key", metavar="KEY", help="With --provenance or --sqsh: the public key (cosign.pub) or KMS URI."),
]
VerifySqsh = Annotated[
    Path | None,
    typer.Option(
        "--sqsh",
        metavar="FILE",
        help="Instead: check a squashfs `export --to DIR --key` published, offline, against the signed statement and "
        "SBOM beside it (needs --key; no project, registry or network).",
    ),
]
VerifyDriver = Annotated[
    list[str],
    typer.Option(
        "--driver",
        metavar="VERSION",
        help="A node's NVIDIA driver (580.65.06); repeatable: does "
        "the image's CUDA run there natively, through forward compatibility (data-center GPUs), or not.",
    ),
]
ReportRecord = Annotated[
    Path | None,
    typer.Option("--record", metavar="PATH", help="Build record [default: build/record.json, if it exists]."),
]
ReportOutput = Annotated[
    Path | None, typer.Option("--output", "-o", metavar="PATH", help="Write here instead of stdout.")
]
ReportFmt = Annotated[
    ReportFormat,
    typer.Option(
        "--format", "-f", metavar=_choices(ReportFormat), parser=_one_of(ReportFormat), help="The report's format."
    ),
]
ReportResults = Annotated[
    Path | None,
    typer.Option("--results", metavar="PATH", help="Training metrics per step (YAML or CSV) for 'Verified results'."),
]
AttestRecord = Annotated[
    Path | None,
    typer.Option("--record", metavar="PATH", help="Build record [default: the newest, as verify picks it]."),
]
AttestKey = Annotated[
    str | None,
    typer.Option(
        "--key",
        metavar="KEY",
        help="Sign with this cosign key (a file from `cosign generate-key-pair`, password in $COSIGN_PASSWORD; "
        "or a KMS URI) and attach the envelope to the pushed image.",
    ),
]
AttestBuilderId = Annotated[
    str | None,
    typer.Option(
        "--builder-id", metavar="URI", help="runDetails.builder.id: a URI for the platform that ran the build."
    ),
]
AttestJsonOut = Annotated[bool, typer.Option("--json", help="Print the statement on stdout.")]
AttestRepository = Annotated[
    str | None,
    typer.Option(
        "--repository",
        metavar="NAME",
        help="The subject's repository when the image was copied from build.tag's (shown in the statement).",
    ),
]
ExportImage = Annotated[
    str | None,
    typer.Argument(
        metavar="IMAGE", help="Image in the local Docker to export [default: the newest successful build's]."
    ),
]
ExportOutput = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="PATH",
        help="The .sqsh to write [default: build/<image>.sqsh; build/smoke/ for a smoke build].",
    ),
]
ExportJsonOut = Annotated[bool, typer.Option("--json", help="Print the export record as JSON on stdout.")]
ExportKey = Annotated[
    str | None,
    typer.Option(
        "--key",
        metavar="KEY",
        help="With --to: sign the evidence beside each file (<name>.sigstore.json, <name>.cdx.json) with this cosign "
        "key ($COSIGN_PASSWORD unlocks it).",
    ),
]
ExportTo = Annotated[
    Path | None,
    typer.Option(
        "--to",
        metavar="DIR",
        help="Publish into DIR (shared storage): <name>@sha256-<hex>.sqsh per platform, named by the pushed image's "
        "platform manifest digest; a whole file of that digest already there is kept untouched.",
    ),
]
