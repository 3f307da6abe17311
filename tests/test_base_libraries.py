"""The base image's glibc and libstdc++, read from its layers before the build (issue 23, point 2).

The scanner's rules (whiteouts, opaque directories, symlinks, early stop, hostile layers) are held on small forged
layers; the versions on real ones: Ubuntu's own libc6, libstdc++6 and libgcc packages (tests/realdebs.py), stacked
as an Ubuntu base image holds them, served by the loopback registry, read through resolve's code.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from contextlib import nullcontext

import pytest

from buildkit.errors import UpstreamMalformed, UpstreamMismatch
from buildkit.gpu.check import wheel_check
from buildkit.image.layerfiles import LayerBlob, find
from buildkit.models.pins import Build
from buildkit.stages.resolve import baselibs
from buildkit.world.http import Http
from buildkit.world.registry import Registry
from tests.fake_upstreams import BASE_REPO, FakeRegistry
from tests.realdebs import GZIP_LAYER, file, symlink, ubuntu_layers
from tests.realwheels import VLLM_0_14_0, real_wheel

CAPTURE = re.compile(r"lib[a-z+_]*\.so\.[0-9.]+")
WANTED = {"libc.so.6": ["usr/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6", "lib64/libc.so.6"]}


def entry(name: str, kind: str = "dir") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = {"dir": tarfile.DIRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
    return info, None


def hardlink(name: str, target: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.LNKTYPE, target
    return info, None


def blob(entries, opened: list[int] | None = None, index: int = 0, body: bytes | None = None) -> LayerBlob:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in entries:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    data = gzip.compress(out.getvalue(), mtime=0) if body is None else body
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def open_() -> nullcontext:
        if opened is not None:
            opened.append(index)
        return nullcontext([data[i : i + 7] for i in range(0, len(data), 7)])  # odd chunks, as a network gives

    return LayerBlob(digest, len(data), GZIP_LAYER, open_)


def scan(*layers, wanted=WANTED, max_file: int = 1 << 20):
    """The scan of `layers` (bottom first); each value is the file's bytes."""
    return find(list(layers), wanted, CAPTURE, lambda name, data: data, "base image", max_file)


def test_the_topmost_layer_that_writes_a_path_decides_and_lower_layers_are_not_read():
    opened: list[int] = []
    bottom = blob([file("usr/lib/x86_64-linux-gnu/libc.so.6", b"old")], opened, 0)
    top = blob([file("usr/lib/x86_64-linux-gnu/libc.so.6", b"new")], opened, 1)
    found = scan(bottom, top)
    assert found.found["libc.so.6"] == ("usr/lib/x86_64-linux-gnu/libc.so.6", 1, b"new")
    assert opened == [1] and (found.layers_read, found.layers) == (1, 2)


def test_merged_usr_symlinks_and_library_symlinks_are_followed_across_layers():
    bottom = blob([symlink("lib", "usr/lib"), file("usr/lib/x86_64-linux-gnu/libc.so.6.0", b"libc")])
    middle = blob([symlink("usr/lib/x86_64-linux-gnu/libc.so.6", "../../../lib/x86_64-linux-gnu/libc.so.6.0")])
    top = blob([entry("etc")])
    found = scan(bottom, middle, top, wanted={"libc.so.6": ["lib/x86_64-linux-gnu/libc.so.6"]})
    assert found.found["libc.so.6"] == ("usr/lib/x86_64-linux-gnu/libc.so.6.0", 0, b"libc")


def test_a_whiteout_or_an_opaque_directory_hides_what_lies_below():
    bottom = blob([file("usr/lib/x86_64-linux-gnu/libc.so.6", b"hidden"), file("lib64/libc.so.6", b"lib64")])
    whiteout = blob([file("usr/lib/x86_64-linux-gnu/.wh.libc.so.6", b"")])
    assert scan(bottom, whiteout).found["libc.so.6"] == ("lib64/libc.so.6", 0, b"lib64")  # the next candidate
    opaque = blob([file("usr/lib/x86_64-linux-gnu/.wh..wh..opq", b""), file("usr/lib/x86_64-linux-gnu/x", b"")])
    assert scan(bottom, opaque).found["libc.so.6"] == ("lib64/libc.so.6", 0, b"lib64")
    dir_whiteout = blob([file("usr/lib/.wh.x86_64-linux-gnu", b""), file("lib64/.wh.libc.so.6", b"")])
    assert scan(bottom, dir_whiteout).found["libc.so.6"] is None


def test_a_symlink_over_a_lower_directory_hides_its_files():
    bottom = blob([file("usr/lib/x86_64-linux-gnu/libc.so.6", b"below")])
    top = blob([symlink("usr/lib/x86_64-linux-gnu", "/opt/libs"), file("opt/libs/libc.so.6", b"above")])
    assert scan(bottom, top).found["libc.so.6"] == ("opt/libs/libc.so.6", 1, b"above")


def test_a_lower_layer_is_read_while_an_earlier_candidate_is_undecided():
    opened: list[int] = []
    bottom = blob([file("usr/lib/x86_64-linux-gnu/libc.so.6", b"first candidate")], opened, 0)
    top = blob([file("lib64/libc.so.6", b"third candidate")], opened, 1)
    assert scan(bottom, top).found["libc.so.6"] == ("usr/lib/x86_64-linux-gnu/libc.so.6", 0, b"first candidate")
    assert opened == [1, 0]


def test_hardlinks_loops_and_dotdot_above_the_root():
    linked = blob([file("opt/libc.so.6", b"linked"), hardlink("usr/lib/x86_64-linux-gnu/libc.so.6", "opt/libc.so.6")])
    assert scan(linked).found["libc.so.6"] == ("usr/lib/x86_64-linux-gnu/libc.so.6", 0, b"linked")
    loop = blob([symlink("usr/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6"), symlink("lib64", "lib64")])
    assert scan(loop).found["libc.so.6"] is None  # ELOOP: the loader finds nothing there either
    above = blob([symlink("lib64/libc.so.6", "../../../../../opt/libc.so.6"), file("opt/libc.so.6", b"clamped")])
    assert scan(above).found["libc.so.6"] == ("opt/libc.so.6", 0, b"clamped")
    fifo = blob([entry("usr/lib/x86_64-linux-gnu/libc.so.6", "fifo"), file("lib64/libc.so.6", b"x")])
    assert scan(fifo).found["libc.so.6"] == ("lib64/libc.so.6", 0, b"x")  # no library there: the next candidate


def test_hostile_layers_are_one_clear_error():
    good = blob([file("lib64/libc.so.6", b"x")])
    with pytest.raises(UpstreamMalformed, match=r"base image: layer 1 of 1 sha256:[0-9a-f]{64}: content is sha256:"):
        scan(good._replace(digest="sha256:" + "0" * 64))
    with pytest.raises(UpstreamMalformed, match="larger than the 10 bytes its descriptor says"):
        scan(good._replace(size=10))
    truncated = blob([], body=gzip.compress(b"\0" * 4096)[:20])
    with pytest.raises(UpstreamMalformed, match="is not a readable layer|bytes, but its descriptor says"):
        scan(truncated)
    with pytest.raises(UpstreamMalformed, match="media type 'application/vnd.in-toto"):
        scan(good._replace(media_type="application/vnd.in-toto+json"))
    huge = blob([file("lib64/libc.so.6", b"x" * 2048)])
    with pytest.raises(UpstreamMalformed, match="libc.so.6 resolves to lib64/libc.so.6, 2,048 bytes, more than"):
        scan(huge, max_file=1024)


# Real layers: Ubuntu's packages. The versions expected are the ones the projects publish: glibc 2.39 defines the
# version node GLIBC_2.39 (glibc's NEWS: every release adds its own); GCC 14's libstdc++ GLIBCXX_3.4.33 and
# CXXABI_1.3.15, its libgcc_s GCC_14.0.0 (https://gcc.gnu.org/onlinedocs/libstdc++/manual/abi.html, "GCC 14.1.0:
# GLIBCXX_3.4.33, CXXABI_1.3.15"); GCC 8's GLIBCXX_3.4.25 and CXXABI_1.3.11, and its libgcc_s GCC_7.0.0 (GCC 8 added
# no node to libgcc/libgcc-std.ver.in); glibc 2.27's GLIBC_2.27.
def _registry_with(tag: str, release: str) -> tuple[FakeRegistry, str]:
    registry = FakeRegistry().start()
    registry.add_image(BASE_REPO, tag, platforms=("linux/amd64",), layers=ubuntu_layers(release))
    return registry, f"{registry.netloc}/{BASE_REPO}:{tag}"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("release", "expected", "paths"),
    [
        ("noble", {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)},
         {"libc.so.6": "usr/lib/x86_64-linux-gnu/libc.so.6",
          "libstdc++.so.6": "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
          "libgcc_s.so.1": "usr/lib/x86_64-linux-gnu/libgcc_s.so.1"}),
        ("bionic", {"GLIBC": (2, 27), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)},
         {"libc.so.6": "lib/x86_64-linux-gnu/libc-2.27.so",
          "libstdc++.so.6": "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.25",
          "libgcc_s.so.1": "lib/x86_64-linux-gnu/libgcc_s.so.1"}),
    ],
)  # fmt: skip
def test_the_base_images_real_glibc_and_libstdcxx_are_read_from_its_layers_and_cached(
    release, expected, paths, tmp_path
):
    registry, ref = _registry_with(release, release)
    try:
        client = Registry(Http())
        fact = client.resolve(ref, "linux/amd64")
        found = baselibs.read(client, fact, tmp_path)
        assert {name: lib.path for name, lib in found.libraries.items() if lib} == paths
        assert {name: lib.layer for name, lib in found.libraries.items() if lib} == dict.fromkeys(paths, 0)
        assert (found.layers_read, found.layers) == (3, 3)  # the libraries are in the bottom layer
        system = baselibs.system(found)
        assert not isinstance(system, str) and system.versions == expected
        # Cached by the manifest's digest: read again without a single blob request.
        registry.log.clear()
        assert baselibs.read(client, fact, tmp_path) == found
        assert [p for _m, p, _h in registry.log if "/blobs/" in p] == []
        assert "3 of 3 layers read from the top" in baselibs.describe(found)
    finally:
        registry.stop()


@pytest.mark.e2e
def test_vllm_0_14_0_needs_a_newer_glibc_than_ubuntu_18_04_has_and_the_check_says_which_symbols(tmp_path):
    """vLLM 0.14.0's wheel is manylinux_2_31: its _moe_C asks for log2@GLIBC_2.29 (libm's), which 18.04's glibc 2.27
    does not define. On 24.04's (2.39) every versioned symbol resolves."""
    wheel = real_wheel(VLLM_0_14_0)
    build = Build.model_validate({"cuda_arch_list": "9.0", "tag": "nemo-rl:test"})
    for release in ("noble", "bionic"):
        registry, ref = _registry_with(release, release)
        try:
            client = Registry(Http())
            system = baselibs.system(baselibs.read(client, client.resolve(ref, "linux/amd64"), tmp_path))
        finally:
            registry.stop()
        assert not isinstance(system, str)
        if release == "noble":
            gpu, notes = wheel_check(wheel, VLLM_0_14_0.filename, build, system=system)
            assert gpu.abi is not None and gpu.abi.unresolved == [] and gpu.abi.checked > 0 and notes == []
            continue
        with pytest.raises(UpstreamMismatch) as raised:
            wheel_check(wheel, VLLM_0_14_0.filename, build, system=system)
        message = str(raised.value)
        assert message == (
            f"wheel {VLLM_0_14_0.filename}: 1 undefined symbol(s) would not resolve against glibc/libstdc++/libgcc_s "
            "of the base image (newest: CXXABI_1.3.11, GCC_7.0.0, GLIBC_2.27, GLIBCXX_3.4.25): log2@GLIBC_2.29 "
            "(should be in libm.so.6; needed by _moe_C.abi3.so)"
        )


@pytest.mark.e2e
def test_resolve_reads_the_base_layers_once_and_not_at_all_with_no_wheel_download(project, upstreams):
    from tests.projects import use_base

    root, cli = project
    use_base(root, upstreams, "noble", cuda_version="12.9.0.043", layers=ubuntu_layers("noble"))
    first = cli("resolve", "--json")
    assert first.code == 0, first.output[-3000:]
    abi = json.loads(first.stdout)["gpu"]["abi"]
    assert abi["against"][-1] == (
        "glibc/libstdc++/libgcc_s of the base image (newest: CXXABI_1.3.15, GCC_14.0.0, GLIBC_2.39, GLIBCXX_3.4.33)"
    ) and abi["unresolved"] == []
    assert "base image: libc.so.6 from layer 1 (usr/lib/x86_64-linux-gnu/libc.so.6)" in first.stderr
    blobs = [p for m, p, _h in upstreams.registry.log if "/blobs/" in p]
    assert len(blobs) == 1 + 3  # the config, then the layers from the top
    upstreams.registry.log.clear()
    (root / "pins.lock").unlink()
    again = cli("resolve", "--json")
    assert again.code == 0 and json.loads(again.stdout)["gpu"]["abi"] == abi
    assert [p for m, p, _h in upstreams.registry.log if "/blobs/" in p] == [blobs[0]]  # the config only: cached
    for cached in (root / "cache" / "gpu-abi").glob("base-*"):
        cached.unlink()
    (root / "pins.lock").unlink()
    upstreams.registry.log.clear()
    offline = cli("resolve", "--no-wheel-download", "--json")
    assert offline.code == 0, offline.output[-3000:]
    assert "not checked: the base image's libraries are not in the cache (--no-wheel-download)" in offline.stderr
    assert [p for m, p, _h in upstreams.registry.log if "/blobs/" in p] == [blobs[0]]
