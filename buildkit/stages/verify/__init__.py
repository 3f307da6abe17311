"""`buildkit verify`: checks inside the built image, through the engine, each a pass/fail/skip with a reason.

The checks are a table (CHECKS), run in order, each a small function that reads what its entry says and adds its
results to the context; verify_image walks it.

An image the engine does not have is pulled first, with Docker's credentials for its registry (credentials.py,
as resolve finds them). Containers run with no network. A check that cannot apply (vLLM in a smoke image, GPUs
without --gpus) is a skip that says why, never a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from buildkit import __version__
from buildkit.errors import EngineNotReady, InputError, UpstreamMismatch, excerpt
from buildkit.files import read_record, utc_now
from buildkit.gpu import driver
from buildkit.gpu.abi import stop_if_unresolved
from buildkit.gpu.image import ENVIRONMENT_RE, MAX_ENVIRONMENTS, image_check
from buildkit.gpu.image import FIND as FIND_ENVIRONMENTS
from buildkit.gpu.scan import check_required
from buildkit.gpu.scan import required as scan_required  # a path matched by build.gpu_required
from buildkit.image.pyenv import judge_environment, read_environment
from buildkit.image.vllmpackage import FIND_SPEC, VllmPackage, judge_package, package_dir, read_package
from buildkit.models.gpufacts import GpuCheck
from buildkit.models.labels import verified_labels
from buildkit.models.lock import Lock, composition, lock_sha256
from buildkit.models.overlay import vllm_layers
from buildkit.models.paths import Paths
from buildkit.models.records import header, repo_digests
from buildkit.models.records.build import latest_build, latest_successful_build, pushed
from buildkit.models.records.prepare import PrepareRecord
from buildkit.models.records.render import RenderRecord
from buildkit.models.records.verify import CheckResult, VerifyRecord
from buildkit.options import VerifyOptions
from buildkit.stages import context
from buildkit.stages.verify.provenance import verify_provenance
from buildkit.text.sanitize import strip_controls
from buildkit.world.engine import ContainerRefused, Engine, ImageEngine, pull_image

FINGERPRINT = "/opt/nemo_rl_container_fingerprint"
WORKDIR = "/opt/nemo-rl"  # where the Dockerfile copies the prepared tree
GPU_PROBE = (
    "import torch; print(torch.cuda.is_available()); "
    "print(torch.cuda.get_device_capability() if torch.cuda.is_available() else ''); "
    "print(' '.join(torch.cuda.get_arch_list()))"
)


def wanted_archs(cuda_arch_list: str) -> list[tuple[str, tuple[int, int]]]:
    """TORCH_CUDA_ARCH_LIST entries as (kernel name, compute capability): '9.0' -> ('sm_90', (9, 0)),
    '9.0a' -> ('sm_90a', (9, 0)), '10.0+PTX' -> ('sm_100', (10, 0))."""
    out = []
    for entry in cuda_arch_list.replace(";", " ").split():
        number = entry.removesuffix("+PTX")
        suffix = number[-1] if number[-1] in "af" else ""
        major, minor = number.rstrip("af").split(".")
        out.append((f"sm_{major}{minor}{suffix}", (int(major), int(minor))))
    return out


def gpu_check_name(cuda_arch_list: str) -> str:
    return f"a GPU of compute capability {' or '.join(cuda_arch_list.replace(';', ' ').split())}, and its kernels"


def judge_gpu(cuda_arch_list: str, code: int, output: str) -> tuple[bool, str]:
    """The GPU check on GPU_PROBE's output: a GPU whose capability the lock lists, and every listed sm_ kernel in
    torch's arch list."""
    lines = output.splitlines()
    if code != 0 or len(lines) < 3 or lines[0] != "True":
        return False, " | ".join(lines[-3:]) or "no output"
    wanted = wanted_archs(cuda_arch_list)
    found_arches = set(lines[2].split())
    capability = lines[1].strip()
    ok_gpu = capability in {f"({major}, {minor})" for _, (major, minor) in wanted}
    missing = [name for name, _ in wanted if name not in found_arches]
    reason = f"GPU capability {capability}; torch arch list {lines[2]}"
    if not ok_gpu:
        reason += f"; the lock builds for {cuda_arch_list}"
    if missing:
        reason += f"; missing {' '.join(missing)}"
    return ok_gpu and not missing, reason


@dataclass
class Context:
    """What the checks read (the image as the engine holds it, the lock, the prepare record, the options) and the
    results they add."""

    engine: ImageEngine
    image: str
    attrs: dict[str, Any]
    lock: Lock
    prepare: PrepareRecord | None
    gpus: bool
    drivers: list[str]
    results: list[CheckResult] = field(default_factory=list)
    gpu: GpuCheck | None = None  # the GPU files check's findings, for the record and the driver check
    package: VllmPackage | None = None  # vLLM's package directory as the Python check read it

    @property
    def labels(self) -> dict[str, str]:
        return (self.attrs.get("Config") or {}).get("Labels") or {}

    @property
    def env(self) -> dict[str, str]:
        config = self.attrs.get("Config") or {}
        return dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)

    @property
    def smoke(self) -> bool:
        return self.labels.get("buildkit.smoke") == "true"  # set by the smoke target, inherited by images built on it

    def run(self, *command: str) -> tuple[int, str]:
        return self.engine.run_check(self.image, list(command))

    def add(self, name: str, ok: bool | None, reason: str) -> None:
        status: Literal["pass", "fail", "skip"] = "skip" if ok is None else ("pass" if ok else "fail")
        self.results.append(CheckResult(name=name, status=status, reason=reason))


def check_vllm_version(c: Context) -> None:
    if c.smoke:
        c.add("vllm version names the locked commit", None, "a smoke image has no vLLM installed")
        return
    if c.lock.vllm_install is not None:
        c.add(
            "vllm version names the locked commit",
            None,
            "not checked: uv builds vLLM from NeMo-RL's git source, whose pyproject.toml may set "
            "SETUPTOOLS_SCM_PRETEND_VERSION (NeMo-RL's does), so the version need not name a commit",
        )
        return
    code, out = c.run("python", "-c", "import vllm; print(vllm.__version__)")
    layers = vllm_layers(c.lock)  # with an overlay, the install (which writes the version) is of the wheel's commit
    ok = code == 0 and f"g{layers.install_commit[:9]}" in out
    reason = version_reason(out, layers.install_commit)
    if layers.has_overlay:
        reason += f" (the wheel's commit, installed; the source {c.lock.vllm.commit[:12]} is laid over it)"
    c.add("vllm version names the locked commit", ok, reason)


def check_no_sglang(c: Context) -> None:
    if c.smoke:
        c.add("sglang is not importable", None, "a smoke image has no Python environment")
        return
    code, out = c.run("python", "-c", "import sglang")
    c.add(
        "sglang is not importable",
        code != 0 and "ModuleNotFoundError" in out,
        "import sglang fails: ModuleNotFoundError" if code != 0 else "import sglang succeeded",
    )


def check_nemo_rl_commit(c: Context) -> None:
    got = c.env.get("NEMO_RL_COMMIT", "<unset>")
    c.add("NEMO_RL_COMMIT matches the lock", got == c.lock.nemo_rl.commit, f"NEMO_RL_COMMIT={got}")


WHEEL_ENV_CHECK = "the image's environment names the locked wheel (VLLM_PRECOMPILED_WHEEL_COMMIT, _LOCATION)"


def check_wheel_env(c: Context) -> None:
    """What a later vLLM build from the image (NeMo-RL's Ray workers, in isolated venvs) takes as its wheel: the
    locked wheel's commit and URL, or it would fetch main's newest."""
    want = {
        "VLLM_PRECOMPILED_WHEEL_COMMIT": c.lock.vllm_wheel.commit,
        "VLLM_PRECOMPILED_WHEEL_LOCATION": c.lock.wheel.url,
    }
    wrong = [f"{k}={excerpt(c.env.get(k, '<unset>'), 120)}, locked {v}" for k, v in want.items() if c.env.get(k) != v]
    if wrong and not any(k in c.env for k in want):
        wrong = ["neither is set (an image rendered before buildkit set them: render and build again)"]
    commit = want["VLLM_PRECOMPILED_WHEEL_COMMIT"]
    c.add(WHEEL_ENV_CHECK, not wrong, "; ".join(wrong) or f"the wheel of {commit} and its URL, as locked")


def check_labels(c: Context) -> None:
    expected = verified_labels(c.lock)
    wrong = [f"{k}={c.labels.get(k, '<missing>')}" for k, v in expected.items() if c.labels.get(k) != v]
    c.add("labels match the lock", not wrong, "; ".join(wrong) or f"{len(expected)} labels as locked")


def check_fingerprint(c: Context) -> None:
    code, out = c.run("sh", "-c", f"test -s {FINGERPRINT} && head -c 200 {FINGERPRINT}")
    c.add("container fingerprint exists", code == 0, f"{FINGERPRINT}: {out[:80] if code == 0 else 'missing or empty'}")


def check_patched_files(c: Context) -> None:
    targets = [t for patch in c.prepare.patches for t in patch.targets] if c.prepare else []
    if not targets:
        c.add("patched files are the recorded ones", None, "no prepare record with a patched file to compare")
    for target in targets:
        code, out = c.run("sha256sum", f"{WORKDIR}/{target.path}")
        have = out.split()[0] if code == 0 and out else "?"
        c.add(
            f"patched {target.path} is the recorded one",
            have == target.after,
            f"sha256 {have[:16]}..., recorded {target.after[:16]}...",
        )


PYTHON_CHECK = "vLLM's package is the source commit's files and the locked wheel's, nothing else"


def check_vllm_python(c: Context) -> None:
    """The package `python` imports as vllm (an editable checkout, as build-custom-vllm.sh installs it, or
    site-packages), read once and held entry by entry to the lock's two lists (image/vllmpackage.py): the source
    commit's files, the wheel's members precompiled mode takes. Its shared objects go on to the GPU files check."""
    if c.smoke:
        c.add(PYTHON_CHECK, None, "a smoke image has no vLLM installed")
        return
    code, out = c.run(*FIND_SPEC)
    directory = package_dir(code, out)
    if directory is None:
        c.add(PYTHON_CHECK, False, f"python in the image finds no vllm package: {excerpt(strip_controls(out), 160)}")
        return
    wheel = c.lock.vllm_files
    c.package = read_package(c.engine.archive(c.image, directory), directory, f"{c.image}:{directory}", wheel or ())
    listed = c.lock.vllm_python
    if listed is None or listed.scope != "package":
        said = (
            "holds no listing of the source's files (resolve said why)"
            if listed is None
            else "lists only the source's Python files (written before buildkit listed every file of the package)"
        )
        c.add(PYTHON_CHECK, None, f"the lock {said}: run `buildkit resolve`")
        return
    if not wheel:
        c.add(
            PYTHON_CHECK,
            None,
            "the lock holds no list of the wheel's members precompiled mode takes (resolve --no-wheel-download): "
            "run `buildkit resolve`",
        )
        return
    c.add(PYTHON_CHECK, *judge_package(listed.files, c.package, listed.commit, wheel))


ENVIRONMENTS_CHECK = "every file of the Python environments is its distribution's (RECORD)"


def check_environments(c: Context) -> None:
    """Each site-packages or dist-packages directory, read once and held to its distributions' RECORDs, its
    start-up files and its bytecode (image/pyenv.py); vLLM's editable finder to the package the Python check read."""
    if c.smoke:
        c.add(ENVIRONMENTS_CHECK, None, "a smoke image has no Python environment")
        return
    _code, out = c.run(*FIND_ENVIRONMENTS)
    found = [line for line in out.splitlines() if ENVIRONMENT_RE.fullmatch(line)][:MAX_ENVIRONMENTS]
    if not found:
        c.add(ENVIRONMENTS_CHECK, None, "the image has no site-packages or dist-packages directory: no RECORD to hold")
        return
    vllm_dir = c.package.directory if c.package else None
    judged = [
        judge_environment(read_environment(c.engine.archive(c.image, d), d, f"{c.image}:{d}"), vllm_dir) for d in found
    ]
    ok = all(good for good, _reason in judged)
    c.add(ENVIRONMENTS_CHECK, ok, "; ".join(reason for good, reason in judged if good == ok)[:900])


def check_gpu_files(c: Context) -> None:
    if c.smoke:
        c.add("GPU kernels, ABI and drivers", None, "a smoke image has no Python environment")
        return
    package = c.package.wheel_files if c.package else {}
    c.gpu = gpu_checks(c.engine, c.image, c.lock, c.env.get("CUDA_VERSION"), c.drivers, c.add, package)


def check_gpu(c: Context) -> None:
    name = gpu_check_name(c.lock.build.cuda_arch_list)
    if not c.gpus:
        c.add(name, None, "not asked (--gpus)")
        return
    try:
        code, out = c.engine.run_check(c.image, ["python", "-c", GPU_PROBE], gpus=True)
    except ContainerRefused as exc:  # no GPU runtime in this engine: the check fails, and says why
        code, out = 1, f"the engine cannot give the container a GPU: {exc}"
    c.add(name, *judge_gpu(c.lock.build.cuda_arch_list, code, out))
    if c.gpu is not None and c.gpu.driver is not None and c.gpu.driver.cuda_runtime:
        c.add("the driver prediction holds on this GPU", *driver_on_gpu(c.engine, c.image, c.gpu, code == 0))


@dataclass(frozen=True)
class Check:
    """One of verify's checks: what it reads, and the function that adds its results (one or more) in order."""

    name: str
    reads: str
    run: Callable[[Context], None]


CHECKS = (
    Check("vllm version", "vllm.__version__, from python in the image", check_vllm_version),
    Check("no sglang", "`import sglang`, from python in the image", check_no_sglang),
    Check("NeMo-RL commit", "the image config's Env: NEMO_RL_COMMIT", check_nemo_rl_commit),
    Check("labels", "the image config's Labels, against models.labels.verified_labels(lock)", check_labels),
    Check(
        "wheel env",
        "the image config's Env: VLLM_PRECOMPILED_WHEEL_COMMIT and _LOCATION, against the lock's wheel",
        check_wheel_env,
    ),
    Check("fingerprint", f"{FINGERPRINT} in the image", check_fingerprint),
    Check("patched files", "the prepare record's patch targets, sha256sum in the image", check_patched_files),
    Check(
        "vLLM's Python",
        "find_spec('vllm') from python in the image; the package's files, against the lock's vllm_python",
        check_vllm_python,
    ),
    Check("GPU files", "the image's shared objects and CUDA_VERSION (buildkit.gpu), --driver", check_gpu_files),
    Check("GPU", "torch and nvidia-smi in a container given the GPUs (--gpus)", check_gpu),
    Check(
        "Python environments",
        "every site-packages and dist-packages directory, against its distributions' RECORDs",
        check_environments,
    ),
)


def verify_image(
    image: str,
    lock: Lock,
    prepare: PrepareRecord | None,
    gpus: bool,
    engine: ImageEngine | None = None,
    drivers: list[str] | None = None,
) -> VerifyRecord:
    """Every check of CHECKS on the image (pulled first when the engine does not have it), in order."""
    begun = time.monotonic()
    engine = engine or Engine()
    attrs = engine.image_attrs(image) or pull_image(engine, image, lock.build.platform)
    c = Context(engine, image, attrs, lock, prepare, gpus, drivers or [])
    try:
        for check in CHECKS:
            check.run(c)
    except ContainerRefused as exc:
        raise EngineNotReady(f"the engine refused to run a check container: {exc}") from None
    checked, aliases = _identity(image, attrs)
    return VerifyRecord(
        buildkit_version=__version__,
        image=image,
        image_id=attrs.get("Id", ""),
        lock_sha256=lock_sha256(lock),
        smoke=c.smoke,
        gpus=gpus,
        checked_at=utc_now(),
        results=c.results,
        header=header("verify", checked, lock_sha256(lock), c.smoke, aliases),
        seconds=round(time.monotonic() - begun, 3),
        gpu=c.gpu,
        vllm=None if c.smoke else composition(lock),  # a smoke image holds no vLLM
    )


def _identity(image: str, attrs: dict) -> tuple[str | None, tuple[str, ...]]:
    """Which image was checked, and its other names: the registry's digest when the engine holds the image by a
    digest of the repository verified, else the engine's image ID (its config digest); every digest Docker knows it
    by and the ID as aliases. run() names it by its build record's manifest digest where a record made it."""
    name = image.partition("@")[0]
    tail = name.rsplit("/", 1)[-1]
    if ":" in tail:
        name = name[: -len(tail)] + tail.partition(":")[0]
    aliases = (str(attrs.get("Id") or ""), *repo_digests(attrs))
    for repo_digest in attrs.get("RepoDigests") or []:
        repo, _, digest = str(repo_digest).partition("@")
        if repo == name and digest.startswith("sha256:"):
            return digest, aliases
    return attrs.get("Id") or None, aliases


def by_manifest(record: VerifyRecord, paths: Paths) -> VerifyRecord:
    """The record named by the platform manifest's digest when the newest build made the image verified (one
    identity per image: the build record's), with every other name kept as an alias."""
    latest, found = latest_build(paths), record.header
    if latest is None or found is None:
        return record
    built = latest[1].build()
    names = {found.image, *found.aliases} - {None}
    digest = latest[1].image.digest
    if not digest or not names & built.images or built.lock_sha256 != found.lock_sha256:
        return record
    renamed = header("verify", digest, found.lock_sha256, found.smoke, (*names, *built.images))
    return record.model_copy(update={"header": renamed})


def gpu_checks(
    engine: ImageEngine,
    image: str,
    lock: Lock,
    cuda_version: str | None,
    drivers: list[str],
    add: Callable[[str, bool | None, str], None],
    package: dict[str, str] | None = None,
) -> GpuCheck:
    """buildkit.gpu's checks over the image's files: kernels for build.cuda_arch_list in the required libraries,
    vLLM's symbols against the image's torch and glibc/libstdc++, and each --driver. `package`: the sha256 of the
    shared objects in the vllm package python imports (an editable checkout is outside site-packages)."""
    hashes: dict[str, str] = {}
    gpu = image_check(
        lambda argv: engine.run_check(image, argv),
        lambda path: engine.archive(image, path),
        lock.build,
        cuda_version,
        drivers,
        image,
        hashes,
    )
    hashes.update(package or {})  # the package python imports wins over another copy in a site-packages
    add(COMPILED_CHECK, *compiled_files(getattr(lock, "vllm_files", None), hashes, lock.build.gpu_required))
    try:
        check_required(gpu.libraries, image)
        required = [r.library for r in gpu.libraries if r.required]
        add(
            f"required libraries have kernels for {', '.join(gpu.gpus)}",
            True,
            f"{len(required)} checked: "
            + "; ".join(f"{r.library.rsplit('/', 1)[-1]} {r.loads}" for r in gpu.libraries if r.required)[:400],
        )
    except UpstreamMismatch as exc:
        add(f"required libraries have kernels for {', '.join(gpu.gpus)}", False, exc.message)
    if gpu.abi is None:
        add("vLLM's symbols resolve against the image's torch", None, "no environment with both vllm and torch/lib")
    else:
        try:
            stop_if_unresolved(gpu.abi, image)
            add("vLLM's symbols resolve against the image's torch", True, f"{gpu.abi.checked} symbols looked up")
        except UpstreamMismatch as exc:
            add("vLLM's symbols resolve against the image's torch", False, exc.message)
    runtime = gpu.driver.cuda_runtime if gpu.driver else None
    for have, judged in (gpu.driver.drivers if gpu.driver else {}).items():
        add(
            f"CUDA {runtime} runs on driver {have}",
            None if judged.startswith("unknown") else not judged.startswith("no:"),
            judged,
        )
    return gpu


COMPILED_CHECK = "vLLM's compiled files are the locked wheel's"


def compiled_files(
    locked: dict[str, str] | None, found: dict[str, str], required: list[str] | None = None
) -> tuple[bool | None, str]:
    """Each of vLLM's compiled files in the image, byte for byte the locked wheel's member (sha256, as resolve
    read them): the kernels the image runs are the wheel's, whatever the source build did. One the image lacks
    fails when build.gpu_required names it (vLLM does not start without it), and is said otherwise."""
    if not locked:
        return (
            None,
            "the lock holds no hashes of the wheel's files (resolve --no-wheel-download, or a lock before "
            "version 5): run `buildkit resolve`",
        )
    problems: list[str] = []
    absent: list[str] = []
    matched = 0
    for path, want in sorted(locked.items()):
        have = found.get(path)
        if have is None:
            (problems if scan_required(path, required or []) else absent).append(f"{path} is not in the image")
        elif have != want:
            problems.append(f"{path} is {have[:12]}..., the wheel's is {want[:12]}...")
        else:
            matched += 1
    if problems:
        return False, "; ".join(problems + absent)[:600]
    if not matched:
        return (
            None,
            f"none of the wheel's {len(locked)} compiled file(s) is in the image's Python environments "
            "(build.gpu_required names none of them)",
        )
    return True, "; ".join([f"{matched} file(s) match the wheel's sha256", *absent])[:600]


def driver_on_gpu(engine: ImageEngine, image: str, gpu: GpuCheck, torch_sees_gpu: bool) -> tuple[bool, str]:
    """The prediction for this machine's real driver (nvidia-smi in a GPU container) against what torch saw."""
    code, out = engine.run_check(
        image, ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], gpus=True
    )
    have = out.strip().splitlines()[0].strip() if code == 0 and out.strip() else ""
    facts = gpu.driver
    if facts is None or facts.cuda_runtime is None:
        return False, "the image sets no CUDA_VERSION: no prediction to hold"  # verify asks only when there is one
    try:
        return driver.compare(facts.cuda_runtime, have, facts.forward_compat, torch_sees_gpu)
    except ValueError:
        return False, f"nvidia-smi gave no driver version: {excerpt(out, 120)}"


def version_reason(out: str, commit: str) -> str:
    """The vLLM version check's reason: the last line the image printed (from inside it: bounded, no controls)."""
    last = out.splitlines()[-1] if out.splitlines() else "?"
    return f"vllm.__version__ = {excerpt(strip_controls(last), 200)[1:-1]}; expected +g{commit[:9]}"


def run(ctx: context.Context[VerifyOptions]) -> None:
    """The checks the options ask for (VerifyOptions): the image's (the newest successful build's when none is
    named), or with `provenance` its two statements from its registry; the record written (build/verify.json, or
    the provenance one) and (record, where) in ctx.made.verify. Which image goes to ctx.say, what runs to
    ctx.step."""
    opts, paths = ctx.options, ctx.paths
    lock = context.load_inputs(paths, on_note=ctx.on_note).lock
    prepare = read_record(paths.prepare_record, PrepareRecord)
    if opts.provenance:
        assert opts.key is not None
        image, smoke = _pushed_image(opts.image, paths, lock, ctx)
        ctx.step(f"reading the provenance of {image}...")
        rendered = read_record(paths.render_record(smoke), RenderRecord)
        result, where = verify_provenance(image, lock, smoke, rendered, opts.key), paths.provenance_verify_record
    else:
        image = opts.image if opts.image is not None else _newest_image(paths, ctx)
        ctx.step(f"verifying {image}...")
        result = verify_image(image, lock, prepare, gpus=opts.gpus, drivers=list(opts.drivers))
        result, where = by_manifest(result, paths), paths.verify_record
    ctx.write(where, result.to_json())
    ctx.made.verify = (result, where)


def _newest_image(paths: Paths, ctx: context.Context) -> str:
    """The newest build's image, when that build made one."""
    record_path, record = latest_successful_build(
        paths,
        "to verify",
        no_build_hint="`buildkit verify IMAGE`, or build first",
        failed_hint="`buildkit verify IMAGE`, or build again",
    )
    ctx.say(f"image {record.image.tag}, from {record_path}")
    return record.image.tag


def _pushed_image(image: str | None, paths: Paths, lock: Lock, ctx: context.Context) -> tuple[str, bool]:
    """The image to read from its registry and whether it is a smoke build: the one named (a smoke build when its
    tag is the lock's smoke tag), else the newest build's, which must have been pushed."""
    if image is not None:
        return image, image.rsplit("/", 1)[-1].partition("@")[0] == lock.build.tag.rsplit("/", 1)[-1] + "-smoke"
    latest = latest_build(paths)
    if latest is None or latest[1].outcome != "succeeded" or not latest[1].image.digest:
        raise InputError("no image given and no successful build recorded", hint="`buildkit verify --provenance IMAGE`")
    record_path, record = latest
    if not pushed(record):
        raise InputError(
            f"the latest build ({record_path}) was loaded into Docker, not pushed: its provenance is in no registry",
            hint="`buildkit build --push`, then `buildkit attest --key ...`",
        )
    ctx.say(f"image {record.image.tag}, from {record_path}")
    return record.image.tag, record.smoke
