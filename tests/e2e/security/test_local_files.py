"""Local files are hostile too (issue 20): pins, the lock, patches, results files, records and the files a record
names are read one way (buildkit.files.read_local): regular files only, never waited on, bounded per kind, and a
patch's symlinks only inside the project. A FIFO, a device, a directory or an oversized file is one message, exit 2,
in bounded time and memory. Device nodes are private ones made here (mknod in a temporary directory; the suite runs
as root), never the machine's own /dev."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.support.measured import measured
from tests.support.projects import golden_project

PATCH = "patches/build-custom-vllm-wheel-location.patch"


def private_zero(path: Path) -> Path:
    """A character device like /dev/zero (1, 5), made here: endless zero bytes to whoever reads it."""
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    return path


def _fifo(root: Path, target: Path, outside: Path) -> str:
    target.unlink()
    os.mkfifo(target)
    return "a FIFO"


def _device_inside(root: Path, target: Path, outside: Path) -> str:
    target.unlink()
    private_zero(target)
    return "a character device"


def _symlink_to_a_device_outside(root: Path, target: Path, outside: Path) -> str:
    target.unlink()
    target.symlink_to(private_zero(outside / "zero"))
    return "resolves outside"


def _symlink_to_a_file_outside(root: Path, target: Path, outside: Path) -> str:
    secret = outside / "secret.patch"
    secret.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(secret)
    return "resolves outside"


def _directory(root: Path, target: Path, outside: Path) -> str:
    target.unlink()
    target.mkdir()
    return "a directory"


def _oversized(root: Path, target: Path, outside: Path) -> str:
    with target.open("r+b") as handle:
        handle.truncate(5 << 20)  # sparse: 5 MiB that take no space
    return "larger than 4 MiB"


PATCH_TRAPS = {
    f.__name__.lstrip("_"): f
    for f in (_fifo, _device_inside, _symlink_to_a_device_outside, _symlink_to_a_file_outside, _directory, _oversized)
}


@pytest.mark.parametrize("trap", sorted(PATCH_TRAPS))
def test_a_declared_patch_that_is_not_a_plain_file_in_the_project(project, trap, tmp_path_factory):
    root, cli = project
    needle = PATCH_TRAPS[trap](root, root / PATCH, tmp_path_factory.mktemp("outside"))
    measured(cli, "resolve").assert_refused(2, PATCH, needle)


def test_every_stage_refuses_a_patch_swapped_for_a_fifo_after_resolve(project):
    root, cli = project
    assert cli("resolve").code == 0
    (root / PATCH).unlink()
    os.mkfifo(root / PATCH)
    for args in (["prepare"], ["render"], ["build", "--dry-run"], ["resolve", "--offline"], ["report"]):
        measured(cli, *args).assert_refused(2, PATCH, "a FIFO")


def test_a_patch_that_is_not_utf8_is_refused_at_resolve(project):
    root, cli = project
    patch = root / PATCH
    patch.write_bytes(b"# \xff preamble\n" + patch.read_bytes())
    measured(cli, "resolve").assert_refused(2, "not UTF-8")


@pytest.mark.parametrize("name", ["pins.yaml", "pins.lock"])
def test_a_fifo_or_a_device_as_pins_or_lock(project, name):
    root, cli = project
    assert cli("resolve").code == 0
    (root / name).unlink()
    os.mkfifo(root / name)
    measured(cli, "resolve", "--offline").assert_refused(2, name, "a FIFO")
    (root / name).unlink()
    private_zero(root / name)
    measured(cli, "resolve", "--offline").assert_refused(2, name, "a character device")


def _report(cli, project: Path, *args: str):
    record = project / "build" / "smoke-record.json"
    return measured(cli, "report", "--pins", str(project / "pins.yaml"), "--record", str(record), *args)


def test_results_files_are_read_bounded(cli, tmp_path):
    project = golden_project(tmp_path)
    fifo = tmp_path / "results.yaml"
    os.mkfifo(fifo)
    _report(cli, project, "--results", str(fifo)).assert_refused(2, "a FIFO")
    huge = tmp_path / "results.csv"
    with huge.open("wb") as handle:
        handle.truncate(300 << 20)  # the size that was exit 70; sparse
    _report(cli, project, "--results", str(huge)).assert_refused(2, "larger than 16 MiB")
    wide = tmp_path / "wide.csv"
    wide.write_text("metric,1\nloss," + "9" * (200 << 10) + "\n")  # one field over the csv module's limit
    _report(cli, project, "--results", str(wide)).assert_refused(2, "not a readable CSV file")
    device = private_zero(tmp_path / "zero.csv")
    _report(cli, project, "--results", str(device)).assert_refused(2, "a character device")


def test_records_and_the_files_they_name_are_never_waited_on(cli, tmp_path):
    project = golden_project(tmp_path)
    record_file = project / "build" / "smoke-record.json"
    record = json.loads(record_file.read_text())
    fifo = tmp_path / "metadata.json"
    os.mkfifo(fifo)
    record_file.write_text(json.dumps({**record, "metadata_file": str(fifo), "log": str(fifo)}))
    attest = ["attest", "--pins", str(project / "pins.yaml"), "--record", str(record_file)]
    run = measured(cli, *attest)
    # The metadata file is optional: never waited on. A reader that opened the FIFO would wait for a writer for
    # ever, and measured()'s hang guard would fail the run: its ending at all is the proof, not its speed.
    assert run.code == 0, run.output
    record_file.unlink()
    os.mkfifo(record_file)
    measured(cli, *attest).assert_refused(2, "a FIFO")
    record_file.unlink()
    private_zero(record_file)
    _report(cli, project).assert_refused(2, "a character device")


# --- the lock is strict JSON, every field bounded (exit 2 naming it, never 70) ---------------------------------


def _raw(old: str, new: str):
    def tamper(text: str) -> str:
        assert old in text
        return text.replace(old, new, 1)

    return tamper


def _field(path: tuple[str, ...], value: object):
    def tamper(text: str) -> str:
        lock = json.loads(text)
        target = lock
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return json.dumps(lock, indent=2)

    return tamper


def _duplicate_sha256(text: str) -> str:
    lock = json.loads(text)
    real = json.dumps(lock["wheel"]["sha256"])
    return text.replace(f'"sha256": {real}', f'"sha256": {real},\n    "sha256": "{"0" * 64}"', 1)


LOCK_TAMPERS = {
    "duplicate key": (_duplicate_sha256, "duplicate key 'sha256'"),
    "huge integer": (_raw('"size": ', '"size": ' + "9" * 5000 + "0 * "), "integer of"),
    "huge integer alone": (_field(("wheel", "size"), 10**30), "integer of 31 digits"),
    "negative size": (_field(("wheel", "size"), -5), "wheel.size"),
    "boolean size": (_field(("wheel", "size"), True), "wheel.size"),
    "boolean content_addressed": (_field(("wheel", "content_addressed"), 1), "wheel.content_addressed"),
    "date not a date": (_field(("nemo_rl", "date"), "PWNED"), "nemo_rl.date"),
    "date out of range": (_field(("nemo_rl", "date"), "2026-02-30T00:00:00Z"), "nemo_rl.date"),
    "PR number boolean": (_field(("vllm_pr", "number"), True), "vllm_pr.number"),
    "PR number huge": (_field(("vllm_pr", "number"), 10**15), "vllm_pr.number"),
    "NaN": (_raw('"size": ', '"size": NaN, "x": '), "NaN"),
    "string too long": (_field(("nemo_rl", "subject"), "x" * 100_000), "nemo_rl.subject"),
}


@pytest.mark.parametrize("name", sorted(LOCK_TAMPERS))
def test_the_lock_is_strict_json(project, name):
    root, cli = project
    assert cli("resolve").code == 0
    tamper, needle = LOCK_TAMPERS[name]
    lock = root / "pins.lock"
    lock.write_text(tamper(lock.read_text()))
    for args in (["resolve", "--offline"], ["render"]):
        measured(cli, *args).assert_refused(2, "pins.lock", needle)


def test_a_boolean_is_never_a_number_in_pins(project):
    root, cli = project
    pins = root / "pins.yaml"
    pins.write_text(pins.read_text().replace("schema_version: 1", "schema_version: true"))
    measured(cli, "resolve", "--offline").assert_refused(2, "schema_version")
