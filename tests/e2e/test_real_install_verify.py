"""Issue 40, point 3: the proof on a real vLLM install. The image is vLLM 0.14.0's real source installed as NeMo-RL's
build-custom-vllm.sh installs it, in precompiled mode from the real 0.14.0 wheel, on the engine
(tests/support/realinstall.py says which step ran where and what was left out). The lock's two lists are what
resolve would write for it: every file under vllm/ at the source commit (`git ls-tree`, as resolve's git listing),
and the wheel's members precompiled mode takes (setup.py's extraction over the real wheel's member list, each
hashed). verify passes the genuine image; each tampered image (one layer over it, the image's own python showing in
tests/e2e/test_real_install.py that the tampered code is what would run) fails, naming the file."""

from __future__ import annotations

import subprocess

import pytest

from buildkit.models.compiled import extraction_of
from buildkit.models.lock import PythonFiles
from buildkit.stages.resolve.precompiled import precompiled_files
from buildkit.stages.verify import ENVIRONMENTS_CHECK, PYTHON_CHECK, verify_image
from buildkit.world.engine import Engine
from tests.support import realinstall
from tests.support.realwheels import real_wheel
from tests.support.verifyimages import LOCK, PREPARE

CHECKS = (PYTHON_CHECK, ENVIRONMENTS_CHECK)
# What each case's failure names: the file, and what it is (the composition proof, or the environments' check).
NAMED = {
    "flash-attn-extra": (PYTHON_CHECK, "are neither 474ded95a56d's nor the wheel's: vllm/vllm_flash_attn/evil.py"),
    "flash-attn-package": (
        PYTHON_CHECK,
        "are neither 474ded95a56d's nor the wheel's: vllm/vllm_flash_attn/flash_attn_interface/__init__.py",
    ),
    "config-symlink": (PYTHON_CHECK, "vllm/config (a symbolic link to /opt/evil/config)"),
    "lora-removed": (PYTHON_CHECK, "of 474ded95a56d's are missing: vllm/lora/"),
    "pth": (ENVIRONMENTS_CHECK, "run at start-up and no distribution owns them: buildkit-tampered.pth"),
    "sitecustomize": (ENVIRONMENTS_CHECK, "run at start-up and no distribution owns them: sitecustomize.py"),
    "pyc-sourceless": (PYTHON_CHECK, "bytecode whose source is absent (no install leaves one): vllm/__pycache__/evil"),
    "pyc-differs": (
        PYTHON_CHECK,
        "unchecked hash-based bytecode whose hash is not its source's (Python runs it without checking): "
        "vllm/__pycache__/envs.cpython-312.pyc",
    ),
    "site-pyc-differs": (ENVIRONMENTS_CHECK, "packaging/__pycache__/version.cpython-312.pyc"),
    "record-mismatch": (ENVIRONMENTS_CHECK, "packaging/version.py differs from its RECORD"),
    "finder-redirect": (ENVIRONMENTS_CHECK, "__editable___vllm_"),
}


@pytest.fixture(scope="module")
def lock(engine):
    """The reference lock with the real install's two lists in it, as resolve lists them for this source and wheel."""
    files = {path: blob for path, (blob, mode) in realinstall.source_listing().items() if mode in ("100644", "100755")}
    listed = PythonFiles(commit=realinstall.SOURCE_COMMIT, source="git ls-tree -r", files=files, scope="package")
    repository, commit = realinstall.source_repository(), realinstall.SOURCE_COMMIT
    setup_py = subprocess.run(
        ["git", "-C", str(repository), "show", f"{commit}:setup.py"], capture_output=True, text=True, check=True
    ).stdout  # setup.py at the wheel's commit, as resolve reads it (the source is the wheel's commit here)
    extraction = extraction_of(setup_py)
    assert extraction is not None, "vLLM 0.14.0's setup.py declares its extraction"
    taken, notes = precompiled_files(real_wheel(realinstall.WHEEL), {}, extraction)
    assert taken is not None and len(taken) == 54 and notes == []
    return LOCK.model_copy(update={"vllm_python": listed, "vllm_files": taken})


def verdicts(image: str, lock) -> dict[str, tuple[str, str]]:
    record = verify_image(image, lock, PREPARE, gpus=False, engine=Engine())
    return {r.name: (r.status, r.reason) for r in record.results if r.name in CHECKS}


def test_verify_passes_the_genuine_install(lock):
    found = verdicts(realinstall.genuine(), lock)
    assert found[PYTHON_CHECK][0] == "pass", found
    assert lock.vllm_python is not None and lock.vllm_files is not None
    source = set(lock.vllm_python.files) - set(lock.vllm_files)
    said = f"{len(source)} file(s) are 474ded95a56d's (git blob ids), and nothing else is there"
    assert found[PYTHON_CHECK][1].startswith(said), found
    assert "54 are the locked wheel's members (sha256)" in found[PYTHON_CHECK][1]
    assert "vllm/_version.py (setuptools-scm's) holds literals only" in found[PYTHON_CHECK][1]
    assert found[ENVIRONMENTS_CHECK][0] == "pass", found


def test_a_version_file_of_setuptools_scm_8_passes(lock):
    found = verdicts(realinstall.tampered("version-scm8"), lock)
    assert found[PYTHON_CHECK][0] == "pass", found


@pytest.mark.parametrize("case", sorted(NAMED))
def test_verify_fails_every_tampered_install_naming_the_file(lock, case):
    found = verdicts(realinstall.tampered(case), lock)
    check, said = NAMED[case]
    status, reason = found[check]
    assert status == "fail", (case, found)
    assert said in reason, (case, reason)


def test_verify_passes_the_wheel_uv_builds_from_the_git_source_and_fails_it_tampered(lock):
    """NeMo-RL's uv-source mode: uv builds vLLM's wheel from the git source in precompiled mode, grpcio-tools in the
    build (one of vLLM's build requirements: its build_py generates the gRPC stubs), and installs it into the venv,
    not editable (tests/fixtures/real-install/Dockerfile.uv)."""
    image = realinstall.uv_built()
    version = realinstall.run_in(
        image, realinstall.PYTHON, "-c", "import importlib.metadata as m; print(m.version('vllm'))"
    )
    assert version.stdout == "0.14.0+precompiled\n", version  # NeMo-RL's two pretend variables, and setup.py's suffix
    found = verdicts(image, lock)
    assert found[PYTHON_CHECK][0] == "pass", found
    said = "3 are gRPC stubs the build generated from vllm/grpc/vllm_engine.proto (held to the statements gRPC's"
    assert said in found[PYTHON_CHECK][1], found
    assert found[ENVIRONMENTS_CHECK][0] == "pass", found
    stub = verdicts(realinstall.tampered("stub-runs-code"), lock)[PYTHON_CHECK]
    assert (
        stub[0] == "fail" and "vllm/grpc/vllm_engine_pb2_grpc.py (line " in stub[1] and "is no statement" in stub[1]
    ), stub
    removed = verdicts(realinstall.tampered("uv-lora-removed"), lock)[PYTHON_CHECK]
    assert removed[0] == "fail" and "of 474ded95a56d's are missing: vllm/lora/" in removed[1], removed
