"""`buildkit resolve` end to end: the real CLI against loopback servers that answer like GitHub, the wheel index
and a token-auth registry."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

from tests.support.fake_upstreams import (
    BASE_REPO,
    BASE_TAG,
    NEMO_RL_SHA,
    TEST_WHEEL_SIZE,
    VLLM_PR,
    VLLM_SHA,
    WHEEL_CU130_X86,
    WHEEL_X86,
)

WHEEL_URL_PATH = f"/{VLLM_SHA}/vllm-0.14.0rc2.dev156%2Bg4a5299c93-cp38-abi3-manylinux_2_31_x86_64.whl"


def lock_of(result) -> dict:
    assert result.code == 0, result.output
    return json.loads(result.stdout)


def test_resolve_json_carries_every_fact(project, upstreams):
    root, cli = project
    result = cli("resolve", "--json")
    lock = lock_of(result)  # stdout is the lock and nothing else
    assert lock["nemo_rl"]["commit"] == NEMO_RL_SHA
    assert lock["nemo_rl"]["subject"] == "docs: add release runs to front page readme for 0.5 (#1879)"
    assert lock["vllm"]["commit"] == VLLM_SHA
    assert lock["vllm_pr"]["merge_commit"] == VLLM_SHA and lock["vllm_pr"]["number"] == VLLM_PR
    assert lock["wheel"]["url"] == upstreams.wheels.url + WHEEL_URL_PATH
    assert lock["wheel"]["filename"] == WHEEL_X86  # not the aarch64 wheel listed first
    assert lock["wheel"]["size"] == TEST_WHEEL_SIZE and lock["wheel"]["verified_by"] == "GET"
    assert lock["wheel"]["etag"] and lock["wheel"]["last_modified"]
    served = upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"]
    assert lock["wheel"]["sha256"] == hashlib.sha256(served.data()).hexdigest()
    assert lock["wheel"]["content_addressed"] is True and lock["wheel"]["not_content_addressed"] is None
    assert lock["wheel"]["index_sha256"] is None  # metadata.json gives no hash
    assert lock["lock_version"] == 5 and "resolved_at" not in json.dumps(lock)  # facts only
    # A merged PR: its merge commit is on main, and its own wheel is used (nothing differs).
    assert lock["vllm_wheel"]["commit"] == VLLM_SHA and lock["vllm_wheel"]["chosen_by"] == "the source commit"
    assert lock["vllm_wheel"]["merge_base"] == VLLM_SHA
    assert lock["vllm_compare"] == {
        "method": "same commit",
        "source": lock["vllm_compare"]["source"],
        "paths": 0,
        "compiled": [],
        "accepted": None,
    }
    # The sha256 of each compiled file as the wheel holds it: verify holds the image's to them.
    with zipfile.ZipFile(io.BytesIO(served.data())) as wheel:
        members = {n: hashlib.sha256(wheel.read(n)).hexdigest() for n in wheel.namelist() if n.endswith(".so")}
    assert lock["vllm_files"] == members and set(members) == {"vllm/_C.abi3.so", "vllm/_moe_C.abi3.so"}
    # The CUDA facts: the base image's config, the wheel's name and bytes, and the check.
    assert lock["base_image"]["cuda_version"] == "12.9.0.043"  # as NGC writes it, kept exactly
    assert lock["base_image"]["config_digest"].startswith("sha256:")
    assert lock["wheel"]["cuda"] == "12" and "vllm/_C.abi3.so needs libcudart.so.12" in lock["wheel"]["cuda_source"]
    assert lock["cuda"]["outcome"] == "match" and lock["cuda"]["base_image"] == "12.9.0.043"
    index_digest = upstreams.registry.tags[(BASE_REPO, BASE_TAG)]
    assert lock["base_image"]["index_digest"] == index_digest
    assert lock["base_image"]["manifest_digest"] == upstreams.registry.platform_digest(
        BASE_REPO, BASE_TAG, "linux/amd64"
    )
    assert lock["base_image"]["pinned"].endswith(f"/{BASE_REPO}@{index_digest}")
    assert lock["build"]["drop_extras"][0]["name"] == "sglang"
    assert len(lock["known_issues"]) == 3
    assert json.loads((root / "pins.lock").read_text()) == lock
    # The wheel is downloaded once, whole, and that GET is its existence check: no HEAD.
    assert [h.get("Range") for h in upstreams.wheels.wheel_gets()] == [None]
    assert [m for m, p, _ in upstreams.wheels.log if p.endswith(".whl")] == ["GET"]
    # When each fact was read is in the resolve record beside the lock, about this lock.
    record = json.loads((root / "build" / "resolve.json").read_text())
    assert record["lock_sha256"] == hashlib.sha256((root / "pins.lock").read_bytes()).hexdigest()
    assert sorted(record["read_at"]) == [
        "base_image",
        "base_libraries",
        "nemo_rl",
        "uv_lock",
        "vllm",
        "vllm_install",
        "vllm_pr",
        "wheel",
    ]
    # The registry was asked through the anonymous token flow.
    assert any(p.startswith("/token?") for _, p, _ in upstreams.registry.log)


def test_resolve_table_and_rerun_leaves_lock_alone(project):
    root, cli = project
    first = cli("resolve")
    assert first.code == 0, first.output
    for column in ("pin", "resolved to", "from"):
        assert column in first.stdout
    assert NEMO_RL_SHA[:12] in first.stdout and "wrote" in first.stderr
    before = (root / "pins.lock").read_bytes()
    second = cli("resolve")
    assert second.code == 0 and "already up to date" in second.stderr
    assert (root / "pins.lock").read_bytes() == before


def test_pr_alone_fills_in_the_commit(project, upstreams):
    root, cli = project
    text = (root / "pins.yaml").read_text().replace(f'  ref: "{VLLM_SHA}"\n', "")
    (root / "pins.yaml").write_text(text)
    lock = lock_of(cli("resolve", "--json"))
    assert lock["vllm"]["commit"] == VLLM_SHA and lock["vllm"]["ref"] == VLLM_SHA
    assert lock["wheel"]["filename"] == WHEEL_X86


def test_sha_prefix_and_branch_refs(project):
    root, cli = project
    text = (
        (root / "pins.yaml")
        .read_text()
        .replace(f'ref: "{VLLM_SHA}"', 'ref: "4a5299c9"')
        .replace('ref: "946862e7"', "ref: main")
    )
    (root / "pins.yaml").write_text(text)
    lock = lock_of(cli("resolve", "--json"))
    assert lock["vllm"]["commit"] == VLLM_SHA and lock["nemo_rl"]["commit"] == NEMO_RL_SHA


def test_variant_directory(project, upstreams):
    root, cli = project
    upstreams.registry.add_image(BASE_REPO, "cuda13", cuda_version="13.0.2")  # a cu130 wheel needs a CUDA 13 base
    text = (root / "pins.yaml").read_text().replace("variant: default", "variant: cu130")
    base = f"{upstreams.registry.netloc}/{BASE_REPO}:cuda13"
    (root / "pins.yaml").write_text(text.replace(upstreams.base_image, base))
    lock = lock_of(cli("resolve", "--json"))
    assert lock["wheel"]["cuda"] == "13.0" and lock["cuda"]["outcome"] == "match"
    assert lock["wheel"]["filename"] == WHEEL_CU130_X86
    assert lock["wheel"]["listed_in"].endswith(f"/{VLLM_SHA}/cu130/vllm/metadata.json")
    assert lock["wheel"]["url"].endswith("vllm-0.14.0rc2.dev156%2Bg4a5299c93.cu130-cp38-abi3-manylinux_2_31_x86_64.whl")


def test_pep503_fallback_records_sha256(project, upstreams):
    root, cli = project
    upstreams.wheels.without_metadata = True
    lock = lock_of(cli("resolve", "--json"))
    assert lock["wheel"]["listed_in"].endswith("/vllm/index.html")
    assert lock["wheel"]["url"] == upstreams.wheels.url + WHEEL_URL_PATH
    # The page's #sha256= is the index's claim; it agreed with the bytes resolve measured.
    assert lock["wheel"]["index_sha256"] == lock["wheel"]["sha256"] and len(lock["wheel"]["sha256"]) == 64


def test_unencoded_metadata_path_is_encoded_like_the_index(project, upstreams):
    root, cli = project
    upstreams.wheels.encode_metadata_paths = False
    assert lock_of(cli("resolve", "--json"))["wheel"]["url"] == upstreams.wheels.url + WHEEL_URL_PATH


def test_head_refused_falls_back_to_one_byte_range(project, upstreams):
    """HEAD is only asked with --no-wheel-download (the downloading GET is the check otherwise)."""
    root, cli = project
    upstreams.wheels.refuse_head = True
    lock = lock_of(cli("resolve", "--json", "--no-wheel-download"))
    assert lock["wheel"]["verified_by"] == "GET Range: bytes=0-0" and lock["wheel"]["size"] == TEST_WHEEL_SIZE
    gets = [h for m, p, h in upstreams.wheels.log if p.endswith(".whl") and m == "GET"]
    assert [h.get("Range") for h in gets] == ["bytes=0-0"] and not lock["wheel"]["content_addressed"]


def test_wheel_redirect_is_followed(project, upstreams):
    root, cli = project
    upstreams.wheels.redirect_wheels = True
    lock = lock_of(cli("resolve", "--json"))
    assert lock["wheel"]["size"] == TEST_WHEEL_SIZE and lock["wheel"]["content_addressed"]
    assert [m for m, p, _ in upstreams.wheels.log if p.startswith("/blobs/")] == ["GET"]


def test_single_platform_base_image_is_checked_through_its_config(project, upstreams):
    root, cli = project
    digest = upstreams.registry.add_image("stub/base", "amd64-only", platforms=("linux/amd64",))
    image = f"{upstreams.registry.netloc}/stub/base:amd64-only"
    (root / "pins.yaml").write_text((root / "pins.yaml").read_text().replace(upstreams.base_image, image))
    lock = lock_of(cli("resolve", "--json"))
    assert lock["base_image"]["index_digest"] is None and lock["base_image"]["manifest_digest"] == digest
    assert any("/blobs/" in p for _, p, _ in upstreams.registry.log)


def test_github_token_is_sent_only_to_github_and_never_shown(project, upstreams):
    root, cli = project
    token = "ghp_secretTOKENvalue123"
    result = cli("resolve", "--json", env={"GITHUB_TOKEN": token})
    assert result.code == 0, result.output
    github_auth = {h.get("Authorization") for _, _, h in upstreams.github.log}
    assert github_auth == {f"Bearer {token}"}
    for upstream in (upstreams.wheels, upstreams.registry):
        assert not any(token in str(h) for _, _, h in upstream.log)
    assert token not in result.output and token not in (root / "pins.lock").read_text()


def test_resolve_table_fits_80_columns(project):
    """One line per pin on an 80-column terminal: short SHAs and hosts (the lock and --json keep full values)."""
    root, cli = project
    result = cli("resolve", env={"COLUMNS": "80"})
    assert result.code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), result.stdout
    rows = {
        line.split()[0]: line
        for line in lines
        if line.strip() and line.split()[0] in ("nemo_rl", "vllm.pr", "vllm", "wheel", "base_image")
    }
    assert set(rows) == {"nemo_rl", "vllm.pr", "vllm", "wheel", "base_image"}, result.stdout
    assert f"wheel from   {VLLM_SHA[:12]} (source); compiled changes: none" in result.stdout
    assert NEMO_RL_SHA[:12] in rows["nemo_rl"] and "2026-02-05" in rows["nemo_rl"]
    assert "#24322" in rows["vllm.pr"] and "0.14.0rc2.dev156+g4a5299c93" in rows["wheel"]
    assert len(lines) <= 11, "no cell wraps onto a second line (a title, a blank, a header, a rule, 6 pins, a blank)"


def test_table_title_when_check_passes(project):
    root, cli = project
    assert cli("resolve").code == 0
    result = cli("resolve", "--check")
    assert result.code == 0, result.output
    assert "is current and upstream agrees" in result.stderr
