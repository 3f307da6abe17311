"""Issue 41, point 1: one identity per image. A pushed build's record names the platform manifest's digest; the
engine knows the same image by its config digest (Docker's image ID) and, after a pull by a tag of an index, by the
index's digest (RepoDigests). Every record keeps the other names as aliases and matches a build by any of them, so
the report never leaves out a record of the same image. The build record is a real one (tests/fixtures/report: a
smoke build on the engine)."""

from __future__ import annotations

import json
import shutil

from buildkit.models.paths import Paths
from buildkit.models.records import RecordHeader, belongs, header, repo_digests
from buildkit.models.records.build import BuildRecord
from buildkit.models.records.verify import VerifyRecord
from buildkit.stages.verify import _identity, by_manifest
from tests.support.paths import REPORT_FIXTURES

BUILT = BuildRecord.model_validate_json((REPORT_FIXTURES / "build" / "smoke-record.json").read_text())
VERIFIED = json.loads((REPORT_FIXTURES / "build" / "verify.json").read_text())
MANIFEST, CONFIG = BUILT.image.digest, BUILT.image.config_digest
INDEX = "sha256:" + "1" * 64  # the digest a tag of a two-platform index names (what `docker pull TAG` records)
REPO = "127.0.0.1:5000/nemo-rl"


def pulled_attrs() -> dict:
    """The engine's view after `docker pull --platform linux/arm64 REPO:TAG` of an index: its ID is the config
    digest, its RepoDigests the index's digest (Docker 20.10's classic store)."""
    return {"Id": CONFIG, "RepoDigests": [f"{REPO}@{INDEX}"]}


def test_a_header_without_aliases_keeps_its_bytes_and_one_with_them_round_trips():
    plain = header("verify", MANIFEST, "a" * 64, True)
    assert "aliases" not in plain.model_dump_json()
    named = header("verify", INDEX, "a" * 64, True, (CONFIG, None, INDEX))
    assert named.aliases == (CONFIG,)
    assert RecordHeader.model_validate_json(named.model_dump_json()) == named
    assert RecordHeader.model_validate(VERIFIED["header"]).aliases == ()  # a record written before aliases


def test_the_names_docker_gives_a_pulled_image_are_aliases():
    assert repo_digests(pulled_attrs()) == (INDEX,)
    assert _identity(f"{REPO}:v0.5.0-spec-decode-arm64-smoke", pulled_attrs()) == (INDEX, (CONFIG, INDEX))


def test_a_verify_record_of_a_pulled_image_belongs_to_the_build_that_pushed_it():
    build = BUILT.build()
    image, aliases = _identity(f"{REPO}:v0.5.0-spec-decode-arm64-smoke", pulled_attrs())
    before = VerifyRecord.model_validate({**VERIFIED, "header": {**VERIFIED["header"], "image": INDEX}})
    assert not belongs(before, build)  # issue 41: "a record of another build; left out"
    after = before.model_copy(update={"header": header("verify", image, BUILT.lock_sha256, True, aliases)})
    assert belongs(after, build)


def test_verify_names_the_image_by_its_build_records_manifest_digest(tmp_path):
    paths = Paths.of(tmp_path / "pins.yaml")
    paths.build_record(True).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPORT_FIXTURES / "build" / "smoke-record.json", paths.build_record(True))
    image, aliases = _identity(f"{REPO}:tag", pulled_attrs())
    record = VerifyRecord.model_validate(VERIFIED).model_copy(
        update={"header": header("verify", image, BUILT.lock_sha256, True, aliases)}
    )
    named = by_manifest(record, paths).header
    assert named is not None and named.image == MANIFEST
    assert set(named.aliases) == {CONFIG, INDEX}
    other = record.model_copy(update={"header": header("verify", "sha256:" + "2" * 64, BUILT.lock_sha256, True)})
    assert by_manifest(other, paths) == other  # another image: left as it is
