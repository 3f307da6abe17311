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
import shutil
import subprocess
import uuid

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from tests.support.projects import smoke_project
from tests.support.signing import PASSWORD, key_pair


def test_a_pushed_image_is_published_with_its_evidence_and_verified_offline(project, remote, engine, cosign, tmp_path):
    root, cli = smoke_project(project, remote)
    repository = f"127.0.0.1:5000/cluster-{uuid.uuid4().hex[:12]}/nemo-rl"
    text = (root / "pins.yaml").read_text().replace("tag: nemo-rl:", f"tag: {repository}:")
    (root / "pins.yaml").write_text(text)
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

    # Again: nothing rewritten.
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shared.iterdir()}
    again = cli("export", "--to", str(shared), "--key", str(key), env=env, timeout=600)
    assert again.code == 0 and "already there" in again.stderr, again.output
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in shared.iterdir()} == before

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
