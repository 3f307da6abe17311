"""A pushed build with a vLLM overlay starts the overlay's stage FROM the install image it (or an earlier build of the
same install) pushed by digest (stages/build/installed.py). verify --provenance then reads two of BuildKit's
statements: the final one names the install image (build arg and base image); the install image's own holds the base
image and the wheel. Each link is checked: the digest, the install's target, and a Dockerfile that differs from this
build's only in the stages a moved head changes (both rendered here from the real upstream shape)."""

from __future__ import annotations

import base64

from buildkit.models.lock import SourceComparison, read_lock
from buildkit.models.plan import BuildPlan, argv, repository
from buildkit.stages.render import render_dockerfile
from buildkit.stages.verify.provenance import ImageProvenance, check_buildkit_provenance, expected
from tests.support.paths import FIXTURES, REPORT_FIXTURES

LOCK = read_lock(REPORT_FIXTURES / "pins.lock")
FORK = "https://github.com/stormchasingg/vllm.git"
SCRIPT = 'export VLLM_PRECOMPILED_WHEEL_LOCATION="${VLLM_PRECOMPILED_WHEEL_LOCATION:-https://wheels.vllm.ai/x.whl}"\n'
REPO = "registry.example.com/team/nemo-rl"
INSTALLED = f"{REPO}@sha256:" + "d" * 64
INSTALLED_PLATFORM = "sha256:" + "e" * 64
FINAL_PLATFORM = "sha256:" + "f" * 64


def _lock(head: str, changed: dict):
    compared = SourceComparison(method="GitHub compare", source="x", paths=len(changed), compiled=[], changed=changed)
    return LOCK.model_copy(
        update={"vllm": LOCK.vllm.model_copy(update={"repo": FORK, "commit": head}), "vllm_compare": compared}
    )


HEAD_A = _lock("a" * 40, {"vllm/draft.py": "added"})
HEAD_B = _lock("b" * 40, {"vllm/draft.py": "added", "vllm/spec/tp.py": "modified", "vllm/old.py": "removed"})


def _dockerfile(lock) -> str:
    return render_dockerfile(lock, (FIXTURES / "nemo-rl-shape.Dockerfile").read_text(), script_text=SCRIPT)[0]


def _statement(subject: str, target: str, args: dict, deps: list[dict], dockerfile: str) -> dict:
    info = {"language": "Dockerfile", "data": base64.b64encode(dockerfile.encode()).decode()}
    return {
        "subject": [{"digest": {"sha256": subject.removeprefix("sha256:")}}],
        "predicate": {
            "buildDefinition": {
                "externalParameters": {"request": {"args": {"target": target} | args}},
                "resolvedDependencies": deps,
            },
            "runDetails": {"metadata": {"buildkit_metadata": {"source": {"infos": [info]}}}},
        },
    }


def _checks(installed_dockerfile: str, installed_target: str = "release-vllm-installed", names_image: bool = True):
    """The final build of head B, whose install image was pushed by the build of head A."""
    want = expected(HEAD_B, smoke=False, rendered=None)
    args = {f"build-arg:{k}": v for k, v in want.build_args.items()}
    base = LOCK.base_image.pinned.rsplit("@", 1)[1].removeprefix("sha256:")
    wheel = {"uri": want.wheel_url, "digest": {"sha256": want.wheel_sha256}}
    install = _statement(
        INSTALLED_PLATFORM, installed_target, args,
        [{"uri": f"pkg:docker/nvcr.io/nvidia/cuda@sha256:{base}", "digest": {"sha256": base}}, wheel],
        installed_dockerfile,
    )  # fmt: skip
    image_dep = {"uri": f"pkg:docker/{REPO}?digest={INSTALLED.split('@')[1]}", "digest": {"sha256": "d" * 64}}
    final = _statement(
        FINAL_PLATFORM, "release", args | {"build-arg:VLLM_INSTALLED_IMAGE": INSTALLED},
        ([image_dep] if names_image else []) + [{"uri": f"{FORK}#{'b' * 40}", "digest": {"sha1": "b" * 40}}],
        _dockerfile(HEAD_B),
    )  # fmt: skip
    results = check_buildkit_provenance(
        ImageProvenance("sha256:" + "1" * 64, FINAL_PLATFORM, final, None),
        want,
        ImageProvenance("sha256:" + "d" * 64, INSTALLED_PLATFORM, install, None),
    )
    return {r.name.removeprefix("BuildKit provenance: "): r for r in results}


def test_an_install_image_pushed_for_an_earlier_head_stands_for_the_base_and_the_wheel():
    checks = _checks(_dockerfile(HEAD_A))
    failed = {name: r.reason for name, r in checks.items() if r.status == "fail"}
    assert not failed, failed
    assert INSTALLED in checks["vLLM install image"].reason
    assert checks["base image digest"].status == checks["wheel sha256"].status == "pass"
    assert checks["build args"].status == "pass"  # the install image's arg is the chain's, not a lock's arg


def test_an_install_image_of_another_install_stage_fails_naming_the_stage():
    other = _dockerfile(HEAD_A).replace("ARG UV_VERSION=0.9.7", "ARG UV_VERSION=0.9.8")
    checks = _checks(other)
    assert checks["vLLM install image"].status == "fail"
    assert "beyond the overlay's stages: base, ARG UV_VERSION" in checks["vLLM install image"].reason
    assert checks["base image digest"].status == "fail"  # nothing stands for it then


def test_an_install_image_of_another_target_or_one_the_build_did_not_start_from_fails():
    assert (
        "its target is 'release', not release-vllm-installed"
        in _checks(_dockerfile(HEAD_A), "release")["vLLM install image"].reason
    )
    unnamed = _checks(_dockerfile(HEAD_A), names_image=False)["vLLM install image"]
    assert unnamed.status == "fail" and "names no base image sha256:" in unnamed.reason


def test_the_three_runs_argv():
    plan = BuildPlan(
        dockerfile=FIXTURES / "x", tree=FIXTURES, target="release", platform="linux/amd64",
        tag=f"{REPO}:v1", build_args=(("A", "1"),), metadata_file=FIXTURES / "m.json", source_date_epoch=1,
        push=True,
    )  # fmt: skip
    from dataclasses import replace

    probe = argv(replace(plan, target="release-vllm-installed", installed="probe", provenance=False))
    assert "--tag" not in probe and f"type=image,name={REPO},push=false" in probe and "--provenance=false" in probe
    push = argv(replace(plan, target="release-vllm-installed", installed="push"))
    assert f"type=image,name={REPO},push-by-digest=true,push=true,rewrite-timestamp=true" in push
    final = argv(replace(plan, installed_image=INSTALLED))
    assert f"VLLM_INSTALLED_IMAGE={INSTALLED}" in final and "type=image,push=true,rewrite-timestamp=true" in final
    assert repository("127.0.0.1:5000/x/nemo-rl:1") == "127.0.0.1:5000/x/nemo-rl"
    assert repository("127.0.0.1:5000/x/nemo-rl") == "127.0.0.1:5000/x/nemo-rl"
