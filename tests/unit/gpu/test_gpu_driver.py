"""Driver compatibility (issue 23, point 4), against NVIDIA's tables and the one real reading taken here."""

from __future__ import annotations

import json

import pytest

from buildkit.gpu import driver
from tests.support.paths import GPU_FIXTURES

OBSERVED = json.loads((GPU_FIXTURES / "observed.json").read_text())


# Each expected value below is NVIDIA's, from the page and table named beside it (the pages are cited in full in
# buildkit/gpu/driver.py): RN = CUDA Toolkit release notes, MVC / FC = the CUDA Compatibility guide's "Minor
# Version Compatibility" / "Forward Compatibility" pages.


def test_minimum_drivers_from_the_release_notes():
    assert driver.minimum_driver("12.9") == "575.51.03"  # RN Table 3 "CUDA 12.9 GA >=575.51.03"
    assert driver.minimum_driver("12.9.0.043") == "575.51.03"  # cuda-dl-base 25.05's CUDA_VERSION
    assert driver.minimum_driver("13.0") == "580.65.06"  # RN Table 3 "CUDA 13.0 GA >=580.65.06"
    assert driver.minimum_driver("13.2") == "595.45.04"  # RN Table 3 "CUDA 13.2 GA >=595.45.04"
    assert driver.minimum_driver("12.8") == "570.26"  # RN Table 3 "CUDA 12.8 GA >=570.26"
    assert driver.minimum_driver("12.0") == "525.60.13"  # RN Table 3 "CUDA 12.0 GA >=525.60.13"
    assert driver.minimum_driver("11.8") == "520.61.05"  # RN Table 3 "CUDA 11.8 GA >=520.61.05"
    assert driver.minimum_driver("12.7") == "560.28.03"  # RN Table 3 has no 12.7 row: the one below (12.6 GA)
    assert driver.minimum_driver("10.2") is None  # older than the table buildkit keeps
    assert driver.minimum_driver("13.4") is None  # newer than RN Table 3's newest row read here (13.2 Update 2)


# The drivers are RN Table 3's (470.82.01: "CUDA 11.4 Update 3", 550.54.15: "CUDA 12.4 Update 1", ...).
@pytest.mark.parametrize(
    "cuda,have,compat,expected",
    [
        ("12.9", "575.57.08", False, driver.NATIVE),  # RN Table 3: >= 575.51.03
        (
            "12.9",
            "570.124.06",
            False,
            driver.MINOR,
        ),  # NeMo-RL #1517's kind of node; RN Table 2 / MVC Table 1: 12.x >= 525
        ("13.2", "590.48.01", False, driver.MINOR),  # < 595.45.04 (RN Table 3), >= 580 (RN Table 2: 13.x >= 580)
        ("13.4", "580.65.06", False, driver.MINOR),  # past the toolkit table, still 13.x >= 580
        ("12.0", "520.61.05", False, driver.NO),  # < 525: RN Table 2 "11.x >= 450, < 525" (an 11.x driver)
        ("13.0", "570.124.06", True, driver.FORWARD),  # FC table: cuda-compat-13-0 on 570+ (CUDA 12.8): C
        ("13.0", "535.104.05", True, driver.FORWARD),  # FC table: cuda-compat-13-0 on 535+ (CUDA 12.2): C
        ("13.4", "570.124.06", True, driver.FORWARD),  # FC table: cuda-compat-13-4 on 570+: C
        ("13.0", "570.124.06", False, driver.NO),  # no cuda-compat package in the image
        (
            "13.0",
            "550.54.15",
            True,
            driver.NO,
        ),  # FC: R550 is not in the table ("end of life ... not supported targets")
        ("13.0", "470.82.01", True, driver.NO),  # FC: R470 likewise
        ("12.9", "470.82.01", True, driver.NO),  # FC: cuda-compat-12-x targets only 535 and 570, not R470
        ("12.9", "470.82.01", False, driver.NO),
        ("10.2", "580.65.06", False, driver.NO),  # not in buildkit's table
    ],
)
def test_judge(cuda, have, compat, expected):
    verdict, why = driver.judge(cuda, have, compat)
    assert verdict == expected and why


def test_forward_compatibility_follows_nvidias_table_row_by_row():
    """FC's "Use the Right CUDA Forward Compatibility Package" table, as published (C = compatible), checked cell by
    cell: a package runs on each listed branch older than its own CUDA, on no other."""
    branches = [535, 570, 580, 590, 595, 610, 615]
    published = {  # row -> the branches with C
        "13-4": {535, 570, 580, 590, 595, 610},
        "13-3": {535, 570, 580, 590, 595},
        "13-2": {535, 570, 580, 590},
        "13-1": {535, 570, 580},
        "13-0": {535, 570},
        "12-9": {535, 570},
        "12-8": {535},
        "12-6": {535},
        "12-5": {535},
        "12-4": {535},
        "12-3": {535},
        "12-2": set(),
    }
    for row, compatible in published.items():
        major, minor = (int(p) for p in row.split("-"))
        found = {b for b in branches if driver._forward_compat(major, minor, (b, 0, 0))}
        assert found == compatible, row
    assert not driver._forward_compat(12, 9, (550, 54, 15)) and not driver._forward_compat(12, 9, (575, 57, 8))


def test_the_device_reading_agrees():
    # The H100 machine (scripts/gpu_proof.py, 2026-11-24): driver 580.159.04, CUDA 13.0 runtime (torch cu130 and
    # the toolkit's libcudart.so.13.0.96); its kernels ran there, so the runtime ran on that driver natively.
    gpu, have, _cc = OBSERVED["gpu"].split(", ")
    assert have == "580.159.04"
    assert driver.judge("13.0", have, False)[0] == driver.NATIVE
    assert OBSERVED["cases"]["sm90"]["observed"] == "SASS"


def test_hostile_versions():
    for bad in ("580", "5800000.1", "580.65.06; rm", ""):
        with pytest.raises(ValueError):
            driver.parse_driver(bad)


# scripts/gpu_proof.py --driver-only on the device machine, 2026-11-24T19:46:50Z (README "Proven on a real GPU"):
# the real driver from /proc/driver/nvidia/version, each runtime's CUDA version as it reports it, and whether it
# initialised CUDA and ran a kernel there.
DEVICE_RUNTIMES = [("torch", "13.0", True), ("cupy", "13.2", True), ("toolkit libcudart", "13.0", True)]


@pytest.mark.parametrize("runtime,cuda,started", DEVICE_RUNTIMES)
def test_the_device_runtimes_agree_with_the_prediction(runtime, cuda, started):
    agree, line = driver.compare(cuda, "580.159.04", False, started)
    assert agree, line
    # CuPy's 13.2 is newer than the table (13.0): it ran through minor-version compatibility, not natively.
    assert (driver.MINOR if cuda == "13.2" else driver.NATIVE) in line


def test_compare_says_when_the_prediction_is_wrong():
    agree, line = driver.compare("13.0", "570.124.06", False, True)  # predicted no, yet it started
    assert not agree and "predicted no" in line and "CUDA started" in line
    agree, line = driver.compare("12.9", "575.57.08", False, False)
    assert not agree and "predicted native" in line and "did not start" in line


def test_a_minor_newer_than_the_table():
    assert driver.minimum_driver("13.4") is None
    assert driver.judge("13.4", "580.159.04", False)[0] == driver.MINOR
    assert driver.judge("13.4", "575.57.08", False)[0] == driver.NO
