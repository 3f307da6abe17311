"""A check that neither passed nor failed is one of three kinds (issue 41, point 3), told apart from the records
that decided it, and a pass needs something checked. On the lock and build record of the recorded smoke build
(tests/fixtures/report/), each varied in the one field a case turns on."""

from __future__ import annotations

import pytest

from buildkit.files import read_record
from buildkit.models.gpufacts import AbiCheck, GpuCheck, LibraryKernels
from buildkit.models.lock import read_lock
from buildkit.models.records.build import BuildRecord
from buildkit.models.verdicts import RESULTS, counts, image_check, judged, known, no_image
from tests.support.paths import REPORT_FIXTURES

TORCH = "torch 2.9.0+cu129 (torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_x86_64.whl, NeMo-RL's uv.lock)"


def fixture_lock():
    return read_lock(REPORT_FIXTURES / "pins.lock")


def fixture_record() -> BuildRecord:
    record = read_record(REPORT_FIXTURES / "build" / "smoke-record.json", BuildRecord)
    assert record is not None
    return record


def with_abi(checked: int, unresolved: int = 0):
    kernels = LibraryKernels(library="vllm/_C.abi3.so", required=True, sass=["sm_90"], ptx=[], loads={"sm_90": "SASS"})
    abi = AbiCheck(against=[TORCH], checked=checked, unresolved=[], unresolved_count=unresolved)
    gpu = GpuCheck(source="vllm.whl", gpus=["sm_90"], libraries=[kernels], abi=abi)
    return fixture_lock().model_copy(update={"gpu": gpu})


def results(rows) -> dict[str, str]:
    return {r["check"]: r["status"] for r in rows}


def test_a_pass_needs_something_checked():
    """The five-minute tour's lock: `gpu.abi.checked: 0` against torch. Nothing looked up is nothing judged."""
    none = {r["check"]: r for r in known(with_abi(0))}
    assert none["ABI"]["status"] == "could not check" and "0 undefined symbols" in none["ABI"]["detail"]
    assert "nothing was judged" in none["ABI"]["detail"]
    assert results(known(with_abi(12)))["ABI"] == "pass"
    assert results(known(with_abi(12, unresolved=1)))["ABI"] == "fail"


def test_the_three_kinds_on_the_recorded_smoke_build():
    rows = known(fixture_lock(), None, fixture_record())
    found = results(rows)
    assert found["driver"] == "not applicable"  # a smoke image has no CUDA runtime
    assert found["kernels"] == "not run yet"  # the lock predates resolve's GPU checks: resolve runs them
    assert {r["check"]: r.get("command") for r in rows}["kernels"] == "buildkit resolve"
    # Loaded into Docker, not pushed: there is no provenance in a registry to read, and running verify would not
    # change that.
    assert (
        found["provenance"] == "could not check"
        and "not pushed" in {r["check"]: r for r in rows}["provenance"]["detail"]
    )
    assert found["reproducibility"] == "pass"
    assert set(found.values()) <= set(RESULTS)


def test_before_a_build_and_after_a_failed_one():
    before = {r["check"]: r for r in known(fixture_lock())}
    assert before["driver"]["command"] == "buildkit build && buildkit verify --driver VERSION"
    assert before["provenance"]["command"] == "buildkit build --push && buildkit verify --provenance --key cosign.pub"
    assert before["reproducibility"]["command"] == "buildkit build --check-reproducible"
    failed = fixture_record().model_copy(update={"outcome": "failed", "smoke": False, "reproducibility": None})
    after = {r["check"]: r for r in known(fixture_lock(), None, failed)}
    for name in ("driver", "reproducibility", "provenance"):
        assert after[name]["status"] == "could not check" and "the build failed" in after[name]["detail"], name
    assert no_image("verify", None) == judged(
        "verify", "not run yet", "no image built from this lock yet", "buildkit build && buildkit verify"
    )
    assert no_image("verify", fixture_record()) is None


def test_a_smoke_release_and_pushed_build_differ_where_they_should():
    record = fixture_record()
    release = record.model_copy(update={"smoke": False})
    assert results(known(fixture_lock(), None, release))["driver"] == "not run yet"
    pushed = record.model_copy(update={"argv": [*record.argv, "--output", "type=image,push=true"]})
    rows = {r["check"]: r for r in known(fixture_lock(), None, pushed)}
    assert rows["provenance"]["status"] == "not run yet"
    assert rows["provenance"]["command"] == "buildkit verify --provenance --key cosign.pub"
    smoke_repro = {
        r["check"]: r for r in known(fixture_lock(), None, record.model_copy(update={"reproducibility": None}))
    }
    assert smoke_repro["reproducibility"]["command"] == "buildkit build --smoke --check-reproducible"


@pytest.mark.parametrize(
    ("reason", "smoke", "kind", "command"),
    [
        ("a smoke image has no vLLM installed", True, "not applicable", None),
        ("not asked (--gpus)", True, "not applicable", None),  # no torch in a smoke image to probe a GPU with
        ("not asked (--gpus)", False, "not run yet", "buildkit verify --gpus"),
        (
            "the lock holds no list of the wheel's members: run `buildkit resolve`",
            False,
            "not run yet",
            "buildkit resolve && buildkit verify",
        ),
        ("no prepare record with a patched file to compare", False, "could not check", None),
    ],
)
def test_each_skip_of_verify_is_one_kind(reason, smoke, kind, command):
    row = image_check("verify", "a check", "skip", reason, smoke)
    assert (row["status"], row.get("command")) == (kind, command)
    assert row["detail"]


def test_a_row_is_not_run_yet_exactly_when_it_names_a_command():
    with pytest.raises(ValueError):
        judged("x", "not run yet", "why")
    with pytest.raises(ValueError):
        judged("x", "could not check", "why", "buildkit verify")
    with pytest.raises(ValueError):
        judged("x", "not checked", "why")  # type: ignore[arg-type]  # the old catch-all is no result any more
    assert counts([judged("a", "pass", ""), judged("b", "not applicable", "why")]) == {
        "pass": 1,
        "fail": 0,
        "not applicable": 1,
        "not run yet": 0,
        "could not check": 0,
    }
