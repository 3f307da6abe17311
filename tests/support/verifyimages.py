"""The images verify's judgement is tested on, through the in-memory engine (tests/support/memengine.py): the image of a
real smoke build (tests/fixtures/report: its lock, prepare record, the labels the engine reported and the verify
record the real engine gave) and the release image of the same lock. Shared by test_verify_checks and
test_vllm_python."""

from __future__ import annotations

import json

from buildkit.gpu.image import FIND
from buildkit.image.vllmpackage import FIND_SPEC
from buildkit.models.lock import read_lock
from buildkit.models.records.prepare import PrepareRecord
from buildkit.stages.verify import FINGERPRINT, WORKDIR
from tests.support.memengine import MemoryImage
from tests.support.paths import GPU_FIXTURES, REPORT_FIXTURES

REPORT = REPORT_FIXTURES
SITE = "/opt/venv/lib/python3.12/site-packages"
LOCK = read_lock(REPORT / "pins.lock")
PREPARE = PrepareRecord.model_validate_json((REPORT / "build" / "prepare.json").read_text())
SMOKE_BUILD = json.loads((REPORT / "build" / "smoke-record.json").read_text())
SMOKE_VERIFY = json.loads((REPORT / "build" / "verify.json").read_text())
SMOKE_TAG = SMOKE_BUILD["image"]["tag"]
RELEASE_TAG = LOCK.build.tag
PATCHED = PREPARE.patches[0].targets[0]  # tools/build-custom-vllm.sh


def smoke_image() -> MemoryImage:
    """The smoke image as the engine held it when verify.json was recorded: its ID and labels from the build record,
    its ENV from the build's history, the fingerprint and the patched file's sha256 as the image answered them."""
    env = [
        e["created_by"].removeprefix("ENV ")
        for e in SMOKE_BUILD["image"]["history"]
        if e["created_by"].startswith("ENV ")
    ]
    fingerprint = SMOKE_VERIFY["results"][4]["reason"].removeprefix(f"{FINGERPRINT}: ")  # its first 80 characters
    return MemoryImage(
        attrs={
            "Id": SMOKE_BUILD["image"]["id"],
            "Config": {"Labels": dict(SMOKE_BUILD["image"]["labels"]), "Env": env},
            "RepoDigests": [],
        },
        answers={
            ("sh", "-c", f"test -s {FINGERPRINT} && head -c 200 {FINGERPRINT}"): (0, fingerprint),
            ("sha256sum", f"{WORKDIR}/{PATCHED.path}"): (0, f"{PATCHED.after}  {WORKDIR}/{PATCHED.path}"),
        },
    )


def release_image() -> MemoryImage:
    """The release image of the same lock: no buildkit.smoke label, and Python with vLLM, torch and no sglang. The
    version is the locked wheel's (vllm-0.14.0rc2.dev156+g4a5299c93, as wheels.vllm.ai names it); the import error
    is CPython 3.12's; the shared objects are the nvcc-built fixtures of tests/fixtures/gpu (as test_gpu_image's
    engine test lays them out). The query for glibc and libstdc++ (ldconfig) has no answer: no system library is
    found, as in that test's busybox base."""
    image = smoke_image()
    del image.attrs["Config"]["Labels"]["buildkit.smoke"]
    image.answers.update(
        {
            ("python", "-c", "import vllm; print(vllm.__version__)"): (0, "0.14.0rc2.dev156+g4a5299c93"),
            ("python", "-c", "import sglang"): (
                1,
                'Traceback (most recent call last):\n  File "<string>", line 1, in '
                "<module>\nModuleNotFoundError: No module named 'sglang'",
            ),
            tuple(FIND): (0, SITE),
            tuple(FIND_SPEC): (0, f"{SITE}/vllm\n"),  # a wheel installed into site-packages
        }
    )
    image.files = {
        f"{SITE}/vllm/_C.abi3.so": (GPU_FIXTURES / "libk_sm90a.so").read_bytes(),
        f"{SITE}/vllm/_moe_C.abi3.so": (GPU_FIXTURES / "libk_sm80.so").read_bytes(),
        f"{SITE}/torch/lib/libc10.so": (GPU_FIXTURES / "libk_sm90.so").read_bytes(),
    }
    return image
