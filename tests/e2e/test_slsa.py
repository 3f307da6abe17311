"""`buildkit attest`: the SLSA provenance v1 statement from the recorded smoke build in tests/fixtures/report, held to
the in-toto Statement v1 and SLSA provenance v1 JSON Schemas (tests/schemas/), signed by the real cosign binary
(scripts/cosign-build.sh) and checked by cosign itself: a tampered statement or another key fails.

Tests that need cosign skip on a machine without it, and fail in CI or whenever BUILDKIT_ENGINE=required."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path

from tests.conftest import Cli
from tests.support.nemo_repo import Remote
from tests.support.paths import REPO_ROOT
from tests.support.projects import golden_project, smoke_project
from tests.support.signing import PASSWORD, key_pair

SCHEMAS = REPO_ROOT / "tests" / "schemas"


def validator():
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = [json.loads(path.read_text()) for path in sorted(SCHEMAS.glob("*.schema.json"))]
    registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas)
    slsa = next(s for s in schemas if s["$id"].endswith("slsa-provenance-v1"))
    Draft202012Validator.check_schema(slsa)
    return Draft202012Validator(slsa, registry=registry)


def schema_errors(statement: dict) -> list[str]:
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(statement))


def attest(cli, project: Path, *args: str, env: dict[str, str] | None = None):
    record = project / "build" / "smoke-record.json"
    return cli("attest", "--pins", str(project / "pins.yaml"), "--record", str(record), *args, env=env)


def test_the_statement_is_slsa_provenance_v1_by_the_schemas(cli, tmp_path):
    project = golden_project(tmp_path)
    result = attest(cli, project, "--json")
    assert result.code == 0, result.output
    statement = json.loads(result.stdout)
    assert schema_errors(statement) == []
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    written = project / "build" / "smoke" / "provenance.intoto.json"
    assert json.loads(written.read_bytes()) == statement
    assert "statement: " in result.stderr and "not signed (no --key)" in result.stderr


def test_the_schemas_refuse_what_the_specs_forbid():
    """The schemas are not a formality: each of these breaks a rule of the specs and is refused."""
    from buildkit.models.slsa import PREDICATE_TYPE, STATEMENT_TYPE

    def statement(**changes):
        base = {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {
                "buildDefinition": {"buildType": "https://example.com/t/v1", "externalParameters": {}},
                "runDetails": {"builder": {"id": "https://example.com/b"}},
            },
        }
        base.update(changes)
        return base

    assert schema_errors(statement()) == []
    bad = [
        statement(_type="https://in-toto.io/Statement/v0.1"),
        statement(subject=[]),
        statement(subject=[{"name": "x"}]),  # a subject without a digest
        statement(subject=[{"name": "x", "digest": {"sha256": "A" * 64}}]),  # not lowercase hex
        statement(subject=[{"name": "x", "digest": {"gitCommit": "abc"}}]),
        statement(predicateType="https://slsa.dev/provenance/v0.2"),
        statement(predicate={"buildDefinition": {"buildType": "https://example.com/t"}}),  # no runDetails
        statement(predicate={"buildDefinition": {"externalParameters": {}}, "runDetails": {"builder": {"id": "u:x"}}}),
        statement(
            predicate={
                "buildDefinition": {"buildType": "HTTPS://EXAMPLE.COM/t", "externalParameters": {}},
                "runDetails": {"builder": {"id": "https://example.com/b"}},
            }
        ),
        statement(
            predicate={
                "buildDefinition": {
                    "buildType": "https://example.com/t",
                    "externalParameters": {},
                    "resolvedDependencies": [{"name": "only a name"}],
                },
                "runDetails": {"builder": {"id": "https://example.com/b"}},
            }
        ),
        statement(
            predicate={
                "buildDefinition": {"buildType": "https://example.com/t", "externalParameters": {}},
                "runDetails": {
                    "builder": {"id": "https://example.com/b"},
                    "metadata": {"startedOn": "2026-11-23 08:26:23"},
                },
            }
        ),
    ]
    for case in bad:
        assert schema_errors(case), case


def test_the_statement_says_what_the_lock_and_the_records_say(cli, tmp_path):
    from buildkit.models.pins import load_pins

    project = golden_project(tmp_path)
    statement = json.loads(attest(cli, project, "--json").stdout)
    lock = json.loads((project / "pins.lock").read_text())
    record_file = project / "build" / "smoke-record.json"
    record = json.loads(record_file.read_text())
    rendered = json.loads((project / "build" / "smoke" / "render.json").read_text())

    assert statement["subject"] == [
        {"name": "nemo-rl", "digest": {"sha256": record["image"]["digest"].removeprefix("sha256:")}}
    ]
    definition, run = statement["predicate"]["buildDefinition"], statement["predicate"]["runDetails"]
    assert definition["buildType"] == "https://buildkit.invalid/buildtypes/nemo-rl-image/v1"
    external = definition["externalParameters"]
    assert external["pins"] == load_pins(project / "pins.yaml").model_dump(mode="json")
    assert external["smoke"] is True and external["push"] is False
    internal = definition["internalParameters"]
    assert (internal["builder"], internal["driver"]) == ("buildkit-engine", "remote")
    assert internal["platform"] == "linux/amd64"
    assert (internal["buildxVersion"], internal["buildkitdVersion"]) == ("v0.38.2", "v0.34.2")
    assert internal["dockerVersion"] == record["docker_version"] and internal["target"] == "smoke"
    assert internal["buildArgs"]["BUILD_CUSTOM_VLLM_REF"] == lock["vllm"]["commit"]
    assert internal["lockSha256"] == record["lock_sha256"]
    # Every check buildkit knows has a row, as in the report's verdict: run or not, and why not (issue 32).
    rows = {c["check"]: (c["status"], c["detail"]) for c in internal["checks"]}
    assert list(rows) == [
        "CUDA",
        "torch",
        "kernels",
        "ABI",
        "glibc",
        "driver",
        "content address",
        "reproducibility",
        "provenance",
    ]
    assert rows["CUDA"][0] == "pass" and rows["reproducibility"][0] == "pass"
    assert rows["driver"] == ("not checked", "a smoke image has no CUDA runtime to run on a driver")
    assert rows["provenance"][1].startswith("checked after this statement is made")

    deps = {d["name"]: d for d in definition["resolvedDependencies"]}
    nemo, vllm = lock["nemo_rl"], lock["vllm"]
    assert deps["nemo-rl"]["uri"] == f"git+{nemo['repo']}@{nemo['commit']}"
    assert deps["nemo-rl"]["digest"] == {"gitCommit": nemo["commit"]}
    assert deps["vllm"]["uri"] == f"git+https://github.com/vllm-project/vllm.git@{vllm['commit']}"
    assert deps["vllm"]["digest"] == {"gitCommit": vllm["commit"]}
    assert deps["vllm"]["annotations"]["pullRequest"] == 24322
    wheel = deps[lock["wheel"]["filename"]]
    assert wheel["uri"] == lock["wheel"]["url"] and wheel["digest"] == {"sha256": lock["wheel"]["sha256"]}
    base = lock["base_image"]
    assert deps["base-image"]["digest"] == {"sha256": base["index_digest"].removeprefix("sha256:")}
    assert deps["base-image"]["uri"].startswith("pkg:docker/127.0.0.1:5000/buildkit/stand-in-base?digest=sha256:")
    patch = "patches/build-custom-vllm-wheel-location.patch"
    assert deps[patch]["digest"] == {"sha256": hashlib.sha256((project / patch).read_bytes()).hexdigest()}
    assert deps["templates"]["digest"] == {"sha256": rendered["template_sha256"]}
    assert deps["build/smoke/Dockerfile"]["digest"] == {"sha256": rendered["dockerfile_sha256"]}

    assert run["builder"]["id"] == "https://buildkit.invalid/builders/local/v1"
    assert run["metadata"] == {
        "invocationId": Path(record["log"]).stem,  # the log's name: the fixture has no metadata file
        "startedOn": record["started"],
        "finishedOn": record["ended"],
    }
    # The log of the fixture build is not on this machine: the record is the one byproduct.
    assert run["byproducts"] == [
        {
            "name": "build/smoke-record.json",
            "digest": {"sha256": hashlib.sha256(record_file.read_bytes()).hexdigest()},
            "mediaType": "application/json",
        }
    ]


def test_same_inputs_same_bytes_anywhere(cli, tmp_path):
    first = golden_project(tmp_path / "a")
    second = golden_project(tmp_path / "elsewhere" / "b")
    assert attest(cli, first).code == 0 and attest(cli, first).code == 0
    assert attest(cli, second).code == 0
    made = [p / "build" / "smoke" / "provenance.intoto.json" for p in (first, second)]
    data = made[0].read_bytes()
    assert data == made[1].read_bytes()
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_the_log_and_the_build_ref_come_in_when_they_are_there(cli, tmp_path):
    project = golden_project(tmp_path)
    record_file = project / "build" / "smoke-record.json"
    record = json.loads(record_file.read_text())
    log_name = Path(record["log"]).name  # as the fixture's build named its log
    log = project / "build" / "logs" / log_name
    log.parent.mkdir(parents=True)
    log.write_text("#1 [internal] load build definition\n")
    metadata = project / "build" / "smoke" / "metadata.json"
    metadata.write_text(
        json.dumps(
            {
                "containerimage.digest": record["image"]["digest"],
                "buildx.build.ref": "buildkit-engine/buildkit-engine0/abc123",
            }
        )
    )
    record.update(log=str(log), metadata_file=str(metadata))
    record_file.write_text(json.dumps(record, indent=2))
    statement = json.loads(attest(cli, project, "--json").stdout)
    run = statement["predicate"]["runDetails"]
    assert run["metadata"]["invocationId"] == "buildkit-engine/buildkit-engine0/abc123"
    assert run["byproducts"][1] == {
        "name": f"build/logs/{log_name}",
        "digest": {"sha256": hashlib.sha256(log.read_bytes()).hexdigest()},
        "mediaType": "text/plain",
    }
    # A metadata file of another build (another digest) is not this build's reference; nor is a hostile one.
    others = (
        {"containerimage.digest": "sha256:" + "0" * 64, "buildx.build.ref": "other/ref"},
        {"containerimage.digest": record["image"]["digest"], "buildx.build.ref": "x\n$(rm -rf /)"},
    )
    for other in others:
        metadata.write_text(json.dumps(other))
        statement = json.loads(attest(cli, project, "--json").stdout)
        assert statement["predicate"]["runDetails"]["metadata"]["invocationId"] == Path(log_name).stem
    assert schema_errors(statement) == []


def test_what_cannot_be_attested_is_one_message(cli, tmp_path):
    project = golden_project(tmp_path)
    record_file = project / "build" / "smoke-record.json"
    record = json.loads(record_file.read_text())

    no_build = cli("attest", "--pins", str(project / "pins.yaml"), "--build-dir", str(tmp_path / "empty"))
    assert no_build.code == 2 and "no build recorded: nothing to attest" in no_build.stderr, no_build.output

    record_file.write_text(json.dumps({**record, "lock_sha256": "f" * 64}))
    other_lock = attest(cli, project)
    assert other_lock.code == 2 and "was built from another lock" in other_lock.stderr, other_lock.output

    record_file.write_text(json.dumps({**record, "outcome": "failed", "exit_code": 1}))
    failed = attest(cli, project)
    assert failed.code == 2 and "failed: it made no image to attest" in failed.stderr, failed.output

    record_file.write_text(json.dumps(record))
    (project / "build" / "smoke" / "render.json").unlink()
    unrendered = attest(cli, project)
    assert unrendered.code == 2 and "no render record of this build's Dockerfile" in unrendered.stderr

    bad_id = attest(cli, project, "--builder-id", "not a uri")
    assert bad_id.code == 2 and "--builder-id: expected an absolute URI" in bad_id.stderr
    for result in (no_build, other_lock, failed, unrendered, bad_id):
        assert "Traceback" not in result.output


def test_dsse_pre_authentication_encoding_is_the_protocols():
    from buildkit.world.cosign import pae

    # The example of the DSSE protocol (secure-systems-lab/dsse, protocol.md).
    expected = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("http://example.com/HelloWorld", b"hello world") == expected


# --- signed with the real cosign ---------------------------------------------------------------------------------


def verify_blob(cosign: str, public: Path, envelope: Path) -> subprocess.CompletedProcess[str]:
    """cosign's own check of a DSSE envelope against a key, without a registry (the subject is not compared)."""
    return subprocess.run(
        [
            cosign,
            "verify-blob-attestation",
            f"--key={public}",
            f"--signature={envelope}",
            "--type=slsaprovenance1",
            "--check-claims=false",
            "--insecure-ignore-tlog=true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_signed_with_a_key_cosign_accepts_and_refuses_tampering_or_another_key(cli, tmp_path, cosign):
    project = golden_project(tmp_path)
    key, public = key_pair(cosign, tmp_path / "keys")
    _, other_public = key_pair(cosign, tmp_path / "other")
    result = attest(cli, project, "--key", str(key), env={"COSIGN_PASSWORD": PASSWORD, "BUILDKIT_COSIGN": cosign})
    assert result.code == 0, result.output
    assert PASSWORD not in result.output
    # The fixture build was loaded into Docker: signed, and not attached (there is no registry copy to attach to).
    assert "not attached: the build loaded the image into Docker" in result.stderr
    envelope_file = project / "build" / "smoke" / "provenance.dsse.json"
    envelope = json.loads(envelope_file.read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json" and len(envelope["signatures"]) == 1
    # The signed payload is the statement file, byte for byte.
    assert base64.b64decode(envelope["payload"]) == (project / "build/smoke/provenance.intoto.json").read_bytes()

    accepted = verify_blob(cosign, public, envelope_file)
    assert accepted.returncode == 0, accepted.stderr
    refused = verify_blob(cosign, other_public, envelope_file)
    assert refused.returncode != 0 and "accepted signatures do not match threshold" in refused.stderr, refused.stderr

    statement = json.loads(base64.b64decode(envelope["payload"]))
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    deps[1]["digest"]["gitCommit"] = "0" * 40  # another vLLM commit, under the old signature
    tampered = tmp_path / "tampered.dsse.json"
    payload = base64.b64encode(json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()).decode()
    tampered.write_text(json.dumps({**envelope, "payload": payload}))
    forged = verify_blob(cosign, public, tampered)
    assert forged.returncode != 0 and "accepted signatures do not match threshold" in forged.stderr, forged.stderr


def test_signing_failures_are_one_message(cli, tmp_path, cosign):
    project = golden_project(tmp_path)
    key, _ = key_pair(cosign, tmp_path / "keys")
    env = {"BUILDKIT_COSIGN": cosign}
    no_password = attest(cli, project, "--key", str(key), env=env)
    assert no_password.code == 2 and "$COSIGN_PASSWORD is not set" in no_password.stderr, no_password.output
    wrong = attest(cli, project, "--key", str(key), env={**env, "COSIGN_PASSWORD": "not the password"})
    assert wrong.code == 2 and f"cosign could not sign with the key {key}" in wrong.stderr, wrong.output
    assert "not the password" not in wrong.output
    missing = attest(cli, project, "--key", str(tmp_path / "nope.key"), env={**env, "COSIGN_PASSWORD": ""})
    assert missing.code == 2 and "--key: no key file" in missing.stderr
    no_cosign = attest(
        cli,
        project,
        "--key",
        str(key),
        env={"BUILDKIT_COSIGN": str(tmp_path / "no-cosign"), "COSIGN_PASSWORD": PASSWORD},
    )
    assert no_cosign.code == 5 and "is not an executable file" in no_cosign.stderr
    assert "scripts/cosign-build.sh" in no_cosign.stderr
    # Nothing half-written: a failed signing leaves no envelope.
    assert not (project / "build" / "smoke" / "provenance.dsse.json").exists()
    for result in (no_password, wrong, missing, no_cosign):
        assert "Traceback" not in result.output


# --- on the real engine: build --push, attest, verify --provenance ------------------------------------------------

OTHER_VLLM = "0123456789abcdef0123456789abcdef01234567"


def pushed_smoke_project(
    project: tuple[Path, Cli], remote: Remote, tmp_path: Path, *build_extra: str
) -> tuple[Path, Cli, str]:
    """A smoke build pushed to the engine's registry, under a repository of its own (the registry is shared)."""

    root, cli = smoke_project(project, remote)
    repository = f"127.0.0.1:5000/slsa-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}/nemo-rl"
    text = (root / "pins.yaml").read_text().replace("tag: nemo-rl:", f"tag: {repository}:")
    (root / "pins.yaml").write_text(text)
    assert cli("resolve").code == 0
    extra = ["--", *build_extra] if build_extra else []
    built = cli("build", "--smoke", "--push", "--progress", "plain", "--no-syntax", *extra, timeout=600)
    assert built.code == 0, built.output
    return root, cli, f"{repository}:v0.5.0-spec-decode-smoke"


def checks(result) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["status"], c["reason"]) for c in json.loads(result.stdout)["results"]}


def test_build_push_attest_verify_on_the_engine(project, remote, upstreams, tmp_path, engine, cosign):
    root, cli, image = pushed_smoke_project(project, remote, tmp_path)
    key, public = key_pair(cosign, tmp_path / "keys")
    _, other_public = key_pair(cosign, tmp_path / "other")
    env = {"COSIGN_PASSWORD": PASSWORD, "BUILDKIT_COSIGN": cosign}
    attested = cli("attest", "--key", str(key), env=env)
    assert attested.code == 0, attested.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    pinned = f"{image.rsplit(':', 1)[0]}@{record['image']['digest']}"
    assert f"attached to {pinned}" in attested.stderr

    # The acceptance test: cosign itself accepts the attestation on the image in the registry, by tag.
    accepted = subprocess.run(
        [
            cosign,
            "verify-attestation",
            f"--key={public}",
            "--type=slsaprovenance1",
            "--insecure-ignore-tlog=true",
            "--allow-http-registry",
            image,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert accepted.returncode == 0, accepted.stderr
    statement = json.loads(base64.b64decode(json.loads(accepted.stdout.splitlines()[0])["payload"]))
    assert statement == json.loads((root / "build" / "smoke" / "provenance.intoto.json").read_text())
    assert schema_errors(statement) == []

    passed = cli("verify", "--provenance", "--key", str(public), "--json", env=env)
    assert passed.code == 0, passed.output
    found = checks(passed)
    # Nothing was exported with --to --key: no evidence refers to the image in its registry, and the row says so.
    referrers = found.pop("registry referrers: evidence")
    assert referrers[0] == "skip" and "`buildkit export --to DIR --key KEY` attaches them" in referrers[1]
    assert all(status == "pass" for status, _ in found.values()), found
    found["registry referrers: evidence"] = referrers
    for source in ("BuildKit provenance", "buildkit statement"):
        for field in (
            "target",
            "base image digest",
            "NeMo-RL commit",
            "vLLM commit",
            "wheel URL",
            "wheel sha256",
            "build args",
            "Dockerfile sha256",
        ):
            assert f"{source}: {field}" in found
    assert found["buildkit statement: lock sha256"][0] == "pass"
    # A record of its own: the in-image checks' record beside it is never overwritten, and the report shows both.
    kept = json.loads((root / "build" / "provenance-verify.json").read_text())
    assert kept["results"] == json.loads(passed.stdout)["results"]
    assert kept["header"]["kind"] == "provenance-verify" and kept["header"]["image"] == record["image"]["digest"]
    inside = cli("verify", env=env)
    assert inside.code == 0, inside.output
    assert json.loads((root / "build" / "provenance-verify.json").read_text()) == kept
    report = json.loads(cli("report", "--format", "json").stdout)
    assert {r["name"] for r in report["provenance_verification"]["results"]} == set(found)
    assert report["verification"]["header"]["kind"] == "verify"
    attest_record = json.loads((root / "build" / "smoke" / "attest.json").read_text())
    assert attest_record["header"]["kind"] == "attest" and attest_record["attached_to"] == pinned
    assert {"check": "SLSA attestation", "status": "pass", "detail": f"signed and attached to {pinned}"} in (
        report["verdict"]["checks"]
    )

    # Another key: cosign accepts no attestation, and the signed statement's check says so.
    other = cli("verify", "--provenance", "--key", str(other_public), "--json", env=env)
    assert other.code == 1, other.output
    status, reason = checks(other)["buildkit statement: signature"]
    assert status == "fail" and "cosign verify-attestation refused" in reason
    assert checks(other)["BuildKit provenance: vLLM commit"][0] == "pass"  # BuildKit's own is unsigned and still fine
    assert "1 check(s) failed" in other.stderr and "buildkit statement: signature" in other.stderr

    # A lock whose vLLM commit differs: both statements fail on that field, naming the lock's and the image's.
    # One Python file changed: GitHub's compare lists it (an empty list ahead of the base proves nothing: git then).
    upstreams.github.add_commit(
        "vllm-project/vllm", OTHER_VLLM, "another vLLM", "2026-01-20T10:00:00Z", files=["vllm/engine/arg_utils.py"]
    )
    upstreams.wheels.add(OTHER_VLLM, f"vllm-0.14.0rc2.dev157+g{OTHER_VLLM[:9]}-cp38-abi3-manylinux_2_31_x86_64.whl")
    text = (
        (root / "pins.yaml")
        .read_text()
        .replace('ref: "4a5299c93ff97c26def537b92562df5ada530fea"\n  pr: 24322', f'ref: "{OTHER_VLLM}"')
    )
    (root / "pins.yaml").write_text(text)
    assert cli("resolve").code == 0
    moved = cli("verify", "--provenance", image, "--key", str(public), "--json", env=env)
    assert moved.code == 1, moved.output
    found = checks(moved)
    for source in ("BuildKit provenance", "buildkit statement"):
        status, reason = found[f"{source}: vLLM commit"]
        assert (status, reason) == ("fail", f"expected {OTHER_VLLM}, found 4a5299c93ff97c26def537b92562df5ada530fea")
        assert found[f"{source}: NeMo-RL commit"][0] == "pass" and found[f"{source}: base image digest"][0] == "pass"
    assert "buildkit statement: vLLM commit" in moved.stderr


def test_an_image_without_provenance_or_with_a_tampered_statement_fails(
    project,
    remote,
    tmp_path,
    engine,
    cosign,
    monkeypatch,
):
    # A later --provenance=false wins over buildkit's --provenance=mode=max: the image has no attestation manifest.
    root, cli, image = pushed_smoke_project(project, remote, tmp_path, "--provenance=false")
    key, public = key_pair(cosign, tmp_path / "keys")
    env = {"COSIGN_PASSWORD": PASSWORD, "BUILDKIT_COSIGN": cosign}
    bare = cli("verify", "--provenance", image, "--key", str(public), "--json", env=env)
    assert bare.code == 1, bare.output
    found = checks(bare)
    status, reason = found["BuildKit provenance: present"]
    assert status == "fail" and reason.startswith("no provenance: the image is a single manifest")
    status, reason = found["buildkit statement: signature"]
    assert status == "fail" and "no matching attestations" in reason, reason

    # A statement changed after signing (another vLLM commit under the old signature) is refused by cosign. The
    # true statement is signed but not attached, so the forged envelope is the image's only attestation.
    from buildkit.world.cosign import sign

    assert cli("attest").code == 0
    payload = (root / "build" / "smoke" / "provenance.intoto.json").read_bytes()
    monkeypatch.setenv("COSIGN_PASSWORD", PASSWORD)
    envelope = sign(cosign, str(key), payload)
    statement = json.loads(payload)
    statement["predicate"]["buildDefinition"]["resolvedDependencies"][1]["digest"]["gitCommit"] = OTHER_VLLM
    forged = tmp_path / "forged.dsse.json"
    forged.write_text(json.dumps({**envelope, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}))
    subprocess.run(
        [cosign, "attach", "attestation", f"--attestation={forged}", image],
        check=True,
        capture_output=True,
        timeout=120,
    )
    refused = subprocess.run(
        [
            cosign,
            "verify-attestation",
            f"--key={public}",
            "--type=slsaprovenance1",
            "--insecure-ignore-tlog=true",
            image,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0, refused.stdout
    tampered = cli("verify", "--provenance", image, "--key", str(public), "--json", env=env)
    assert tampered.code == 1, tampered.output
    status, reason = checks(tampered)["buildkit statement: signature"]
    assert status == "fail" and "cosign verify-attestation refused" in reason
