"""The grammar of a path in a git tree (world/git.py path_problem), and GitHub's compare answer held to it
(stages/resolve/github.py): issue 40, "What failed" 5. The CLI cases: tests/e2e/security/test_compare_answers.py."""

from __future__ import annotations

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.stages.resolve.github import _CompareFiles
from buildkit.world.git import GIT_PATH_MAX, path_problem
from buildkit.world.shapes import parse

# Real vLLM paths (the reference PR's, and vLLM's compiled inputs: buildkit/models/compiled.py).
GOOD = [
    "vllm/v1/worker/gpu_model_runner.py",
    "csrc/cache_kernels.cu",
    "requirements/cuda.txt",
    "setup.py",
    ".github/workflows/pre-commit.yml",  # a leading dot in a name is a name
    "vllm/..hidden/x.py",
    "a/b...c",
    "é/ü.py",
    "x" * GIT_PATH_MAX,
]
BAD = {
    "vllm/../csrc/x.cu": "a '..' component",
    "..": "a '..' component",
    "./csrc/x.cu": "a '.' component",
    "csrc/./x.cu": "a '.' component",
    "csrc//x.cu": "an empty component",
    "/csrc/x.cu": "an empty component",
    "csrc/x.cu/": "an empty component",
    "": "an empty component",
    "é" * (GIT_PATH_MAX // 2 + 1): f"more than {GIT_PATH_MAX} bytes",
    "csrc/\ud800.cu": "a character UTF-8 cannot hold",
}


@pytest.mark.parametrize("path", GOOD)
def test_paths_git_holds_pass(path):
    assert path_problem(path) is None


@pytest.mark.parametrize("path, problem", BAD.items())
def test_paths_that_spell_another_path_are_refused(path, problem):
    assert path_problem(path) == problem


def _compare(*files: dict) -> dict:
    return {"status": "ahead", "ahead_by": 1, "merge_base_commit": {"sha": "a" * 40}, "files": list(files)}


@pytest.mark.parametrize("bad", [*BAD, "csrc/x\x1b[2K.cu", "csrc/x\t.cu", "csrc/x\x85.cu"])
@pytest.mark.parametrize("field", ["filename", "previous_filename"])
def test_a_compare_answer_names_only_git_paths(bad, field):
    entry = {"filename": "vllm/config.py", "status": "renamed", field: bad}
    with pytest.raises(UpstreamMalformed) as caught:
        parse(_CompareFiles, _compare(entry), "GitHub API answer for x/y compare a...b")
    message = caught.value.message
    assert message.startswith(f"GitHub API answer for x/y compare a...b is malformed: files.0.{field}: expected a git")
    assert "\x1b" not in message and "\t" not in message and "\n" not in message and len(message) < 300


def test_ahead_by_is_a_count():
    for value in (-1, "1", None, 1.0, True):
        with pytest.raises(UpstreamMalformed, match="ahead_by"):
            parse(_CompareFiles, {**_compare(), "ahead_by": value}, "GitHub API answer")
    missing = _compare()
    del missing["ahead_by"]
    with pytest.raises(UpstreamMalformed, match="ahead_by: Field required"):
        parse(_CompareFiles, missing, "GitHub API answer")
