"""The smaller holes of issue 20, each refused at its root: a forged attestation index cannot make thousands of
requests; a missing or private `verify --provenance --key` is bad input before any check; `bump` never moves a pin
backwards or to unrelated history (a force-push) without `--allow-unrelated`, and its summary says when it does;
the message for a too-large upstream Dockerfile is one line. (A patch that is not UTF-8 is refused at resolve:
tests/e2e/security/test_local_files.py.)"""

from __future__ import annotations

import json

import pytest

from buildkit.errors import UpstreamMalformed
from buildkit.stages.verify.provenance import MAX_ATTESTATIONS, read_buildkit_provenance
from tests.support.gitserver import git
from tests.support.measured import measured
from tests.support.nemo_repo import use_remote
from tests.support.signing import key_pair


def _forged_index(registry, repo: str, entries: int, distinct: int) -> None:
    """An image index as BuildKit pushes it (one linux/amd64 manifest and attestation manifests that refer to it,
    annotated `vnd.docker.reference.type: attestation-manifest`), with `entries` attestation entries over
    `distinct` attestation manifests that hold no SLSA statement."""
    image = registry.platform_digest(
        registry_repo := "nvidia/cuda-dl-base", "25.05-cuda12.9-devel-ubuntu24.04", "linux/amd64"
    )
    assert registry_repo
    attestations = []
    for n in range(distinct):
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": "sha256:" + f"{n:064x}",
                "size": 2,
            },
            "layers": [],
        }
        attestations.append(registry._put(manifest["mediaType"], manifest))
    manifests = [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": image,
            "size": 1,
            "platform": {"architecture": "amd64", "os": "linux"},
        }
    ]
    for n in range(entries):
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": attestations[n % distinct],
                "size": 1,
                "platform": {"architecture": "unknown", "os": "unknown"},
                "annotations": {
                    "vnd.docker.reference.type": "attestation-manifest",
                    "vnd.docker.reference.digest": image,
                },
            }
        )
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
    registry.tags[(repo, "1")] = registry._put(index["mediaType"], index)


@pytest.mark.parametrize("distinct", [1, 3000])
def test_a_forged_attestation_index_makes_a_few_requests(upstreams, monkeypatch, distinct):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    registry = upstreams.registry
    _forged_index(registry, "forged/image", entries=3000, distinct=distinct)
    before = len(registry.log)
    found = read_buildkit_provenance(f"{registry.netloc}/forged/image:1", "linux/amd64")
    manifest_reads = [p for _, p, _ in registry.log[before:] if "/manifests/" in p]
    assert found.statement is None and "holds no" in (found.missing or "")
    # The index (asked twice: the registry's token challenge first), then each distinct attestation once, capped.
    assert len(manifest_reads) <= 2 + min(distinct, MAX_ATTESTATIONS), manifest_reads


def test_verify_provenance_refuses_a_missing_or_private_key_first(cli, tmp_path, cosign):
    private, public = key_pair(cosign, tmp_path / "keys")
    # No pins and no lock here: the key is looked at before anything else, so it is what the message is about.
    missing = measured(cli, "verify", "--provenance", "img:1", "--key", str(tmp_path / "nope.pub"))
    missing.assert_refused(2, "no public key file")
    measured(cli, "verify", "--provenance", "img:1", "--key", str(private)).assert_refused(2, "is a private key")
    (tmp_path / "notes.txt").write_text("not a key\n")
    measured(cli, "verify", "--provenance", "img:1", "--key", str(tmp_path / "notes.txt")).assert_refused(
        2, "holds no PEM public key"
    )
    # A real public key passes the key check and goes on to the lock (absent here: exit 2 about pins.yaml).
    run = measured(cli, "verify", "--provenance", "img:1", "--key", str(public))
    assert run.code == 2 and "pins.yaml" in run.stderr and "key" not in run.stderr, run.output


def _force_push(upstream) -> str:
    """Upstream rewrites its history: main's only commit amended (a new root commit, same files) and force-pushed."""
    message = "docs: add release runs to front page readme for 0.5 (#1879), rewritten"
    git("commit", "-q", "--amend", "-m", message, cwd=upstream.work, date="2026-02-06T10:00:00+00:00")
    upstream.daemon.publish(upstream.work, "RL.git")
    return git("rev-parse", "HEAD", cwd=upstream.work).strip()


def test_bump_refuses_unrelated_history_unless_told(project, remote):
    root, cli = use_remote(project, remote)
    before = {p: p.read_bytes() for p in (root / "pins.yaml", root / "pins.lock")}
    rewritten = _force_push(remote)
    run = cli("bump", "--nemo-rl", "main")
    assert run.code == 4 and "unrelated to it" in run.stderr and "--allow-unrelated" in run.stderr, run.output
    assert "Traceback" not in run.output
    assert {p: p.read_bytes() for p in before} == before, "nothing was written"
    moved = cli("bump", "--nemo-rl", "main", "--allow-unrelated")
    assert moved.code == 0, moved.output
    assert "**nemo\\_rl moved to an unrelated commit**" in moved.stdout or "moved to an unrelated" in moved.stdout
    assert json.loads((root / "pins.lock").read_text())["nemo_rl"]["commit"] == rewritten


def test_bump_refuses_an_older_commit_and_says_it_is_older(project, remote):
    root, cli = use_remote(project, remote)
    git("tag", "v0.5.0", remote.commit, cwd=remote.work)
    newer = remote.new_commit("README.md", "more docs\n", "docs: more", date="2026-03-01T10:00:00+00:00")
    assert cli("bump", "--nemo-rl", "main").code == 0
    assert json.loads((root / "pins.lock").read_text())["nemo_rl"]["commit"] == newer
    run = cli("bump", "--nemo-rl", "v0.5.0")
    assert run.code == 4 and "older than it" in run.stderr and "Traceback" not in run.output, run.output
    back = cli("bump", "--nemo-rl", "v0.5.0", "--allow-unrelated", "--dry-run")
    assert back.code == 0, back.output
    assert "moved back" in back.stdout and "the new commit is older than the old one" in back.stdout


def test_a_too_large_upstream_dockerfile_is_one_line(tmp_path):
    from buildkit.stages.render import upstream_dockerfile

    repo = tmp_path / "rl"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "docker").mkdir()
    (repo / "docker" / "Dockerfile").write_text("# padding\n" * 200_000)  # 2 MB, over the 1 MiB limit
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "big", cwd=repo)
    commit = git("rev-parse", "HEAD", cwd=repo).strip()

    class Prepared:
        tree = str(repo)
        patches: list = []

    with pytest.raises(UpstreamMalformed) as info:
        upstream_dockerfile(Prepared(), commit)
    assert "\n" not in info.value.message and "is 2000000 bytes" in info.value.message
