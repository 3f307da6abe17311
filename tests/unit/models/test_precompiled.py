"""Issue 40, point 1: what precompiled mode takes from the wheel comes from setup.py at the wheel's commit and the
wheel's member list, not from a fixed list. setup.py is vLLM 0.14.0's real one (tests/fixtures, from its sdist);
the wheel is vLLM 0.14.0's real x86_64 wheel from PyPI."""

from __future__ import annotations

import time
import zipfile

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.models.compiled import Extraction, extraction_of, is_vllm_file
from buildkit.models.lock import CommitFact
from buildkit.stages.resolve.precompiled import precompiled_files, taken
from buildkit.stages.resolve.source import _listing
from tests.support.realwheels import VLLM_0_14_0, real_wheel
from tests.support.vllmtree import SETUP_PY

SO = (
    "vllm/_C.abi3.so", "vllm/_moe_C.abi3.so", "vllm/_flashmla_C.abi3.so", "vllm/_flashmla_extension_C.abi3.so",
    "vllm/_sparse_flashmla_C.abi3.so", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", "vllm/cumem_allocator.abi3.so", "vllm/_rocm_C.abi3.so",
)  # fmt: skip


def test_the_real_setup_py_declares_its_extraction():
    found = extraction_of(SETUP_PY.read_text())
    assert found == Extraction(
        SO,
        (
            r"vllm/vllm_flash_attn/(?:[^/.][^/]*/)*(?!\.)[^/]*\.py",
            r"vllm/third_party/triton_kernels/(?:[^/.][^/]*/)*(?!\.)[^/]*\.py",
        ),
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "def f():\n    files_to_copy = ['a', 1]\n",  # not a list of strings
        "def f():\n    files_to_copy = names()\n",
        "def f():\n    files_to_copy = ['a']\n    a_regex = re.compile(pattern)\n",  # not a literal pattern
        "def f():\n    files_to_copy = ['a']\n    a_regex = re.compile('(')\n",  # not a pattern re compiles
        "def f():\n    files_to_copy = ['a']\n    a_regex = re.compile('" + "a" * 400 + "')\n",
        "files_to_copy = ['a']\n",  # not in a function: not setup.py's shape
        "def f(:\n",
    ],
)
def test_a_setup_py_of_another_shape_gives_no_extraction(text):
    assert extraction_of(text) is None


def test_the_extraction_matches_as_setup_py_does_a_prefix_match():
    """`regex.match` matches at the start, not the whole name: a .pyi beside the .py is taken too, as setup.py does."""
    found = extraction_of(SETUP_PY.read_text())
    assert found is not None
    members = [
        "vllm/_C.abi3.so",
        "vllm/vllm_flash_attn/layers/rotary.py",
        "vllm/vllm_flash_attn/layers/rotary.pyi",
        "vllm/vllm_flash_attn/.hidden.py",
        "vllm/config/__init__.py",
        "vllm/_qutlass_C.abi3.so",  # a newer library 0.14.0's list does not name (vLLM #54478's kind)
    ]
    assert taken(members, found, "wheel") == members[:3]


def test_a_pattern_that_backtracks_without_end_is_stopped(monkeypatch):
    """The patterns are upstream's: matched in a child with a deadline, a catastrophic one stops resolve with one
    line (the deadline lowered here: the failure's own scale is a hang)."""
    monkeypatch.setattr("buildkit.stages.resolve.precompiled.DEADLINE", 2)
    evil = Extraction((), (r"(a+)+$",))
    begun = time.monotonic()
    with pytest.raises(UpstreamMalformed, match="took more than 2 s"):
        taken(["a" * 64 + "!"], evil, "wheel x")
    assert time.monotonic() - begun < 60


@pytest.mark.e2e
def test_the_real_wheel_gives_the_54_members_precompiled_mode_takes():
    """vLLM 0.14.0's wheel: 7 of the 9 named libraries (it has no _sparse_flashmla_C or _rocm_C), and 47 Python
    files of vllm_flash_attn and triton_kernels; each hashed, as the lock keeps them."""
    wheel = real_wheel(VLLM_0_14_0)
    files, notes = precompiled_files(wheel, {}, extraction_of(SETUP_PY.read_text()))
    assert files is not None and len(files) == 54 and notes == []
    assert sorted(n for n in files if n.endswith(".so")) == sorted(set(SO) - {SO[4], SO[8]})
    with zipfile.ZipFile(wheel) as z:
        assert all(n in z.namelist() for n in files)


def test_the_listing_keeps_every_file_git_can_hold_under_vllm():
    """vLLM's own names use `,=[]` (fused_moe configs); a path with a `..`, an empty or `.` component, a control
    character, or outside vllm/ is not listed; a link or a submodule is not a regular file."""
    assert is_vllm_file(
        "vllm/model_executor/layers/fused_moe/configs/E=8,N=14336,dtype=fp8_w8a8,block_shape=[128,128].json"
    )
    assert is_vllm_file("vllm/py.typed") and is_vllm_file("vllm/entrypoints/x.jinja", "100755")
    for path, mode in (
        ("vllm/../csrc/x.cu", "100644"),
        ("vllm//x.py", "100644"),
        ("vllm/./x.py", "100644"),
        ("vllm/a\nb.py", "100644"),
        ("csrc/x.cu", "100644"),
        ("vllm", "100644"),
        ("vllm/x.py", "120000"),
        ("vllm/x", "160000"),
        ("vllm/" + "a" * 400, "100644"),
    ):
        assert not is_vllm_file(path, mode), path


def test_a_tree_of_more_than_50000_files_under_vllm_is_exit_3_not_a_traceback():
    source = CommitFact.model_construct(repo="https://github.com/alice/vllm.git", ref="main", commit="a" * 40)
    files = {f"vllm/f{i}.py": "b" * 40 for i in range(50_001)}
    with pytest.raises(UpstreamMalformed, match="50,001 files under vllm/, more than buildkit lists") as raised:
        _listing(source, "git ls-tree", files)
    assert raised.value.exit_code == 3
    assert _listing(source, "git ls-tree", dict(list(files.items())[:50_000])).scope == "package"
