"""render's vllm_overlay on both real upstream shapes (tests/fixtures: NeMo-RL's docker/Dockerfile at 946862e7 and
its later 7ea279ab shape), the result read back by BuildKit's own Dockerfile parser: the install RUN takes the wheel's
commit, the overlay's steps are the target stage's last, and their paths are those the lock lists."""

from __future__ import annotations

import dockerfile
import pytest

from buildkit.errors import InputError
from buildkit.models.lock import Changes, SourceComparison, read_lock
from buildkit.models.pins import GitUrlRewrite
from buildkit.stages.render import render_dockerfile
from tests.support.paths import FIXTURES, REPORT_FIXTURES

LOCK = read_lock(REPORT_FIXTURES / "pins.lock")
HEAD = "c" * 40
FORK = "https://github.com/stormchasingg/vllm.git"
# The patched build-custom-vllm.sh reads the wheel from the environment (patches/build-custom-vllm-wheel-location.patch)
SCRIPT = 'export VLLM_PRECOMPILED_WHEEL_LOCATION="${VLLM_PRECOMPILED_WHEEL_LOCATION:-https://wheels.vllm.ai/x.whl}"\n'
CHANGED: Changes = {
    "vllm/v1/worker/gpu_model_runner.py": "modified",
    "vllm/v1/spec_decode/draft_model.py": "added",
    "vllm/old.py": "removed",
}


def moved_lock():
    compared = SourceComparison(method="GitHub compare", source="x", paths=3, compiled=[], changed=CHANGED)
    return LOCK.model_copy(
        update={"vllm": LOCK.vllm.model_copy(update={"repo": FORK, "commit": HEAD}), "vllm_compare": compared}
    )


@pytest.mark.parametrize("shape", ["nemo-rl-shape.Dockerfile", "nemo-rl-later-shape.Dockerfile"])
def test_the_overlay_is_the_target_stages_last_steps_on_both_upstream_shapes(shape):
    text, done = render_dockerfile(moved_lock(), (FIXTURES / shape).read_text(), script_text=SCRIPT)
    parsed = dockerfile.parse_string(text)
    stages: dict[str, list] = {}
    name = ""
    for ins in parsed:
        if ins.cmd == "FROM":
            name = ins.value[-1] if len(ins.value) == 3 else ""
        stages.setdefault(name, []).append(ins)
    assert [i.original for i in stages["vllm-source"][1:]] == [f"ADD --keep-git-dir=false {FORK}#{HEAD} /"]
    copy = stages["vllm-overlay"][1]
    assert copy.cmd == "COPY" and copy.flags == ("--parents", "--from=vllm-source")
    assert copy.value == ("vllm/v1/worker/gpu_model_runner.py", "vllm/v1/spec_decode/draft_model.py", "/")
    # The overlay is a stage of its own: upstream's target stage renamed, and the target FROM it by default, or FROM
    # the image a pushed build names in the global build arg (declared before the first FROM).
    first_from = next(n for n, i in enumerate(parsed) if i.cmd == "FROM")
    assert ("VLLM_INSTALLED_IMAGE",) in [i.value for i in parsed[:first_from] if i.cmd == "ARG"]
    assert stages["release-vllm-installed"][0].value == ("hermetic", "AS", "release-vllm-installed")
    assert any("build-custom-vllm.sh" in i.original for i in stages["hermetic"])  # the install, before both
    assert stages["release"][0].value == ("${VLLM_INSTALLED_IMAGE:-release-vllm-installed}", "AS", "release")
    assert [i.cmd for i in stages["release"] if i.cmd != "LABEL"] == ["FROM", "COPY", "RUN"]
    last = [i for i in stages["release"] if i.cmd != "LABEL"][-2:]
    assert (last[0].cmd, last[0].flags, last[0].value) == (
        "COPY",
        ("--link", "--from=vllm-overlay"),
        ("/", "/opt/nemo-rl/3rdparty/vllm/"),
    )
    assert last[1].cmd == "RUN" and last[1].value[0].split() == [
        "cd", "/opt/nemo-rl/3rdparty/vllm", "&&", "rm", "-f", "--", "vllm/old.py",
        "vllm/v1/worker/__pycache__/gpu_model_runner.*.pyc", "vllm/v1/spec_decode/__pycache__/draft_model.*.pyc",
        "vllm/__pycache__/old.*.pyc",
    ]  # fmt: skip
    # The install RUN's build args name vLLM itself at the wheel's commit; the fork is the overlay's alone.
    args = {
        i.value[0].split("=", 1)[0]: i.value[0].split("=", 1)[1] for i in parsed if i.cmd == "ARG" and "=" in i.value[0]
    }
    assert args["BUILD_CUSTOM_VLLM_REF"] == LOCK.vllm_wheel.commit
    assert args["BUILD_CUSTOM_VLLM_URL"] == LOCK.vllm_wheel.upstream
    assert text.startswith("# syntax=docker/dockerfile:1.20\n")  # COPY --parents is 1.20's
    assert {c.name: c.summary for c in done}["vllm_overlay"].startswith(
        f"vLLM installed from {LOCK.vllm_wheel.commit[:12]} (the wheel's commit), then 2 path(s) of the source "
        f"{HEAD[:12]} laid over it and 1 removed"
    )


def test_a_file_mirror_of_the_source_is_refused_at_render_and_a_git_one_is_fetched():
    """BuildKit fetches the overlay's source itself, through pins.yaml's git_url_rewrites; it fetches no file://
    repository, so render refuses one rather than leave the build to fail after the install RUN."""
    upstream = (FIXTURES / "nemo-rl-later-shape.Dockerfile").read_text()
    mirror = [GitUrlRewrite(url="file:///srv/mirror/", instead_of="https://github.com/")]
    with pytest.raises(InputError, match="file:///srv/mirror/stormchasingg/vllm.git is a file:// repository"):
        render_dockerfile(moved_lock(), upstream, rewrites=mirror)
    served = [GitUrlRewrite(url="git://127.0.0.1:9418/", instead_of="https://github.com/")]
    text, _ = render_dockerfile(moved_lock(), upstream, rewrites=served)
    assert f"ADD --keep-git-dir=false git://127.0.0.1:9418/stormchasingg/vllm.git#{HEAD} /\n" in text
    assert text.count("git://127.0.0.1:9418/") == 2  # the ADD and its comment; the install's URL is not rewritten
