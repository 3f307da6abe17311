"""The GPU check's judgement on torch's answer, for arch lists other than the reference "9.0" (the engine here has
no GPU, so the engine tests reach only the "no GPU runtime" failure)."""

from __future__ import annotations

import pytest

from buildkit.stages.verify import gpu_check_name, judge_gpu, wanted_archs


def test_wanted_archs():
    assert wanted_archs("9.0") == [("sm_90", (9, 0))]
    assert wanted_archs("9.0a 10.0+PTX") == [("sm_90a", (9, 0)), ("sm_100", (10, 0))]
    assert wanted_archs("8.0;8.6") == [("sm_80", (8, 0)), ("sm_86", (8, 6))]
    assert gpu_check_name("9.0 10.0") == "a GPU of compute capability 9.0 or 10.0, and its kernels"


@pytest.mark.parametrize(
    ("arch_list", "output", "ok"),
    [
        ("9.0", "True\n(9, 0)\nsm_80 sm_90", True),
        ("9.0 10.0", "True\n(10, 0)\nsm_90 sm_100", True),  # a B200 for a Hopper+Blackwell lock
        ("9.0 10.0", "True\n(10, 0)\nsm_90", False),  # sm_100 kernels missing
        ("9.0 10.0", "True\n(8, 0)\nsm_80 sm_90 sm_100", False),  # an A100 is neither
        ("9.0", "False\n\nsm_90", False),  # no GPU visible
        ("8.0;8.6", "True\n(8, 6)\nsm_80 sm_86", True),
    ],
)
def test_judge_gpu(arch_list, output, ok):
    passed, reason = judge_gpu(arch_list, 0, output)
    assert passed is ok, reason


def test_judge_gpu_names_what_is_missing():
    passed, reason = judge_gpu("9.0 10.0", 0, "True\n(8, 0)\nsm_80 sm_90")
    assert not passed and "the lock builds for 9.0 10.0" in reason and "missing sm_100" in reason
    assert judge_gpu("9.0", 1, "Traceback\nImportError: torch") == (False, "Traceback | ImportError: torch")


def test_the_version_reason_is_bounded_and_has_no_controls():
    """What the image prints goes into build/verify.json: one bounded line, without terminal escapes."""
    from buildkit.stages.verify import version_reason

    sha = "4a5299c93ff97c26def537b92562df5ada530fea"
    reason = version_reason("noise\n\x1b]0;owned\x07" + "9" * 1_000_000, sha)
    assert len(reason) < 300 and "\x1b" not in reason and "\x07" not in reason
    assert reason.endswith("; expected +g4a5299c93")
    assert version_reason("0.10.1+g4a5299c93\n", sha) == "vllm.__version__ = 0.10.1+g4a5299c93; expected +g4a5299c93"
