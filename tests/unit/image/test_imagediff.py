"""imagediff: two OCI layouts compared as diffoci does. The layouts are written here with tarfile, gzip and json, in
both forms buildx writes (a tar file, and a directory with tar=false), shaped as buildx shapes them (a nested index
with an attestation manifest); the last tests compare real buildx output from the engine of scripts/engine-up.sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.image import diff as imagediff
from buildkit.image.diff import summary
from buildkit.models.comparison import FieldDifference, ImageComparison
from tests.support.engine import STAND_IN_BASE
from tests.support.images import EPOCH, GZIP, TAR, ZSTD, F, Spec, image, sha

BASE = [F("bin", kind=tarfile.DIRTYPE, mode=0o755), F("bin/sh", b"#!busybox\n", mode=0o755)]


def compare(tmp_path: Path, a: Spec, b: Spec, form_a: str = "tar", form_b: str = "tar", **options) -> ImageComparison:
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    result = imagediff.compare(a.write(tmp_path / "a", form_a), b.write(tmp_path / "b", form_b), **options)
    # Whatever it holds, it goes into the build record as JSON and comes back the same.
    assert ImageComparison.model_validate_json(result.model_dump_json()) == result
    return result


@pytest.mark.parametrize("form", ["tar", "dir"])
def test_identical_images_are_identical_though_their_attestations_differ(tmp_path, form):
    a = image([BASE, [F("stamp", b"x")]], attestation="invocation 1")
    b = image([BASE, [F("stamp", b"x")]], attestation="invocation 2")
    result = compare(tmp_path, a, b, form, form)
    assert result.identical and result.manifest_digest_a == result.manifest_digest_b == a.manifest
    assert (result.layers_a, result.first_differing_layer, result.files, result.layers) == (2, None, [], [])
    assert summary(result) == [f"identical: manifest {a.manifest}, config {a.config} (2 layers)"]


def test_a_file_whose_content_differs_is_named_with_its_layer_and_command(tmp_path):
    commands = ["COPY busybox /bin", "RUN date > /stamp"]
    a = image([BASE, [F("stamp", b"Mon 09:00\n")]], commands=commands)
    b = image([BASE, [F("stamp", b"Tue 10:00\n")]], commands=commands)
    result = compare(tmp_path, a, b, "tar", "dir")  # a tar layout against a directory one
    assert not result.identical and result.first_differing_layer == 1
    [layer] = result.layers
    assert (layer.index, layer.digest_a, layer.digest_b) == (1, a.layers[1], b.layers[1])
    assert layer.created_by == "RUN date > /stamp" and layer.compared and layer.file_differences == 1
    [stamp] = result.files
    assert (stamp.layer, stamp.path, stamp.change, stamp.fields) == (1, "/stamp", "changed", ["content"])
    assert stamp.a is not None and stamp.b is not None
    assert stamp.a.sha256 == sha(b"Mon 09:00\n") and stamp.b.sha256 == sha(b"Tue 10:00\n")
    assert [d.path for d in result.config_differences] == ["rootfs.diff_ids.1"]
    lines = summary(result)
    assert lines[0].startswith("differ: manifest sha256:")
    assert "layer 2 of 2 (RUN date > /stamp) differs: 1 file" in lines
    assert lines[-1] == f"  /stamp changed (content {stamp.a.sha256[:19]}… -> {stamp.b.sha256[:19]}…)"


@pytest.mark.parametrize(
    ("mtime_b", "expected"), [(1700000000, (1700000000, None)), (1700000000.5, (1700000000, 500000000))]
)
def test_a_file_whose_only_difference_is_its_mtime(tmp_path, mtime_b, expected):
    result = compare(tmp_path, image([BASE, [F("stamp", b"x")]]), image([BASE, [F("stamp", b"x", mtime=mtime_b)]]))
    [stamp] = result.files
    assert stamp.a is not None and stamp.b is not None
    assert stamp.fields == ["mtime"] and (stamp.a.mtime, stamp.a.mtime_ns) == (0, None)
    assert (stamp.b.mtime, stamp.b.mtime_ns) == expected
    assert stamp.a.sha256 == stamp.b.sha256
    assert summary(result)[-1].startswith("  /stamp changed (mtime 0 -> 1700000000")


def test_a_file_whose_mode_differs(tmp_path):
    result = compare(tmp_path, image([BASE, [F("run.sh", b"x")]]), image([BASE, [F("run.sh", b"x", mode=0o755)]]))
    [run] = result.files
    assert run.a is not None and run.b is not None
    assert run.fields == ["mode"] and (run.a.mode, run.b.mode) == ("0644", "0755")
    assert summary(result)[-1] == "  /run.sh changed (mode 0644 -> 0755)"


def test_added_and_removed_files(tmp_path):
    a = image([BASE, [F("etc", kind=tarfile.DIRTYPE, mode=0o755), F("etc/old", b"1")]])
    b = image(
        [
            BASE,
            [
                F("etc", kind=tarfile.DIRTYPE, mode=0o755),
                F("etc/new", b"22"),
                F("etc/link", kind=tarfile.SYMTYPE, linkname="new"),
            ],
        ]
    )
    result = compare(tmp_path, a, b)
    assert [(f.path, f.change, f.fields) for f in result.files] == [
        ("/etc/link", "added", []),
        ("/etc/new", "added", []),
        ("/etc/old", "removed", []),
    ]
    added, removed = result.files[0], result.files[2]
    assert added.a is None and added.b is not None and added.b.linkname == "new"
    assert removed.b is None and removed.a is not None and removed.a.size == 1
    assert summary(result)[-3:] == [
        "  /etc/link added (symlink -> new)",
        "  /etc/new added (file, 2 bytes)",
        "  /etc/old removed (file, 1 bytes)",
    ]


def test_a_differing_config_with_identical_layers(tmp_path):
    a = image([BASE, [F("stamp", b"x")]], labels={"org.opencontainers.image.created": EPOCH})
    b = image([BASE, [F("stamp", b"x")]], labels={"org.opencontainers.image.created": "2026-01-01T00:00:00Z"})
    result = compare(tmp_path, a, b)
    assert not result.identical and result.config_digest_a != result.config_digest_b
    assert result.first_differing_layer is None and result.layers == [] and result.files == []
    assert result.config_differences == [
        FieldDifference(
            path='config.Labels["org.opencontainers.image.created"]',
            change="changed",
            a=EPOCH,
            b="2026-01-01T00:00:00Z",
        )
    ]
    assert result.manifest_differences == []  # the config's digest is config_digest_*, not repeated here
    assert summary(result)[1] == (
        'config config.Labels["org.opencontainers.image.created"]: "1970-01-01T00:00:00Z" -> "2026-01-01T00:00:00Z"'
    )


def test_creation_times_are_named_by_their_path(tmp_path):
    result = compare(tmp_path, image([BASE]), image([BASE], created="2026-01-01T00:00:00Z"))
    assert [d.path for d in result.config_differences] == ["created", "history.0.created", "history.1.created"]
    assert result.first_differing_layer is None


def test_the_first_differing_layer_and_only_its_files_unless_all_layers_are_asked_for(tmp_path):
    commands = ["COPY busybox /bin", "RUN date > /stamp", "RUN date > /stamp2"]
    a = image([BASE, [F("stamp", b"1")], [F("stamp2", b"1")]], commands=commands)
    b = image([BASE, [F("stamp", b"2")], [F("stamp2", b"2")]], commands=commands)
    result = compare(tmp_path, a, b)
    # The history's ENV entry made no layer: layer 1 is the history's third entry.
    assert result.first_differing_layer == 1 and result.layers[0].created_by == "RUN date > /stamp"
    assert [(layer.index, layer.compared) for layer in result.layers] == [(1, True), (2, False)]
    assert [f.path for f in result.files] == ["/stamp"]
    assert "layer 3 of 3 (RUN date > /stamp2) differs too (files not compared)" in summary(result)

    every = compare(tmp_path, a, b, all_layers=True)
    assert [(f.layer, f.path) for f in every.files] == [(1, "/stamp"), (2, "/stamp2")]
    assert all(layer.compared for layer in every.layers)


def test_a_layer_only_one_image_has(tmp_path):
    result = compare(tmp_path, image([BASE]), image([BASE, [F("extra", b"x")]]))
    assert (result.layers_a, result.layers_b, result.first_differing_layer) == (1, 2, 1)
    assert result.layers[0].digest_a is None and result.layers[0].digest_b is not None
    assert [(f.path, f.change) for f in result.files] == [("/extra", "added")]
    assert "layers: 1 vs 2" in summary(result)


def test_the_same_files_compressed_differently(tmp_path):
    result = compare(tmp_path, image([BASE], media=[GZIP]), image([BASE], media=[TAR]))
    [layer] = result.layers
    assert (layer.media_type_a, layer.media_type_b, layer.file_differences) == (GZIP, TAR, 0)
    assert layer.note == "the same uncompressed tar (diff_id): only the compression differs"
    assert result.config_differences == []


def test_an_empty_layer_is_a_layer_without_files(tmp_path):
    result = compare(tmp_path, image([BASE, []]), image([BASE, [F("x")]]))
    assert [(f.path, f.change) for f in result.files] == [("/x", "added")]


def test_the_platform_is_chosen_and_attestations_are_skipped(tmp_path):
    platforms = ("linux/arm64", "linux/amd64")
    a = image([BASE, [F("stamp", b"1")]], platforms=platforms)
    b = image([BASE, [F("stamp", b"2")]], platforms=platforms, nested=False)  # a flat index works too
    amd64 = compare(tmp_path, a, b)
    assert amd64.manifest_digest_a == a.manifest and amd64.platform == "linux/amd64"
    arm64 = compare(tmp_path, a, b, platform="linux/arm64")
    assert arm64.manifest_digest_a != a.manifest and arm64.files[0].path == "/stamp"
    with pytest.raises(InputError, match=r"no image for platform linux/s390x \(it has linux/amd64, linux/arm64\)"):
        compare(tmp_path, a, b, platform="linux/s390x")
    with pytest.raises(InputError, match="expected os/architecture"):
        compare(tmp_path, a, b, platform="linux")


def test_a_layout_of_only_an_attestation_has_no_image(tmp_path):
    spec = image([BASE])
    nested = json.loads(spec.blobs[spec.index["manifests"][0]["digest"].removeprefix("sha256:")])
    spec.index = {"schemaVersion": 2, "manifests": nested["manifests"][:1]}  # the attestation manifest alone
    with pytest.raises(InputError, match="no image for platform linux/amd64 .it has no image manifest"):
        compare(tmp_path, spec, spec)


@pytest.mark.parametrize("form", ["tar", "dir"])
@pytest.mark.parametrize("which", ["layer", "config", "manifest"])
def test_a_blob_whose_bytes_do_not_match_its_digest_is_refused(tmp_path, form, which):
    a = image([BASE, [F("stamp", b"1")]])
    b = image([BASE, [F("stamp", b"2")]])
    target = {"layer": b.layers[1], "config": b.config, "manifest": b.manifest}[which].removeprefix("sha256:")
    data = bytearray(b.blobs[target])
    data[len(data) // 2] ^= 0xFF  # the same size, other bytes
    b.blobs[target] = bytes(data)
    with pytest.raises(InputError, match=rf"{which}( 2 of 2)? sha256:{target}: content is sha256:[0-9a-f]{{64}}, not"):
        compare(tmp_path, a, b, form, form)


def test_a_blob_of_the_wrong_size_is_refused_before_it_is_read(tmp_path):
    a, b = image([BASE, [F("stamp", b"1")]]), image([BASE, [F("stamp", b"2")]])
    target = b.layers[1].removeprefix("sha256:")
    b.blobs[target] += b"\0" * 10
    with pytest.raises(InputError, match=r"is \d+ bytes, but its descriptor says \d+"):
        compare(tmp_path, a, b)


def test_an_uncompressed_layer_that_is_not_its_diff_id_is_refused(tmp_path):
    a = image([BASE, [F("stamp", b"1")]])
    b = image([BASE, [F("stamp", b"2")]], diff_ids=[sha(b"one"), sha(b"two")])
    with pytest.raises(
        InputError, match=r"layer 2 of 2 sha256:\w+ \(uncompressed\): content is sha256:\w+, not " + sha(b"two")
    ):
        compare(tmp_path, a, b)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"diff_ids": [sha(b"one")]}, r"does not list a sha256 diff_id for each of the 2 layers"),
        ({"diff_ids": ["md5:x", "md5:y"]}, r"does not list a sha256 diff_id"),
        # JSON can escape a lone surrogate; no such string could be written to the build record.
        ({"labels": {"x": "\ud800"}}, r"config sha256:\w+ has a string that is not valid Unicode"),
    ],
)
def test_a_config_that_does_not_describe_its_layers_is_refused(tmp_path, options, message):
    with pytest.raises(InputError, match=message):
        compare(tmp_path, image([BASE, [F("x")]]), image([BASE, [F("x")]], **options))


def test_a_tar_layout_never_takes_a_blob_from_a_name_of_its_choosing(tmp_path):
    a, b = image([BASE, [F("stamp", b"1")]]), image([BASE, [F("stamp", b"2")]])
    target = b.layers[1].removeprefix("sha256:")
    planted = {
        f"../blobs/sha256/{target}": b.blobs[target],
        f"x/../blobs/sha256/{target}": b.blobs[target],
        f"/blobs/sha256/{target}": b.blobs[target],
    }
    (tmp_path / "b").mkdir()
    path_b = b.write(tmp_path / "b", "tar", extra=planted, skip={target})
    with pytest.raises(InputError, match=f"blobs/sha256/{target} is missing from the layout"):
        imagediff.compare(a.write(tmp_path / "a", "dir"), path_b)


def test_a_blob_that_is_a_link_is_refused(tmp_path):
    a, b = image([BASE, [F("stamp", b"1")]]), image([BASE, [F("stamp", b"2")]])
    target = b.layers[1].removeprefix("sha256:")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b.blobs[target])
    path_b = b.write(tmp_path / "b", "dir", skip={target})
    (path_b / "blobs" / "sha256" / target).symlink_to(elsewhere)
    with pytest.raises(InputError, match=f"blobs/sha256/{target} cannot be read"):
        imagediff.compare(a.write(tmp_path / "a", "dir"), path_b)

    # In a tar, a symlink entry with a blob's name is not that blob either.
    path_t = b.write(tmp_path / "t", "tar", skip={target})
    with tarfile.open(path_t, "a") as tar:
        link = tarfile.TarInfo(f"blobs/sha256/{target}")
        link.type, link.linkname = tarfile.SYMTYPE, "../../index.json"
        tar.addfile(link)
    with pytest.raises(InputError, match="is not a regular file in the tar"):
        imagediff.compare(a.write(tmp_path / "a", "dir"), path_t)


def test_the_file_list_is_capped_and_the_rest_counted(tmp_path):
    a = image([BASE, [F(f"f{i:03}", b"a") for i in range(250)]])
    b = image([BASE, [F(f"f{i:03}", b"b") for i in range(250)]])
    result = compare(tmp_path, a, b)
    assert len(result.files) == 200 and result.files_truncated == 50 and result.layers[0].file_differences == 250
    assert result.files[-1].path == "/f199"
    lines = summary(result)
    assert "layer 2 of 2 (RUN step 1) differs: 250 files" in lines
    assert len(lines) == 3 + 20 + 1 and lines[-1] == "  … and 230 more file differences"
    assert len(compare(tmp_path, a, b, max_files=0).files) == 0


def test_text_from_the_image_reaches_the_summary_without_control_characters(tmp_path):
    evil = "evil\x1b]0;pwned\x07\x9b2J\nname"
    a = image([BASE, [F(evil, b"1"), F("bad\udcffname", b"1")]], commands=["COPY x", "RUN \x1b[2Jclear"])
    b = image([BASE, [F(evil, b"2"), F("bad\udcffname", b"2")]], commands=["COPY x", "RUN \x1b[2Jclear"])
    result = compare(tmp_path, a, b)
    assert [f.path for f in result.files] == ["/bad\\xffname", "/" + evil]  # bytes that are not UTF-8, escaped
    text = "\n".join(summary(result))
    assert not any(c in text for c in "\x1b\x07\x9b")
    assert "layer 2 of 2 (RUN [2Jclear) differs: 2 files" in text and "/evil]0;pwned2J\\nname changed" in text


def test_a_layer_media_type_buildkit_cannot_read(tmp_path):
    a, b = image([BASE, [F("x", b"1")]]), image([BASE, [F("x", b"2")]])
    manifest = json.loads(b.blobs[b.manifest.removeprefix("sha256:")])
    manifest["layers"][1]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+bzip2"
    replaced = b.add(
        json.dumps(manifest).encode(),
        "application/vnd.oci.image.manifest.v1+json",
        platform={"os": "linux", "architecture": "amd64"},
    )
    b.index = {"schemaVersion": 2, "manifests": [replaced]}
    with pytest.raises(InputError, match=r"media type 'application/vnd.oci.image.layer.v1.tar\+bzip2'"):
        compare(tmp_path, a, b)


def test_zstd_layers_need_the_zstandard_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if it were not installed
    a, b = image([BASE, [F("x", b"1")]], media=[GZIP, ZSTD]), image([BASE, [F("x", b"2")]], media=[GZIP, ZSTD])
    with pytest.raises(InputError, match=r"layer media type .*tar\+zstd needs the zstandard package") as caught:
        compare(tmp_path, a, b)
    assert caught.value.hint == "pip install zstandard"


def test_zstd_layers_are_read_when_zstandard_is_there(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    specs = []
    for data in (b"1", b"2"):
        spec = image([BASE, [F("x", data)]], media=[GZIP, TAR])
        # Recompress the plain tar layer with zstd and point a manifest at it.
        manifest = json.loads(spec.blobs[spec.manifest.removeprefix("sha256:")])
        plain = spec.blobs[spec.layers[1].removeprefix("sha256:")]
        manifest["layers"][1] = spec.add(zstandard.ZstdCompressor().compress(plain), ZSTD)
        spec.index = {
            "schemaVersion": 2,
            "manifests": [spec.add(json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")],
        }
        specs.append(spec)
    a, b = specs
    result = compare(tmp_path, a, b)
    assert [(f.path, f.fields) for f in result.files] == [("/x", ["content"])]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("nothing-here", None, "no OCI layout there"),
        ("x.tar", b"not a tar at all" * 100, "not a readable OCI layout tar"),
        ("empty", {}, "index.json is missing from the layout"),
        ("big", {"index.json": b" " * (5 << 20)}, "index.json is 5242880 bytes, more than the 4194304 allowed"),
        ("cut", {"index.json": b"[1, 2"}, "index.json is not JSON"),
        ("list", {"index.json": b"[1, 2]"}, "index.json is not a JSON object"),
        ("deep", {"index.json": b'{"a":' * 100 + b"1" + b"}" * 100}, "nested more than 64 levels deep"),
        ("md5", {"index.json": b'{"manifests": [{"digest": "md5:x"}]}'}, "index.json: manifests.0.mediaType: Field"),
    ],
)
def test_a_layout_that_is_missing_or_damaged_is_one_clear_error(tmp_path, name, content, message):
    damaged = tmp_path / name
    if isinstance(content, bytes):
        damaged.write_bytes(content)
    elif isinstance(content, dict):
        damaged.mkdir()
        for file, data in content.items():
            (damaged / file).write_bytes(data)
    (tmp_path / "good").mkdir()
    good = image([BASE]).write(tmp_path / "good", "dir")
    for a, b in ((damaged, good), (good, damaged)):
        with pytest.raises(InputError, match=message):
            imagediff.compare(a, b)


# --- real buildx output ------------------------------------------------------------------------------------------


def buildx_oci(engine: str, tmp_path: Path, name: str, dockerfile: str) -> Path:
    """The image built as `build --check-reproducible` builds it: from a clean cache, SOURCE_DATE_EPOCH set,
    timestamps rewritten, provenance attached (so the two layouts differ outside the image)."""
    context = tmp_path / f"{name}-context"
    context.mkdir()
    (context / "Dockerfile").write_text(dockerfile)
    dest = tmp_path / f"{name}.tar"
    done = subprocess.run(
        [
            "docker",
            "buildx",
            "build",
            "--builder",
            engine,
            "--no-cache",
            "--provenance=mode=max",
            "--output",
            f"type=oci,dest={dest},rewrite-timestamp=true",
            str(context),
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": "0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dest


def test_real_buildx_images_that_record_the_time_differ_in_that_file(engine, tmp_path):
    # The uuid makes the two builds differ even when both run within the same second.
    dockerfile = f"FROM {STAND_IN_BASE}\nRUN date > /stamp && cat /proc/sys/kernel/random/uuid >> /stamp\n"
    first, second = (buildx_oci(engine, tmp_path, name, dockerfile) for name in ("first", "second"))
    result = imagediff.compare(first, second)
    assert not result.identical and result.first_differing_layer == result.layers_a - 1
    [layer] = result.layers  # the base image's layers are the same blobs
    assert "date > /stamp" in (layer.created_by or "")
    [stamp] = result.files
    assert (stamp.path, stamp.change) == ("/stamp", "changed") and "content" in stamp.fields
    assert "mtime" not in stamp.fields  # rewrite-timestamp clamped both to SOURCE_DATE_EPOCH
    assert any(line.startswith("  /stamp changed (") for line in summary(result))


def test_real_buildx_images_without_the_time_are_identical(engine, tmp_path):
    dockerfile = f"FROM {STAND_IN_BASE}\nRUN echo hello > /greeting && mkdir -p /opt/app\n"
    first, second = (buildx_oci(engine, tmp_path, name, dockerfile) for name in ("first", "second"))
    result = imagediff.compare(first, second)
    assert result.identical, summary(result)
    assert summary(result)[0].startswith(f"identical: manifest {result.manifest_digest_a}")
