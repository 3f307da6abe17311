"""verify's judgement without an engine: its table of checks run through the in-memory engine
(tests/support/memengine.py), on the image of a real smoke build (tests/fixtures/report: its lock, prepare record, the
labels the engine reported and the verify record the real engine gave), and on release images made from it by changing
one thing each."""

from __future__ import annotations

import pytest

from buildkit.errors import EngineNotReady, InputError
from buildkit.models.labels import VERIFIED, image_labels, verified_labels
from buildkit.stages import verify
from buildkit.stages.verify import (
    CHECKS,
    ENVIRONMENTS_CHECK,
    FINGERPRINT,
    GPU_PROBE,
    PYTHON_CHECK,
    WHEEL_ENV_CHECK,
    WORKDIR,
    verify_image,
)
from buildkit.world.engine import ImageEngine
from tests.support.memengine import NO_GPU_RUNTIME, MemoryEngine, MemoryImage
from tests.support.verifyimages import (
    LOCK,
    PATCHED,
    PREPARE,
    RELEASE_TAG,
    SITE,
    SMOKE_BUILD,
    SMOKE_TAG,
    SMOKE_VERIFY,
    release_image,
    smoke_image,
)


@pytest.fixture(autouse=True)
def no_docker_config(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))  # no credentials: anonymous pulls


def results(record) -> dict[str, tuple[str, str]]:
    return {r.name: (r.status, r.reason) for r in record.results}


def run_verify(image: MemoryImage, tag: str, **kwargs) -> tuple[verify.VerifyRecord, MemoryEngine]:
    engine = MemoryEngine(images={tag: image})
    kwargs.setdefault("prepare", PREPARE)
    kwargs.setdefault("gpus", False)
    return verify_image(tag, LOCK, engine=engine, **kwargs), engine


def test_the_smoke_build_is_judged_as_the_real_engine_judged_it():
    """Through the in-memory engine, the recorded smoke image gets the recorded verdicts, reasons and header."""
    record, _engine = run_verify(smoke_image(), SMOKE_TAG)
    got = [(r.name, r.status, r.reason) for r in record.results]
    # verify.json was recorded before the vLLM Python, GPU file and environment checks came (issues 28, 23, 40): a
    # smoke image skips them, in their place.
    python = (PYTHON_CHECK, "skip", "a smoke image has no vLLM installed")
    gpu_files = ("GPU kernels, ABI and drivers", "skip", "a smoke image has no Python environment")
    # It was built before render set the wheel's commit and location in the image's environment: that check fails.
    unset = "neither is set (an image rendered before buildkit set them: render and build again)"
    assert got.pop(4) == (WHEEL_ENV_CHECK, "fail", unset)
    assert got.pop(6) == python
    assert got.pop(6) == gpu_files
    assert got.pop() == (ENVIRONMENTS_CHECK, "skip", "a smoke image has no Python environment")
    assert got == [(r["name"], r["status"], r["reason"]) for r in SMOKE_VERIFY["results"]]
    assert record.header is not None
    assert record.header.model_dump() == SMOKE_VERIFY["header"] | {"buildkit_version": record.buildkit_version}
    assert (record.image_id, record.lock_sha256, record.smoke) == (
        SMOKE_VERIFY["image_id"],
        SMOKE_VERIFY["lock_sha256"],
        True,
    )
    assert record.gpu is None


def test_the_labels_verify_compares_are_those_render_writes():
    """One function gives the labels: the real smoke build's image carried exactly them (and the smoke target's own
    buildkit.smoke), and verify compares a part of them, with the same values."""
    written = image_labels(LOCK)
    assert written == {k: v for k, v in SMOKE_BUILD["image"]["labels"].items() if k != "buildkit.smoke"}
    assert verified_labels(LOCK) == {k: written[k] for k in VERIFIED}
    assert {k: v for k, v in SMOKE_BUILD["image"]["labels"].items() if k in VERIFIED} == verified_labels(LOCK)


@pytest.mark.parametrize("label", VERIFIED)
def test_a_label_that_differs_from_the_lock_fails(label):
    image = smoke_image()
    image.attrs["Config"]["Labels"][label] = "0" * 40
    status, reason = results(run_verify(image, SMOKE_TAG)[0])["labels match the lock"]
    assert status == "fail" and reason == f"{label}={'0' * 40}"


def test_a_missing_label_fails_and_is_named():
    image = smoke_image()
    del image.attrs["Config"]["Labels"]["buildkit.lock.sha256"]
    assert results(run_verify(image, SMOKE_TAG)[0])["labels match the lock"] == (
        "fail",
        "buildkit.lock.sha256=<missing>",
    )


def test_descriptive_labels_are_not_judged():
    image = smoke_image()
    image.attrs["Config"]["Labels"]["org.opencontainers.image.source"] = "https://elsewhere.example/RL.git"
    assert results(run_verify(image, SMOKE_TAG)[0])["labels match the lock"][0] == "pass"


def test_a_wrong_or_missing_nemo_rl_commit_fails():
    image = smoke_image()
    image.attrs["Config"]["Env"] = [e for e in image.attrs["Config"]["Env"] if not e.startswith("NEMO_RL_COMMIT=")]
    assert results(run_verify(image, SMOKE_TAG)[0])["NEMO_RL_COMMIT matches the lock"] == (
        "fail",
        "NEMO_RL_COMMIT=<unset>",
    )


def with_wheel_env(image, commit: str, url: str):
    image.attrs["Config"]["Env"] += [
        f"VLLM_PRECOMPILED_WHEEL_COMMIT={commit}",
        f"VLLM_PRECOMPILED_WHEEL_LOCATION={url}",
    ]
    return image


def test_the_wheel_env_render_writes_passes_and_another_wheel_fails():
    """What render's template sets (ENV VLLM_PRECOMPILED_WHEEL_COMMIT and _LOCATION, the lock's wheel) passes; an
    image naming another wheel fails, naming the variable and both values."""
    commit, url = LOCK.vllm_wheel.commit, LOCK.wheel.url
    ok = results(run_verify(with_wheel_env(smoke_image(), commit, url), SMOKE_TAG)[0])[WHEEL_ENV_CHECK]
    assert ok == ("pass", f"the wheel of {commit} and its URL, as locked")
    other = "1" * 40
    wrong = results(run_verify(with_wheel_env(smoke_image(), other, url), SMOKE_TAG)[0])[WHEEL_ENV_CHECK]
    assert wrong == ("fail", f"VLLM_PRECOMPILED_WHEEL_COMMIT={other!r}, locked {commit}")
    # The locked commit beside another file: the location names what a rebuild would fetch, and it is not the wheel.
    elsewhere = "https://wheels.example/vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl"
    moved = results(run_verify(with_wheel_env(smoke_image(), commit, elsewhere), SMOKE_TAG)[0])[WHEEL_ENV_CHECK]
    assert moved == ("fail", f"VLLM_PRECOMPILED_WHEEL_LOCATION={elsewhere!r}, locked {url}")


def test_a_missing_fingerprint_fails():
    image = smoke_image()
    del image.answers[("sh", "-c", f"test -s {FINGERPRINT} && head -c 200 {FINGERPRINT}")]
    image.answers[("sh", "-c", f"test -s {FINGERPRINT} && head -c 200 {FINGERPRINT}")] = (1, "")
    assert results(run_verify(image, SMOKE_TAG)[0])["container fingerprint exists"] == (
        "fail",
        f"{FINGERPRINT}: missing or empty",
    )


def test_a_patched_file_that_is_not_the_recorded_one_fails():
    image = smoke_image()
    del image.answers[("sha256sum", f"{WORKDIR}/{PATCHED.path}")]
    image.files[f"{WORKDIR}/{PATCHED.path}"] = b"#!/bin/bash\n# upstream's script, unpatched\n"
    status, reason = results(run_verify(image, SMOKE_TAG)[0])[f"patched {PATCHED.path} is the recorded one"]
    assert status == "fail" and reason.endswith(f"recorded {PATCHED.after[:16]}...")


def test_without_a_prepare_record_the_patched_files_are_a_skip():
    name = "patched files are the recorded ones"
    assert results(run_verify(smoke_image(), SMOKE_TAG, prepare=None)[0])[name] == (
        "skip",
        "no prepare record with a patched file to compare",
    )


def test_the_release_image_runs_vllm_sglang_and_the_gpu_file_checks():
    record, engine = run_verify(release_image(), RELEASE_TAG, drivers=["575.57.08"])
    got = results(record)
    assert record.smoke is False
    assert got["vllm version names the locked commit"] == (
        "pass",
        "vllm.__version__ = 0.14.0rc2.dev156+g4a5299c93; expected +g4a5299c93",
    )
    assert got["sglang is not importable"] == ("pass", "import sglang fails: ModuleNotFoundError")
    # The GPU file checks judge as on the engine (tests/unit/gpu/test_gpu_image.py): _moe_C has no sm_90 kernel.
    status, reason = got["required libraries have kernels for sm_90"]
    assert status == "fail" and f"{SITE[1:]}/vllm/_moe_C.abi3.so has no kernel for sm_90" in reason
    assert got["vLLM's symbols resolve against the image's torch"][0] == "pass"
    assert got["CUDA 12.9 runs on driver 575.57.08"][0] == "pass"
    assert record.gpu is not None and record.gpu.driver is not None and record.gpu.driver.cuda_runtime == "12.9"
    assert ("archive", RELEASE_TAG, SITE) in engine.calls
    assert [name for name in got][:2] == ["vllm version names the locked commit", "sglang is not importable"]


def test_a_vllm_of_another_commit_fails():
    image = release_image()
    image.answers[("python", "-c", "import vllm; print(vllm.__version__)")] = (0, "0.14.0")  # PyPI's vLLM 0.14.0
    status, reason = results(run_verify(image, RELEASE_TAG)[0])["vllm version names the locked commit"]
    assert status == "fail" and reason == "vllm.__version__ = 0.14.0; expected +g4a5299c93"


def test_an_image_without_python_fails_the_vllm_check():
    image = release_image()
    del image.answers[("python", "-c", "import vllm; print(vllm.__version__)")]
    assert results(run_verify(image, RELEASE_TAG)[0])["vllm version names the locked commit"][0] == "fail"


def test_an_importable_sglang_fails():
    image = release_image()
    image.answers[("python", "-c", "import sglang")] = (0, "")
    assert results(run_verify(image, RELEASE_TAG)[0])["sglang is not importable"] == ("fail", "import sglang succeeded")


def test_gpus_asked_of_an_engine_without_a_gpu_runtime_fails_and_says_why():
    record, _ = run_verify(smoke_image(), SMOKE_TAG, gpus=True)
    assert results(record)["a GPU of compute capability 9.0, and its kernels"] == (
        "fail",
        f"the engine cannot give the container a GPU: {NO_GPU_RUNTIME}",
    )


def test_gpus_on_a_hopper_with_its_kernels_pass():
    image = smoke_image()
    image.gpu_answers[("python", "-c", GPU_PROBE)] = (0, "True\n(9, 0)\nsm_80 sm_86 sm_90")  # torch 2.9 cu129, H100
    engine = MemoryEngine(images={SMOKE_TAG: image}, gpu_runtime=True)
    record = verify_image(SMOKE_TAG, LOCK, PREPARE, gpus=True, engine=engine)
    assert results(record)["a GPU of compute capability 9.0, and its kernels"][0] == "pass"


def test_an_image_the_engine_lacks_is_pulled_then_checked():
    engine = MemoryEngine(registry={SMOKE_TAG: smoke_image()})
    record = verify_image(SMOKE_TAG, LOCK, PREPARE, gpus=False, engine=engine)
    assert ("pull", SMOKE_TAG, ()) in engine.calls and record.image_id == SMOKE_BUILD["image"]["id"]


def test_a_pushed_image_of_another_platform_is_pulled_for_its_platform():
    """Issue 41: after `build --push` of linux/arm64 on an amd64 machine, the tag names an index with no amd64 image:
    verify pulls the platform the lock builds, and the hint for one that is not there names the fix."""
    tag = "127.0.0.1:5000/nemo-rl:v0.5.0-spec-decode-arm64-smoke"
    arm64 = LOCK.model_copy(update={"build": LOCK.build.model_copy(update={"platform": "linux/arm64"})})
    engine = MemoryEngine(registry={tag: smoke_image()}, platforms={tag: "linux/arm64"})
    verify_image(tag, arm64, PREPARE, gpus=False, engine=engine)
    assert ("pull", tag, ()) in engine.calls
    with pytest.raises(InputError, match="no matching manifest for linux/amd64") as raised:
        verify_image(
            tag,
            LOCK,
            PREPARE,
            gpus=False,
            engine=MemoryEngine(registry={tag: smoke_image()}, platforms={tag: "linux/arm64"}),
        )
    assert raised.value.hint == (
        f"the registry holds {tag} for other platforms only: build and push linux/amd64 (`buildkit build --push`)"
    )


def test_an_image_nobody_has_is_one_message():
    with pytest.raises(InputError, match="no image 'nemo-rl:v0.5.0-spec-decode-smoke' in the engine, and it could not"):
        verify_image(SMOKE_TAG, LOCK, PREPARE, gpus=False, engine=MemoryEngine())


def test_a_pushed_image_is_named_by_its_registry_digest():
    image = smoke_image()
    digest = SMOKE_BUILD["image"]["digest"]
    image.attrs["RepoDigests"] = [f"127.0.0.1:5000/elsewhere@sha256:{'1' * 64}", f"127.0.0.1:5000/nemo-rl@{digest}"]
    tag = "127.0.0.1:5000/nemo-rl:v0.5.0-spec-decode-smoke"
    record, _ = run_verify(image, tag)
    assert record.header is not None
    assert record.header.image == digest


def test_an_engine_that_refuses_containers_is_engine_not_ready():
    class Refusing(MemoryEngine):
        def run_check(self, image, command, gpus=False):
            raise verify.ContainerRefused("Error response from daemon: mkdir /var/lib/docker/overlay2: no space left")

    with pytest.raises(EngineNotReady, match="the engine refused to run a check container: Error response"):
        verify_image(SMOKE_TAG, LOCK, PREPARE, gpus=False, engine=Refusing(images={SMOKE_TAG: smoke_image()}))


def test_the_checks_are_a_table_each_saying_what_it_reads():
    assert len({c.name for c in CHECKS}) == len(CHECKS) and all(c.reads and callable(c.run) for c in CHECKS)
    engine: ImageEngine = MemoryEngine()  # the in-memory engine is an ImageEngine to the type checker
    assert engine is not None
