"""The base image's glibc and libstdc++, read from its layers before the build (issue 23, point 2).

The scanner's rules (whiteouts, opaque directories, symlinks, early stop, hostile layers) are held on small forged
layers; the versions on real ones: Ubuntu's own libc6, libstdc++6 and libgcc packages (tests/support/realdebs.py),
stacked as an Ubuntu base image holds them, served by the loopback registry, read through resolve's code.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import threading
from contextlib import nullcontext
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from buildkit.errors import UpstreamMalformed, UpstreamMismatch, UpstreamUnreachable
from buildkit.gpu.check import wheel_check
from buildkit.image.layerfiles import LayerBlob, find
from buildkit.models.lock.facts import ImageFact
from buildkit.models.pins import Build
from buildkit.stages.resolve import baselibs
from buildkit.world.http import Http
from buildkit.world.registry import LayerRef, Registry
from tests.support.fake_upstreams import BASE_REPO, FakeRegistry
from tests.support.realdebs import GZIP_LAYER, file, symlink, ubuntu_layers
from tests.support.realwheels import VLLM_0_14_0, real_wheel

LIBC = "usr/lib/x86_64-linux-gnu/libc.so.6"
LIB64 = "lib64/libc.so.6"


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


def scan(*layers, paths=(LIBC, LIB64), max_file: int = 1 << 20):
    """The scan of `layers` (bottom first) with the names resolve captures; each value is the file's bytes."""
    return find(list(layers), list(paths), baselibs.CAPTURE, lambda name, data: data, "base image", max_file)


def libc(*layers, path=LIBC):
    return scan(*layers, paths=(path,)).found[path]


def test_the_topmost_layer_that_writes_a_path_decides_and_lower_layers_are_not_read():
    opened: list[int] = []
    bottom = blob([file(LIBC, b"old")], opened, 0)
    # As BuildKit and Docker write a layer: the directories of what changed are entries too.
    top = blob([entry("usr"), entry("usr/lib"), entry("usr/lib/x86_64-linux-gnu"), file(LIBC, b"new")], opened, 1)
    found = scan(bottom, top, paths=(LIBC,))
    assert found.found[LIBC] == (LIBC, 1, b"new")
    assert opened == [1] and (found.layers_read, found.layers) == (1, 2)


def test_merged_usr_symlinks_and_library_symlinks_are_followed_across_layers():
    bottom = blob([symlink("lib", "usr/lib"), file("usr/lib/x86_64-linux-gnu/libc-2.39.so", b"libc")])
    middle = blob([symlink(LIBC, "../../../lib/x86_64-linux-gnu/libc-2.39.so")])
    top = blob([entry("etc")])
    found = libc(bottom, middle, top, path="lib/x86_64-linux-gnu/libc.so.6")
    assert found == ("usr/lib/x86_64-linux-gnu/libc-2.39.so", 0, b"libc")


def test_a_whiteout_or_an_opaque_directory_hides_what_lies_below_but_not_its_own_layer():
    bottom = blob([file(LIBC, b"hidden"), file(LIB64, b"lib64")])
    whiteout = blob([file("usr/lib/x86_64-linux-gnu/.wh.libc.so.6", b"")])
    assert scan(bottom, whiteout).found == {LIBC: None, LIB64: (LIB64, 0, b"lib64")}
    opaque = blob([file("usr/lib/x86_64-linux-gnu/.wh..wh..opq", b""), file("usr/lib/x86_64-linux-gnu/x", b"")])
    assert scan(bottom, opaque).found == {LIBC: None, LIB64: (LIB64, 0, b"lib64")}
    gone = blob([file("usr/lib/.wh.x86_64-linux-gnu", b""), file("lib64/.wh.libc.so.6", b"")])
    assert scan(bottom, gone).found == {LIBC: None, LIB64: None}
    root = blob([file(".wh..wh..opq", b""), entry("etc")])
    assert scan(bottom, root).found == {LIBC: None, LIB64: None}
    # OCI layer.md: "Files that are present in the same layer as a whiteout file can only be hidden by whiteout
    # files in subsequent layers": a layer that removes the directory and writes it anew shows its own libc.
    again = blob([file("usr/lib/.wh.x86_64-linux-gnu", b""), entry("usr/lib/x86_64-linux-gnu"), file(LIBC, b"new")])
    assert scan(bottom, again).found[LIBC] == (LIBC, 1, b"new")
    listed_first = blob([file(LIBC, b"new"), file("usr/lib/x86_64-linux-gnu/.wh.libc.so.6", b"")])
    assert scan(bottom, listed_first).found[LIBC] == (LIBC, 1, b"new")


def test_a_symlink_over_a_lower_directory_hides_its_files():
    bottom = blob([file(LIBC, b"below")])
    top = blob([symlink("usr/lib/x86_64-linux-gnu", "/opt/libs"), file("opt/libs/libc.so.6", b"above")])
    assert libc(bottom, top) == ("opt/libs/libc.so.6", 1, b"above")


def test_a_directory_named_only_as_a_parent_does_not_replace_a_lower_symlink():
    """Docker and BuildKit write an entry below a symlink at the symlink's target, so a layer holding
    lib/x86_64-linux-gnu/... over `lib -> usr/lib` names `lib` only as a parent: the symlink stays."""
    bottom = blob([symlink("lib", "usr/lib"), file(LIBC, b"through the symlink")])
    implied = blob([file("lib/x86_64-linux-gnu/unrelated.conf", b"")])
    assert libc(bottom, implied, path="lib/x86_64-linux-gnu/libc.so.6") == (LIBC, 0, b"through the symlink")
    named = blob([entry("lib"), file("lib/x86_64-linux-gnu/unrelated.conf", b"")])
    assert libc(bottom, named, path="lib/x86_64-linux-gnu/libc.so.6") is None  # a real directory replaced it


def test_dotdot_after_a_symlink_goes_to_the_parent_of_its_target_as_the_kernel_does():
    layer = blob(
        [
            symlink("opt/link", "/srv/deep/dir"),
            entry("srv/deep/dir"),
            file("srv/deep/glibc/libc-2.99.so", b"the kernel's"),
            file("opt/glibc/libc-2.99.so", b"textual"),
            symlink(LIBC, "/opt/link/../glibc/libc-2.99.so"),
        ]
    )
    assert libc(layer) == ("srv/deep/glibc/libc-2.99.so", 0, b"the kernel's")


def test_a_lower_layer_is_read_while_a_wanted_path_is_undecided():
    opened: list[int] = []
    bottom = blob([file(LIBC, b"first")], opened, 0)
    top = blob([file(LIB64, b"other")], opened, 1)
    assert scan(bottom, top).found == {LIBC: (LIBC, 0, b"first"), LIB64: (LIB64, 1, b"other")}
    assert opened == [1, 0]


def test_hardlinks_loops_dotdot_above_the_root_and_rhels_libgcc():
    linked = blob([file("opt/libc.so.6", b"linked"), hardlink(LIBC, "opt/libc.so.6")])
    assert libc(linked) == (LIBC, 0, b"linked")
    loop = blob([symlink(LIBC, "libc.so.6")])
    assert libc(loop) is None  # ELOOP: the loader finds nothing there either
    above = blob([symlink(LIB64, "../../../../../opt/libc.so.6"), file("opt/libc.so.6", b"clamped")])
    assert libc(above, path=LIB64) == ("opt/libc.so.6", 0, b"clamped")
    fifo = blob([entry(LIBC, "fifo")])
    assert libc(fifo) is None
    # RHEL 8's (and UBI's, Rocky's) libgcc_s.so.1 is a symlink to a versioned name.
    rhel = blob(
        [
            symlink("usr/lib64/libgcc_s.so.1", "libgcc_s-8-20210514.so.1"),
            file("usr/lib64/libgcc_s-8-20210514.so.1", b"gcc 8"),
        ]
    )
    assert libc(rhel, path="usr/lib64/libgcc_s.so.1") == ("usr/lib64/libgcc_s-8-20210514.so.1", 0, b"gcc 8")


def test_hostile_layers_are_one_clear_error_within_bounded_memory():
    good = blob([file(LIB64, b"x")])
    with pytest.raises(UpstreamMalformed, match=r"base image: layer 1 of 1 sha256:[0-9a-f]{64}: content is sha256:"):
        scan(good._replace(digest="sha256:" + "0" * 64))
    with pytest.raises(UpstreamMalformed, match="larger than the 10 bytes its descriptor says"):
        scan(good._replace(size=10))
    truncated = blob([], body=gzip.compress(b"\0" * 4096)[:20])
    with pytest.raises(UpstreamMalformed, match="is not a readable layer|bytes, but its descriptor says"):
        scan(truncated)
    with pytest.raises(UpstreamMalformed, match="media type 'application/vnd.in-toto"):
        scan(good._replace(media_type="application/vnd.in-toto+json"))
    huge = blob([file(LIB64, b"x" * 2048)])
    with pytest.raises(UpstreamMalformed, match="'lib64/libc.so.6' is 2,048 bytes, more than the 1,024"):
        scan(huge, max_file=1024)
    deep = blob([file("a/" * 3000 + "libc.so.6", b"")])  # 3,000 components: memory would grow as their square
    with pytest.raises(UpstreamMalformed, match="an entry name or link target of 6,009 characters"):
        scan(deep)
    info = tarfile.TarInfo("usr/lib/x86_64-linux-gnu/libc.so.6")
    info.pax_headers = {"comment": "x" * (2 << 20)}  # tarfile would read a PAX header of any size whole
    with pytest.raises(UpstreamMalformed, match="an extended header of 2,097,1[0-9]{2} bytes"):
        scan(blob([(info, b"")]))


def test_a_blob_hosts_challenge_never_gets_the_registrys_credentials(tmp_path, monkeypatch):
    """Registries redirect blobs to a CDN; http.py drops the Authorization header there. A 401 from that host
    naming its own token realm must not get Docker's stored password for the registry."""
    seen: dict[str, list] = {"cdn": [], "realm": []}

    class Realm(BaseHTTPRequestHandler):
        def do_GET(self):
            seen["realm"].append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", "14")
            self.end_headers()
            self.wfile.write(b'{"token": "t"}')

        def log_message(self, *args):
            pass

    realm = _serve(Realm)

    class Cdn(BaseHTTPRequestHandler):
        def do_GET(self):
            seen["cdn"].append(self.headers.get("Authorization"))
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="http://127.0.0.1:{realm.server_port}/token"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    cdn = _serve(Cdn)

    class Blobs(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{cdn.server_port}/blob")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    registry = _serve(Blobs)
    host = f"127.0.0.1:{registry.server_port}"
    (tmp_path / "config.json").write_text(json.dumps({"auths": {host: {"auth": "YWxpY2U6UzNDUkVU"}}}))  # alice:S3CRET
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    digest = "sha256:" + "a" * 64
    fact = ImageFact.model_construct(pinned=f"{host}/repo@{digest}")  # only the field the registry reads
    try:
        with pytest.raises(UpstreamUnreachable, match="refused access to repo .401."):
            with Registry(Http()).layer(fact, LayerRef(digest, 10, GZIP_LAYER)) as chunks:
                list(chunks)
    finally:
        for server in (realm, cdn, registry):
            server.shutdown()
    assert seen == {"cdn": [None], "realm": []}


def _serve(handler) -> HTTPServer:
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_every_copy_counts_and_the_oldest_decides():
    """The loader may take any copy in its directories (ld.so.cache, LD_LIBRARY_PATH), so the oldest decides."""
    copies = [
        baselibs.BaseLibrary(name="libc.so.6", path=LIBC, layer=0, versions=["GLIBC_2.2.5", "GLIBC_2.39"]),
        baselibs.BaseLibrary(
            name="libstdc++.so.6",
            path="usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
            layer=0,
            versions=["GLIBCXX_3.4", "GLIBCXX_3.4.33", "CXXABI_1.3.15"],
        ),
        baselibs.BaseLibrary(
            name="libstdc++.so.6",
            path="usr/local/lib/libstdc++.so.6.0.25",
            layer=2,
            versions=["GLIBCXX_3.4", "GLIBCXX_3.4.25", "CXXABI_1.3.11"],
        ),
    ]
    found = baselibs.BaseLibraries(
        manifest_digest="sha256:" + "1" * 64, libraries=copies, layers=3, layers_read=3, bytes_read=0
    )
    system = baselibs.system(found)
    assert not isinstance(system, str)
    assert system.versions == {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11)}
    assert baselibs.describe(found).startswith(
        f"base image: libc.so.6 from layer 1 ({LIBC}); libstdc++.so.6 from layer 1 "
        "(usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33); libstdc++.so.6 from layer 3 "
        "(usr/local/lib/libstdc++.so.6.0.25); no libgcc_s.so.1; 3 of 3 layers read"
    )


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
        (
            "noble",
            {"GLIBC": (2, 39), "GLIBCXX": (3, 4, 33), "CXXABI": (1, 3, 15), "GCC": (14, 0, 0)},
            {
                "libc.so.6": "usr/lib/x86_64-linux-gnu/libc.so.6",
                "libstdc++.so.6": "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33",
                "libgcc_s.so.1": "usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
            },
        ),
        (
            "bionic",
            {"GLIBC": (2, 27), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11), "GCC": (7, 0, 0)},
            {
                "libc.so.6": "lib/x86_64-linux-gnu/libc-2.27.so",
                "libstdc++.so.6": "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.25",
                "libgcc_s.so.1": "lib/x86_64-linux-gnu/libgcc_s.so.1",
            },
        ),
    ],
)
def test_the_base_images_real_glibc_and_libstdcxx_are_read_from_its_layers_and_cached(
    release, expected, paths, tmp_path
):
    registry, ref = _registry_with(release, release)
    try:
        client = Registry(Http())
        fact = client.resolve(ref, "linux/amd64")
        found = baselibs.read(client, fact, tmp_path)
        assert {lib.name: lib.path for lib in found.libraries} == paths and len(found.libraries) == 3
        assert {lib.layer for lib in found.libraries} == {0}
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
def test_an_older_copy_in_usr_local_lib_decides(tmp_path):
    """An upper layer puts 18.04's real libstdc++ (GCC 8) in /usr/local/lib, which Ubuntu's ld.so.conf searches
    first: the loader may take it, so GLIBCXX_3.4.25 is what vLLM's modules are held to, not 24.04's 3.4.33."""
    from tests.support.realdebs import BIONIC, layer, package_entries

    old = next((i, c) for i, c in package_entries(BIONIC[1:2]) if i.name.endswith("libstdc++.so.6.0.25"))
    old[0].name = "usr/local/lib/libstdc++.so.6.0.25"
    local = layer(
        [
            entry("usr"),
            entry("usr/local"),
            entry("usr/local/lib"),
            old,
            symlink("usr/local/lib/libstdc++.so.6", "libstdc++.so.6.0.25"),
        ]
    )
    registry = FakeRegistry().start()
    try:
        registry.add_image(BASE_REPO, "local", platforms=("linux/amd64",), layers=[*ubuntu_layers("noble"), local])
        client = Registry(Http())
        found = baselibs.read(client, client.resolve(f"{registry.netloc}/{BASE_REPO}:local", "linux/amd64"), tmp_path)
    finally:
        registry.stop()
    assert sorted((lib.name, lib.path, lib.layer) for lib in found.libraries if lib.name == "libstdc++.so.6") == [
        ("libstdc++.so.6", "usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33", 0),
        ("libstdc++.so.6", "usr/local/lib/libstdc++.so.6.0.25", 3),
    ]
    system = baselibs.system(found)
    assert not isinstance(system, str) and system.versions["GLIBCXX"] == (3, 4, 25)
    assert system.versions["GLIBC"] == (2, 39)


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
            assert gpu.abi is not None and gpu.abi.unresolved == [] and gpu.abi.checked > 0
            # Against the base image only: that torch was not part of it is said, and recorded for the report.
            why = "no torch was given to check vLLM's symbols against"
            assert notes == [f"ABI not checked: {why}"] and gpu.not_checked == {"abi": why}
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
    from tests.support.projects import use_base

    root, cli = project
    use_base(root, upstreams, "noble", cuda_version="12.9.0.043", layers=ubuntu_layers("noble"))
    first = cli("resolve", "--json")
    assert first.code == 0, first.output[-3000:]
    abi = json.loads(first.stdout)["gpu"]["abi"]
    assert (
        abi["against"][-1]
        == (
            "glibc/libstdc++/libgcc_s of the base image (newest: CXXABI_1.3.15, GCC_14.0.0, GLIBC_2.39, GLIBCXX_3.4.33)"
        )
        and abi["unresolved"] == []
    )
    assert "base image: libc.so.6 from layer 1 (usr/lib/x86_64-linux-gnu/libc.so.6)" in first.stderr
    assert "base image: reading its layers from the top for its glibc and libstdc++ (" in first.stderr
    blobs = [p for m, p, _h in upstreams.registry.log if "/blobs/" in p]
    assert len(blobs) == 1 + 3  # the config, then the layers from the top
    upstreams.registry.log.clear()
    (root / "pins.lock").unlink()
    again = cli("resolve", "--json")
    assert again.code == 0 and json.loads(again.stdout)["gpu"]["abi"] == abi
    assert [p for m, p, _h in upstreams.registry.log if "/blobs/" in p] == [blobs[0]]  # the config only: cached
    assert "base image: reading its layers" not in again.stderr
    for cached in (root / "cache" / "gpu-abi").glob("base-*"):
        cached.unlink()
    (root / "pins.lock").unlink()
    upstreams.registry.log.clear()
    offline = cli("resolve", "--no-wheel-download", "--json")
    assert offline.code == 0, offline.output[-3000:]
    assert "not checked: the base image's libraries are not in the cache (--no-wheel-download)" in offline.stderr
    assert [p for m, p, _h in upstreams.registry.log if "/blobs/" in p] == [blobs[0]]


def test_the_base_read_shows_on_resolves_progress_row(monkeypatch):
    """On a terminal the lookups' row says which layer is being read and how many bytes of all; once, a line."""
    from rich.console import Console

    from buildkit.commands import resolve as command
    from buildkit.stages.resolve.download import DownloadEvent

    screen = io.StringIO()
    monkeypatch.setattr(command.ui, "err", Console(file=screen, force_terminal=True, width=200))
    with command.WheelProgress("resolving pins") as progress:
        progress(DownloadEvent("base", "layer 1 of 31", 0, 8_000_000_000))
        progress(DownloadEvent("base", "layer 2 of 31", 1_500_000_000, 8_000_000_000))
        assert progress.bar is not None and progress.lookups_task is not None
        row = progress.bar.tasks[progress.lookups_task].description
    assert row == "resolving pins; base image layer 2 of 31 from the top, 1.50 of 8.00 GB"
    assert screen.getvalue().count("base image: reading its layers from the top for its glibc and libstdc++") == 1


def test_a_cache_entry_that_is_not_a_plain_valid_file_is_read_again_from_the_layers(tmp_path):
    """The cache is hostile until checked: a fifo never blocks, a symlink or a file of another base is not used."""
    import os

    digest = "sha256:" + "2" * 64
    fact = ImageFact.model_construct(manifest_digest=digest)  # only the field the cache reads
    path = baselibs.cache_path(tmp_path, digest)
    path.parent.mkdir(parents=True)
    assert baselibs.cached(tmp_path, fact) is None  # none yet
    good = baselibs.BaseLibraries(manifest_digest=digest, libraries=[], layers=0, layers_read=0, bytes_read=0)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(good.model_dump_json())
    path.symlink_to(elsewhere)
    assert baselibs.cached(tmp_path, fact) is None
    path.unlink()
    os.mkfifo(path)
    assert baselibs.cached(tmp_path, fact) is None
    path.unlink()
    path.write_text(good.model_copy(update={"manifest_digest": "sha256:" + "3" * 64}).model_dump_json())
    assert baselibs.cached(tmp_path, fact) is None
    path.write_text("{" * 100)
    assert baselibs.cached(tmp_path, fact) is None
    path.write_text(good.model_dump_json())
    assert baselibs.cached(tmp_path, fact) == good
