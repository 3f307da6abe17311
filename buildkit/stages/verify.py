"""`buildkit verify`: checks inside the built image, through the docker SDK, each a pass/fail/skip with a reason.

An image the engine does not have is pulled first, with Docker's credentials for its registry (credentials.py,
as resolve finds them). Containers run with no network. A check that cannot apply (vLLM in a smoke image, GPUs
without --gpus) is a skip that says why, never a pass.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit import __version__
from buildkit.errors import CredentialsError, EngineNotReady, InputError, excerpt
from buildkit.files import utc_now
from buildkit.models.gpufacts import GpuCheck
from buildkit.models.lock import Lock, lock_sha256
from buildkit.models.records import RecordHeader, header
from buildkit.stages.prepare import PrepareRecord
from buildkit.text.sanitize import strip_controls

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


def pull(engine, image: str) -> dict:
    """The image's attributes after the engine pulled it with Docker's credentials for its registry (anonymously
    when there are none: the SDK's own lookup is never used, so there is one way credentials are found)."""
    from buildkit.world.credentials import lookup
    from buildkit.world.registry import parse_image_ref

    try:
        registry = parse_image_ref(image).registry
    except ValueError:
        raise InputError(f"no image {image!r} in the engine", hint="build it first (`buildkit build`)") from None
    credential = lookup(registry)
    problem = engine.pull(image, credential.engine_auth() if credential else {})
    attrs = engine.image_attrs(image) if problem is None else None
    if attrs is not None:
        return attrs
    reason = excerpt(strip_controls(problem or "the engine has no such image after the pull"), 300)[1:-1]
    if credential is not None and any(word in reason.lower() for word in ("unauthorized", "denied", "forbidden")):
        raise CredentialsError(
            f"the engine could not pull {image} with the credentials from {credential.source}: {reason}",
            hint=f"`docker login {registry}`, then run again",
        )
    raise InputError(
        f"no image {image!r} in the engine, and it could not be pulled: {reason}",
        hint=f"build it first (`buildkit build`), or `docker login {registry}` if it is in a private registry",
    )


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    status: Literal["pass", "fail", "skip"]
    reason: str


class VerifyRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_version: Literal[1] = 1
    buildkit_version: str
    image: str
    image_id: str
    lock_sha256: str
    smoke: bool
    gpus: bool
    checked_at: str
    results: list[CheckResult]
    header: RecordHeader | None = None  # None in a record written before headers
    seconds: float | None = None  # how long the checks took (None: a record from before it was kept)
    gpu: GpuCheck | None = None  # kernels per target GPU, ABI, drivers (buildkit.gpu); None for smoke images

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def verify_image(image: str, lock: Lock, prepare: PrepareRecord | None, gpus: bool, engine=None,
                 drivers: list[str] | None = None) -> VerifyRecord:  # fmt: skip
    from docker.errors import APIError

    from buildkit.world.engine import Engine

    begun = time.monotonic()
    engine = engine or Engine()
    attrs = engine.image_attrs(image) or pull(engine, image)
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    smoke = labels.get("buildkit.smoke") == "true"  # set by the smoke target, inherited by images built on it

    def run(*command: str) -> tuple[int, str]:
        return engine.run_check(image, list(command))

    results: list[CheckResult] = []

    def add(name: str, ok: bool | None, reason: str) -> None:
        results.append(
            CheckResult(name=name, status="skip" if ok is None else ("pass" if ok else "fail"), reason=reason)
        )

    try:
        commit = lock.vllm.commit
        if smoke:
            add("vllm version names the locked commit", None, "a smoke image has no vLLM installed")
            add("sglang is not importable", None, "a smoke image has no Python environment")
        else:
            code, out = run("python", "-c", "import vllm; print(vllm.__version__)")
            ok = code == 0 and f"g{commit[:9]}" in out
            add("vllm version names the locked commit", ok, version_reason(out, commit))
            code, out = run("python", "-c", "import sglang")
            add("sglang is not importable", code != 0 and "ModuleNotFoundError" in out,
                "import sglang fails: ModuleNotFoundError" if code != 0 else "import sglang succeeded")  # fmt: skip

        got = env.get("NEMO_RL_COMMIT", "<unset>")
        add("NEMO_RL_COMMIT matches the lock", got == lock.nemo_rl.commit, f"NEMO_RL_COMMIT={got}")

        expected = {
            "org.opencontainers.image.revision": lock.nemo_rl.commit,
            "buildkit.vllm.commit": lock.vllm.commit,
            "buildkit.vllm.wheel": lock.wheel.url,
            "buildkit.lock.sha256": lock_sha256(lock),
        }
        if lock.wheel.sha256:  # the bytes BuildKit checked when it fetched the wheel
            expected["buildkit.vllm.wheel.sha256"] = lock.wheel.sha256
        wrong = [f"{k}={labels.get(k, '<missing>')}" for k, v in expected.items() if labels.get(k) != v]
        add("labels match the lock", not wrong, "; ".join(wrong) or f"{len(expected)} labels as locked")

        code, out = run("sh", "-c", f"test -s {FINGERPRINT} && head -c 200 {FINGERPRINT}")
        add(
            "container fingerprint exists", code == 0, f"{FINGERPRINT}: {out[:80] if code == 0 else 'missing or empty'}"
        )

        targets = [t for patch in prepare.patches for t in patch.targets] if prepare else []
        if not targets:
            add("patched files are the recorded ones", None, "no prepare record with a patched file to compare")
        for target in targets:
            code, out = run("sha256sum", f"{WORKDIR}/{target.path}")
            have = out.split()[0] if code == 0 and out else "?"
            add(f"patched {target.path} is the recorded one", have == target.after,
                f"sha256 {have[:16]}..., recorded {target.after[:16]}...")  # fmt: skip

        gpu = None
        if smoke:
            add("GPU kernels, ABI and drivers", None, "a smoke image has no Python environment")
        else:
            gpu = gpu_checks(engine, image, lock, env.get("CUDA_VERSION"), drivers or [], add)

        gpu_name = gpu_check_name(lock.build.cuda_arch_list)
        if gpus:
            try:
                code, out = engine.run_check(image, ["python", "-c", GPU_PROBE], gpus=True)
            except APIError as exc:  # no GPU runtime in this engine: the check fails, and says why
                code, out = 1, f"the engine cannot give the container a GPU: {exc.explanation or exc}"
            add(gpu_name, *judge_gpu(lock.build.cuda_arch_list, code, out))
            if gpu is not None and gpu.driver is not None and gpu.driver.cuda_runtime:
                add("the driver prediction holds on this GPU", *driver_on_gpu(engine, image, gpu, code == 0))
        else:
            add(gpu_name, None, "not asked (--gpus)")
    except APIError as exc:
        raise EngineNotReady(f"the engine refused to run a check container: {exc.explanation or exc}") from None

    return VerifyRecord(
        buildkit_version=__version__,
        image=image,
        image_id=attrs.get("Id", ""),
        lock_sha256=lock_sha256(lock),
        smoke=smoke,
        gpus=gpus,
        checked_at=utc_now(),
        results=results,
        header=header("verify", _identity(image, attrs), lock_sha256(lock), smoke),
        seconds=round(time.monotonic() - begun, 3),
        gpu=gpu,
    )


def _identity(image: str, attrs: dict) -> str | None:
    """Which image was checked, as its build record names it: the registry's digest when the engine holds the image
    by a digest of the repository verified (a pushed build: its record has that digest, not the engine's ID), else
    the engine's image ID (a loaded build: its record has that ID)."""
    name = image.partition("@")[0]
    tail = name.rsplit("/", 1)[-1]
    if ":" in tail:
        name = name[: -len(tail)] + tail.partition(":")[0]
    for repo_digest in attrs.get("RepoDigests") or []:
        repo, _, digest = str(repo_digest).partition("@")
        if repo == name and digest.startswith("sha256:"):
            return digest
    return attrs.get("Id") or None


def gpu_checks(engine, image: str, lock: Lock, cuda_version: str | None, drivers: list[str], add) -> GpuCheck:
    """buildkit.gpu's checks over the image's files: kernels for build.cuda_arch_list in the required libraries,
    vLLM's symbols against the image's torch and glibc/libstdc++, and each --driver."""
    from buildkit.errors import UpstreamMismatch
    from buildkit.gpu.abi import stop_if_unresolved
    from buildkit.gpu.image import image_check
    from buildkit.gpu.scan import check_required

    gpu = image_check(lambda argv: engine.run_check(image, argv), lambda path: engine.archive(image, path),
                      lock.build, cuda_version, drivers, image)  # fmt: skip
    try:
        check_required(gpu.libraries, image)
        required = [r.library for r in gpu.libraries if r.required]
        add(f"required libraries have kernels for {', '.join(gpu.gpus)}", True, f"{len(required)} checked: "
            + "; ".join(f"{r.library.rsplit('/', 1)[-1]} {r.loads}" for r in gpu.libraries if r.required)[:400])
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
    for have, judged in (gpu.driver.drivers if gpu.driver else {}).items():
        assert gpu.driver is not None  # (the loop runs only with one)
        add(f"CUDA {gpu.driver.cuda_runtime} runs on driver {have}", None if judged.startswith("unknown") else
            not judged.startswith("no:"), judged)  # fmt: skip
    return gpu


def driver_on_gpu(engine, image: str, gpu: GpuCheck, torch_sees_gpu: bool) -> tuple[bool, str]:
    """The prediction for this machine's real driver (nvidia-smi in a GPU container) against what torch saw."""
    from buildkit.gpu import driver

    assert gpu.driver is not None and gpu.driver.cuda_runtime  # the caller checks
    code, out = engine.run_check(image, ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 gpus=True)  # fmt: skip
    have = out.strip().splitlines()[0].strip() if code == 0 and out.strip() else ""
    try:
        verdict, why = driver.judge(gpu.driver.cuda_runtime, have, gpu.driver.forward_compat)
    except ValueError:
        return False, f"nvidia-smi gave no driver version: {excerpt(out, 120)}"
    predicted = verdict != driver.NO
    seen = "sees" if torch_sees_gpu else "does not see"
    return predicted == torch_sees_gpu, f"predicted {verdict} ({why}); torch {seen} the GPU"


def version_reason(out: str, commit: str) -> str:
    """The vLLM version check's reason: the last line the image printed (from inside it: bounded, no controls)."""
    last = out.splitlines()[-1] if out.splitlines() else "?"
    return f"vllm.__version__ = {excerpt(strip_controls(last), 200)[1:-1]}; expected +g{commit[:9]}"
