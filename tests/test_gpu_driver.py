"""Driver compatibility (issue 23, point 4), against NVIDIA's tables and the one real reading taken here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from buildkit.gpu import driver

OBSERVED = json.loads((Path(__file__).parent / "fixtures" / "gpu" / "observed.json").read_text())


def test_minimum_drivers_from_the_release_notes():
    assert driver.minimum_driver("12.9") == "575.51.03"
    assert driver.minimum_driver("12.9.0.043") == "575.51.03"  # cuda-dl-base 25.05's CUDA_VERSION
    assert driver.minimum_driver("13.0") == "580.65.06"
    assert driver.minimum_driver("12.7") == "560.28.03"  # no 12.7 release: the one below
    assert driver.minimum_driver("10.2") is None


@pytest.mark.parametrize("cuda,have,compat,expected", [
    ("12.9", "575.57.08", False, driver.NATIVE),
    ("12.9", "570.124.06", False, driver.MINOR),  # NeMo-RL #1517's kind of node: older branch, same major
    ("13.0", "570.124.06", True, driver.FORWARD),
    ("13.0", "570.124.06", False, driver.NO),
    ("13.0", "470.256.02", True, driver.NO),  # R470 is too old for CUDA 13 forward compatibility
    ("12.9", "470.256.02", True, driver.FORWARD),
    ("12.9", "470.256.02", False, driver.NO),
])  # fmt: skip
def test_judge(cuda, have, compat, expected):
    verdict, why = driver.judge(cuda, have, compat)
    assert verdict == expected and why


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
    assert driver.minimum_driver("13.2") is None
    assert driver.judge("13.2", "580.159.04", False)[0] == driver.MINOR
    assert driver.judge("13.2", "575.57.08", False)[0] == driver.NO
