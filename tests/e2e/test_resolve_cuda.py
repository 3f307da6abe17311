"""CUDA consistency at resolve (issue 13, point 4): the base image's CUDA_VERSION (its config's Env) against the
wheel's CUDA (its name, and the libcudart its vllm/_C.abi3.so needs). The real CLI against the loopback registry
and wheel index, which serve real configs and real zips holding a real (minimal) ELF; the ELF reader also on
hostile bytes made here."""

from __future__ import annotations

import hashlib
import io
import json
import struct
from pathlib import Path

import pytest

from buildkit.models.drift import base_image_drift
from buildkit.stages.resolve.elf import ElfError, needed
from tests.support.fake_upstreams import VLLM_SHA, WHEEL_VERSION, WHEEL_X86, minimal_elf
from tests.support.projects import use_base, use_variant

WHEEL_CU129_X86 = f"vllm-{WHEEL_VERSION}.cu129-cp38-abi3-manylinux_2_31_x86_64.whl"


def run(cli, *args):
    result = cli("resolve", "--json", *args)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def lock_of(result) -> dict:
    assert result.code == 0, result.output
    return json.loads(result.stdout)


def served(upstreams):
    return upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"]


def warnings(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


# The check at resolve.


def test_a_match_goes_into_the_lock(project, upstreams):
    root, cli = project
    lock = lock_of(run(cli))
    config = json.loads(upstreams.registry.blobs[lock["base_image"]["config_digest"]][1])
    assert "CUDA_VERSION=12.9.0.043" in config["config"]["Env"]
    assert lock["base_image"]["cuda_version"] == "12.9.0.043"
    # The default variant's name says no CUDA; the bytes say the major.
    assert lock["wheel"]["cuda"] == "12"
    assert lock["wheel"]["cuda_source"] == "vllm/_C.abi3.so needs libcudart.so.12"
    assert lock["cuda"] == {
        "base_image": "12.9.0.043",
        "wheel": "12",
        "outcome": "match",
        "detail": "base image CUDA_VERSION=12.9.0.043 and wheel CUDA 12: both CUDA 12",
    }
    # Name and bytes together: a cu129 variant gives major.minor, confirmed by the bytes.
    upstreams.wheels.add(VLLM_SHA, WHEEL_CU129_X86, variant="cu129")
    use_variant(root, "cu129")
    lock = lock_of(run(cli))
    assert lock["wheel"]["cuda"] == "12.9" and lock["cuda"]["outcome"] == "match"
    assert lock["wheel"]["cuda_source"] == "the pinned variant cu129; vllm/_C.abi3.so needs libcudart.so.12"


def test_a_cu130_wheel_on_a_cuda_12_base_fails_before_the_download(project, upstreams):
    root, cli = project
    use_variant(root, "cu130")
    result = run(cli)
    assert result.code == 4, result.output
    assert "CUDA mismatch" in result.stderr and "CUDA_VERSION=12.9.0.043" in result.stderr
    assert "built for CUDA 13.0 (the pinned variant cu130)" in result.stderr
    assert "hint: pin a `wheel.variant: cuNNN` built for CUDA 12" in result.stderr
    assert not (root / "pins.lock").exists()
    # The download started beside the registry's lookups; the name's refusal came without reading its bytes'
    # CUDA, and stopped it (a finished or partial download stays in the cache, never in a lock).
    assert "needs libcudart" not in result.stderr


def test_a_cu129_wheel_on_a_cuda_13_base_fails(project, upstreams):
    root, cli = project
    upstreams.wheels.add(VLLM_SHA, WHEEL_CU129_X86, variant="cu129")
    use_base(root, upstreams, "cuda13", cuda_version="13.0.2")
    use_variant(root, "cu129")
    result = run(cli)
    assert result.code == 4, result.output
    assert "CUDA_VERSION=13.0.2" in result.stderr and "built for CUDA 12.9" in result.stderr
    assert not (root / "pins.lock").exists()


def test_a_default_wheel_needing_libcudart_13_on_a_cuda_12_base_fails(project, upstreams):
    """The issue's case: the default variant's name says nothing; its bytes need libcudart.so.13."""
    root, cli = project
    (root / "pins.lock").write_text("{}")  # any existing lock is left as it was
    served(upstreams).needed = ("libc.so.6", "libcudart.so.13", "libstdc++.so.6")
    result = run(cli)
    assert result.code == 4, result.output
    assert "CUDA_VERSION=12.9.0.043" in result.stderr
    assert "built for CUDA 13 (vllm/_C.abi3.so needs libcudart.so.13)" in result.stderr
    assert (root / "pins.lock").read_text() == "{}"


def test_bytes_refused_again_from_the_cache_say_so_and_how_to_read_them_afresh(project, upstreams):
    """An earlier resolve refused the wheel's bytes but left them in the cache; `--no-wheel-download` reads them
    there and refuses them again: the message says they came from the cache (its path) and how to clear it."""
    root, cli = project
    served(upstreams).needed = ("libc.so.6", "libcudart.so.13", "libstdc++.so.6")
    first = run(cli)
    assert first.code == 4 and "came from the cache" not in first.stderr, first.output  # downloaded: said as it is
    again = run(cli, "--no-wheel-download")
    assert again.code == 4, again.output
    assert "built for CUDA 13 (vllm/_C.abi3.so needs libcudart.so.13)" in again.stderr
    error = " ".join(again.stderr.split("hint:")[0].split())
    cache = root / "cache" / "wheels"  # BUILDKIT_CACHE_DIR of the test project
    assert "(the wheel's bytes came from the cache: " in error and str(cache) in error
    hint = " ".join(again.stderr.split("hint:", 1)[1].split())
    assert "delete " in hint and "without --no-wheel-download" in hint
    entry = hint.split("delete ", 1)[1].split(" and run", 1)[0]
    assert entry.startswith(str(cache)) and Path(entry).is_dir()
    assert not (root / "pins.lock").exists()


def test_bytes_that_contradict_the_name_are_malformed(project, upstreams):
    root, cli = project
    wheel = upstreams.wheels.add(VLLM_SHA, WHEEL_CU129_X86, variant="cu129", needed=("libcudart.so.13",))
    assert wheel.needed == ("libcudart.so.13",)
    use_variant(root, "cu129")
    result = run(cli)
    assert result.code == 3, result.output
    assert "its name says CUDA 12.9 (the pinned variant cu129), but vllm/_C.abi3.so needs libcudart.so.13" in (
        result.stderr
    )


def test_no_wheel_download_with_an_empty_cache_is_not_checked(project, upstreams):
    root, cli = project
    result = run(cli, "--no-wheel-download")
    lock = lock_of(result)
    why = "the default variant's name does not say its CUDA, and the wheel's bytes were not read (--no-wheel-download)"
    assert lock["wheel"]["cuda"] is None and lock["wheel"]["cuda_source"] == why
    assert lock["cuda"]["outcome"] == "not checked" and lock["cuda"]["base_image"] == "12.9.0.043"
    assert lock["cuda"]["detail"] == f"the wheel's CUDA is unknown: {why}"
    assert (
        f"warning: the CUDA match of the base image and the wheel was not checked: the wheel's CUDA is unknown: {why}"
        in warnings(result)
    )
    # Once the cache has the wheel, --no-wheel-download reads its bytes there.
    assert run(cli).code == 0
    again = lock_of(run(cli, "--no-wheel-download"))
    assert again["cuda"]["outcome"] == "match" and again["wheel"]["cuda"] == "12"


def test_a_base_image_without_cuda_version_is_not_checked(project, upstreams):
    root, cli = project
    use_base(root, upstreams, "plain", cuda_version=None)
    result = run(cli)
    lock = lock_of(result)
    assert lock["base_image"]["cuda_version"] is None and lock["cuda"]["outcome"] == "not checked"
    assert lock["cuda"]["detail"].startswith("the base image's config sets no CUDA_VERSION (config sha256:")
    assert len(warnings(result)) == 1 and "was not checked" in warnings(result)[0]


@pytest.mark.parametrize(
    "env, needle",
    [
        (["CUDA_VERSION=12.9.1\nRUN evil"], "is not a CUDA version like 12.9.1"),
        (["CUDA_VERSION="], "is not a CUDA version"),
        (["CUDA_VERSION=12"], "is not a CUDA version"),
        (["CUDA_VERSION=12.9.0.043.1"], "is not a CUDA version"),  # five parts: no NVIDIA image has them
        (["CUDA_VERSION=12.9.0.043 "], "is not a CUDA version"),
        (["CUDA_VERSION=１２.9"], "is not a CUDA version"),  # fullwidth digits: not ASCII
        (["CUDA_VERSION=v12.9"], "is not a CUDA version"),
        (["CUDA_VERSION=12.9.1", "CUDA_VERSION=13.0.0"], "sets CUDA_VERSION 2 times"),
        ([12], "config.Env.0: Input should be a valid string"),
        ("CUDA_VERSION=12.9.1", "config.Env: Input should be a valid list"),
        (["A=b"] * 5000, "config.Env: List should have at most 4096 items"),
    ],
)
def test_a_malformed_cuda_version_is_exit_3(project, upstreams, env, needle):
    root, cli = project
    use_base(root, upstreams, "bad", env=env)
    result = run(cli)
    assert result.code == 3, result.output
    assert needle in result.stderr and not (root / "pins.lock").exists()


# The registry reads the config of the platform manifest, each checked against its digest.


def test_an_index_platform_manifest_and_config_are_checked_against_their_digests(project, upstreams):
    root, cli = project
    registry = upstreams.registry
    lock = lock_of(run(cli))
    manifest_digest, config_digest = lock["base_image"]["manifest_digest"], lock["base_image"]["config_digest"]
    media_type, body = registry.blobs[config_digest]
    registry.blobs[config_digest] = (media_type, body.replace(b"12.9.0.043", b"13.0.1"))
    result = run(cli)
    assert result.code == 3 and "does not have the digest its manifest names" in result.stderr, result.output
    registry.blobs[config_digest] = (media_type, body)
    media_type, body = registry.blobs[manifest_digest]
    registry.blobs[manifest_digest] = (media_type, body + b" ")
    result = run(cli)
    assert result.code == 3 and "manifest digest header" in result.stderr, result.output


def test_a_single_platform_image_config_is_read_once(project, upstreams):
    root, cli = project
    use_base(root, upstreams, "single", platforms=("linux/amd64",), cuda_version="12.8.0")
    lock = lock_of(run(cli))
    assert lock["base_image"]["index_digest"] is None and lock["base_image"]["cuda_version"] == "12.8.0"
    blob_gets = [p for m, p, _ in upstreams.registry.log if m == "GET" and "/blobs/" in p]
    assert len({p for p in blob_gets}) == 1 and len(blob_gets) <= 2  # one config; a retry only after the 401


# Hostile wheels and ELF bytes: exit 3 naming what is wrong (the library the loader would refuse), never a
# traceback or an unbounded read; a wheel without vllm/_C.abi3.so is "not checked" (the layout may change upstream).


def elf_with(**fields) -> bytearray:
    """The fake's minimal ELF with header or program-header fields overwritten."""
    data = bytearray(minimal_elf(("libcudart.so.12",)))
    places = {
        "class": (4, "B"),
        "phoff": (0x20, "<Q"),
        "phentsize": (0x36, "<H"),
        "phnum": (0x38, "<H"),
        "dyn_offset": (64 + 56 + 8, "<Q"),
        "dyn_filesz": (64 + 56 + 32, "<Q"),
    }
    for name, value in fields.items():
        at, fmt = places[name]
        struct.pack_into(fmt, data, at, value)
    return data


@pytest.mark.parametrize(
    "data, needle",
    [
        (b"", "the ELF header (64 bytes at 0) lies past the end"),
        (b"MZ" + bytes(100), "not an ELF file"),
        (bytes(elf_with(**{"class": 1})), "not a 64-bit little-endian ELF file"),
        (minimal_elf()[:100], "the program headers (112 bytes at 64) lies past the end"),
        (bytes(elf_with(phnum=65535)), "65535 program headers"),
        (bytes(elf_with(phentsize=32)), "program header size 32"),
        (bytes(elf_with(phoff=1 << 62)), "lies past the end"),
        (bytes(elf_with(dyn_offset=1 << 40)), "the dynamic section"),
        (bytes(elf_with(dyn_filesz=1 << 40)), "a dynamic section of 1,099,511,627,776 bytes"),
    ],
)
def test_hostile_elf_bytes_are_refused_with_bounded_reads(data, needle):
    reads: list[int] = []

    class Counting(io.BytesIO):
        def read(self, n=-1):
            assert n is not None and 0 <= n <= 1 << 16, "every read is bounded"
            reads.append(n)
            return super().read(n)

    with pytest.raises(ElfError) as caught:
        needed(Counting(data), len(data))
    assert needle in str(caught.value)
    assert sum(reads) <= 1 << 16


def test_elf_string_table_problems():
    good = minimal_elf(("libcudart.so.12", "libc.so.6"))
    assert needed(io.BytesIO(good), len(good)) == ["libcudart.so.12", "libc.so.6"]
    # DT_STRSZ shorter than the names: a name runs past the table.
    strsz_at = good.index(struct.pack("<qQ", 10, len(b"\0libcudart.so.12\0libc.so.6\0")))
    cut = bytearray(good)
    struct.pack_into("<Q", cut, strsz_at + 8, 5)
    with pytest.raises(ElfError, match="past the string table|not a file name"):
        needed(io.BytesIO(bytes(cut)), len(cut))
    # A string table at an address no PT_LOAD holds.
    moved = bytearray(good)
    struct.pack_into("<Q", moved, good.index(struct.pack("<qQ", 5, 176)) + 8, 1 << 50)
    with pytest.raises(ElfError, match="in no loaded segment"):
        needed(io.BytesIO(bytes(moved)), len(moved))
    # No dynamic section: a static file needs nothing.
    static = bytearray(good)
    struct.pack_into("<I", static, 64 + 56, 4)  # PT_DYNAMIC -> PT_NOTE
    assert needed(io.BytesIO(bytes(static)), len(static)) == []


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"library": b"\x7fELF garbage"}, "vllm/_C.abi3.so is not a library buildkit can read"),
        ({"library": bytes(elf_with(phnum=60000))}, "60000 program headers"),
        ({"archive": False}, "is not a readable wheel (zip)"),
    ],
)
def test_a_hostile_wheel_is_exit_3(project, upstreams, change, needle):
    root, cli = project
    for name, value in change.items():
        setattr(served(upstreams), name, value)
    # No clock: the needle says the reader refused the wheel; a reader that hung on it would end only at the cli
    # fixture's hang guard, and fail.
    result = run(cli)
    assert result.code == 3 and needle in result.stderr, result.output
    assert not (root / "pins.lock").exists()


def test_a_zip_directory_claiming_to_be_huge_is_refused(tmp_path):
    from buildkit.errors import UpstreamMalformed
    from buildkit.stages.resolve.cuda import _needed

    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, 0xFFFFFFF0, 0, 0)
    wheel = tmp_path / "x.whl"
    wheel.write_bytes(b"PK\x03\x04" + bytes(100) + eocd)
    with pytest.raises(UpstreamMalformed, match="its zip directory is 4,294,967,280 bytes"):
        _needed("x.whl", wheel)


def test_a_wheel_without_the_library_is_not_checked(project, upstreams):
    root, cli = project
    served(upstreams).member = None
    # build.gpu_required (default vLLM's _C and _moe_C) stops resolve first (issue 23: a required library that is
    # missing is like one without kernels); without required libraries, the CUDA check says "not checked".
    result = run(cli)
    assert result.code == 4 and "the required library vllm/_C.abi3.so (build.gpu_required) is not in it" in (
        result.stderr
    ), result.output
    assert not (root / "pins.lock").exists()
    pins = (root / "pins.yaml").read_text()
    arch = '  cuda_arch_list: "9.0"'
    (root / "pins.yaml").write_text(pins.replace(arch, f"{arch}\n  gpu_required: []"))
    result = run(cli)
    lock = lock_of(result)
    assert lock["wheel"]["cuda"] is None and lock["cuda"]["outcome"] == "not checked"
    assert "the wheel has no vllm/_C.abi3.so" in lock["wheel"]["cuda_source"]
    served(upstreams).member, served(upstreams).needed = "vllm/_C.abi3.so", ("libc.so.6",)
    served(upstreams).etag = '"cpu-build"'
    lock = lock_of(run(cli))
    assert lock["wheel"]["cuda_source"].startswith("vllm/_C.abi3.so needs no libcudart: not a CUDA build")


# The lock: version 2 migrated and stale, and its claim re-checked.


def test_a_version_2_lock_is_migrated_stale_keeps_its_bytes_and_is_rewritten(project, upstreams, monkeypatch):
    root, cli = project
    v3 = lock_of(run(cli))
    newer = ("cuda", "vllm_wheel", "vllm_compare", "vllm_files", "vllm_python", "torch", "pins_file")  # v3 on
    v2 = {k: v for k, v in v3.items() if k not in newer} | {"lock_version": 2}
    v2["wheel"] = {k: v for k, v in v3["wheel"].items() if k not in ("cuda", "cuda_source")}
    v2["base_image"] = {k: v for k, v in v3["base_image"].items() if k not in ("cuda_version", "config_digest")}
    text = json.dumps(v2, indent=2) + "\n"
    (root / "pins.lock").write_text(text)

    from buildkit.models.lock import V2_STALE, consistency_problems, lock_sha256, read_lock
    from buildkit.models.pins import load_pins

    migrated = read_lock(root / "pins.lock")
    reason = "written by lock version 2, before CUDA versions were read"
    assert migrated.lock_version == 2 and migrated.cuda.outcome == "not checked" and migrated.cuda.detail == reason
    assert migrated.wheel.cuda is None and migrated.wheel.cuda_source == reason
    assert migrated.base_image.cuda_version is None and migrated.base_image.config_digest is None
    assert migrated.to_json() == text and lock_sha256(migrated) == hashlib.sha256(text.encode()).hexdigest()
    for name, value in upstreams.env().items():
        monkeypatch.setenv(name, value)
    assert consistency_problems(load_pins(root / "pins.yaml"), migrated, list(migrated.patches)) == [V2_STALE]

    check = cli("resolve", "--check")
    assert check.code == 1 and V2_STALE in check.stderr, check.output
    rewritten = lock_of(run(cli))
    assert rewritten["lock_version"] == 5 and rewritten["cuda"]["outcome"] == "match"


@pytest.mark.parametrize(
    "edit, needle",
    [
        # Different majors claimed as a match.
        (
            lambda lock: (lock["base_image"].update(cuda_version="13.0.1"), lock["cuda"].update(base_image="13.0.1")),
            "cuda: the base image is CUDA 13.0.1 and the wheel CUDA 12: different majors",
        ),
        # The section and the facts it claims to have compared disagree.
        (lambda lock: lock["wheel"].update(cuda="13"), "cuda: the check compared base image 12.9.0.043 and wheel 12"),
        # "match" with one side unknown.
        (
            lambda lock: (lock["wheel"].update(cuda=None), lock["cuda"].update(wheel=None)),
            "the lock says 'match' without knowing both",
        ),
        # A mismatch relabelled "not checked".
        (
            lambda lock: (
                lock["base_image"].update(cuda_version="13.0.1"),
                lock["cuda"].update(base_image="13.0.1", outcome="not checked"),
            ),
            "different majors",
        ),
    ],
)
def test_an_edited_cuda_claim_is_refused(project, edit, needle):
    root, cli = project
    lock = lock_of(run(cli))
    edit(lock)
    (root / "pins.lock").write_text(json.dumps(lock, indent=2))
    result = cli("resolve", "--offline")
    assert result.code == 1 and needle in result.stderr, result.output
    assert cli("render").code == 1


def test_a_lock_with_a_malformed_cuda_value_is_invalid(project):
    root, cli = project
    lock = lock_of(run(cli))
    for section, field, value in (
        ("base_image", "cuda_version", "12.9.1\n"),
        ("wheel", "cuda", "12.x"),
        ("cuda", "outcome", "mismatch"),
        ("wheel", "cuda_source", "a\nb"),
    ):
        bad = json.loads(json.dumps(lock))
        bad[section][field] = value
        (root / "pins.lock").write_text(json.dumps(bad))
        result = cli("resolve", "--offline")
        assert result.code == 2 and "invalid lock" in result.stderr, result.output


# Drift prefers what resolve measured.


def test_drift_prefers_the_measured_cuda_version():
    upstream = "nvcr.io/nvidia/cuda-dl-base:26.05-cuda13.2-devel-ubuntu24.04"
    pinned = "nvcr.io/nvidia/cuda-dl-base:25.05-cuda12.9-devel-ubuntu24.04"
    assert base_image_drift(upstream, pinned, "12.9.1") == [
        f"upstream builds on CUDA 13.2 (its ARG BASE_IMAGE default '{upstream}') but the pinned base image "
        f"'{pinned}' is CUDA 12.9.1 (its config's CUDA_VERSION)"
    ]
    # The tag says 12.9 but the image is CUDA 13: what the config says wins, so no drift.
    assert base_image_drift(upstream, pinned, "13.0.1") == []
    # A tag that names no CUDA, and a config that says 12: a finding the tag alone could not give.
    assert base_image_drift(upstream, "registry.example/base:latest", "12.8.0")[0].endswith(
        "is CUDA 12.8.0 (its config's CUDA_VERSION)"
    )
    # No measured value (a lock from before version 3, or a config without CUDA_VERSION): the tag.
    assert base_image_drift(upstream, pinned, None)[0].endswith("is CUDA 12.9 (read from its tag)")
