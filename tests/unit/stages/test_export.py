"""`buildkit export`: the image as an enroot squashfs for Slurm. enroot's configuration files from an image config
(checked against real bash for the quoting), a missing mksquashfs, and on the engine of scripts/engine-up.sh: the
smoke image exported twice to the same bytes, with what `unsquashfs` finds in it and what the report says; an image
with whiteouts exported to what Docker itself shows of it; a full disk and a missing image."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.models.records import belongs
from buildkit.stages.export import bash_quote, configure, squash_options
from buildkit.world.mksquashfs import squash
from tests.support.engine import unavailable
from tests.support.mounts import tmpfs
from tests.support.projects import smoke_built
from tests.support.trees import listing

SMOKE_TAG = "nemo-rl:v0.5.0-spec-decode-smoke"
SMOKE_SQSH = f"build/smoke/{SMOKE_TAG.replace(':', '+')}.sqsh"
FINGERPRINT = "opt/nemo_rl_container_fingerprint"
PATCHED = "opt/nemo-rl/tools/build-custom-vllm.sh"


# enroot's configuration files (src/docker.sh, docker::configure)


def test_configure_writes_what_enroot_writes():
    config = {
        "architecture": "amd64",
        "config": {
            "Env": ["PATH=/usr/bin:/bin", 'QUOTED=it\'s "x" $HOME'],
            "WorkingDir": "/opt/nemo-rl",
            "Entrypoint": ["/bin/entry", "it's"],
            "Cmd": ["--flag", "two words"],
            "Volumes": {"/data": {}, "/cache": {}},
            "Labels": {"b.key": "multi\nline", "a.key": "plain"},
        },
    }
    layout, files = configure(config, "dockerd://nemo-rl:v1")
    assert files[("etc", "environment")] == b'PATH=/usr/bin:/bin\nQUOTED=it\'s "x" $HOME\n'
    assert files[("etc", "fstab")] == (
        b"${ENROOT_ROOTFS}/cache /cache none x-create=dir,bind,rw,nosuid,nodev\n"
        b"${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
    )  # sorted, as jq's `keys` sorts them
    assert files[("etc", "rc")].decode() == (
        "# enroot-provenance: dockerd://nemo-rl:v1\n"
        "# b.key multi line\n"
        "# a.key plain\n"
        "\n"
        'mkdir -p "/opt/nemo-rl" 2> /dev/null\n'
        'cd "/opt/nemo-rl" && unset OLDPWD || exit 1\n'
        "\n"
        "if [ -s /etc/rc.local ]; then\n"
        "    . /etc/rc.local\n"
        "fi\n"
        "\n"
        "if [ $# -gt 0 ]; then\n"
        "    exec '/bin/entry' 'it'\\''s' \"$@\"\n"
        "else\n"
        "    exec '/bin/entry' 'it'\\''s' '--flag' 'two words'\n"
        "fi\n"
    )
    assert files[("etc", "rc.local")].startswith(b"# This file is sourced by /etc/rc when the container starts.\n")
    assert layout.volumes == ["/cache", "/data"] and layout.cmd == ["--flag", "two words"]

    # Neither entrypoint nor command: /bin/sh, after the two spaces enroot's empty entrypoint leaves.
    layout, files = configure({"config": {}}, "dockerd://x:1")
    assert b"    exec  '/bin/sh'\n" in files[("etc", "rc")] and b'cd "/" &&' in files[("etc", "rc")]
    assert files[("etc", "environment")] == b"" and files[("etc", "fstab")] == b"" and layout.workdir == "/"


WORDS = ["plain", "", "it's", "two words", '$HOME `x` "q" \\', "line\nbreak", "tab\there", "esc\x1b[0m", "\x01\x7f"]


@pytest.mark.parametrize("word", WORDS)
def test_words_are_quoted_as_bash_quotes_them(word):
    """bash_quote is `${word@Q}`: bash reads each back as the word itself."""
    done = subprocess.run(["bash", "-c", 'printf "%s" "${1@Q}"', "bash", word], capture_output=True, check=True)
    assert bash_quote(word) == done.stdout.decode()
    back = subprocess.run(["bash", "-c", f"printf '%s' {bash_quote(word)}"], capture_output=True, check=True)
    assert back.stdout.decode() == word


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"Env": ["A=1\nB=2"]}, "cannot be a line of /etc/environment"),
        ({"Env": ["NOEQUALS"]}, "cannot be a line of /etc/environment"),
        ({"WorkingDir": '/x"; rm -rf ~; "'}, "is not a plain absolute path"),
        ({"WorkingDir": "/opt/$(id)"}, "is not a plain absolute path"),
        ({"WorkingDir": "/opt/../../x"}, "is not a plain absolute path"),
        ({"WorkingDir": "relative"}, "is not a plain absolute path"),
        ({"Volumes": {"/a b": {}}}, "cannot be a line of /etc/fstab"),
        ({"Volumes": {"/../../etc": {}}}, "cannot be a line of /etc/fstab"),
        ({"Volumes": ["/data"]}, "Volumes is not an object"),
        ({"Cmd": "sh -c x"}, "Cmd is not a list of strings"),
        ({"Labels": {"a": 1}}, "Labels is not an object of strings"),
    ],
)
def test_configure_refuses_what_would_break_out_of_enroots_files(section, message):
    with pytest.raises(InputError, match=message) as caught:
        configure({"config": section}, "dockerd://x:1")
    assert caught.value.exit_code == 2


def test_a_label_cannot_end_its_comment_line():
    _, files = configure({"config": {"Labels": {"k\nrm -rf ~": "v\nrm -rf ~"}}}, "dockerd://x:1")
    assert b"# k rm -rf ~ v rm -rf ~\n" in files[("etc", "rc")]


@pytest.mark.e2e  # slow: mksquashfs several times (10 s here)
def test_the_bytes_do_not_depend_on_the_number_of_processors(tmp_path):
    """mksquashfs 4.4+ orders its output the same with any number of processors (its default -reproducible), so
    the machine that exports does not change the .sqsh."""
    from buildkit.world.mksquashfs import find_mksquashfs

    tool = find_mksquashfs()
    tree = tmp_path / "tree"
    for index in range(300):
        path = tree / f"d{index % 7}" / f"f{index}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(index * 997 % 300_000))
    digests = set()
    for count in (1, 2, 4):
        out = tmp_path / f"{count}.sqsh"
        out.touch()
        squash(tool, tree, out, squash_options(1770316331), count, out)
        digests.add(hashlib.sha256(out.read_bytes()).hexdigest())
    assert len(digests) == 1


def test_without_mksquashfs_nothing_is_made_and_the_hint_says_what_to_install(cli, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = cli("export", env={"PATH": str(empty)})
    assert result.code == 5, result.output
    assert "error: mksquashfs is not installed" in result.stderr and "apt-get install squashfs-tools" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "build").exists() and not [*tmp_path.rglob("*.sqsh"), *tmp_path.rglob("*.tmp")]


# On the engine


def unsquashfs(*args: str) -> str:
    return subprocess.run(["unsquashfs", *args], capture_output=True, text=True, check=True).stdout


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".tmp", ".sqsh")))


def test_export_the_smoke_image_for_slurm(project, remote, engine, tmp_path):
    root, cli = smoke_built(project, remote)
    result = cli("export", "--json", timeout=300)
    assert result.code == 0, result.output
    record = json.loads(result.stdout)
    sqsh = root / SMOKE_SQSH
    assert record["path"] == str(sqsh) and json.loads((root / "build/smoke/squashfs.json").read_text()) == record
    assert record["sha256"] == hashlib.sha256(sqsh.read_bytes()).hexdigest() and record["size"] == sqsh.stat().st_size
    assert stat.S_IMODE(sqsh.stat().st_mode) == 0o666 & ~_umask()  # others may read it, as any new file
    assert leftovers(sqsh.parent) == [sqsh.name], "no temp file or working directory is left"
    built = json.loads((root / "build/smoke-record.json").read_text())
    assert record["image_id"] == built["image"]["id"] and record["config_digest"] == built["image"]["config_digest"]
    assert record["manifest_digest"] == built["image"]["digest"] and record["source_date_epoch"] == 1770316331
    assert record["options"] == [
        "-mkfs-time",
        "1770316331",
        "-all-time",
        "1770316331",
        "-all-root",
        "-comp",
        "lzo",
        "-noD",
        "-exit-on-error",
        "-no-xattrs",
    ]
    assert f"wrote {sqsh}" in result.stderr and "srun --container-image=" in result.stderr

    # The image's files: the patched script, the fingerprint the smoke target writes, every one root's, with the
    # lock's time; the filesystem made at the same time, compressed as enroot compresses it.
    listed = unsquashfs("-lln", str(sqsh))
    lines = {line.split()[-1].removeprefix("squashfs-root/"): line for line in listed.splitlines()}
    assert PATCHED in lines and FINGERPRINT in lines
    assert all(" 0/0 " in line and " 2026-02-05 18:32 " in line for line in lines.values()), listed[:2000]
    prepared = json.loads((root / "build/prepare.json").read_text())
    script = subprocess.run(["unsquashfs", "-cat", str(sqsh), PATCHED], capture_output=True, check=True).stdout
    assert hashlib.sha256(script).hexdigest() == prepared["patches"][0]["targets"][0]["after"]
    lock = json.loads((root / "pins.lock").read_text())
    fingerprint = unsquashfs("-cat", str(sqsh), FINGERPRINT)
    assert fingerprint == f"smoke {lock['nemo_rl']['commit']} vllm {lock['vllm']['commit']}\n"
    superblock = unsquashfs("-s", str(sqsh))
    assert "Compression lzo" in superblock and "Data is uncompressed" in superblock
    assert "Xattrs are not stored" in superblock and "Thu Feb  5 18:32:11 2026" in superblock

    # enroot's files: the image's ENV, its working directory and command, where enroot puts them.
    inspected = json.loads(
        subprocess.run(["docker", "image", "inspect", SMOKE_TAG], capture_output=True, check=True).stdout
    )[0]
    assert unsquashfs("-cat", str(sqsh), "etc/environment") == "".join(e + "\n" for e in inspected["Config"]["Env"])
    rc = unsquashfs("-cat", str(sqsh), "etc/rc")
    assert rc.startswith(f"# enroot-provenance: dockerd://{SMOKE_TAG}\n# buildkit.lock.sha256 ")
    assert 'cd "/opt/nemo-rl" && unset OLDPWD || exit 1\n' in rc and "    exec  '/bin/sh'\n" in rc
    assert unsquashfs("-cat", str(sqsh), "etc/fstab") == ""
    assert "etc/rc.local" in lines and not any(name.startswith("dev/") for name in lines)

    # The same image gives the same bytes: again through the CLI to another file, and with another processor count.
    again = cli("export", "-o", str(tmp_path / "again.sqsh"), timeout=300)
    assert again.code == 0, again.output
    assert hashlib.sha256((tmp_path / "again.sqsh").read_bytes()).hexdigest() == record["sha256"]
    from buildkit.models.lock import read_lock
    from buildkit.models.paths import Paths
    from buildkit.stages.export import choose_source, export_squashfs
    from buildkit.world.mksquashfs import find_mksquashfs

    paths = Paths.of(root / "pins.yaml")
    one, _ = export_squashfs(
        paths, read_lock(paths.lock), choose_source(paths, None), find_mksquashfs(), tmp_path / "one.sqsh", processors=1
    )
    assert one.sha256 == record["sha256"]

    # The report's Slurm section: the file, its sha256 and size, the srun line. (The last export wrote the record.)
    assert cli("export").code == 0
    report = cli("report")
    assert report.code == 0, report.output
    section = report.stdout[report.stdout.index("## Slurm (enroot/pyxis)") : report.stdout.index("## Reproducibility")]
    assert f"| sha256 | `{record['sha256']}` |" in section and f"| Size | {record['size']} bytes" in section
    assert f"```bash\nsrun --container-image={sqsh} --container-workdir=/opt/nemo-rl --pty bash\n```" in section
    assert f"`enroot import dockerd://{SMOKE_TAG}`" in section
    as_json = json.loads(cli("report", "--format", "json").stdout)
    assert as_json["slurm"]["sha256"] == record["sha256"] and as_json["slurm"]["srun"].startswith("srun ")


WHITEOUTS = """\
FROM {base}
RUN rm /opt/nemo-rl/3rdparty/vllm/nemo-rl.env \\
 && rm -rf /opt/nemo-rl/.git/modules && mkdir /opt/nemo-rl/.git/modules && echo new > /opt/nemo-rl/.git/modules/only \\
 && mkdir -p /srv/ro && echo data > /srv/ro/file && ln /srv/ro/file /srv/hard && ln -s ../srv/ro/file /srv/soft \\
 && chmod 0555 /srv/ro && echo s > /srv/suid && chmod 4755 /srv/suid && ln /srv/suid /srv/suid2 && mkfifo /srv/pipe
RUN rm -rf /srv/soft /bin/vi && echo later >> /srv/ro/file
ENV EXTRA="two words" EMPTY=
WORKDIR /srv
VOLUME /data
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["echo it's here"]
"""


def test_an_image_with_whiteouts_is_what_docker_shows_of_it(project, remote, engine, tmp_path):
    """Files removed and a directory replaced in later layers (whiteouts and an opaque directory, as Docker's
    overlay2 writes them), hardlinks, symlinks, a read-only directory, a set-uid file and a FIFO: the squashfs holds
    exactly the files `docker export` shows of a container of the image (enroot's `dockerd://` import), but for
    what Docker adds to a container and enroot's own files."""
    root, cli = smoke_built(project, remote)
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(WHITEOUTS.format(base=SMOKE_TAG))
    subprocess.run(
        ["docker", "build", "--network", "none", "-q", "-t", "whiteouts:1", str(context)],
        check=True,
        capture_output=True,
    )
    result = cli("export", "whiteouts:1", "-o", str(tmp_path / "w.sqsh"), "--json", timeout=300)
    assert result.code == 0, result.output
    record = json.loads(result.stdout)
    assert record["build_record"] is None and record["layout"]["workdir"] == "/srv"
    assert record["layout"]["entrypoint"] == ["/bin/sh", "-c"] and record["layout"]["volumes"] == ["/data"]

    extracted = tmp_path / "x"
    subprocess.run(
        ["unsquashfs", "-no-xattrs", "-d", str(extracted), str(tmp_path / "w.sqsh")], check=True, capture_output=True
    )
    ours = listing(extracted)
    docker = _docker_export("whiteouts:1")
    enroot = {"etc/environment", "etc/fstab", "etc/rc", "etc/rc.local"}
    # What Docker puts into every container (its init layer; the RUN steps left /proc and /sys in the layers too).
    added_by_docker = {".dockerenv", "etc/hostname", "etc/hosts", "etc/mtab", "etc/resolv.conf", "proc", "sys"}
    assert set(ours) - enroot - added_by_docker == {
        p for p in docker if p not in added_by_docker and not p.startswith("dev/")
    }
    for path, (filemode, content) in ours.items():
        if path in enroot or path in added_by_docker or path in ("srv", "etc"):  # enroot's top layer made these
            continue
        assert (filemode, content) == docker[path], path
    assert "opt/nemo-rl/3rdparty/vllm/nemo-rl.env" not in ours and "srv/soft" not in ours
    assert [p for p in ours if p.startswith("opt/nemo-rl/.git/modules/")] == ["opt/nemo-rl/.git/modules/only"]
    assert ours["srv/ro/file"] == ("-rw-r--r--", b"data\nlater\n") and ours["srv/suid"][0] == "-rwsr-xr-x"
    assert ours["srv/ro"][0] == "drwxr-xr-x"  # 0555 in the image, u+w as enroot gives every directory
    # A hardlink stays one file, unless a later layer changed one of its names (the copy-up breaks it, as in Docker).
    assert (extracted / "srv/suid2").stat().st_ino == (extracted / "srv/suid").stat().st_ino
    assert ours["srv/hard"][1] == b"data\n" and (extracted / "srv/hard").stat().st_nlink == 1
    rc = (extracted / "etc/rc").read_text()
    assert "    exec '/bin/sh' '-c' \"$@\"\n" in rc and "    exec '/bin/sh' '-c' 'echo it'\\''s here'\n" in rc
    fstab = "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
    assert (extracted / "etc/fstab").read_text() == fstab
    assert "EXTRA=two words\nEMPTY=\n" in (extracted / "etc/environment").read_text()


def test_an_image_the_engine_does_not_have_is_named_with_what_to_do(project, engine):
    root, cli = project
    assert cli("resolve").code == 0
    nothing = cli("export")
    assert nothing.code == 2 and "no image given and no build recorded" in nothing.stderr, nothing.output
    missing = cli("export", "nosuch:1")
    assert missing.code == 2 and "error: no image nosuch:1 in the local engine" in missing.stderr, missing.output
    assert "run `buildkit build` first" in missing.stderr
    assert {p.name for p in (root / "build").glob("*")} == {"resolve.json"}  # resolve's record, nothing exported
    assert cli("export", "not an image").code == 2


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of the size asked for, mounted in tmp_path: a real file system that fills up. Mounting needs root,
    as the engine does (scripts/engine-up.sh); where it cannot, the test skips, or fails when the engine is required."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            unavailable(f"cannot mount a small tmpfs to fill ({done.stderr.strip()}): needs root")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_not_enough_space_is_said_before_anything_is_written(project, remote, engine, small_disk):
    root, cli = smoke_built(project, remote)
    disk = small_disk("16m")
    result = cli("export", "-o", str(disk / "nemo-rl.sqsh"), timeout=300)
    assert result.code == 2, result.output
    assert f"error: {disk} has 16.0 MiB free; exporting an image of" in result.stderr
    assert "the unpacked image and the .sqsh side by side" in result.stderr and "-o DIR/NAME.sqsh" in result.stderr
    assert list(disk.iterdir()) == [] and not (root / "build/smoke/squashfs.json").exists()


@pytest.mark.parametrize("stage", ["saving", "unpacking", "mksquashfs"])
def test_a_disk_that_fills_up_midway_leaves_nothing_half_written(project, remote, engine, small_disk, stage):
    """The space check passes, then something else fills the disk while the export runs: whether the archive, the
    unpacked tree or the .sqsh hits the full disk, the same message, exit 2, and nothing of the export is left."""
    from buildkit.models.lock import read_lock
    from buildkit.models.paths import Paths
    from buildkit.stages.export import choose_source, export_squashfs
    from buildkit.world.mksquashfs import find_mksquashfs

    root, cli = smoke_built(project, remote)
    disk = small_disk("300m")
    output = disk / "nemo-rl.sqsh"

    def fill_the_disk(step: str) -> None:
        if step.startswith(stage) and not (disk / "ballast").exists():
            with (disk / "ballast").open("wb") as ballast:
                try:
                    while True:
                        ballast.write(b"\0" * 2**20)
                        ballast.flush()
                except OSError:
                    pass

    paths = Paths.of(root / "pins.yaml")
    with pytest.raises(InputError) as caught:
        export_squashfs(
            paths, read_lock(paths.lock), choose_source(paths, None), find_mksquashfs(), output, on_step=fill_the_disk
        )
    assert caught.value.exit_code == 2
    assert caught.value.message == f"cannot write {output}: No space left on device"
    assert caught.value.hint == "the disk is full: free some space"
    assert [p.name for p in disk.iterdir()] == ["ballast"] and not (root / "build/smoke/squashfs.json").exists()


def _docker_export(image: str) -> dict[str, tuple[str, object]]:
    """The files of a container of `image` as `docker export` streams them (what `enroot import dockerd://` reads),
    shaped as `listing` shapes a tree, modes as enroot fixes them (u+rX; u+w on directories)."""
    container = subprocess.run(["docker", "create", image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        data = subprocess.run(["docker", "export", container], capture_output=True, check=True).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", container], capture_output=True)
    out: dict[str, tuple[str, object]] = {}
    files: dict[str, bytes] = {}
    kinds = {tarfile.DIRTYPE: stat.S_IFDIR, tarfile.SYMTYPE: stat.S_IFLNK, tarfile.FIFOTYPE: stat.S_IFIFO}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            name = member.name.strip("/").removeprefix("./")
            if not name:
                continue
            mode = member.mode & 0o7777 | 0o400  # Docker's own entries carry the type bits too
            if member.isdir() or mode & 0o111:
                mode |= 0o100
            if member.isdir():
                mode |= 0o200
            content: object = None
            if member.isreg():
                extracted = tar.extractfile(member)
                assert extracted is not None  # a regular file's
                content = files[name] = extracted.read()
            elif member.islnk():
                content = files[member.linkname.strip("/")]
            elif member.issym():
                content = member.linkname
            out[name] = (stat.filemode(kinds.get(member.type, stat.S_IFREG) | mode), content)
    return out


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# Which build record goes with a named image: the one rule of models/records/ (belongs), on the record of a real
# smoke build (tests/fixtures/report) and the engine's image as Docker inspects it (classic store: its Id is the
# config digest, while the record's header names the manifest digest).


def _recorded(tmp_path):
    import shutil

    from buildkit.models.paths import Paths
    from buildkit.models.records.build import BuildRecord
    from tests.support.paths import REPO_ROOT

    project = tmp_path / "project"
    shutil.copytree(REPO_ROOT / "tests/fixtures/report/build", project / "build")
    paths = Paths.of(project / "pins.yaml")
    return paths, BuildRecord.model_validate_json(paths.build_record(True).read_text())


def _engine_with(tag: str, image_id: str, labels: dict[str, str]):
    from tests.support.memengine import MemoryEngine, MemoryImage

    return MemoryEngine(images={tag: MemoryImage({"Id": image_id, "Config": {"Labels": labels}})})


def test_a_named_image_takes_the_record_of_the_build_that_made_it(tmp_path, monkeypatch):
    from buildkit.stages import export

    paths, record = _recorded(tmp_path)
    asked = []

    def asking(image, build):
        asked.append(build)
        return belongs(image, build)

    monkeypatch.setattr(export, "belongs", asking)
    engine = _engine_with(record.image.tag, record.image.id, record.image.labels)
    source = export.choose_source(paths, record.image.tag, engine)
    assert source.record_path == paths.build_record(True) and source.record == record
    assert asked[-1] == record.build() and record.header.image not in (record.image.id, None)
    by_id = export.choose_source(
        paths, record.image.id, _engine_with(record.image.id, record.image.id, record.image.labels)
    )
    assert by_id.record == record  # the image named by its ID is the same build


def test_a_tag_that_names_another_image_or_lock_has_no_record(tmp_path):
    from buildkit.stages.export import choose_source

    paths, record = _recorded(tmp_path)
    rebuilt = _engine_with(record.image.tag, "sha256:" + "1" * 64, record.image.labels)  # the tag moved on
    assert choose_source(paths, record.image.tag, rebuilt).record is None
    other_lock = {**record.image.labels, "buildkit.lock.sha256": "2" * 64}
    assert (
        choose_source(paths, record.image.tag, _engine_with(record.image.tag, record.image.id, other_lock)).record
        is None
    )
    release = {k: v for k, v in record.image.labels.items() if k != "buildkit.smoke"}  # not the smoke target
    assert (
        choose_source(paths, record.image.tag, _engine_with(record.image.tag, record.image.id, release)).record is None
    )
    with pytest.raises(InputError, match="no image nosuch:1 in the local engine"):
        choose_source(paths, "nosuch:1", rebuilt)


def test_a_pushed_build_of_another_platform_is_pulled_by_its_digest_for_its_platform(tmp_path):
    """Issue 41: `build --push` of linux/arm64 from an amd64 machine loads nothing into Docker; export pulls the
    record's manifest digest for the record's platform (the tag names an index with no amd64 image)."""
    from buildkit.stages import export
    from tests.support.memengine import MemoryEngine, MemoryImage

    paths, record = _recorded(tmp_path)
    tag = "127.0.0.1:5000/nemo-rl:v0.5.0-spec-decode-arm64-smoke"
    pushed = record.model_copy(update={"image": record.image.model_copy(update={"tag": tag, "id": None})})
    by_digest = f"127.0.0.1:5000/nemo-rl@{record.image.digest}"
    image = MemoryImage({"Id": record.image.config_digest, "Config": {"Labels": record.image.labels}})
    engine = MemoryEngine(registry={by_digest: image}, platforms={by_digest: "linux/arm64"})
    source = export.Source(tag, paths.build_record(True), pushed)
    assert export._engine_image(engine, source, "linux/arm64")["Id"] == record.image.config_digest
    assert ("pull", by_digest, ()) in engine.calls
    with pytest.raises(InputError, match="no matching manifest for linux/amd64"):
        export._engine_image(
            MemoryEngine(registry={by_digest: image}, platforms={by_digest: "linux/arm64"}), source, None
        )
    with pytest.raises(InputError, match="no image nosuch:1 in the local engine") as raised:
        export._engine_image(MemoryEngine(), export.Source("nosuch:1", None, None), "linux/arm64")
    assert "`docker pull --platform linux/arm64 nosuch:1`" in (raised.value.hint or "")


# export --to DIR (issue 43): the directory checked before anything is read or made; a file there taken as published
# only when its squashfs superblock says it is whole.


@pytest.mark.parametrize("case", ["missing", "file", "symlink"])
def test_a_to_that_is_not_a_directory_is_one_line_and_nothing_is_written(project, tmp_path, case):
    root, cli = project
    assert cli("resolve").code == 0
    target = tmp_path / "shared"
    if case == "file":
        target.write_text("a file\n")
    elif case == "symlink":
        (tmp_path / "real").mkdir()
        target.symlink_to(tmp_path / "real")
    before = sorted((str(p), p.is_dir()) for p in tmp_path.rglob("*") if "build" not in p.parts)
    result = cli("export", "--to", str(target))
    assert result.code == 2, result.output
    said = {"missing": "no such directory", "file": "is not a directory", "symlink": "is a symlink"}[case]
    assert f"error: --to '{target}'" in result.stderr and said in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2  # the error and its hint
    assert sorted((str(p), p.is_dir()) for p in tmp_path.rglob("*") if "build" not in p.parts) == before


def test_to_and_output_together_are_refused(cli, tmp_path):
    result = cli("export", "--to", str(tmp_path), "-o", str(tmp_path / "x.sqsh"))
    assert result.code == 2 and "--to DIR names the file by its digest: it cannot go with -o" in result.stderr


def test_a_published_file_is_whole_only_when_its_superblock_says_so(tmp_path):
    from buildkit.stages.export.publish import published_name, whole_squashfs
    from buildkit.world.mksquashfs import find_mksquashfs

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_bytes(os.urandom(100_000))
    made = tmp_path / "made.sqsh"
    made.touch()
    squash(find_mksquashfs(), tree, made, squash_options(1770316331), 1, made)
    data = made.read_bytes()
    assert whole_squashfs(made) == len(data) and len(data) % 4096 == 0
    cut = tmp_path / "cut.sqsh"
    cut.write_bytes(data[: len(data) // 2])  # a copy that stopped half way
    other = tmp_path / "other.sqsh"
    other.write_bytes(b"not a squashfs" * 100)
    link = tmp_path / "link.sqsh"
    link.symlink_to(made)
    assert [whole_squashfs(p) for p in (cut, other, link, tmp_path / "none.sqsh")] == [None] * 4
    digest = "sha256:" + "a" * 64
    assert published_name("127.0.0.1:5000/team/nemo-rl:v1-smoke", digest) == f"nemo-rl@sha256-{'a' * 64}.sqsh"
    with pytest.raises(InputError):
        published_name("127.0.0.1:5000/team/nemo-rl:v1", "sha256:../x")


def test_enroot_squash_options_are_read_as_enroot_reads_them_and_checked(tmp_path):
    """$ENROOT_SQUASH_OPTIONS (enroot's own variable) sets how the data is compressed; an option that would read
    other files or change owners is refused, named; the file mksquashfs makes with zstd says so in its superblock."""
    from buildkit.stages.export import enroot_squash_options
    from buildkit.world.mksquashfs import find_mksquashfs

    assert enroot_squash_options(None) == ("-comp", "lzo", "-noD", "-exit-on-error")
    assert enroot_squash_options("  ") == ("-comp", "lzo", "-noD", "-exit-on-error")
    zstd = enroot_squash_options("-comp zstd -Xcompression-level 19 -b 1M")
    assert zstd == ("-comp", "zstd", "-Xcompression-level", "19", "-b", "1M")
    for bad in ("-ef /etc/shadow", "-comp brotli", "-root-owned", "-b", "-Xcompression-level 99"):
        with pytest.raises(InputError, match="ENROOT_SQUASH_OPTIONS: "):
            enroot_squash_options(bad)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_bytes(b"x" * 100_000)
    out = tmp_path / "z.sqsh"
    out.touch()
    squash(find_mksquashfs(), tree, out, squash_options(1770316331, zstd), 1, out)
    assert "Compression zstd" in unsquashfs("-s", str(out))


def test_a_to_this_user_cannot_write_is_one_line_before_anything(project, tmp_path):
    root, cli = project
    assert cli("resolve").code == 0
    with tmpfs(tmp_path / "readonly", "ro,size=1m") as target:
        result = cli("export", "--to", str(target))
        assert result.code == 2, result.output
        assert (
            f"error: --to '{target}': not writable by this user" in result.stderr and "Traceback" not in result.stderr
        )
        assert list(target.iterdir()) == []
