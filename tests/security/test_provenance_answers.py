"""verify --provenance reads JSON of any shape from the registry: a malformed index is one clear error (exit 3),
and BuildKit's recorded build args must be exactly the lock's (an extra one changes what was built)."""

from __future__ import annotations

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.provenance import Expected, ImageProvenance, check_buildkit_provenance, read_buildkit_provenance
from tests.fake_upstreams import FakeRegistry

INDEX = "application/vnd.oci.image.index.v1+json"
DIGEST = "sha256:" + "1" * 64


@pytest.fixture
def registry():
    server = FakeRegistry().start()
    yield server
    server.stop()


@pytest.mark.parametrize(
    "index",
    [
        {"manifests": [{"digest": DIGEST, "platform": "linux/amd64"}]},
        {"manifests": 5},
        {"manifests": [{"digest": DIGEST, "platform": {"os": "linux", "architecture": "amd64"}, "annotations": ["x"]},
                       {"digest": DIGEST, "annotations": ["x"]}]},
    ],
)  # fmt: skip
def test_a_malformed_index_is_one_clear_error(registry, index):
    digest = registry._put(INDEX, {"schemaVersion": 2, "mediaType": INDEX, **index})
    registry.tags[("team/nemo-rl", "v1")] = digest
    with pytest.raises(UpstreamMalformed, match="the image index or its attestation manifest is malformed"):
        read_buildkit_provenance(f"{registry.netloc}/team/nemo-rl:v1", "linux/amd64")


WANT = Expected(
    target="release",
    base_digest=DIGEST,
    nemo_rl_commit="a" * 40,
    vllm_commit="b" * 40,
    wheel_url="https://wheels.example/w.whl",
    wheel_sha256=None,
    build_args={"NEMO_RL_COMMIT": "a" * 40, "BUILD_CUSTOM_VLLM_REF": "b" * 40},
    dockerfile_sha256=None,
    lock_sha256="c" * 64,
    source_date_epoch=1770316331,
)


def statement(**args: str) -> dict:
    return {
        "subject": [{"digest": {"sha256": "2" * 64}}],
        "predicate": {"buildDefinition": {"externalParameters": {"request": {
            "args": {"target": "release", **{f"build-arg:{k}": v for k, v in args.items()}}}}}},
    }  # fmt: skip


def results(args: dict[str, str]) -> dict[str, str]:
    found = ImageProvenance("sha256:" + "2" * 64, "sha256:" + "2" * 64, statement(**args), None)
    return {r.name.split(": ", 1)[1]: r.status for r in check_buildkit_provenance(found, WANT)}


def test_build_args_are_exactly_the_locks():
    assert results({**WANT.build_args, "SOURCE_DATE_EPOCH": "1770316331"})["build args"] == "pass"
    assert results({**WANT.build_args, "SOURCE_DATE_EPOCH": "1770316331"})["SOURCE_DATE_EPOCH"] == "pass"
    assert results({**WANT.build_args, "NRL_GIT_REF": "main"})["build args"] == "fail"
    assert results({**WANT.build_args, "SOURCE_DATE_EPOCH": "0"})["SOURCE_DATE_EPOCH"] == "fail"


def test_a_malformed_statement_is_one_clear_error():
    broken = statement()
    broken["predicate"]["buildDefinition"]["externalParameters"]["request"] = ["not", "an", "object"]
    found = ImageProvenance(DIGEST, DIGEST, broken, None)
    with pytest.raises(UpstreamMalformed, match="the provenance statement of the image is malformed"):
        check_buildkit_provenance(found, WANT)
