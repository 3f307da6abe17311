"""`buildkit verify`: checks inside the built image, through the docker SDK, each a pass/fail/skip with a reason.

Containers run with no network. A check that cannot apply (vLLM in a smoke image, GPUs without --gpus) is a skip
that says why, never a pass.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit import __version__
from buildkit.errors import EngineNotReady, InputError
from buildkit.files import utc_now
from buildkit.lock import Lock, lock_sha256
from buildkit.source import PrepareRecord

FINGERPRINT = "/opt/nemo_rl_container_fingerprint"
SCRIPT = "/opt/nemo-rl/tools/build-custom-vllm.sh"


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

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


class _Runner:
    def __init__(self, client, image: str, gpus: bool = False):
        self.client, self.image, self.gpus = client, image, gpus

    def run(self, *command: str) -> tuple[int, str]:
        """Run a command in a throwaway container (no network); its exit code and combined output."""
        from docker.errors import APIError
        from docker.types import DeviceRequest

        kwargs = {"device_requests": [DeviceRequest(count=-1, capabilities=[["gpu"]])]} if self.gpus else {}
        container = self.client.containers.create(
            self.image, command=list(command), entrypoint=[], network_disabled=True, **kwargs
        )
        try:
            try:
                container.start()
            except APIError as exc:  # e.g. the executable is not in the image: the check fails, it says why
                return 127, str(exc.explanation or exc)
            code = container.wait(timeout=300).get("StatusCode", 1)
            output = container.logs(stdout=True, stderr=True).decode("utf-8", errors="replace")
        finally:
            container.remove(force=True)
        return code, output.strip()


def verify_image(image: str, lock: Lock, prepare: PrepareRecord | None, gpus: bool, engine=None) -> VerifyRecord:
    from docker.errors import APIError, ImageNotFound

    from buildkit.engine import Engine

    engine = engine or Engine()
    try:
        attrs = engine.client.images.get(image).attrs
    except ImageNotFound:
        raise InputError(f"no image {image!r} in the engine", hint="build it first (`buildkit build`)") from None
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    smoke = labels.get("buildkit.smoke") == "true"  # set by the smoke target, inherited by images built on it
    runner = _Runner(engine.client, image)
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
            code, out = runner.run("python", "-c", "import vllm; print(vllm.__version__)")
            ok = code == 0 and f"g{commit[:9]}" in out
            add("vllm version names the locked commit", ok, f"vllm.__version__ = {out.splitlines()[-1] if out else '?'}"
                f"; expected +g{commit[:9]}")  # fmt: skip
            code, out = runner.run("python", "-c", "import sglang")
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
        wrong = [f"{k}={labels.get(k, '<missing>')}" for k, v in expected.items() if labels.get(k) != v]
        add("labels match the lock", not wrong, "; ".join(wrong) or f"{len(expected)} labels as locked")

        code, out = runner.run("sh", "-c", f"test -s {FINGERPRINT} && head -c 200 {FINGERPRINT}")
        add(
            "container fingerprint exists", code == 0, f"{FINGERPRINT}: {out[:80] if code == 0 else 'missing or empty'}"
        )

        if prepare is None or not prepare.patches:
            add("patched build-custom-vllm.sh is the recorded one", None, "no prepare record with a patch to compare")
        else:
            want = next(
                (t.after for p in prepare.patches for t in p.targets if t.path == "tools/build-custom-vllm.sh"), None
            )
            code, out = runner.run("sha256sum", SCRIPT)
            have = out.split()[0] if code == 0 and out else "?"
            add("patched build-custom-vllm.sh is the recorded one", want is not None and have == want,
                f"sha256 {have[:16]}..., recorded {str(want)[:16]}...")  # fmt: skip

        if gpus:
            gpu = _Runner(engine.client, image, gpus=True)
            probe = ("import torch; print(torch.cuda.is_available()); "
                     "print(torch.cuda.get_device_capability() if torch.cuda.is_available() else ''); "
                     "print(' '.join(torch.cuda.get_arch_list()))")  # fmt: skip
            try:
                code, out = gpu.run("python", "-c", probe)
            except APIError as exc:  # no GPU runtime in this engine: the check fails, and says why
                code, out = 1, f"the engine cannot give the container a GPU: {exc.explanation or exc}"
            lines = out.splitlines()
            ok = code == 0 and len(lines) >= 3 and lines[0] == "True" and lines[1] == "(9, 0)" and "sm_90" in lines[2]
            add(
                "a GPU of compute capability 9.0, and sm_90 in torch's arch list",
                ok,
                " | ".join(lines[-3:]) or "no output",
            )
        else:
            add("a GPU of compute capability 9.0, and sm_90 in torch's arch list", None, "not asked (--gpus)")
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
    )
