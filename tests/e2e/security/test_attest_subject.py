"""`buildkit attest` signs only what the lock built (issue 20). A build record is a file anyone can edit: with its
`image.tag`/`image.digest` pointed at another repository's image, attest used to sign a valid statement for that
image, which `cosign verify-attestation` (and an admission policy using the statement alone) then accepted. Now the
record's values are held to the lock before they reach a statement, the subject's repository is the lock's
build.tag repository (or one named with --repository, which the statement shows), and before anything is signed
the registry must serve that digest with a config labelled with this lock's sha256."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.measured import measured
from tests.support.projects import golden_project
from tests.support.signing import PASSWORD, key_pair

RECORD = Path("build") / "smoke-record.json"


def _attest(cli, project: Path, *args: str, env: dict[str, str] | None = None):
    return measured(
        cli, "attest", "--pins", str(project / "pins.yaml"), "--record", str(project / RECORD), *args, env=env
    )


def _edit(project: Path, **image_changes: object) -> dict:
    record = json.loads((project / RECORD).read_text())
    record["image"].update(image_changes)
    (project / RECORD).write_text(json.dumps(record, indent=2))
    return record


def _set_argv(project: Path, old: str, new: str) -> None:
    record = json.loads((project / RECORD).read_text())
    record["argv"] = [new if word == old else word for word in record["argv"]]
    (project / RECORD).write_text(json.dumps(record, indent=2))


EDITS = {
    "another repository": (dict(tag="registry.example.com/someone/else:1-smoke"), "image.tag"),
    "an option in the tag": (dict(tag="nemo-rl:v0.5.0-spec-decode-smoke --upload"), "image.tag"),
    "a digest that is no digest": (dict(digest="sha256:zz"), "image.digest"),
}


@pytest.mark.parametrize("name", sorted(EDITS))
def test_an_edited_image_in_the_record_is_never_attested(cli, tmp_path, name):
    project = golden_project(tmp_path)
    changes, needle = EDITS[name]
    _edit(project, **changes)
    _attest(cli, project).assert_refused(2, needle)
    assert not (project / "build" / "smoke" / "provenance.intoto.json").exists()


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("smoke", "release", "--target"),
        ("NEMO_RL_COMMIT=64c0f3c7f2979df77ce84ae558f4a05bfec2e77c", "NEMO_RL_COMMIT=" + "0" * 40, "build args"),
        ("BUILD_CUSTOM_VLLM=1", "BUILD_CUSTOM_VLLM=1 --upload", "build args"),
    ],
)
def test_record_values_that_reach_the_statement_are_the_locks(cli, tmp_path, old, new, needle):
    project = golden_project(tmp_path)
    _set_argv(project, old, new)
    _attest(cli, project).assert_refused(2, needle)


def test_a_record_text_field_with_a_line_break(cli, tmp_path):
    project = golden_project(tmp_path)
    record = json.loads((project / RECORD).read_text())
    (project / RECORD).write_text(json.dumps({**record, "builder": "buildkit-engine\nsubject: evil"}))
    _attest(cli, project).assert_refused(2, "builder")
    (project / RECORD).write_text(json.dumps({**record, "log": "build/logs/x.log\n--upload"}))
    _attest(cli, project).assert_refused(2, "is not a path of one line")


def test_a_repository_named_on_the_command_line_is_shown(cli, tmp_path):
    project = golden_project(tmp_path)
    named = "registry.example.com/mirror/nemo-rl"
    result = _attest(cli, project, "--repository", named, "--json")
    assert result.code == 0, result.output
    statement = json.loads(result.stdout)
    assert statement["subject"][0]["name"] == named
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["subjectRepository"] == named
    default = json.loads(_attest(cli, project, "--json").stdout)
    assert default["subject"][0]["name"] == "nemo-rl"
    assert "subjectRepository" not in default["predicate"]["buildDefinition"]["externalParameters"]
    _attest(cli, project, "--repository", "Not A Name:1").assert_refused(2, "--repository")


def _pushed(project: Path, digest: str) -> None:
    """The record as a pushed build of the image `digest` (what `buildkit build --push` records)."""
    _set_argv(project, "type=docker,rewrite-timestamp=true", "type=image,push=true,rewrite-timestamp=true")
    _edit(project, digest=digest)


def _labelled_image(registry, repo: str, labels: dict[str, str]) -> str:
    """A one-platform image as BuildKit pushes it: an OCI manifest whose config carries the build's labels."""
    image = registry.put_image(
        {"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/usr/bin"], "Labels": labels}}
    )
    registry.tags[(repo, "1")] = image["digest"]
    return image["digest"]


def _config_of(registry, digest: str) -> str:
    return json.loads(registry.blobs[digest][1])["config"]["digest"]


def test_a_copied_lock_label_is_not_this_build(tmp_path, upstreams):
    """Issue 29: the label is text anyone who can push to the repository can copy onto another image. The image
    signed must be the one the build recorded: the config the registry serves for the digest is the record's
    config digest (buildx's `containerimage.config.digest`), which covers the label, the layers and all the rest.
    In this process, without cosign: the check runs before anything is signed."""
    from buildkit.errors import InputError
    from buildkit.models.paths import Paths
    from buildkit.stages.attest import built_from_this_lock, slsa

    project = golden_project(tmp_path)
    registry = upstreams.registry
    lock_sha = json.loads((project / RECORD).read_text())["lock_sha256"]
    ours = _labelled_image(registry, "buildkit/ours", {"buildkit.lock.sha256": lock_sha, "build": "ours"})
    copied = _labelled_image(registry, "buildkit/ours", {"buildkit.lock.sha256": lock_sha, "build": "theirs"})

    def check(digest: str) -> None:
        sources = slsa.gather(Paths.of(project / "pins.yaml"), project / RECORD)
        built_from_this_lock(f"{registry.netloc}/buildkit/ours@{digest}", sources)

    _pushed(project, ours)
    _edit(project, config_digest=_config_of(registry, ours))
    check(ours)  # the build's own image: passes
    _edit(project, digest=copied)  # the record pointed at another image that carries the same label
    with pytest.raises(InputError) as refused:
        check(copied)
    message = refused.value.message
    assert "is not a build of this lock (its config is " in message, message
    assert f"the build recorded {_config_of(registry, ours)!r}" in message and "not signed" in message
    _edit(project, config_digest=None)  # a record that names no config: nothing to hold the image to
    with pytest.raises(InputError, match="the record names no image config digest"):
        check(copied)


def test_signing_needs_the_registry_to_serve_this_locks_build(cli, tmp_path, upstreams, cosign):
    project = golden_project(tmp_path)
    key, _ = key_pair(cosign, tmp_path / "keys")
    env = {"COSIGN_PASSWORD": PASSWORD, "BUILDKIT_COSIGN": cosign, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    registry = upstreams.registry
    envelope = project / "build" / "smoke" / "provenance.dsse.json"
    lock_sha = json.loads((project / RECORD).read_text())["lock_sha256"]

    # Someone else's image (the base image: no buildkit labels) named by its digest: refused before signing.
    other = registry.platform_digest("nvidia/cuda-dl-base", "25.05-cuda12.9-devel-ubuntu24.04", "linux/amd64")
    _pushed(project, other)
    run = _attest(cli, project, "--key", str(key), "--repository", f"{registry.netloc}/nvidia/cuda-dl-base", env=env)
    run.assert_refused(2, "is not a build of this lock", "has no buildkit.lock.sha256 label")
    assert not envelope.exists(), "nothing was signed"

    # An image labelled by another lock: refused too.
    forged = _labelled_image(registry, "buildkit/other", {"buildkit.lock.sha256": "f" * 64})
    _edit(project, digest=forged)
    run = _attest(cli, project, "--key", str(key), "--repository", f"{registry.netloc}/buildkit/other", env=env)
    run.assert_refused(2, "is not a build of this lock", "f" * 12)
    assert not envelope.exists()

    # This lock's build: the check passes and cosign signs (attaching then needs a registry that takes pushes,
    # which this stand-in is not: that failure is cosign's, after signing).
    ours = _labelled_image(registry, "buildkit/ours", {"buildkit.lock.sha256": lock_sha})
    _edit(project, digest=ours, config_digest=_config_of(registry, ours))
    run = _attest(cli, project, "--key", str(key), "--repository", f"{registry.netloc}/buildkit/ours", env=env)
    assert "not a build of this lock" not in run.stderr, run.output
    assert envelope.exists(), run.output


def test_a_missing_key_is_refused_before_anything_else(cli, tmp_path):
    project = golden_project(tmp_path)
    (project / RECORD).unlink()  # nothing else would work either: the key is looked at first
    _attest(cli, project, "--key", str(tmp_path / "nope.key")).assert_refused(2, "no key file")
