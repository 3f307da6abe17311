"""Every grammar matches the whole value: a trailing newline or carriage return is refused, never rendered.

Python's `$` also matches before a final newline, so `re.match(r"^release$", "release\\n")` succeeds; the grammars
use full matches instead. The JSON Schema keeps `^...$`, which in ECMA-262 means the whole string.
"""

from __future__ import annotations

import json
import re

import pytest
from pydantic import TypeAdapter, ValidationError

from buildkit.models import grammar
from tests.support.paths import REPO_ROOT

REFERENCE = (REPO_ROOT / "pins.yaml").read_text()
SHA = "4a5299c93ff97c26def537b92562df5ada530fea"

# (grammar, a value it accepts): every grammar in buildkit/models/grammar.py.
GRAMMARS = [
    ("full sha", grammar.FullSha, SHA),
    ("sha prefix", grammar.GitRef, "946862e7"),
    ("git ref name", grammar.GitRef, "release/0.5"),
    ("digest", grammar.Digest, "sha256:" + "0" * 64),
    ("image ref", grammar.ImageRef, "nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04"),
    ("image ref by digest", grammar.ImageRef, "ghcr.io/a/b@sha256:" + "0" * 64),
    ("image tag", grammar.ImageTag, "nemo-rl:v0.5.0-spec-decode"),
    ("cache repository", grammar.CacheRepository, "127.0.0.1:5000/nemo-rl/cache"),
    ("stage", grammar.StageName, "release"),
    ("platform", grammar.Platform, "linux/amd64"),
    ("cuda arch list", grammar.CudaArchList, "9.0 10.0+PTX"),
    ("extra", grammar.ExtraName, "sglang"),
    ("variant", grammar.Variant, "cu129"),
    ("https url", grammar.HttpsUrl, "https://wheels.vllm.ai"),
    ("loopback http url", grammar.HttpsUrl, "http://127.0.0.1:8080/x"),
    ("git url", grammar.GitUrl, "https://github.com/vllm-project/vllm.git"),
    ("file git url", grammar.GitUrl, "file:///srv/mirror/RL.git"),
    ("repo path", grammar.RepoPath, "patches/x.patch"),
    ("one line of text", grammar.OneLine, "sgl-kernel cannot build"),
]


@pytest.mark.parametrize(("name", "kind", "good"), GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_grammar_accepts_the_plain_value(name, kind, good):
    assert TypeAdapter(kind).validate_python(good) == good


@pytest.mark.parametrize("suffix", ["\n", "\r", "\r\n"], ids=["LF", "CR", "CRLF"])
@pytest.mark.parametrize(("name", "kind", "good"), GRAMMARS, ids=[g[0] for g in GRAMMARS])
def test_grammar_refuses_a_trailing_line_break(name, kind, good, suffix):
    with pytest.raises(ValidationError):
        TypeAdapter(kind).validate_python(good + suffix)


@pytest.mark.parametrize(
    "check",
    [grammar.full_sha, grammar.git_ref, grammar.digest, grammar.image_ref, grammar.https_url, grammar.git_url],
)
def test_grammar_functions_refuse_a_trailing_newline(check):
    good = {
        grammar.full_sha: SHA,
        grammar.git_ref: "main",
        grammar.digest: "sha256:" + "0" * 64,
        grammar.image_ref: "ubuntu:24.04",
        grammar.https_url: "https://example.com",
        grammar.git_url: "https://example.com/x.git",
    }[check]
    assert check(good) == good
    with pytest.raises(ValueError):
        check(good + "\n")


def test_one_line_text_refuses_a_trailing_newline():
    with pytest.raises(ValueError, match="one line of text"):
        grammar.one_line_text("fine\n")


@pytest.mark.parametrize(
    "good",
    [
        "127.0.0.1:5000/nemo-rl/cache",
        "ghcr.io/org/nemo-rl-cache",
        "localhost/c",
        "localhost:5000/c",
        "[::1]:5000/c",
        "registry:5000/c",
        "docker.io/org/cache",
    ],
)
def test_a_cache_repository_with_its_registry_host(good):
    assert grammar.cache_repository(good) == good


@pytest.mark.parametrize("bad", ["nemo-rl/cache", "nemo-rl/team/cache", "cache", "local/cache", "localhostx/c"])
def test_a_cache_repository_without_a_registry_host_is_refused_as_docker_hubs(bad):
    """buildx reads `nemo-rl/cache` as docker.io/nemo-rl/cache: another's Docker Hub namespace, poisoning the cache."""
    with pytest.raises(ValueError, match=r"starts with its registry host .* Docker Hub"):
        grammar.cache_repository(bad)


def test_cli_refuses_a_cache_ref_without_a_registry_host(cli, tmp_path):
    write_pins(tmp_path, "  target: release\n", "  target: release\n  cache:\n    ref: nemo-rl/cache\n")
    result = cli("resolve", "--offline")
    assert result.code == 2, result.output
    assert "build.cache.ref: " in result.stderr and "registry host" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "bad", ["a\udc80b", "\ud800", "csi \x9b2J", "nel \x85"], ids=["surrogate", "high", "csi", "nel"]
)
def test_one_line_text_refuses_lone_surrogates_and_c1_controls(bad):
    with pytest.raises(ValueError, match="one line of text"):
        grammar.one_line_text(bad)


def test_cli_refuses_a_known_issue_title_with_a_lone_surrogate(cli, tmp_path):
    """YAML's "\\udc80" is a lone surrogate: it passed, and `attest` crashed encoding it (exit 70)."""
    write_pins(tmp_path, "  - title: sglang extra is disabled", '  - title: "sglang \\udc80 disabled"')
    result = cli("resolve", "--offline")
    assert result.code == 2, result.output
    assert "known_issues.0.title: expected one line of text" in result.stderr and "Traceback" not in result.output


def test_a_rejected_value_is_quoted_short():
    with pytest.raises(ValueError) as info:
        grammar.image_ref("x" * 100_000 + "\n")
    assert len(str(info.value)) < 400


def write_pins(root, old: str, new: str) -> None:
    assert old in REFERENCE
    (root / "pins.yaml").write_text(REFERENCE.replace(old, new))


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("target: release", 'target: "release\\n"', "build.target"),
        ("platform: linux/amd64", 'platform: "linux/amd64\\n"', "build.platform"),
        ("platform: linux/amd64", 'platform: "linux/amd64\\r"', "build.platform"),
    ],
)
def test_cli_refuses_trailing_newline_in_pins(cli, tmp_path, old, new, key):
    write_pins(tmp_path, old, new)
    result = cli("resolve", "--offline")
    assert result.code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert f"{key}: expected" in result.stderr


def test_cli_refuses_trailing_newline_in_the_lock(project, upstreams):
    root, cli = project
    assert cli("resolve").code == 0
    lock = json.loads((root / "pins.lock").read_text())
    lock["vllm"]["commit"] += "\n"
    (root / "pins.lock").write_text(json.dumps(lock))
    result = cli("resolve", "--offline")
    assert result.code == 2, result.output
    assert "vllm.commit: expected a full commit SHA" in result.stderr


def test_schema_patterns_stay_anchored_for_editors(cli):
    schema = cli("schema").stdout
    patterns = re.findall(r'"pattern": "((?:[^"\\]|\\.)*)"', schema)
    assert len(patterns) >= 10
    for pattern in patterns:
        pattern = json.loads(f'"{pattern}"')
        assert pattern.startswith("^") and pattern.endswith("$"), pattern
        assert "(?P<" not in pattern
        re.compile(pattern)
