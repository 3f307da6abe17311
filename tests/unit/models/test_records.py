"""The one rule for which records belong to a build (buildkit.models.records.belongs), on each kind of record: by its
header, and by its fields for a record written before headers."""

from __future__ import annotations

from types import SimpleNamespace

from buildkit.models.records import Build, belongs, header

LOCK, OTHER_LOCK = "a" * 64, "b" * 64
DIGEST, IMAGE_ID = "sha256:" + "1" * 64, "sha256:" + "2" * 64
BUILD = Build(LOCK, smoke=False, images=frozenset({DIGEST, IMAGE_ID}))


def with_header(kind, image, lock=LOCK, smoke=False):
    return SimpleNamespace(header=header(kind, image, lock, smoke))


def test_a_record_with_a_header_belongs_by_lock_target_and_image():
    assert belongs(with_header("verify", IMAGE_ID), BUILD)
    assert belongs(with_header("squashfs", DIGEST), BUILD)
    assert belongs(with_header("render", None), BUILD)  # no image yet: every build of its lock and target
    assert not belongs(with_header("verify", "sha256:" + "3" * 64), BUILD)  # another image
    assert not belongs(with_header("render", None, lock=OTHER_LOCK), BUILD)
    assert not belongs(with_header("attest", DIGEST, smoke=True), BUILD)


def test_a_record_before_headers_belongs_by_the_fields_it_has():
    legacy_verify = SimpleNamespace(header=None, lock_sha256=LOCK, smoke=False, image_id=IMAGE_ID)
    legacy_render = SimpleNamespace(header=None, lock_sha256=LOCK, smoke_base=None)
    legacy_squashfs = SimpleNamespace(header=None, lock_sha256=LOCK, smoke=False, image_id="x", config_digest=DIGEST)
    assert belongs(legacy_verify, BUILD) and belongs(legacy_render, BUILD) and belongs(legacy_squashfs, BUILD)
    assert not belongs(SimpleNamespace(header=None, lock_sha256=LOCK, smoke_base="base@sha256:..."), BUILD)
    assert not belongs(SimpleNamespace(header=None, lock_sha256=LOCK, smoke=False, image_id="other"), BUILD)
    assert not belongs(SimpleNamespace(header=None, lock_sha256=OTHER_LOCK, smoke=False, image_id=IMAGE_ID), BUILD)
    assert not belongs(SimpleNamespace(header=None, statement="..."), BUILD)  # an attest record names no lock
    assert not belongs(None, BUILD)
