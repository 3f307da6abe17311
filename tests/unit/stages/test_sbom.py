"""The SBOM `export --to DIR --key` writes beside a published squashfs (stages/export/evidence.py): CycloneDX 1.6,
valid against CycloneDX's own schema (cyclonedx-python-lib's strict validator), built from the lock of the report's
recorded build (its wheel's real shared objects with their SASS and PTX, as resolve read them from vLLM's wheel) and
from real dist-info directories: this virtual environment's own, compared with what importlib.metadata finds."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import sysconfig
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from buildkit.models.gpufacts import GpuCheck, LibraryKernels
from buildkit.models.lock import read_lock
from buildkit.stages.export.evidence import oci_purl, python_packages, sbom, source_purl, statement_for
from tests.support.paths import REPORT_FIXTURES

DIGEST = "sha256:" + "e" * 64
# What resolve's GPU check reads from vLLM 0.14.0's x86_64 wheel (PyPI), as docs/explanation/gpu-checks.md lists it
# and tests/e2e/test_realwheel_aarch64.py scans it: two of its shared objects, their SASS and PTX.
REAL_ROWS = [
    LibraryKernels(
        library="vllm/_C.abi3.so", required=True,
        sass=["sm_52", "sm_70", "sm_75", "sm_80", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_120", "sm_120a"],
        ptx=["compute_52", "compute_80", "compute_89", "compute_90"], loads={"sm_90": "SASS"},
    ),
    LibraryKernels(
        library="vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so", required=False, sass=["sm_90a"], ptx=[],
        loads={"sm_90": "SASS"},
    ),
]  # fmt: skip
LOCK = read_lock(REPORT_FIXTURES / "pins.lock").model_copy(
    update={
        "gpu": GpuCheck(source="vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl", gpus=["sm_90"], libraries=REAL_ROWS)
    }
)


def test_the_packages_are_the_dist_infos_with_a_record_as_importlib_reads_them(tmp_path):
    site = Path(sysconfig.get_paths()["purelib"])
    found = python_packages(site)
    # importlib's reading of every directory that holds a .dist-info (site-packages, and the vendored ones below it,
    # such as setuptools/_vendor: present in the image, so listed, each with where it is).
    holders = {str(info.parent) for info in site.rglob("*.dist-info")}
    expected = {
        (d.metadata["Name"].lower(), d.version, "/" + str(Path(str(d._path)).relative_to(site)))  # type: ignore[attr-defined]
        for d in importlib.metadata.distributions(path=sorted(holders))
        if (Path(str(d._path)) / "RECORD").is_file()  # type: ignore[attr-defined]
    }
    assert {(c["name"].lower(), c["version"], c["properties"][0]["value"]) for c in found} == expected
    assert len(expected) > 20
    pydantic = next(c for c in found if c["name"].lower() == "pydantic")
    assert pydantic["purl"] == f"pkg:pypi/pydantic@{importlib.metadata.version('pydantic')}"

    # Not followed through a symlink; not taken without a RECORD.
    tree = tmp_path / "tree" / "site-packages"
    tree.mkdir(parents=True)
    real = next(site.glob("pydantic-*.dist-info"))
    shutil.copytree(real, tree / real.name)
    (tree / "linked-1.0.dist-info").symlink_to(real)
    shutil.copytree(real, tree / "norecord-1.0.dist-info")
    (tree / "norecord-1.0.dist-info" / "RECORD").unlink()
    assert [(c["name"], c["properties"][0]["value"]) for c in python_packages(tmp_path / "tree")] == [
        ("pydantic", f"/site-packages/{real.name}")
    ]


def test_the_sbom_is_valid_cyclonedx_and_says_what_the_lock_says():
    packages = python_packages(Path(sysconfig.get_paths()["purelib"]))
    bom = sbom(LOCK, None, "registry.example.com/team/nemo-rl", DIGEST, packages, LOCK.base_image.pinned)
    text = json.dumps(bom, indent=2)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(text) is None
    refs = {c["bom-ref"]: c for c in bom["components"]}
    assert refs["vllm-source"]["version"] == LOCK.vllm.commit
    assert refs["vllm-source"]["purl"] == f"pkg:github/vllm-project/vllm@{LOCK.vllm.commit}"
    assert refs["nemo-rl"]["purl"].startswith(f"pkg:generic/RL@{LOCK.nemo_rl.commit}?vcs_url=git%2Bgit")  # a mirror
    wheel = refs["vllm-wheel"]
    assert wheel["hashes"] == [{"alg": "SHA-256", "content": LOCK.wheel.sha256}]
    assert LOCK.gpu is not None and len(wheel["components"]) == len(LOCK.gpu.libraries) > 0
    assert wheel["components"][1] == {
        "type": "file",
        "bom-ref": "wheel-file:vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
        "name": "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
        "properties": [
            {"name": "buildkit:cuda:sass", "value": "sm_90a"},
            {"name": "buildkit:cuda:ptx", "value": "none"},
        ],
    }
    assert refs["base-image"]["version"] == LOCK.base_image.pinned.rsplit("@", 1)[1]
    assert (
        json.dumps(
            sbom(LOCK, None, "registry.example.com/team/nemo-rl", DIGEST, packages, LOCK.base_image.pinned), indent=2
        )
        == text
    )  # fmt: skip  (the same inputs, the same bytes)


def test_a_lock_without_its_gpu_check_says_the_shared_objects_were_not_read():
    bare = LOCK.model_copy(update={"gpu": None})
    wheel = next(c for c in sbom(bare, None, "r/nemo-rl", DIGEST, [], bare.base_image.pinned)["components"]
                 if c["bom-ref"] == "vllm-wheel")  # fmt: skip
    assert "components" not in wheel
    assert {"name": "buildkit:cuda", "value": "not read: the lock holds no GPU check"} in wheel["properties"]


def test_purls_and_the_statements_subjects():
    assert (
        source_purl("https://github.com/stormchasingg/vllm.git", "a" * 40)
        == f"pkg:github/stormchasingg/vllm@{'a' * 40}"
    )
    generic = source_purl("git://127.0.0.1:9418/vllm.git", "a" * 40)
    assert generic.startswith(f"pkg:generic/vllm@{'a' * 40}?vcs_url=git%2Bgit%3A%2F%2F127.0.0.1")
    assert (
        oci_purl("nvcr.io/nvidia/cuda", DIGEST)
        == f"pkg:oci/cuda@sha256%3A{'e' * 64}?repository_url=nvcr.io/nvidia/cuda"
    )
    build = {"subject": [{"name": "r/nemo-rl", "digest": {"sha256": "f" * 64}}], "predicate": {}}
    made = statement_for(build, "r/nemo-rl", DIGEST, [("x.sqsh", "1" * 64), ("x.cdx.json", "2" * 64)])
    assert [s["digest"]["sha256"] for s in made["subject"]] == ["f" * 64, "e" * 64, "1" * 64, "2" * 64]
    assert build["subject"] == [{"name": "r/nemo-rl", "digest": {"sha256": "f" * 64}}]  # not changed in place
