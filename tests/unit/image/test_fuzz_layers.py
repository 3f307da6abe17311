"""Issue 29: the layer-tar reader (layerfiles.find over ocilayout.walk_layer, under a Budget) fuzzed by mutation.
The corpus is real layers: small gzip and zstd tars as resolve meets them (symlinks, whiteouts, hardlinks, a libc),
and the bottom of an Ubuntu 24.04 image built from its real libc6 package (tests/support/realdebs.py). Each input is a
seeded mutation of one of them (bytes flipped, inserted, removed, cut; before or after compression), its descriptor
taken from the mutated bytes so the reader gets past the digest check and into the decompressor and the tar. Every input
must end in a result or a BuildkitError, within a per-input bound: never another exception, never a hang."""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import tarfile
import threading
import time
from contextlib import nullcontext

import zstandard

from buildkit.budget import Budget, Limits
from buildkit.errors import BuildkitError
from buildkit.image.layerfiles import LayerBlob, find
from buildkit.stages.resolve import baselibs
from tests.support.realdebs import GZIP_LAYER, NOBLE, file, package_entries, symlink

ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
SEED = 29
# A fixed number of inputs, not "as many as fit in 20 s": the same inputs on every run and every machine (under the
# test command's load, 20 s held 63 inputs; idle, about 340). 200 take about 12 s of a core.
MUTATIONS = 200
PER_INPUT_SECONDS = 5.0  # far above what one small layer takes (milliseconds): past it is a hang
HANG_SECONDS = 60.0  # the join's guard: the failure is a hang, not a slow machine
PATHS = [f"{d}/{name}" for name in baselibs.NAMES for d in baselibs.directories("linux/amd64")]
# Small limits: a mutation that makes a bomb or a flood of entries meets them in milliseconds, as the real ones would.
LIMITS = Limits(inflated=256 << 20, ratio=100, entries=200_000, kept=16 << 20, seconds=PER_INPUT_SECONDS)


def tar_of(entries) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, content in entries:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return out.getvalue()


def corpus() -> list[bytes]:
    """Uncompressed tars: forged ones with every entry kind the reader decides on, and Ubuntu's real libc6."""
    whiteout, opaque = tarfile.TarInfo("usr/lib/.wh.old"), tarfile.TarInfo("opt/.wh..wh..opq")
    whiteout.size = opaque.size = 0
    link = tarfile.TarInfo("lib64/libc.so.6")
    link.type, link.linkname = tarfile.LNKTYPE, "usr/lib/x86_64-linux-gnu/libc.so.6"
    forged = tar_of(
        [
            symlink("lib", "usr/lib"),
            file("usr/lib/x86_64-linux-gnu/libc.so.6", b"\x7fELF" + bytes(60)),
            (whiteout, b""),
            (opaque, b""),
            (link, None),
            symlink("usr/lib/x86_64-linux-gnu/libstdc++.so.6", "libstdc++.so.6.0.33"),
        ]
    )
    libc6 = [(i, c) for i, c in package_entries(NOBLE[:1]) if i.isdir() or i.issym() or "libc.so" in i.name]
    return [forged, tar_of(libc6)]


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if not out:
            break
        at = rng.randrange(len(out))
        kind = rng.randrange(5)
        if kind == 0:
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            out[at] = rng.choice((0, 0xFF, 0x7F, 0x30, 0x2F))  # NUL, high, DEL, '0', '/': tar's fields
        elif kind == 2:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == 3:
            del out[at : at + rng.randint(1, 512)]
        else:
            out[at : at + 12] = b"%011o" % rng.randrange(8**11)  # a size or mode field's octal, any value
    return bytes(out)


def as_layer(raw: bytes, rng: random.Random) -> tuple[str, bytes]:
    """The tar compressed as a real layer is, and mutated before or after the compression."""
    media_type = rng.choice((GZIP_LAYER, ZSTD_LAYER))
    compress = (lambda b: gzip.compress(b, mtime=0)) if media_type == GZIP_LAYER else zstandard.compress
    if rng.random() < 0.5:
        return media_type, compress(mutate(raw, rng))
    return media_type, mutate(compress(raw), rng)


def read(media_type: str, body: bytes):
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    chunks = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    blob = LayerBlob(digest, len(body), media_type, lambda: nullcontext(chunks))
    return find(
        [blob],
        PATHS,
        baselibs.CAPTURE,
        baselibs._version_nodes,
        "base image",
        baselibs.MAX_FILE,
        budget=Budget("base image", LIMITS),
    )


def test_mutated_real_layers_end_in_a_result_or_a_buildkit_error_within_the_bound():
    rng = random.Random(SEED)
    seeds = corpus()
    for raw in seeds:  # the corpus itself reads (else every mutation would only test the error path)
        assert read(GZIP_LAYER, gzip.compress(raw, mtime=0)).layers_read == 1
    ended = {"result": 0, "error": 0}
    for _ in range(MUTATIONS):
        media_type, body = as_layer(rng.choice(seeds), rng)
        outcome: list[object] = []

        def run(media_type: str = media_type, body: bytes = body, outcome: list[object] = outcome) -> None:
            try:
                read(media_type, body)
                outcome.append("result")
            except BuildkitError:
                outcome.append("error")
            except BaseException as exc:  # noqa: BLE001 -- the finding: kept with its input for the message
                outcome.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        begun = time.monotonic()
        worker.start()
        worker.join(HANG_SECONDS)
        shown = f"{media_type}, {len(body)} bytes, sha256 {hashlib.sha256(body).hexdigest()[:16]}"
        assert outcome, f"no end within {HANG_SECONDS:g} s ({time.monotonic() - begun:.1f} s): {shown}"
        assert outcome[0] in ("result", "error"), f"{type(outcome[0]).__name__}: {outcome[0]} for {shown}"
        ended[str(outcome[0])] += 1
    assert ended["result"] > 0 and ended["error"] > 0 and sum(ended.values()) == MUTATIONS, ended
