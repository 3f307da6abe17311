"""NeMo-RL's uv-source way to pin a vLLM fork, read from pyproject.toml and uv.lock (buildkit/models/uvsource.py):
both forms NeMo-RL's history holds, copied as they stand, and what cannot be theirs refused."""

from __future__ import annotations

import pytest

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.models.uvsource import uv_source

LIMIT = 1 << 20
# NVIDIA-NeMo/RL 5d63149a (super-v3.5-posttraining), pyproject.toml lines 273 and 539-540
BRANCH_PYPROJECT = b"""[tool.uv.sources]
vllm = { git = "https://github.com/TomerBN-Nvidia/vllm.git", branch = "super_vl_rl_v0.25.1", extra = "vllm" }

[tool.uv.extra-build-variables]
vllm = { VLLM_USE_PRECOMPILED = "1", VLLM_PRECOMPILED_WHEEL_COMMIT = "61874f9842bd084cc5e9e348de4b3b6a8f46cdc8", \
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VLLM = "0.25.1", SETUPTOOLS_SCM_PRETEND_VERSION = "0.25.1" }
"""
# NVIDIA-NeMo/RL 5f0d71a7, uv.lock: its header and lines 8295-8298
BRANCH_LOCK = b"""version = 1
revision = 3
requires-python = ">=3.13.14, <3.14"

[[package]]
name = "vllm"
version = "0.25.1"
source = { git = "https://github.com/TomerBN-Nvidia/vllm.git?branch=super_vl_rl_v0.25.1#b31cc131c3185d78b4e3aad0f771690588020dca" }
"""  # noqa: E501
# NVIDIA-NeMo/RL 95c11c44, pyproject.toml line 181 and 219 (the vllm part), uv.lock line 8641
REV_PYPROJECT = b"""[tool.uv]
extra-build-variables = { vllm = { VLLM_USE_PRECOMPILED = "1", VLLM_PRECOMPILED_WHEEL_COMMIT = "b66a74649e40022c6b1180b98fbb1b6e4b4af74a" } }

[tool.uv.sources]
vllm = { git = "https://github.com/terrykong/vllm.git", rev = "d35c05dbfec153a875258b8a1d563bd8b08aceb3" }
"""  # noqa: E501
REV_LOCK = b"""version = 1
revision = 3

[[package]]
name = "vllm"
version = "1.0.0.dev0"
source = { git = "https://github.com/terrykong/vllm.git?rev=d35c05dbfec153a875258b8a1d563bd8b08aceb3#d35c05dbfec153a875258b8a1d563bd8b08aceb3" }
"""  # noqa: E501


def test_both_forms_nemo_rl_wrote_are_read():
    branch = uv_source(BRANCH_PYPROJECT, lambda: BRANCH_LOCK, "5d63149a23d8", LIMIT)
    assert branch is not None
    assert (branch.repo, branch.ref, branch.commit, branch.wheel_commit, branch.precompiled) == (
        "https://github.com/TomerBN-Nvidia/vllm.git",
        "super_vl_rl_v0.25.1",
        "b31cc131c3185d78b4e3aad0f771690588020dca",
        "61874f9842bd084cc5e9e348de4b3b6a8f46cdc8",
        True,
    )
    rev = uv_source(REV_PYPROJECT, lambda: REV_LOCK, "95c11c440f62", LIMIT)
    assert rev is not None
    assert (rev.ref, rev.commit, rev.wheel_commit) == (
        "d35c05dbfec153a875258b8a1d563bd8b08aceb3",
        "d35c05dbfec153a875258b8a1d563bd8b08aceb3",
        "b66a74649e40022c6b1180b98fbb1b6e4b4af74a",
    )


def test_vllm_from_an_index_or_a_path_is_the_scripts_way_and_uv_lock_is_not_read():
    read: list[int] = []

    def lock() -> bytes | None:
        read.append(1)
        return None

    for text in (
        b'[project]\nname = "nemo-rl"\n',
        b'[tool.uv.sources]\nvllm = { path = "3rdparty/vllm", editable = true }\n',
    ):
        assert uv_source(text, lock, "x", LIMIT) is None
    assert read == []


@pytest.mark.parametrize(
    ("pyproject", "lock", "error", "message"),
    [
        (BRANCH_PYPROJECT, b"version = 1\n", UpstreamMismatch, "its uv.lock pins no commit of it"),
        (BRANCH_PYPROJECT, REV_LOCK, UpstreamMismatch, "not the git source pyproject.toml names"),
        (BRANCH_PYPROJECT, BRANCH_LOCK.replace(b"#b31cc131c3185d78b4e3aad0f771690588020dca", b"#b31cc131"),
         UpstreamMalformed, "pins no full commit"),
        (BRANCH_PYPROJECT.replace(b'"61874f9842bd084cc5e9e348de4b3b6a8f46cdc8"', b'"main"'), BRANCH_LOCK,
         UpstreamMalformed, "VLLM_PRECOMPILED_WHEEL_COMMIT 'main' is not a full SHA"),
        (BRANCH_PYPROJECT.replace(b'extra = "vllm"', b'rev = "abc"'), BRANCH_LOCK, UpstreamMalformed,
         "is not a git source uv reads"),
        (b'[tool.uv.sources]\nvllm = { git = "ftp://example.com/vllm.git" }\n', BRANCH_LOCK, UpstreamMalformed,
         "vLLM's git source"),
        (b"a" + b".a" * 20 + b" = 1\n", BRANCH_LOCK, UpstreamMalformed, "dots outside strings"),
        (b"x" * (LIMIT + 1), BRANCH_LOCK, UpstreamMalformed, "more than 1,048,576 bytes"),
        # uv.lock's tables are counted as they are split, as torch's are: a flood of them is refused, not walked
        (BRANCH_PYPROJECT, b'version = 1\n' + b'[[package]]\nname = "x"\n' * 20_001, UpstreamMalformed,
         "more than 20,000 entries"),
    ],
)  # fmt: skip
def test_what_cannot_be_nemo_rls_is_refused_named(pyproject, lock, error, message):
    with pytest.raises(error, match=message):
        uv_source(pyproject, lambda: lock, "5d63149a23d8", LIMIT)
