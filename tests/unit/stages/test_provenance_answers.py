"""`buildkit verify --provenance` reads the image index, the attestation manifest and BuildKit's statement from the
registry: an answer of the wrong shape (a string for a platform, a number for a list, a list for annotations) is
exit 3 with a message naming the field, never an internal error (exit 70). The registry is the hostile server."""

from __future__ import annotations

import hashlib
import json

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.stages.attest import slsa
from buildkit.stages.verify.provenance import (
    ATTESTATION_REFERENCE,
    INTOTO_LAYER,
    PREDICATE_ANNOTATION,
    read_buildkit_provenance,
)
from buildkit.world.http import Http
from tests.support.hostile import answer
from tests.support.paths import REPORT_FIXTURES

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
PLATFORM_DIGEST = "sha256:" + "b" * 64


def _body(data) -> bytes:
    return json.dumps(data).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _statement(**changes) -> dict:
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "x", "digest": {"sha256": PLATFORM_DIGEST.removeprefix("sha256:")}}],
        "predicateType": slsa.PREDICATE_TYPE,
        "predicate": {"buildDefinition": {"externalParameters": {"request": {"args": {}}}}},
    } | changes


def _attestation(statement: bytes) -> dict:
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "c" * 64},
        "layers": [
            {
                "mediaType": INTOTO_LAYER,
                "digest": _digest(statement),
                "annotations": {PREDICATE_ANNOTATION: slsa.PREDICATE_TYPE},
            }
        ],
    }


def _index(attestation: bytes, **platform_entry) -> dict:
    return {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {"mediaType": MANIFEST, "digest": PLATFORM_DIGEST, "platform": {"os": "linux", "architecture": "amd64"}}
            | platform_entry,
            {
                "mediaType": MANIFEST,
                "digest": _digest(attestation),
                "platform": {"os": "unknown", "architecture": "x"},
                "annotations": {
                    "vnd.docker.reference.type": ATTESTATION_REFERENCE,
                    "vnd.docker.reference.digest": PLATFORM_DIGEST,
                },
            },
        ],
    }


def serve(hostile, index=None, attestation=None, statement=None) -> None:
    """The image nemo-rl:v1 in the hostile registry: its index, attestation manifest and statement, each replaceable
    by a malformed one (served under the digest the layer above names)."""
    statement_bytes = _body(statement if statement is not None else _statement())
    attestation_bytes = _body(attestation if attestation is not None else _attestation(statement_bytes))
    index_bytes = _body(index if index is not None else _index(attestation_bytes))
    hostile.route(f"/v2/nemo-rl/blobs/{_digest(statement_bytes)}", answer(200, statement_bytes))
    hostile.route(
        f"/v2/nemo-rl/manifests/{_digest(attestation_bytes)}",
        answer(200, attestation_bytes, {"Content-Type": MANIFEST}),
    )
    hostile.route("/v2/nemo-rl/manifests/v1", answer(200, index_bytes, {"Content-Type": INDEX}))


@pytest.fixture
def registry(hostile, monkeypatch):
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    def read(**answers):
        serve(hostile, **answers)
        return read_buildkit_provenance(f"{hostile.netloc}/nemo-rl:v1", "linux/amd64", Http())

    return read


def test_a_well_formed_provenance_is_read(registry):
    found = registry()
    assert found.platform_digest == PLATFORM_DIGEST and found.missing is None
    assert found.statement == _statement()


def _with_attestation(**layer_changes) -> dict:
    attestation = _attestation(b"{}")
    attestation["layers"][0] |= layer_changes
    return attestation


@pytest.mark.parametrize(
    ("answers", "needle"),
    [
        ({"index": _index(b"{}", platform="linux/amd64")}, "the image index is malformed: manifests.0.platform"),
        ({"index": {"mediaType": INDEX, "manifests": 5}}, "manifests: Input should be a valid list"),
        ({"index": _index(b"{}", annotations=["x"])}, "manifests.0.annotations: Input should be a valid dict"),
        ({"index": {"mediaType": INDEX, "manifests": ["x"]}}, "manifests.0: Input should be a valid dict"),
        ({"attestation": {"mediaType": MANIFEST, "layers": 5}}, "the attestation manifest sha256:"),
        ({"attestation": _with_attestation(annotations=["x"])}, "layers.0.annotations: Input should be a valid dict"),
        ({"statement": _statement(subject=5)}, "the provenance sha256:"),
        (
            {"statement": _statement(predicate={"buildDefinition": {"externalParameters": {"request": ["x"]}}})},
            "predicate.buildDefinition.externalParameters.request",
        ),
        (
            {"statement": _statement(predicate={"buildDefinition": {"resolvedDependencies": 5}})},
            "resolvedDependencies: Input should be a valid list",
        ),
    ],
    ids=[
        "platform-string",
        "manifests-number",
        "annotations-list",
        "entry-string",
        "layers-number",
        "layer-annotations-list",
        "subject-number",
        "request-list",
        "dependencies-number",
    ],
)
def test_malformed_provenance_answers_are_exit_3(registry, answers, needle):
    with pytest.raises(UpstreamMalformed) as caught:
        registry(**answers)
    assert caught.value.exit_code == 3
    assert needle in caught.value.message and len(caught.value.message) < 500, caught.value.message


# The build args BuildKit recorded, held to the lock's exactly.

LOCK = REPORT_FIXTURES / "pins.lock"


def _build_args_check(recorded: dict[str, str]):
    from buildkit.models.lock import read_lock
    from buildkit.stages.verify.provenance import ImageProvenance, check_buildkit_provenance, expected

    want = expected(read_lock(LOCK), smoke=False, rendered=None)
    request = {"args": {f"build-arg:{k}": v for k, v in recorded.items()}}
    statement = _statement(predicate={"buildDefinition": {"externalParameters": {"request": request}}})
    results = check_buildkit_provenance(ImageProvenance("sha256:" + "a" * 64, PLATFORM_DIGEST, statement, None), want)
    return want, next(r for r in results if r.name.endswith(": build args"))


def test_the_lock_build_args_and_its_source_date_epoch_pass():
    from buildkit.models.lock import read_lock
    from buildkit.models.plan import source_date_epoch

    want, _ = _build_args_check({})
    assert want.source_date_epoch == str(source_date_epoch(read_lock(LOCK)))
    for recorded in (want.build_args, want.build_args | {"SOURCE_DATE_EPOCH": want.source_date_epoch}):
        assert _build_args_check(recorded)[1].status == "pass"


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        ({"NRL_GIT_REF": "main"}, "NRL_GIT_REF=main"),
        ({"SOURCE_DATE_EPOCH": "0"}, "SOURCE_DATE_EPOCH=0"),
        ({"X": "\x1b]0;owned\x07" + "y" * 5000}, "X="),
    ],
    ids=["extra-arg", "other-epoch", "hostile-value"],
)
def test_a_build_arg_beyond_the_lock_fails_the_check(extra, shown):
    want, check = _build_args_check(dict(_build_args_check({})[0].build_args) | extra)
    assert check.status == "fail" and shown in check.reason
    assert "\x1b" not in check.reason and len(check.reason) < 5000


def test_a_missing_build_arg_fails_the_check():
    want, _ = _build_args_check({})
    recorded = dict(want.build_args)
    recorded.pop("NEMO_RL_COMMIT")
    assert _build_args_check(recorded)[1].status == "fail"
