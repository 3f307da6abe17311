"""The image reaches the cluster with its evidence (issue 43), on the engine: a pushed smoke build published with
`export --to DIR --key KEY` (the squashfs named by its platform manifest's digest, a CycloneDX SBOM valid against
CycloneDX's own 1.6 schema, and a Sigstore bundle of buildkit's statement whose subjects are the file, the SBOM and
the image), exported again with nothing rewritten, verified offline with `verify --sqsh` (cosign with the public key
alone), and each tampering (a flipped byte, a swapped SBOM, a statement for another digest, a bundle that does not
parse) failing, named."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.support.mounts import tmpfs
from tests.support.projects import push_to_engine_registry, smoke_project
from tests.support.signing import PASSWORD, key_pair


def test_a_pushed_image_is_published_with_its_evidence_and_verified_offline(project, remote, engine, cosign, tmp_path):
    root, cli = smoke_project(project, remote)
    push_to_engine_registry(root, "cluster")
    built = cli("build", "--smoke", "--push", "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    key, public = key_pair(cosign, tmp_path / "keys")
    env = {"COSIGN_PASSWORD": PASSWORD, "BUILDKIT_COSIGN": cosign}
    shared = tmp_path / "shared"
    shared.mkdir()
    unattested = cli("export", "--to", str(shared), "--key", str(key), env=env, timeout=600)
    assert unattested.code == 2 and "run `buildkit attest --key KEY` first" in unattested.stderr, unattested.output
    assert sorted(p.name for p in shared.iterdir()) == [".buildkit-export.lock"]  # nothing made before the check
    attested = cli("attest", "--key", str(key), env=env, timeout=300)
    assert attested.code == 0, attested.output
    published = cli("export", "--to", str(shared), "--key", str(key), "--json", env=env, timeout=600)
    assert published.code == 0, published.output
    made = json.loads(published.stdout)
    sqsh = shared / made["path"].rsplit("/", 1)[1]
    stem = sqsh.name.removesuffix(".sqsh")
    assert sqsh.name.startswith("nemo-rl@sha256-") and made["sha256"] == hashlib.sha256(sqsh.read_bytes()).hexdigest()
    sbom_path, bundle_path = shared / f"{stem}.cdx.json", shared / f"{stem}.sigstore.json"
    assert sorted(p.name for p in shared.iterdir()) == sorted(
        [".buildkit-export.lock", sqsh.name, sbom_path.name, bundle_path.name]
    )

    # The SBOM: valid CycloneDX 1.6 (its own schema), and true to the lock and the image.
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(sbom_path.read_text()) is None
    sbom = json.loads(sbom_path.read_text())
    lock = json.loads((root / "pins.lock").read_text())
    refs = {c["bom-ref"]: c for c in sbom["components"]}
    assert sbom["metadata"]["component"]["version"] == "sha256:" + stem.rsplit("sha256-", 1)[1]
    assert refs["nemo-rl"]["version"] == lock["nemo_rl"]["commit"]
    assert refs["vllm-source"]["version"] == lock["vllm"]["commit"]
    assert refs["vllm-wheel"]["hashes"] == [{"alg": "SHA-256", "content": lock["wheel"]["sha256"]}]
    assert {"name": "buildkit:wheel:commit", "value": lock["vllm_wheel"]["commit"]} in refs["vllm-wheel"]["properties"]
    # The stand-in base image's Python: the packages its dist-info directories name, each with its RECORD.
    pypi = [c for c in sbom["components"] if c.get("purl", "").startswith("pkg:pypi/")]
    names = subprocess.run(["unsquashfs", "-lc", str(sqsh)], capture_output=True, text=True, check=True).stdout
    dist_infos = {line.split("squashfs-root", 1)[1].rsplit("/", 1)[0] for line in names.splitlines()
                  if line.endswith(".dist-info/RECORD")}  # fmt: skip
    assert {next(p["value"] for p in c["properties"] if p["name"] == "buildkit:dist-info") for c in pypi} == dist_infos

    # The bundle: a Sigstore bundle whose statement names the file, the SBOM and the image.
    bundle = json.loads(bundle_path.read_text())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    subjects = {s["digest"]["sha256"]: s["name"] for s in statement["subject"]}
    assert subjects[made["sha256"]] == sqsh.name
    assert subjects[hashlib.sha256(sbom_path.read_bytes()).hexdigest()] == sbom_path.name
    assert stem.rsplit("sha256-", 1)[1] in subjects

    # In the registry, as OCI referrers of the platform manifest (this registry has no referrers API: the tag
    # schema, an index tagged sha256-<hex>), once each however often exported; verify --provenance reads them.
    name, hexdigest = made["image"].rsplit(":", 1)[0].removeprefix("127.0.0.1:5000/"), stem.rsplit("sha256-", 1)[1]
    referrers = _get_json(f"http://127.0.0.1:5000/v2/{name}/manifests/sha256-{hexdigest}")
    assert sorted(m["artifactType"] for m in referrers["manifests"]) == [
        "application/vnd.cyclonedx+json",
        "application/vnd.dev.sigstore.bundle.v0.3+json",
    ]
    artifact = _get_json(f"http://127.0.0.1:5000/v2/{name}/manifests/{referrers['manifests'][0]['digest']}")
    assert artifact["subject"]["digest"] == f"sha256:{hexdigest}" and artifact["config"]["size"] == 2
    checked = cli("verify", "--provenance", "--key", str(public), "--json", env=env, timeout=300)
    rows = {r["name"]: r for r in json.loads(checked.stdout)["results"]}
    assert checked.code == 0, [r for r in rows.values() if r["status"] != "pass"]
    assert rows["registry referrers: signed statement"]["status"] == "pass"
    assert "the referrers tag schema" in rows["registry referrers: signed statement"]["reason"]
    assert rows["registry referrers: SBOM"]["status"] == rows["enroot import"]["status"] == "pass"

    # Two CI jobs publishing the same image into one new directory at once: they take turns, one file each.
    both = tmp_path / "both"
    both.mkdir()
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: cli("export", "--to", str(both), "--key", str(key), env=env, timeout=600), "ab"))
    assert [r.code for r in runs] == [0, 0], [r.output for r in runs]
    assert sum("already there" in r.stderr for r in runs) == 1  # the second found the first's files whole
    assert sorted(p.name for p in both.iterdir()) == sorted(p.name for p in shared.iterdir())
    assert hashlib.sha256((both / sqsh.name).read_bytes()).hexdigest() == made["sha256"]

    # Again: nothing rewritten.
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shared.iterdir()}
    again = cli("export", "--to", str(shared), "--key", str(key), env=env, timeout=600)
    assert again.code == 0 and "already there" in again.stderr, again.output
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shared.iterdir()} == before
    # The kept files are attached once: the exports into the other directory signed anew (a bundle of their own),
    # and their SBOM, the same bytes, was not attached again.
    again_listed = _get_json(f"http://127.0.0.1:5000/v2/{name}/manifests/sha256-{hexdigest}")["manifests"]
    assert sorted(m["artifactType"] for m in again_listed).count("application/vnd.cyclonedx+json") == 1

    # On a login node: the file and its sidecars, the public key, no project (another directory), no network use.
    login = tmp_path / "login"
    login.mkdir()
    on_login = type(cli)(login, cli.env)
    checked = on_login("verify", "--sqsh", str(sqsh), "--key", str(public), "--json", env=env, timeout=300)
    assert checked.code == 0, checked.output
    results = {r["name"]: r["status"] for r in json.loads(checked.stdout)["results"]}
    assert set(results.values()) == {"pass"} and "squashfs: SBOM vLLM commit" in results

    def tampered(name: str, change) -> tuple[int, str]:
        where = tmp_path / name
        where.mkdir()
        for path in (sqsh, sbom_path, bundle_path):
            shutil.copy(path, where / path.name)
        target = change(where)
        result = on_login("verify", "--sqsh", str(target), "--key", str(public), env=env, timeout=300)
        return result.code, result.stderr

    def flip(where):
        data = bytearray((where / sqsh.name).read_bytes())
        data[len(data) // 2] ^= 1
        (where / sqsh.name).write_bytes(bytes(data))
        return where / sqsh.name

    code, said = tampered("flipped", flip)
    assert code == 1 and "FAIL  squashfs: signature" in said and "does not match" in said, said

    def swap_sbom(where):
        other = json.loads((where / sbom_path.name).read_text())
        refs = {c["bom-ref"]: c for c in other["components"]}
        refs["vllm-source"]["version"] = "0" * 40  # another build's claim
        (where / sbom_path.name).write_text(json.dumps(other, indent=2) + "\n")
        return where / sqsh.name

    code, said = tampered("swapped", swap_sbom)
    assert code == 1 and "FAIL  squashfs: SBOM:" in said and "not among the statement's subjects" in said, said

    def other_digest(where):
        renamed = f"nemo-rl@sha256-{'0' * 64}"
        for path in list(where.iterdir()):
            path.rename(where / path.name.replace(stem, renamed))
        return where / f"{renamed}.sqsh"

    code, said = tampered("renamed", other_digest)
    assert code == 1 and "FAIL  squashfs: image digest" in said and "another image's" in said, said

    def garbled(where):
        (where / bundle_path.name).write_text("{not json")
        return where / sqsh.name

    code, said = tampered("garbled", garbled)
    assert code == 3 and "the Sigstore bundle is not JSON" in said and "Traceback" not in said, said

    # In the registry: an SBOM someone else attached beside the signed one, and a bundle signed with another key,
    # each fail verify --provenance's referrer checks, named.
    from buildkit.world.artifacts import BUNDLE_TYPE, SBOM_TYPE, attach_files

    platform_ref = f"{made['image'].rsplit(':', 1)[0]}@sha256:{hexdigest}"
    foreign = json.loads(sbom_path.read_text())
    foreign["components"][2]["version"] = "0" * 40  # another vLLM commit claimed
    attach_files(platform_ref, f"sha256:{hexdigest}", [(SBOM_TYPE, sbom_path.name, json.dumps(foreign).encode())])
    checked = cli("verify", "--provenance", "--key", str(public), "--json", env=env, timeout=300)
    rows = {r["name"]: r for r in json.loads(checked.stdout)["results"]}
    assert checked.code == 1 and rows["registry referrers: SBOM"]["status"] == "fail", rows
    assert "is not among the signed statement's subjects" in rows["registry referrers: SBOM"]["reason"]
    other_key, _ = key_pair(cosign, tmp_path / "other-keys")
    forged = tmp_path / "forged.sigstore.json"
    cosign_sign = ["attest-blob", f"--key={other_key}", f"--statement={tmp_path / 'statement.json'}",
                   "--new-bundle-format", f"--bundle={forged}", "--tlog-upload=false", "--yes"]  # fmt: skip
    (tmp_path / "statement.json").write_bytes(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    subprocess.run([cosign, *cosign_sign], env={**os.environ, **env}, check=True, capture_output=True)
    attach_files(platform_ref, f"sha256:{hexdigest}", [(BUNDLE_TYPE, bundle_path.name, forged.read_bytes())])
    checked = cli("verify", "--provenance", "--key", str(public), "--json", env=env, timeout=300)
    rows = {r["name"]: r for r in json.loads(checked.stdout)["results"]}
    assert checked.code == 1 and rows["registry referrers: signed statement"]["status"] == "fail", rows


def _get_json(url: str) -> dict:
    accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=30) as answer:
        return json.loads(answer.read())


def _put(url: str, body: bytes, content_type: str, method: str = "PUT") -> str:
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.headers.get("Location", "")


def _push_blob(repo: str, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    location = _put(f"http://127.0.0.1:5000/v2/{repo}/blobs/uploads/", b"", "application/octet-stream", "POST")
    where = location if location.startswith("http") else f"http://127.0.0.1:5000{location}"
    _put(f"{where}{'&' if '?' in where else '?'}digest={digest}", data, "application/octet-stream")
    return {"digest": digest, "size": len(data)}


def _push_manifest(repo: str, reference: str, manifest: dict) -> dict:
    body = json.dumps(manifest).encode()
    _put(f"http://127.0.0.1:5000/v2/{repo}/manifests/{reference}", body, manifest["mediaType"])
    return {
        "mediaType": manifest["mediaType"],
        "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
        "size": len(body),
    }


def test_enroot_import_is_read_from_the_registry_as_enroot_reads_it(engine):
    """On the engine's registry (distribution's own Accept negotiation): an index with the image's entry and a buildx
    attestation entry (unknown/unknown) imports; an index with no entry for the node's arch, and an image whose
    layer enroot does not extract, fail, each named."""
    from buildkit.stages.verify.enroot import enroot_import

    repo = f"enroot-{uuid.uuid4().hex[:12]}/img"
    oci = "application/vnd.oci.image.manifest.v1+json"
    platform_config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    config = _push_blob(repo, json.dumps(platform_config).encode())

    def image(layer_type: str) -> dict:
        layer = _push_blob(repo, uuid.uuid4().bytes * 64)
        return _push_manifest(repo, uuid.uuid4().hex, {
            "schemaVersion": 2, "mediaType": oci,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": [{"mediaType": layer_type, **layer}],
        })  # fmt: skip

    good = image("application/vnd.oci.image.layer.v1.tar+gzip")
    attestation = image("application/vnd.in-toto+json")
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
        {**attestation, "platform": {"architecture": "unknown", "os": "unknown"},
         "annotations": {"vnd.docker.reference.digest": good["digest"],
                         "vnd.docker.reference.type": "attestation-manifest"}},
        {**good, "platform": {"architecture": "amd64", "os": "linux"}},
    ]}  # fmt: skip
    _push_manifest(repo, "both", index)
    passed = enroot_import(f"127.0.0.1:5000/{repo}:both", "linux/amd64")
    assert passed.status == "pass", passed.reason
    assert (
        passed.reason
        == f"amd64: {good['digest']} (1 layers enroot extracts), 1 attestation entry (unknown/unknown) passed over"
    )

    failed = enroot_import(f"127.0.0.1:5000/{repo}:both", "linux/arm64")
    assert (
        failed.status == "fail"
        and failed.reason == "the index has no arm64 entry: enroot would fetch the tag as a manifest"
    )

    bzip = image("application/vnd.oci.image.layer.v1.tar+bzip2")
    odd = enroot_import(f"127.0.0.1:5000/{repo}@{bzip['digest']}", "linux/amd64")
    assert (
        odd.status == "fail"
        and "does not extract layers of 'application/vnd.oci.image.layer.v1.tar+bzip2'" in odd.reason
    )


def test_no_attestations_pushes_the_image_without_buildx_entries(project, remote, engine, tmp_path):
    """`build --push --no-attestations`: the tag names the image manifest itself, no index with buildx's
    unknown/unknown entries (for consumers that do not skip them); the record says why no provenance is attached,
    and enroot reads the image."""
    from buildkit.stages.verify.enroot import enroot_import

    root, cli = smoke_project(project, remote)
    push_to_engine_registry(root, "plain")
    built = cli("build", "--smoke", "--push", "--no-attestations", "--progress", "plain", timeout=600)
    assert built.code == 0, built.output
    record = json.loads((root / "build" / "smoke-record.json").read_text())
    assert record["provenance"] == "not attached: --no-attestations (buildx's attestation entries left out)"
    assert "--provenance=false" in record["argv"]
    accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, " \
             "application/vnd.docker.distribution.manifest.v2+json"  # fmt: skip
    name, tag = record["image"]["tag"].removeprefix("127.0.0.1:5000/").rsplit(":", 1)
    request = urllib.request.Request(f"http://127.0.0.1:5000/v2/{name}/manifests/{tag}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=30) as answer:
        served = json.loads(answer.read())
    assert "manifests" not in served and served["layers"], served
    found = enroot_import(record["image"]["tag"], "linux/amd64")
    assert found.status == "pass" and "passed over" not in found.reason, found.reason
    # A --to without room for the export: one line before anything is written (the lock file aside, empty).
    with tmpfs(tmp_path / "small", "size=16m") as small:
        full = cli("export", "--to", str(small), timeout=600)
        assert full.code == 2 and f"error: {small} has " in full.stderr and "free" in full.stderr, full.output
        assert "--to DIR" in full.stderr and "Traceback" not in full.stderr
        assert [p.name for p in small.iterdir()] == [".buildkit-export.lock"]
    refused = cli("build", "--smoke", "--push", "--no-attestations", "--sbom", "--dry-run")
    assert refused.code == 2 and "an SBOM attestation is one of buildx's attestations" in refused.stderr
