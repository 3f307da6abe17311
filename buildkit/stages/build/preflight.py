"""Checks before a build: engine, buildx, builder, platform, disk, credentials. `buildkit doctor` prints them all,
and the tools export and attest need; `buildkit build` stops at the first one that fails, with what to do."""

from __future__ import annotations

from dataclasses import dataclass, field

from buildkit.errors import CredentialsError, EngineNotReady, GitFailed, UpstreamUnreachable, excerpt
from buildkit.models.grammar import is_loopback_host
from buildkit.models.lock import Lock
from buildkit.models.overlay import vllm_layers
from buildkit.models.pins import GitUrlRewrite, fetched_from
from buildkit.models.results import Builder
from buildkit.stages.build import provenance_choice
from buildkit.world import buildx, cosign
from buildkit.world.buildx import BuilderInfo
from buildkit.world.credentials import config_path, lookup
from buildkit.world.engine import Engine, ImageEngine
from buildkit.world.git import run_git
from buildkit.world.mksquashfs import find_mksquashfs
from buildkit.world.registry import parse_image_ref

GIB = 2**30


@dataclass
class Check:
    name: str
    ok: bool | None  # None: could not be measured (said plainly, not a failure)
    detail: str
    fix: str = ""


@dataclass
class Preflight:
    checks: list[Check] = field(default_factory=list)
    engine: ImageEngine | None = None
    builder: BuilderInfo | None = None
    buildx_version: str = ""
    engine_version: str = ""

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]

    def builder_facts(self) -> Builder:
        assert self.builder is not None, "only after a preflight that passed"
        b = self.builder
        return Builder(b.name, b.driver, b.endpoint, b.buildkit_version, self.buildx_version, self.engine_version)

    def provenance(self, push: bool) -> tuple[bool, str]:
        """Whether a provenance attestation can be attached here, and the note the record carries."""
        assert self.builder is not None, "only after a preflight that passed"
        store = self.engine.containerd_store() if self.engine is not None else None
        return provenance_choice(self.builder.attestations, self.builder.driver, store, push)


# What bench/emulation.py measured for a CPU-bound RUN step (the same step, arm64 under QEMU against amd64 native,
# 2026-11-27): sha256sum 4.3x, a shell loop (closer to pip, Python and configure scripts) 9.4x.
EMULATION_COST = "4-10x slower than native for CPU-bound steps (bench/emulation.py)"


def run_preflight(
    builder: str | None,
    platform: str,
    min_free_gb: float,
    push: bool,
    tag: str,
    emulate: bool | None = None,
    smoke: bool = False,
) -> Preflight:
    """The checks before a build (`emulate`: whether a platform the builder only emulates is allowed; None, as
    doctor asks, says where each platform runs without judging it; `smoke`: a smoke build, which may run emulated
    without asking)."""
    result = Preflight()
    _engine_checks(result, builder, platform, min_free_gb, emulate, smoke)
    if push:  # asked whatever the engine's state: they do not depend on it
        result.checks.append(_push_credentials_check(tag))
    return result


def tool_checks() -> list[Check]:
    """The tools two commands need beside the engine: mksquashfs (`export`) and cosign (`attest`, `verify
    --provenance`). Missing is n/a, not a failure: a build needs neither."""
    checks = []
    try:
        found = find_mksquashfs()
        checks.append(Check("mksquashfs", True, f"mksquashfs {found.version} ({found.path}), for `buildkit export`"))
    except EngineNotReady as exc:
        checks.append(Check("mksquashfs", None, f"{exc.message}; only `buildkit export` needs it", exc.hint or ""))
    try:
        path = cosign.binary()
        checks.append(
            Check(
                "cosign",
                True,
                f"cosign {cosign.version(path)} ({path}), for `buildkit attest` and `verify --provenance`",
            )
        )
    except (EngineNotReady, UpstreamUnreachable) as exc:
        checks.append(
            Check("cosign", None, f"{exc.message}; only `attest` and `verify --provenance` need it", exc.hint or "")
        )
    return checks


def _push_credentials_check(tag: str) -> Check:

    try:
        return credentials_check(parse_image_ref(tag).registry)
    except ValueError:
        return Check("credentials", False, f"--tag {tag!r} is not an image reference", "name the image to push")


def credentials_check(registry: str) -> Check:
    """Docker's credentials for the registry, found as resolve and verify find them (buildkit/world/credentials.py):
    where they come from, never what they hold. Not a login: the registry is not asked."""
    try:
        found = lookup(registry)
    except CredentialsError as exc:
        return Check("credentials", False, exc.message, exc.hint or "")
    if found is not None:
        return Check("credentials", True, f"credentials for {registry} from {found.source}")
    if is_loopback_host(registry.rsplit(":", 1)[0]):
        return Check(
            "credentials",
            None,
            f"no credentials for {registry} in {config_path()}; a loopback registry usually needs none",
        )
    return Check("credentials", False, f"no credentials for {registry} in {config_path()}", f"docker login {registry}")


def _engine_checks(
    result: Preflight, builder: str | None, platform: str, min_free_gb: float, emulate: bool | None, smoke: bool
) -> None:
    """The engine, buildx and the builder, then what the builder offers: the platform, attestations, disk."""
    add = result.checks.append
    add(_engine_check(result))
    try:
        result.buildx_version = buildx.version()
        add(Check("buildx", True, f"buildx {result.buildx_version}"))
    except EngineNotReady as exc:
        add(Check("buildx", False, exc.message, exc.hint or ""))
        return
    try:
        info = buildx.inspect(builder)
    except EngineNotReady as exc:
        add(Check("builder", False, exc.message, exc.hint or ""))
        return
    result.builder = info
    add(
        Check("builder", True, f"{info.name} ({info.driver} driver, {info.endpoint}), BuildKit {info.buildkit_version}")
    )
    result.checks += platform_checks(info, platform, emulate, smoke)
    add(_attestations_check(info))
    add(_disk_check(info, result.engine, min_free_gb))


def _engine_check(result: Preflight) -> Check:
    try:
        result.engine = Engine()
        version = result.engine.version()
    except EngineNotReady as exc:
        return Check("engine", False, exc.message, exc.hint or "")
    result.engine_version = version.get("Version", "")
    return Check("engine", True, f"Docker {result.engine_version} (API {version.get('ApiVersion', '?')})")


def platform_checks(info: BuilderInfo, platform: str, emulate: bool | None = None, smoke: bool = False) -> list[Check]:
    """One check per platform, saying where it runs: several (build.platforms) come as buildx names them,
    "linux/amd64,linux/arm64". A platform the builder only emulates fails a release build unless `emulate` (None:
    said, not judged): a 20-30 minute build under QEMU takes hours. A smoke build (`smoke`) goes ahead emulated
    without asking: its steps take seconds under QEMU (arm64's smoke build: 12 s, issue 41); the check says so, and the
    build command says it once before it starts."""
    return [_platform_check(info, each, emulate, smoke) for each in platform.split(",") if each]


def _platform_check(info: BuilderInfo, platform: str, emulate: bool | None, smoke: bool = False) -> Check:
    offers = f"builder offers {', '.join(info.platforms)}"
    where = info.where(platform)
    if where is None:
        return Check(
            "platform",
            False,
            f"{platform} not offered ({offers})",
            "use a builder for that platform, or set up emulation (binfmt)",
        )
    node, native = where
    if native:
        return Check("platform", True, f"{platform} supported (native on node {node}; {offers})")
    emulated = f"emulated with QEMU on node {node}, {EMULATION_COST}"
    if emulate is None:
        return Check(
            "platform",
            True,
            f"{platform} supported ({emulated}; `buildkit build` needs --emulate for it, a smoke build does not; "
            f"{offers})",
        )
    if emulate:
        return Check("platform", True, f"{platform} supported ({emulated}, as --emulate allows; {offers})")
    if smoke:
        return Check(
            "platform",
            True,
            f"{platform} supported ({emulated}; a smoke build's few steps need no --emulate; {offers})",
        )
    return Check(
        "platform",
        False,
        f"{platform} runs only under emulation ({emulated}; {offers})",
        f"pass --emulate to build it so anyway (or try it first with `buildkit build --smoke`, which needs no "
        f"--emulate), or add a node whose CPU runs it natively: `docker buildx create "
        f"--append --name {info.name} <endpoint of a {platform} machine>`",
    )


def _attestations_check(info: BuilderInfo) -> Check:
    return Check(
        "attestations",
        True if info.attestations else None,
        "provenance (mode=max) and SBOM supported by the " + f"{info.driver} driver"
        if info.attestations
        else f"the {info.driver} driver on the classic image store cannot attach provenance; the build goes on "
        "without it (use a docker-container or remote builder for attestations)",
    )


def _disk_check(info: BuilderInfo, engine: ImageEngine | None, min_free_gb: float) -> Check:
    """Free space where the engine keeps its data, when the builder's host is this one."""
    if info.driver not in ("docker", "docker-container") or engine is None:
        return Check(
            "disk",
            None,
            f"free space on the {info.driver} builder's host is not visible from here; it needs about "
            f"{min_free_gb:g} GiB",
        )
    root, free = engine.free_bytes()
    ok = free >= min_free_gb * GIB
    return Check(
        "disk",
        ok,
        f"{free / GIB:.1f} GiB free at {root} (need {min_free_gb:g} GiB)",
        "" if ok else "free space, or lower --min-free-gb if you know the build needs less",
    )


def source_reachable(lock: Lock, rewrites: list[GitUrlRewrite]) -> None:
    """With a vLLM overlay BuildKit fetches the source itself, after the install RUN has run: a fork that cannot be
    reached fails here instead, before the long steps (`git ls-remote`, git_url_rewrites applied)."""
    layers = vllm_layers(lock)
    if not layers.has_overlay:
        return
    url = fetched_from(layers.source_repo, rewrites)
    try:
        run_git(["ls-remote", "--heads", url], timeout=SOURCE_CHECK_TIMEOUT, env={"GIT_TERMINAL_PROMPT": "0"})
    except (GitFailed, UpstreamUnreachable) as exc:
        raise UpstreamUnreachable(
            f"vLLM's source {url} cannot be reached ({excerpt(exc.message, 200)}): the build's vLLM overlay fetches "
            f"{layers.source_commit[:12]} from it after the install RUN, so the build stops now instead",
            hint="check the network to that host or that the fork still exists; a mirror: pins.yaml git_url_rewrites",
        ) from None


SOURCE_CHECK_TIMEOUT = 60.0  # seconds for `git ls-remote` of the fork: a remote that answers at all answers in that
