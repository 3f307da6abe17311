"""The vLLM layer plan (buildkit/models/overlay.py) from the recorded lock (tests/fixtures/report/, a real resolve),
with the source moved off its wheel's commit as an open PR's head is; and the differing paths as GitHub's compare
answer and git's diff give them."""

from __future__ import annotations

import pytest

from buildkit.models.lock import Changes, SourceComparison, read_lock
from buildkit.models.overlay import MAX_OVERLAY, vllm_layers
from buildkit.models.pins import GitUrlRewrite, fetched_from
from buildkit.stages.resolve.github import _ChangedFile, changes_of
from tests.support.paths import REPORT_FIXTURES

LOCK = read_lock(REPORT_FIXTURES / "pins.lock")
HEAD = "c" * 40
FORK = "https://github.com/stormchasingg/vllm.git"


def moved(changed: Changes | None, paths: int | None = None):
    """The recorded lock with its source at a fork's head whose differing paths are `changed`."""
    compared = SourceComparison(
        method="GitHub compare",
        source="https://api.github.com/repos/vllm-project/vllm/compare/main...c",
        paths=len(changed or {}) if paths is None else paths,
        compiled=[],
        changed=changed,
    )
    return LOCK.model_copy(
        update={"vllm": LOCK.vllm.model_copy(update={"repo": FORK, "commit": HEAD}), "vllm_compare": compared}
    )


def test_the_source_at_its_wheels_commit_is_installed_as_it_is():
    layers = vllm_layers(LOCK)
    assert (layers.install_commit, layers.has_overlay, layers.whole) == (LOCK.vllm.commit, False, None)


def test_python_only_differences_are_laid_over_the_wheel_commits_install():
    # PR #24322's path (https://github.com/vllm-project/vllm/pull/24322 changes the model runner, Python only)
    layers = vllm_layers(
        moved(
            {
                "vllm/v1/worker/gpu_model_runner.py": "modified",
                "vllm/v1/spec_decode/draft_model.py": "added",
                "vllm/old.py": "removed",
                "tests/v1/spec_decode/test_draft.py": "added",
                "vllm/vllm_flash_attn/flash_attn_interface.py": "modified",  # the wheel's, whatever the source holds
                "vllm/_C.abi3.so": "added",
            }
        )
    )
    assert (layers.install_repo, layers.install_commit) == (LOCK.vllm_wheel.upstream, LOCK.vllm_wheel.commit)
    assert (layers.source_repo, layers.source_commit) == (FORK, HEAD)
    assert layers.overlay == (
        "vllm/v1/worker/gpu_model_runner.py",
        "vllm/v1/spec_decode/draft_model.py",
        "tests/v1/spec_decode/test_draft.py",
    )
    assert layers.removed == ("vllm/old.py",)
    assert layers.stale_caches() == [
        "vllm/v1/worker/__pycache__/gpu_model_runner.*.pyc",
        "vllm/v1/spec_decode/__pycache__/draft_model.*.pyc",
        "tests/v1/spec_decode/__pycache__/test_draft.*.pyc",
        "vllm/__pycache__/old.*.pyc",
    ]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("requirements/common.txt", "requirements/common.txt differs, and the install reads it"),
        ("setup.py", "setup.py differs, and the install reads it"),
        ("vllm/envs.py", "vllm/envs.py differs, and the install reads it (setup.py loads it"),
        ("use_existing_torch.py", "use_existing_torch.py differs, and the install reads it"),
        ("csrc/cache_kernels.cu", "csrc/cache_kernels.cu differs, and the install reads it (compiled sources)"),
        ("docs/a b.md", "'docs/a b.md' differs, a path the Dockerfile cannot name as it is"),
        ("vllm/[x].py", "'vllm/[x].py' differs, a path the Dockerfile cannot name as it is"),
    ],
)
def test_a_path_the_install_reads_or_the_dockerfile_cannot_name_installs_the_source_itself(path, why):
    layers = vllm_layers(moved({"vllm/config.py": "modified", path: "modified"}))
    assert (layers.install_commit, layers.has_overlay) == (HEAD, False)
    assert layers.whole is not None and layers.whole.startswith(why)
    assert layers.said().startswith(f"vLLM installed from the source {HEAD[:12]} itself: ")


def test_an_unlisted_or_too_long_difference_installs_the_source_itself():
    unlisted = vllm_layers(moved(None, paths=12))
    assert unlisted.whole == "the lock does not list the 12 path(s) that differ (resolve again to list them)"
    many: Changes = {f"vllm/m{i}.py": "added" for i in range(MAX_OVERLAY + 1)}
    assert vllm_layers(moved(many)).whole == f"{MAX_OVERLAY + 1} paths differ, more than one layer of them should " \
        f"carry ({MAX_OVERLAY})"  # fmt: skip


def test_github_statuses_say_whether_the_head_has_each_path():
    # File statuses as GitHub's compare answer names them
    # (https://docs.github.com/en/rest/commits/commits#compare-two-commits)
    files = [
        _ChangedFile(filename="vllm/a.py", status="modified"),
        _ChangedFile(filename="vllm/b.py", status="added"),
        _ChangedFile(filename="vllm/c.py", status="removed"),
        _ChangedFile(filename="vllm/new.py", status="renamed", previous_filename="vllm/old.py"),
        _ChangedFile(filename="vllm/copy.py", status="copied", previous_filename="vllm/a.py"),
        _ChangedFile(filename="vllm/mode.sh", status="changed"),
        _ChangedFile(filename="vllm/same.py", status="unchanged"),
    ]
    assert changes_of(files) == {
        "vllm/a.py": "modified",
        "vllm/b.py": "added",
        "vllm/c.py": "removed",
        "vllm/copy.py": "added",
        "vllm/mode.sh": "modified",
        "vllm/new.py": "added",
        "vllm/old.py": "removed",
    }
    # A path a rename took away that another change brings back: the head has it.
    back = [
        _ChangedFile(filename="vllm/b.py", status="renamed", previous_filename="vllm/a.py"),
        _ChangedFile(filename="vllm/a.py", status="added"),
    ]
    assert changes_of(back) == {"vllm/a.py": "added", "vllm/b.py": "added"}


def test_the_lock_holds_changed_to_its_count_and_to_gits_path_grammar():
    with pytest.raises(ValueError, match="changed lists 1 path"):
        SourceComparison(method="git diff", source="git diff", paths=2, compiled=[], changed={"vllm/a.py": "added"})
    for bad in ("vllm/../csrc/x.cu", "/vllm/a.py", "vllm//a.py", "vllm/a.py/", "vllm/\na.py"):
        with pytest.raises(ValueError, match="a path of a git tree"):
            SourceComparison(method="git diff", source="git diff", paths=1, compiled=[], changed={bad: "added"})


def test_mirrors_rewrite_the_url_git_fetches_longest_prefix_first():
    rewrites = [
        GitUrlRewrite(url="git://127.0.0.1:9418/", instead_of="https://github.com/"),
        GitUrlRewrite(url="git://127.0.0.1:9418/forks/", instead_of="https://github.com/stormchasingg/"),
    ]
    assert fetched_from(FORK, rewrites) == "git://127.0.0.1:9418/forks/vllm.git"
    assert fetched_from(LOCK.vllm_wheel.upstream, rewrites) == "git://127.0.0.1:9418/vllm-project/vllm.git"
    assert fetched_from("https://gitlab.com/x/vllm.git", rewrites) == "https://gitlab.com/x/vllm.git"
