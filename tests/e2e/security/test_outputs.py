"""`-o` never clobbers (issue 20): as root, `report -o /dev/null` used to rename a regular file over the device for
every process on the machine. Every atomic write now goes only onto a regular file or a new path; a device, a FIFO
or a socket, or a symlink to one, is refused with nothing replaced; `-o -` streams to standard output. Tested on
private device nodes made here (mknod, as root), never the machine's own /dev."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.files import is_stdout, replaced_atomically, work_dir_beside, write_atomic
from tests.support.measured import measured
from tests.support.nemo_repo import use_remote
from tests.support.projects import golden_project, smoke_built


def private_null(path: Path) -> Path:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null, made here
    return path


def _same_node(path: Path, before: os.stat_result) -> bool:
    now = os.lstat(path)
    return (now.st_ino, now.st_mode, now.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)


def specials(directory: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of path a write must not replace, and the word its message uses."""
    directory.mkdir()
    fifo = directory / "fifo"
    os.mkfifo(fifo)
    # An AF_UNIX path holds at most 107 bytes, and a test's directory under pytest-xdist can be longer: bound
    # through the directory's descriptor (/proc/self/fd/N/socket), which the kernel resolves to the same place.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(f"/proc/self/fd/{fd}/socket")
    finally:
        os.close(fd)
    link = directory / "link"
    link.symlink_to(private_null(directory / "null"))
    block = directory / "block"
    os.mknod(block, 0o600 | stat.S_IFBLK, os.makedev(7, 200))  # a loop device number nothing here uses
    return {
        "character device": (directory / "null", "a character device"),
        "fifo": (fifo, "a FIFO"),
        "socket": (directory / "socket", "a socket"),
        "symlink to a device": (link, "through a symlink"),
        "block device": (block, "a block device"),
    }


def _report(cli, project: Path, *args: str):
    record = project / "build" / "smoke-record.json"
    return measured(cli, "report", "--pins", str(project / "pins.yaml"), "--record", str(record), *args)


def test_report_never_replaces_a_special_file(cli, tmp_path):
    project = golden_project(tmp_path)
    for name, (path, word) in specials(tmp_path / "specials").items():
        before = os.lstat(path)
        _report(cli, project, "-o", str(path)).assert_refused(2, str(path), word)
        assert _same_node(path, before), f"{name} was replaced"
        assert not list(path.parent.glob(f".{path.name}.*.tmp")), "no temp file is left"


def test_render_refuses_before_any_work_and_streams_to_stdout(project, remote):
    root, cli = use_remote(project, remote)
    null = private_null(root / "null")
    before = os.lstat(null)
    run = measured(cli, "render", "-o", str(null))
    run.assert_refused(2, "a character device")
    written = sorted(p.name for p in (root / "build").iterdir()) if (root / "build").exists() else []
    # (resolve.json is the project's resolve, before render ran)
    assert _same_node(null, before) and written in ([], ["resolve.json"]), "refused before prepare wrote anything"
    streamed = cli("render", "-o", "-")
    assert streamed.code == 0, streamed.output
    assert streamed.stdout == (root / "build" / "Dockerfile").read_text() and "FROM" in streamed.stdout


def test_dash_streams_to_stdout(cli, tmp_path):
    project = golden_project(tmp_path)
    plain = _report(cli, project)
    streamed = _report(cli, project, "-o", "-")
    assert streamed.code == 0 and streamed.stdout == plain.stdout and streamed.stdout.startswith("#")
    assert not (project / "-").exists()
    # /dev/stdout is the same request; only its name is looked at (the machine's /dev is never touched here).
    assert is_stdout(Path("/dev/stdout")) and is_stdout(Path("-")) and not is_stdout(Path("/dev/stdout2"))


def test_a_regular_file_and_a_new_path_are_still_written(cli, tmp_path):
    project = golden_project(tmp_path)
    existing = tmp_path / "report.md"
    existing.write_text("old")
    assert _report(cli, project, "-o", str(existing)).code == 0 and existing.read_text().startswith("#")
    target = tmp_path / "elsewhere.md"
    target.write_text("theirs")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert _report(cli, project, "-o", str(link)).code == 0
    assert target.read_text() == "theirs", "a symlink's target is never written through"
    assert link.is_file() and not link.is_symlink()


@pytest.mark.parametrize("writer", ["write_atomic", "replaced_atomically", "work_dir_beside"])
def test_every_atomic_writer_refuses(tmp_path, writer):
    """export writes its .sqsh through work_dir_beside and replaced_atomically: the same refusal, before any work."""
    for _, (path, word) in specials(tmp_path / "specials").items():
        before = os.lstat(path)
        with pytest.raises(InputError, match=word):
            if writer == "write_atomic":
                write_atomic(path, "x")
            else:
                with (replaced_atomically if writer == "replaced_atomically" else work_dir_beside)(path):
                    raise AssertionError("the block must not run")
        assert _same_node(path, before)
        assert not list(path.parent.glob(f".{path.name}.*.tmp"))


def test_export_refuses_a_device_and_streams_to_stdout(project, remote, engine, tmp_path):
    import hashlib
    import subprocess
    import sys

    root, cli = smoke_built(project, remote)
    null = private_null(tmp_path / "null")
    before = os.lstat(null)
    refused = cli("export", "-o", str(null), timeout=300)
    assert refused.code == 2 and "a character device" in refused.stderr, refused.output
    assert _same_node(null, before) and not list(tmp_path.glob(".null.*.tmp"))
    streamed = subprocess.run(
        [sys.executable, "-m", "buildkit.cli", "export", "-o", "-"],
        cwd=root,
        env=cli.env,
        capture_output=True,
        timeout=300,
    )
    assert streamed.returncode == 0, streamed.stderr.decode()
    record = json.loads((root / "build" / "smoke" / "squashfs.json").read_text())
    assert hashlib.sha256(streamed.stdout).hexdigest() == record["sha256"] and streamed.stdout[:4] == b"hsqs"
