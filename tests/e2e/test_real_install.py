"""The real vLLM precompiled install of tests/support/realinstall.py: the genuine image is laid out as NeMo-RL's
build-custom-vllm.sh leaves it (upstream-facts.md: "A real precompiled install runs offline here"), and in each
tampered image the image's own python would run the tampered code, where in the genuine one it would not."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support import realinstall
from tests.support.realinstall import CHECKOUT, PACKAGE_DIR, PYTHON, SITE_PACKAGES, SOURCE_COMMIT
from tests.support.vllmtree import listing as github_listing

# The compiled members precompiled mode takes from vLLM 0.14.0's wheel (its setup.py names them; the wheel has seven).
SHARED_OBJECTS = (
    "vllm/_C.abi3.so",
    "vllm/_moe_C.abi3.so",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_flashmla_extension_C.abi3.so",
    "vllm/cumem_allocator.abi3.so",
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
)
FROM_WHEEL_FOLDERS = ("vllm/vllm_flash_attn/", "vllm/third_party/triton_kernels/")

# Run by the image's python: every file under the package directory (git blob id, sha256, whether a link), where
# import finds `vllm`, what site-packages holds, the checkout's commit and _version.py.
FACTS = (
    realinstall.FIND
    + f"""
import hashlib, json, os, subprocess
files = {{}}
for folder, dirs, names in os.walk('{PACKAGE_DIR}'):
    for name in names:
        path = os.path.join(folder, name)
        with open(path, 'rb') as f:
            data = f.read()
        blob = None if name.endswith('.so') else hashlib.sha1(b'blob %d\\0' % len(data) + data).hexdigest()
        files['vllm/' + os.path.relpath(path, '{PACKAGE_DIR}')] = [blob, hashlib.sha256(data).hexdigest(),
                                                                  os.path.islink(path)]
spec = find('vllm')
head = subprocess.run(['git', '-C', '{CHECKOUT}', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout
print(json.dumps({{
    'files': files,
    'origin': spec.origin if spec else None,
    'site': sorted(os.listdir('{SITE_PACKAGES}')),
    'head': head.strip(),
    'left': [os.path.join(d, n) for d, _, names in os.walk('{SITE_PACKAGES}/nvidia') for n in names],
    'version': text('{PACKAGE_DIR}/_version.py'),
}}))
"""
)


@pytest.fixture(scope="module")
def image(engine) -> str:
    return realinstall.genuine()


@pytest.fixture(scope="module")
def facts(image) -> dict:
    done = realinstall.run_in(image, PYTHON, "-c", FACTS)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.e2e
def test_the_source_is_vllm_0_14_0_as_github_holds_it():
    """The commit made of the sdist (the same SHA on every machine: source_repository() fails otherwise) holds, for
    every vllm/**/*.py of the v0.14.0 tree GitHub lists, the same git blob, but the two gRPC stubs a build writes."""
    listing = realinstall.source_listing()
    github = github_listing()
    differ = {path for path, blob in github.items() if listing.get(path, ("", ""))[0] != blob}
    assert differ == {"vllm/grpc/vllm_engine_pb2.py", "vllm/grpc/vllm_engine_pb2_grpc.py"}
    assert not any(path in listing for path in differ)
    assert sum(path.endswith(".py") for path in listing) == 1184
    assert {mode for _, mode in listing.values()} <= {"100644", "100755"}
    assert realinstall.source_repository().name == "vllm-0.14.0-source.git"


def test_the_checkout_is_the_source_commit_with_the_wheels_members(facts):
    """Every file of the commit under vllm/ is in the checkout with its blob; what else the package holds is what
    precompiled mode took from the wheel (byte for byte), setuptools-scm's _version.py and bytecode caches."""
    files = facts["files"]
    listing = realinstall.source_listing()
    members = realinstall.wheel_members()
    assert facts["head"] == SOURCE_COMMIT
    assert {path: blob for path, (blob, _) in listing.items()} == {path: files.get(path, [None])[0] for path in listing}
    extra = {path for path in files if path not in listing and "/__pycache__/" not in path}
    from_wheel = {
        name
        for name in members
        if name in SHARED_OBJECTS or (name.startswith(FROM_WHEEL_FOLDERS) and name.endswith(".py"))
    }
    assert extra == from_wheel | {"vllm/_version.py"}
    assert {path: files[path][1] for path in from_wheel} == {name: members[name] for name in from_wheel}
    assert set(SHARED_OBJECTS) <= from_wheel and len(from_wheel) == 7 + 7 + 40  # .so, flash-attn .py, triton .py
    assert not any(link for _, _, link in files.values())


def test_python_finds_vllm_in_the_checkout_through_pips_editable_finder(facts):
    site = facts["site"]
    assert facts["origin"] == f"{PACKAGE_DIR}/__init__.py"
    (pth,) = [name for name in site if re.fullmatch(r"__editable__\.vllm-.+\.pth", name)]
    (finder,) = [name for name in site if re.fullmatch(r"__editable___vllm_.+_finder\.py", name)]
    (dist_info,) = [name for name in site if re.fullmatch(r"vllm-.+\.dist-info", name)]
    assert ".precompiled" in dist_info and f"g{SOURCE_COMMIT[:7]}" in dist_info, dist_info
    assert pth.removeprefix("__editable__.").removesuffix(".pth") in dist_info
    assert finder.startswith("__editable___vllm_")
    # torch and what it brought are left out (realinstall's docstring says why); pip's uninstall leaves nvidia/'s
    # empty folders and no file; the rest of the venv stays
    assert not {"torch", "triton"} & set(site) and facts["left"] == []
    assert not [name for name in site if name.startswith(("torch-", "nvidia_", "triton-"))]
    assert {"pip", "setuptools", "setuptools_scm", "vcs_versioning", "packaging", "numpy"} <= set(site)


def test_version_file_is_setuptools_scm_10s(facts):
    """setuptools-scm 10.3.4 (vcs-versioning) writes `from __future__ import annotations` and a `__commit_id__`."""
    version = facts["version"]
    assert "from __future__ import annotations" in version
    assert f"\n__commit_id__ = commit_id = 'g{SOURCE_COMMIT[:9]}'\n" in version
    assert f"\n__version__ = version = '0.1.dev1+g{SOURCE_COMMIT[:9]}.d20260120'\n" in version


def test_version_file_of_setuptools_scm_8_is_its_own(image):
    """The scm8 case holds setuptools-scm 8.3.1's output byte for byte: no __future__ import, no commit id, and the
    version of the same commit, dirty tree and SOURCE_DATE_EPOCH as 10.3.4's in the image, but for the length of the
    abbreviated commit (8.3.1: 7 hex digits, as git's default; 10.3.4: 9)."""
    scm8 = realinstall.scm8_version_file().decode()
    assert "from __future__" not in scm8 and "commit_id" not in scm8
    tag = realinstall.tampered("version-scm8")
    done = realinstall.run_in(tag, "cat", f"{PACKAGE_DIR}/_version.py")
    assert done.stdout == scm8
    genuine = realinstall.run_in(image, "cat", f"{PACKAGE_DIR}/_version.py").stdout
    version = re.compile(r"^__version__ = version = '(.+)'$", re.M)
    assert version.findall(scm8) == [f"0.1.dev1+g{SOURCE_COMMIT[:7]}.d20260120"]
    assert version.findall(genuine) == [f"0.1.dev1+g{SOURCE_COMMIT[:9]}.d20260120"]


def _layers(tag: str) -> list[str]:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", tag], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def genuine_shown(image) -> dict[str, realinstall.Shown]:
    return realinstall.shown_many(list(realinstall.CASES), image)


@pytest.mark.parametrize("case", list(realinstall.CASES))
def test_tampered_code_is_what_the_images_python_would_run(image, genuine_shown, case):
    tag = realinstall.tampered(case)
    assert _layers(tag)[:-1] == _layers(image), "one layer on top of the genuine image"
    tampered = realinstall.shown(case, tag)
    assert tampered.runs, f"{case}: {tampered.said}"
    genuine = genuine_shown[case]
    assert not genuine.runs, f"{case} in the genuine image: {genuine.said}"
