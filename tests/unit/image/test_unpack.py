"""The layers `buildkit export` unpacks come from outside: `docker save`'s archive is read only through the digests
its config names, and no layer can make the unpacker write, link or delete outside its directory. The archives and
layers are written here with tarfile (the layer helpers are imagediff's); the engine tests in
tests/unit/stages/test_export.py unpack real ones."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.image.ocilayout import OciLayout, resolve_image
from buildkit.image.unpack import unpack_image
from tests.support.images import TAR, F, image, layer_tar, sha, write_tar
from tests.support.trees import listing

DIR, SYM, LNK, CHR, FIFO = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE


def docker_archive(path: Path, layers: list[list[F]], *, entries=None, config: bytes | None = None) -> Path:
    """A docker-archive as Docker 20.10's `docker save` writes it: <v1 id>/layer.tar (uncompressed), the config
    named by its sha256, manifest.json last."""
    tars = [layer_tar(files) for files in layers]
    if config is None:
        diff_ids = [sha(t) for t in tars]
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"diff_ids": diff_ids}}).encode()
    files: dict[str, bytes] = {}
    names = []
    for index, data in enumerate(tars):
        v1 = hashlib.sha256(f"v1 layer {index}".encode()).hexdigest()
        files |= {f"{v1}/VERSION": b"1.0", f"{v1}/json": b"{}", f"{v1}/layer.tar": data}
        names.append(f"{v1}/layer.tar")
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    files[config_name] = config
    files["manifest.json"] = json.dumps(
        entries if entries is not None else [{"Config": config_name, "RepoTags": ["x:1"], "Layers": names}]
    ).encode()
    return write_tar(path, files)


def unpack(tmp_path: Path, layers: list[list[F]], archive: bool = False):
    """The layers as an image, unpacked into tmp_path/root: (root, the result)."""
    if archive:
        path = docker_archive(tmp_path / "saved.tar", layers)
    else:
        path = image(layers, media=[TAR] * len(layers), nested=False).write(tmp_path / "layout", "tar")
    root = tmp_path / "root"
    root.mkdir()
    with OciLayout(path) as layout:
        result = unpack_image(layout, resolve_image(layout, "linux/amd64"), root)
    return root, result


# docker save's archive (Docker before 25)


def test_a_docker_archive_reads_as_the_layout_it_describes(tmp_path):
    layers = [[F("bin", kind=DIR, mode=0o755), F("bin/sh", b"#!\n", mode=0o755)], [F("etc/passwd", b"root\n")]]
    path = docker_archive(tmp_path / "saved.tar", layers)
    with OciLayout(path) as layout:
        assert layout.docker_archive
        saved = resolve_image(layout, "linux/amd64")
        config_name = next(n for n in tarfile.open(path).getnames() if re.fullmatch(r"[0-9a-f]{64}\.json", n))
        assert saved.config_descriptor.digest == "sha256:" + config_name.removesuffix(".json")
        assert [d.digest for d in saved.layers] == saved.config["rootfs"]["diff_ids"]
        names = [e.name for e in layout.read_layer(saved.layers[0], saved.diff_id(0), "layer").entries]
    assert names == ["bin", "bin/sh"]
    root, _ = unpack(tmp_path, layers, archive=True)
    assert listing(root)["etc/passwd"] == ("-rw-r--r--", b"root\n")


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "expected exactly one image in a docker-archive, found 0 images"),
        ([{"Config": "a" * 64 + ".json", "Layers": []}] * 2, "found 2 images"),
        ({"Config": "x"}, "found no list of images"),
        ([{"Config": "../../etc/passwd", "Layers": []}], "Config: String should match pattern"),
        ([{"Config": "a" * 64 + ".json", "Layers": ["../../../etc/shadow"]}], "Layers.0: String should match"),
        ([{"Config": "a" * 64 + ".json", "Layers": []}], "the config manifest.json names, is missing"),
    ],
)
def test_a_docker_archive_is_read_only_through_names_it_may_use(tmp_path, entries, message):
    path = docker_archive(tmp_path / "saved.tar", [[F("a", b"a")]], entries=entries)
    with pytest.raises(InputError, match=message):
        OciLayout(path)


def _members(path: Path) -> dict[str, bytes]:
    """Each member's bytes, by name (a saved archive holds regular files only)."""
    files = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member)
            assert data is not None, member.name
            files[member.name] = data.read()
    return files


def test_a_docker_archive_config_is_checked_against_the_sha256_it_is_named_by(tmp_path):
    path = docker_archive(tmp_path / "saved.tar", [[F("a", b"a")]])
    files = _members(path)
    config_name = next(n for n in files if re.fullmatch(r"[0-9a-f]{64}\.json", n))
    files[config_name] = files[config_name].replace(b'"amd64"', b'"arm64"')
    with pytest.raises(InputError, match="content is sha256:.* not sha256:"):
        OciLayout(write_tar(tmp_path / "forged.tar", files))


def test_a_docker_archive_layer_is_checked_against_its_diff_id(tmp_path):
    path = docker_archive(tmp_path / "saved.tar", [[F("a", b"honest")]])
    files = _members(path)
    layer = next(n for n in files if n.endswith("/layer.tar"))
    files[layer] = files[layer].replace(b"honest", b"forged")  # same size: only the digest tells
    root = tmp_path / "root"
    root.mkdir()
    with OciLayout(write_tar(tmp_path / "forged.tar", files)) as layout:
        saved = resolve_image(layout, "linux/amd64")
        with pytest.raises(InputError, match="content is sha256:.* not sha256:"):
            unpack_image(layout, saved, root)


def test_a_docker_archive_whose_config_does_not_name_its_layers(tmp_path):
    config = json.dumps({"os": "linux", "architecture": "amd64", "rootfs": {"diff_ids": []}}).encode()
    path = docker_archive(tmp_path / "saved.tar", [[F("a", b"a")]], config=config)
    with pytest.raises(InputError, match="does not list a sha256 diff_id for each of the 1 layers manifest.json"):
        OciLayout(path)


# Stacking layers


def test_layers_stack_with_their_whiteouts(tmp_path):
    lower = [
        F("a", kind=DIR, mode=0o755),
        F("a/old", b"old"),
        F("a/keep", b"keep"),
        F("d", kind=DIR, mode=0o755),
        F("d/x", b"x"),
        F("d/sub", kind=DIR, mode=0o755),
        F("d/sub/y", b"y"),
        F("f", b"f"),
        F("link", kind=SYM, linkname="f"),
        F("gone", kind=DIR, mode=0o755),
        F("gone/z", b"z"),
    ]
    upper = [
        F(".wh.f"),
        F(".wh.gone"),
        F("a", kind=DIR, mode=0o755),
        F("a/.wh.old"),
        # An entry listed before its directory's opaque marker is this layer's own: the marker hides only what
        # lower layers put there (d/x, d/sub/y), whatever the order of the tar.
        F("d", kind=DIR, mode=0o750),
        F("d/-first", b"mine"),
        F("d/.wh..wh..opq"),
        F("d/sub", kind=DIR, mode=0o755),
        F("d/sub/new", b"new"),
        F("g", b"g"),
        F(".wh.g"),  # a whiteout never hides its own layer's entry
    ]
    root, result = unpack(tmp_path, [lower, upper])
    assert listing(root) == {
        "a": ("drwxr-xr-x", None),
        "a/keep": ("-rw-r--r--", b"keep"),
        "d": ("drwxr-x---", None),
        "d/-first": ("-rw-r--r--", b"mine"),
        "d/sub": ("drwxr-xr-x", None),
        "d/sub/new": ("-rw-r--r--", b"new"),
        "link": ("lrwxrwxrwx", "f"),
        "g": ("-rw-r--r--", b"g"),
    }
    assert result.entries == len(lower) + len(upper) and result.skipped == []


def test_an_entry_replaces_what_was_there_whatever_its_type(tmp_path):
    lower = [F("a", kind=DIR, mode=0o755), F("a/x", b"x"), F("b", b"b"), F("c", kind=SYM, linkname="/etc")]
    upper = [F("a", b"now a file"), F("b", kind=DIR, mode=0o755), F("b/y", b"y"), F("c", b"now a file")]
    root, _ = unpack(tmp_path, [lower, upper])
    assert listing(root) == {
        "a": ("-rw-r--r--", b"now a file"),
        "b": ("drwxr-xr-x", None),
        "b/y": ("-rw-r--r--", b"y"),
        "c": ("-rw-r--r--", b"now a file"),
    }


def test_modes_are_the_layers_as_enroot_fixes_them(tmp_path):
    """chmod -R u+rX and u+w on directories (enroot's common::fixperms); set-id bits stay; hardlinks share."""
    layer = [
        F("ro", kind=DIR, mode=0o555),
        F("ro/none", b"n", mode=0o000),
        F("ro/x", b"x", mode=0o001),
        F("suid", b"s", mode=0o4755),
        F("pipe", kind=FIFO, mode=0o640),
        F("hard", kind=LNK, linkname="suid"),
    ]
    root, _ = unpack(tmp_path, [layer])
    found = listing(root)
    assert found["ro"][0] == "drwxr-xr-x" and found["ro/none"][0] == "-r--------" and found["ro/x"][0] == "-r-x-----x"
    assert found["suid"][0] == "-rwsr-xr-x" and found["pipe"][0] == "prw-r-----"
    assert (root / "hard").stat().st_ino == (root / "suid").stat().st_ino


def test_device_nodes_are_left_out_and_listed_and_dev_is_never_unpacked(tmp_path):
    layer = [
        F("dev", kind=DIR, mode=0o755),
        F("dev/null", kind=CHR),
        F("dev/shm", kind=DIR, mode=0o1777),
        F("dev/file", b"x"),
        F("usr", kind=DIR, mode=0o755),
        F("usr/tty0", kind=CHR),
    ]
    root, result = unpack(tmp_path, [layer])
    assert listing(root) == {"dev": ("drwxr-xr-x", None), "usr": ("drwxr-xr-x", None)}
    assert result.skipped == ["/usr/tty0"] and result.skipped_count == 1


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([[F("/etc/passwd", b"x")]], "an absolute path"),
        ([[F("a/../../outside", b"x")]], "goes up with '..'"),
        # An earlier layer plants a symlink out of the tree; a later one writes, deletes or links through it.
        ([[F("evil", kind=SYM, linkname="{outside}")], [F("evil/planted", b"x")]], "a path through evil, which is a"),
        ([[F("evil", kind=SYM, linkname="{outside}")], [F("evil/.wh.sentinel")]], "a path through evil"),
        ([[F("evil", kind=SYM, linkname="{outside}")], [F("evil/.wh..wh..opq")]], "a path through evil"),
        ([[F("file", b"x")], [F("file/below", b"x")]], "a path through file, which is a symlink or a file"),
        ([[F("h", kind=LNK, linkname="../outside/sentinel")]], "goes up with '..'"),
        ([[F("h", kind=LNK, linkname="/etc/passwd")]], "an absolute path"),
        ([[F("evil", kind=SYM, linkname="{outside}"), F("h", kind=LNK, linkname="evil/sentinel")]], "a path through"),
        ([[F("h", kind=LNK, linkname="missing")]], "which is no file unpacked in the image"),
        ([[F("d", kind=DIR), F("h", kind=LNK, linkname="d")]], "which is no file unpacked in the image"),
        ([[F("h", b"x"), F("h", kind=LNK, linkname="h")]], "which it would replace itself"),
        ([[F(".wh..wh.plnk")]], "a whiteout the OCI image spec does not define"),
        ([[F("a/.wh..")]], "a whiteout the OCI image spec does not define"),
        ([[F("s", kind=SYM, linkname="")]], "which Linux cannot store"),
        ([[F("blk", kind=b"Z")]], "an entry of type b'Z'"),
        # A path deep enough that removing it (shutil.rmtree recurses per level) would overflow Python's stack.
        ([[F("/".join(["a"] * 1000) + "/f", b"x")]], "a path 1001 directories deep"),
        ([[F("x", b"x"), F("h", kind=LNK, linkname="/".join(["a"] * 300))]], "a path 300 directories deep"),
    ],
)
def test_nothing_outside_the_tree_is_ever_touched(tmp_path, layers, message):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sentinel").write_text("untouched")
    for layer in layers:
        for entry in layer:
            entry.linkname = entry.linkname.replace("{outside}", str(outside))
    with pytest.raises(InputError, match=message) as caught:
        unpack(tmp_path, layers)
    assert caught.value.exit_code == 2
    assert [p.name for p in outside.iterdir()] == ["sentinel"] and (outside / "sentinel").read_text() == "untouched"


@pytest.mark.skipif(os.geteuid() != 0, reason="shows that root is not needed by running as nobody; needs root")
def test_unpacking_needs_no_root_and_gives_the_same_tree_to_anyone(tmp_path):
    """The same layers unpacked by root and by nobody give the same tree: modes, set-id bits, read-only
    directories, FIFOs, hardlinks; device nodes left out either way."""
    layers = [
        [
            F("ro", kind=DIR, mode=0o555),
            F("ro/f", b"f", mode=0o444),
            F("suid", b"s", mode=0o4755),
            F("pipe", kind=FIFO, mode=0o600),
            F("hard", kind=LNK, linkname="suid"),
            F("usr", kind=DIR, mode=0o755),
            F("usr/node", kind=CHR),
        ],
        [F("ro/.wh.f"), F("ro/g", b"g", mode=0o400)],
    ]
    as_root, _ = unpack(tmp_path, layers)
    mine = tmp_path / "nobody"
    (mine / "root").mkdir(parents=True)
    for path in (mine, mine / "root"):
        os.chown(path, 65534, 65534)
    path = image(layers, media=[TAR] * 2, nested=False).write(tmp_path / "again", "tar")
    with OciLayout(path) as layout:  # opened as root; the child reads it through the open file
        saved = resolve_image(layout, "linux/amd64")
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover -- the child: nobody, in a directory of its own, then out
            status = 1
            try:
                os.close(reader)
                os.chdir(mine)  # the test's directories above are root's alone: the child never passes them
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                result = unpack_image(layout, saved, Path("root"))
                os.write(writer, repr(result.skipped).encode())
                status = 0
            except BaseException as exc:  # noqa: BLE001 -- said to the parent, which fails the test
                os.write(writer, repr(exc).encode())
            finally:
                os._exit(status)
        os.close(writer)
        with os.fdopen(reader) as said:
            told = said.read()
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, told
    assert told == "['/usr/node']"
    assert listing(mine / "root") == listing(as_root)


DEEP = "/".join(["d"] * 1000)


@pytest.fixture
def deep_tmp(tmp_path):
    """tmp_path, emptied afterwards by GNU rm (iterative): a deep tree left by a failure would break pytest's own
    removal of old temp directories (shutil.rmtree) in every later run."""
    yield tmp_path
    subprocess.run(["rm", "-rf", "--one-file-system", *map(str, tmp_path.iterdir())], check=False)


@pytest.mark.parametrize(
    "layers",
    [
        [[F(DEEP + "/f", b"x")]],
        [[F(DEEP, kind=DIR)]],
        [[F("f", b"x"), F("h", kind=LNK, linkname=DEEP + "/f")]],
    ],
    ids=["file", "directory", "hardlink-target"],
)
def test_a_path_deeper_than_the_bound_is_refused_by_name(deep_tmp, layers):
    """A 1000-level path once crashed `export` (RecursionError, exit 70) and left a tree no later run could remove."""
    with pytest.raises(InputError, match=r"d/d/d.*: a path 100[01] directories deep \(at most 256\)") as caught:
        unpack(deep_tmp, layers)
    assert caught.value.exit_code == 2


def test_a_path_at_the_bound_unpacks(tmp_path):
    name = "/".join(["d"] * 255) + "/f"
    root, _ = unpack(tmp_path, [[F(name, b"deep")], [F("d", b"replaces the whole tree")]])
    assert (root / "d").read_bytes() == b"replaces the whole tree"


def _deep_tree(top: Path, depth: int, outside: Path) -> None:
    """`depth` nested directories under `top`, each with a file and a symlink to `outside`, made level by level."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            os.symlink(str(outside), "link", dir_fd=fd)
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


@pytest.mark.e2e  # slow: thousands of nested directories (15 s here)
def test_a_deep_working_directory_is_removed_and_so_is_a_deep_orphan(deep_tmp):
    """The working directory beside the output, and one a killed run left, are removed whatever their depth (shutil's
    rmtree raised RecursionError on both, and the orphan broke every later write to the same file); nothing a
    symlink in them points to is touched."""
    from buildkit.files import work_dir_beside, write_atomic

    tmp_path = deep_tmp
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("kept")
    output = tmp_path / "out" / "image.sqsh"
    with work_dir_beside(output) as work:
        _deep_tree(work, 1500, outside)
    assert list(output.parent.iterdir()) == []
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs, as after a kill
    orphan = output.parent / f".image.sqsh.{dead.pid}.abc123.tmp"
    orphan.mkdir()
    _deep_tree(orphan, 1500, outside)
    write_atomic(output, "done")
    assert [p.name for p in output.parent.iterdir()] == ["image.sqsh"]
    assert [p.name for p in outside.iterdir()] == ["kept"]
