"""The torch the vLLM wheel was built for, from its dist-info METADATA (issue 32, point 4), against the torch
NeMo-RL's uv.lock installs. The METADATA's shape and its torch line are vLLM 0.14.0's PyPI wheel's
(tests/support/fake_upstreams.py says where); the real wheel itself is read in test_real_wheel_names_torch_2_9_1."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.gpu.torchlock import torch_of_uv_lock
from buildkit.gpu.torchreq import MAX_METADATA_BYTES, TorchMismatch, check, requires_torch
from tests.support.fake_upstreams import LATER_UV_LOCK, NEMO_RL_UV_LOCK, WHEEL_X86, WheelFile, dist_info_metadata
from tests.support.realwheels import VLLM_0_14_0, real_wheel


def _wheel(tmp_path: Path, members: dict[str, bytes]) -> Path:
    path = tmp_path / WHEEL_X86
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_the_served_wheels_torch_line_is_read(tmp_path):
    path = tmp_path / WHEEL_X86
    path.write_bytes(WheelFile(64 * 1024, "", metadata=(dist_info_metadata(WHEEL_X86),)).data())
    assert requires_torch(path, WHEEL_X86) == "==2.9.1"  # not torchaudio's, not an extra's


def test_no_metadata_or_no_torch_line_is_none(tmp_path):
    assert requires_torch(_wheel(tmp_path, {"vllm/__init__.py": b""}), WHEEL_X86) is None
    _name, data = dist_info_metadata(WHEEL_X86, requires_torch=None)
    assert requires_torch(_wheel(tmp_path, {_name: data}), WHEEL_X86) is None


def test_an_optional_torch_requirement_is_not_the_wheels(tmp_path):
    name = "vllm-0.14.0.dist-info/METADATA"
    text = b'Name: vllm\nRequires-Dist: torch==2.11.0; extra == "x"\nRequires-Dist: torch==2.9.1\n\nbody\n'
    assert requires_torch(_wheel(tmp_path, {name: text}), WHEEL_X86) == "==2.9.1"


def test_hostile_metadata_is_refused(tmp_path):
    name = "vllm-0.14.0.dist-info/METADATA"
    with pytest.raises(UpstreamMalformed, match="more than buildkit reads"):
        requires_torch(_wheel(tmp_path, {name: b"A" * (MAX_METADATA_BYTES + 1)}), WHEEL_X86)
    with pytest.raises(UpstreamMalformed, match="an unreadable requirement"):
        requires_torch(_wheel(tmp_path, {name: b"Requires-Dist: torch==[2\n\n"}), WHEEL_X86)
    with pytest.raises(UpstreamMalformed, match="2 unconditional torch requirements"):
        requires_torch(_wheel(tmp_path, {name: b"Requires-Dist: torch==2.9.1\nRequires-Dist: torch>=2\n\n"}), WHEEL_X86)
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UpstreamMalformed, match="not a readable wheel"):
        requires_torch(bad, "bad.whl")


def test_the_comparison_ignores_the_local_part_and_tells_a_release_line_apart():
    ref = torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "x86_64")  # 2.9.0+cu129
    assert check("==2.9.0", ref, WHEEL_X86).outcome == "match"
    same = check("==2.9.1", ref, WHEEL_X86)  # the reference pins: a patch apart
    assert same.outcome == "same release line" and "the ABI check on vLLM's symbols decides" in same.detail
    later = torch_of_uv_lock(LATER_UV_LOCK.encode(), "uv.lock", "x86_64")  # 2.11.0+cu130
    with pytest.raises(TorchMismatch, match="built for torch==2.9.1 .* installs torch 2.11.0\\+cu130") as caught:
        check("==2.9.1", later, WHEEL_X86)
    assert caught.value.exit_code == 4 and "requires torch 2.11" in (caught.value.hint or "")
    assert check(">=2.9", later, WHEEL_X86).outcome == "match"


def test_a_check_that_could_not_run_says_why():
    unread = check("==2.9.1", "not checked: could not read NeMo-RL's uv.lock at 946862e7755f: 404", WHEEL_X86)
    assert unread.outcome == "not checked" and unread.detail.startswith("could not read NeMo-RL's uv.lock")
    ref = torch_of_uv_lock(NEMO_RL_UV_LOCK.encode(), "uv.lock", "x86_64")
    assert check(None, ref, WHEEL_X86).detail.endswith("names no torch requirement")


@pytest.mark.e2e  # a real PyPI wheel (fetched once, sha256-checked: tests/support/realwheels.py)
def test_real_wheel_names_torch_2_9_1():
    path = real_wheel(VLLM_0_14_0)
    assert requires_torch(path, path.name) == "==2.9.1"
