"""The wheel is content-addressed: `buildkit resolve` downloads it once, hashes it in the same pass, keeps it in
the cache (keyed by URL and ETag), resumes an interrupted download, and `--check --deep` hashes it afresh. The real
CLI against the loopback wheel index, which serves real bytes with ranges (tests/support/fake_upstreams.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from buildkit.models.lock import SKIPPED_REASON
from buildkit.stages.resolve.download import entry_dir
from tests.conftest import Cli
from tests.support.fake_upstreams import TEST_WHEEL_SIZE, VLLM_SHA, WHEEL_X86, WheelFile, pins_text
from tests.support.nemo_repo import point_pins_at
from tests.support.paths import REPO_ROOT

MiB = 1 << 20


def served(upstreams):
    return upstreams.wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"]


def resolved(cli: Cli, *args: str, code: int = 0) -> dict:
    result = cli("resolve", "--json", *args)
    assert result.code == code, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    return json.loads(result.stdout) if code == 0 else {}


def entry(root: Path, upstreams) -> Path:
    wheel = served(upstreams)
    url = upstreams.wheels.url + f"/{VLLM_SHA}/" + WHEEL_X86.replace("+", "%2B")
    return entry_dir(root / "cache", url, wheel.etag)


def no_traceback(result) -> None:
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output


def test_the_hash_is_of_the_served_bytes_and_the_wheel_is_kept(project, upstreams):
    root, cli = project
    lock = resolved(cli)
    data = served(upstreams).data()
    assert len(data) == TEST_WHEEL_SIZE
    assert lock["wheel"]["sha256"] == hashlib.sha256(data).hexdigest() and lock["wheel"]["content_addressed"]
    kept = entry(root, upstreams)
    assert (kept / WHEEL_X86).read_bytes() == data and not (kept / f"{WHEEL_X86}.part").exists()
    record = json.loads((kept / "record.json").read_text())
    assert record == {
        "url": lock["wheel"]["url"],
        "etag": lock["wheel"]["etag"],
        "size": TEST_WHEEL_SIZE,
        "sha256": lock["wheel"]["sha256"],
        "last_modified": lock["wheel"]["last_modified"],
    }


def test_a_later_resolve_and_another_project_reuse_the_cache(project, upstreams, tmp_path):
    root, cli = project
    first = resolved(cli)
    assert len(upstreams.wheels.wheel_gets()) == 1
    again = cli("resolve")
    assert again.code == 0 and "wheel: reused from cache" in again.stderr, again.output
    # A second project with the same cache dir.
    other = tmp_path / "other"
    other.mkdir()
    (other / "pins.yaml").write_text(pins_text(upstreams.base_image))
    shutil.copytree(REPO_ROOT / "patches", other / "patches")
    lock = resolved(Cli(other, cli.env))
    assert lock["wheel"]["sha256"] == first["wheel"]["sha256"]
    # Each resolve asks the wheel's GET (its existence check); for a cached wheel it is conditional
    # (If-None-Match: the ETag the cache saw) and the answer a 304 without a body: downloaded once.
    gets = upstreams.wheels.wheel_gets()
    assert [h.get("If-None-Match") for h in gets] == [None, first["wheel"]["etag"], first["wheel"]["etag"]]
    # A server that ignores the condition answers 200: its ETag names the finished entry, the body is left unread.
    upstreams.wheels.conditional = False
    assert resolved(cli)["wheel"]["sha256"] == first["wheel"]["sha256"]


def test_a_new_etag_is_a_new_download(project, upstreams):
    root, cli = project
    first = resolved(cli)
    wheel = served(upstreams)
    wheel.etag, wheel.seed = '"republished"', 7  # upstream replaced the file
    second = resolved(cli)
    assert len(upstreams.wheels.wheel_gets()) == 2
    assert second["wheel"]["etag"] == '"republished"'
    assert second["wheel"]["sha256"] == hashlib.sha256(wheel.data()).hexdigest() != first["wheel"]["sha256"]


def test_a_dropped_download_resumes_in_the_same_run(project, upstreams):
    root, cli = project
    upstreams.wheels.cuts = [100_000]
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    gets = upstreams.wheels.wheel_gets()
    assert [h.get("Range") for h in gets] == [None, "bytes=100000-"]
    assert gets[1].get("If-Range") == served(upstreams).etag
    assert "wheel: resumed at 100,000 bytes" in result.stderr
    assert json.loads(result.stdout)["wheel"]["sha256"] == hashlib.sha256(served(upstreams).data()).hexdigest()


def test_an_interrupted_download_resumes_on_the_next_resolve(project, upstreams):
    root, cli = project
    upstreams.wheels.cuts = [50_000, 50_000, 50_000]  # every attempt of this run breaks off
    failed = cli("resolve")
    assert failed.code == 3, failed.output
    no_traceback(failed)
    assert "stopped at 150,000 of 262,144 bytes" in failed.stderr and "continues where it stopped" in failed.stderr
    assert not (root / "pins.lock").exists()
    part = entry(root, upstreams) / f"{WHEEL_X86}.part"
    assert part.stat().st_size == 150_000
    again = cli("resolve", "--json")
    assert again.code == 0, again.output
    assert upstreams.wheels.wheel_gets()[-1].get("Range") == "bytes=150000-"
    assert json.loads(again.stdout)["wheel"]["sha256"] == hashlib.sha256(served(upstreams).data()).hexdigest()
    assert "wheel: resumed at 150,000 bytes" in again.stderr
    assert "wheel: hashed 0.2 MiB (0.1 MiB downloaded in " in again.stderr  # the part was hashed, not fetched
    assert not part.exists()


def test_a_server_that_ignores_ranges_starts_over(project, upstreams):
    root, cli = project
    upstreams.wheels.cuts = [60_000, 60_000, 60_000]
    assert cli("resolve").code == 3
    upstreams.wheels.ranges = False  # a 200 answers the Range request: the part is dropped, not continued
    lock = resolved(cli)
    assert upstreams.wheels.wheel_gets()[-1].get("Range") == "bytes=180000-"
    assert lock["wheel"]["sha256"] == hashlib.sha256(served(upstreams).data()).hexdigest()


def test_a_truncated_wheel_never_reaches_a_lock(project, upstreams):
    """The downloading GET's own Content-Length is the size (no HEAD to disagree with): a server that serves a
    truncated file is caught by reading it as a wheel."""
    root, cli = project
    served(upstreams).served_size = TEST_WHEEL_SIZE - 1000
    upstreams.wheels.ranges = False
    result = cli("resolve")
    no_traceback(result)
    assert result.code in (3, 4), result.output
    assert not (root / "pins.lock").exists()


def test_an_index_hash_that_disagrees_with_the_bytes(project, upstreams):
    root, cli = project
    upstreams.wheels.without_metadata = True  # the PEP 503 page, with #sha256= fragments
    real = hashlib.sha256(served(upstreams).data()).hexdigest()
    served(upstreams).seed = 3  # the page claims the hash of seed 3's bytes...
    claimed = served(upstreams).sha256()
    served(upstreams).seed = 0
    page = upstreams.wheels._sha256
    upstreams.wheels._sha256 = lambda commit, name: claimed  # ...while seed 0's bytes are served
    try:
        result = cli("resolve")
    finally:
        upstreams.wheels._sha256 = page
    assert result.code == 4, result.output
    assert f"the wheel index says sha256 {claimed}, the downloaded bytes hash to {real}" in result.stderr
    assert not (entry(root, upstreams) / "record.json").exists() and not (root / "pins.lock").exists()


def test_no_wheel_download_says_the_wheel_is_not_content_addressed(project, upstreams):
    root, cli = project
    result = cli("resolve", "--no-wheel-download")
    assert result.code == 0, result.output
    wheel = json.loads((root / "pins.lock").read_text())["wheel"]
    assert wheel["content_addressed"] is False and wheel["sha256"] is None
    assert wheel["not_content_addressed"] == SKIPPED_REASON
    assert upstreams.wheels.wheel_gets() == []
    assert "warning: the locked wheel is not content-addressed" in result.stderr
    # Not stale: --check and --offline accept it, and say it once more.
    check = cli("resolve", "--check")
    assert check.code == 0 and "not content-addressed" in check.stderr, check.output
    # A resolve that may download hashes it and rewrites the lock.
    lock = resolved(cli)
    assert lock["wheel"]["content_addressed"] and lock["wheel"]["not_content_addressed"] is None


def test_no_wheel_download_takes_the_hash_from_the_cache(project, upstreams):
    root, cli = project
    first = resolved(cli)
    (root / "pins.lock").unlink()
    lock = resolved(cli, "--no-wheel-download")
    assert lock["wheel"]["sha256"] == first["wheel"]["sha256"] and lock["wheel"]["content_addressed"]
    assert len(upstreams.wheels.wheel_gets()) == 1


def test_check_deep_downloads_afresh(project, upstreams):
    root, cli = project
    resolved(cli)
    before = (root / "pins.lock").read_bytes()
    result = cli("resolve", "--check", "--deep")
    assert result.code == 0, result.output
    assert "upstream agrees (the wheel's bytes too)" in result.stderr
    assert len(upstreams.wheels.wheel_gets()) == 2, "--deep does not trust the cache"
    assert not list((root / "cache" / "wheels").glob(".deep-*")), "its temporary file is removed"
    assert (root / "pins.lock").read_bytes() == before
    plain = cli("resolve", "--check")
    assert plain.code == 0 and len(upstreams.wheels.wheel_gets()) == 2, "--check alone reads no bytes"


def test_check_deep_finds_bytes_that_changed_under_the_same_etag(project, upstreams):
    root, cli = project
    locked = resolved(cli)["wheel"]["sha256"]
    served(upstreams).seed = 5  # same size, same ETag, other bytes
    assert cli("resolve", "--check").code == 0, "HEAD cannot see it"
    result = cli("resolve", "--check", "--deep")
    assert result.code == 1, result.output
    no_traceback(result)
    now = hashlib.sha256(served(upstreams).data()).hexdigest()
    assert f"wheel.sha256: lock has '{locked}', upstream now says '{now}'" in result.stderr


def test_check_deep_on_a_lock_without_a_hash(project, upstreams):
    root, cli = project
    assert cli("resolve", "--no-wheel-download").code == 0
    result = cli("resolve", "--check", "--deep")
    assert result.code == 1 and "--deep has nothing to compare" in result.stderr, result.output
    assert upstreams.wheels.wheel_gets() == []


def test_option_combinations_that_make_no_sense(project):
    root, cli = project
    for args in (
        ["--deep"],
        ["--deep", "--offline", "--check"],
        ["--no-wheel-download", "--check"],
        ["--no-wheel-download", "--offline"],
    ):
        result = cli("resolve", *args)
        assert result.code == 2, (args, result.output)
        no_traceback(result)
        assert args[0] in result.stderr


def test_plain_progress_lines_off_a_terminal(project, upstreams):
    root, cli = project
    upstreams.wheels.cuts = [3 * MiB]
    for wheel in upstreams.wheels.files.values():
        wheel.size = 8 * MiB
    result = cli("resolve")
    assert result.code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("wheel:")]
    assert lines[0] == f"wheel: downloading {WHEEL_X86} (8.0 MiB) to hash it"
    assert f"wheel: resumed at {3 * MiB:,} bytes" in lines
    assert any(line.startswith("wheel: 50% (4.0 of 8.0 MiB), ") and line.endswith(" MiB/s") for line in lines), lines
    assert lines[-1].startswith("wheel: downloaded 8.0 MiB in "), lines  # resumed: no byte came twice
    assert lines[-1].endswith(f"MiB/s), sha256 {served(upstreams).sha256()}")
    assert len(lines) <= 14, lines  # a handful: every 10% at most
    assert "\r" not in result.stderr and "\x1b" not in result.stderr
    again = cli("resolve")
    assert [line for line in again.stderr.splitlines() if line.startswith("wheel:")] == [
        f"wheel: reused from cache, sha256 {served(upstreams).sha256()}"
    ]


def test_a_damaged_cache_entry_is_downloaded_again(project, upstreams):
    root, cli = project
    first = resolved(cli)
    kept = entry(root, upstreams)
    for damage in (
        lambda: (kept / "record.json").write_text("{not json"),
        lambda: (kept / "record.json").write_text(json.dumps({"url": "x"})),
        lambda: (kept / "record.json").write_text(" " * 10_000),
        lambda: (kept / WHEEL_X86).write_bytes(b"short"),
        lambda: (kept / WHEEL_X86).unlink(),
    ):
        gets = len(upstreams.wheels.wheel_gets())
        damage()
        lock = resolved(cli)
        # The conditional GET (304: the cache should have it), then, the entry being damaged, the whole file.
        assert len(upstreams.wheels.wheel_gets()) == gets + 2
        assert lock["wheel"]["sha256"] == first["wheel"]["sha256"]
        assert json.loads((kept / "record.json").read_text())["sha256"] == first["wheel"]["sha256"]


def test_a_planted_symlink_is_not_followed(project, upstreams, tmp_path):
    root, cli = project
    target = tmp_path / "elsewhere"
    target.mkdir()
    kept = entry(root, upstreams)
    kept.parent.mkdir(parents=True)
    kept.symlink_to(target)  # a cache restored from somewhere else sends the download elsewhere
    lock = resolved(cli)
    assert lock["wheel"]["content_addressed"] and list(target.iterdir()) == []
    assert kept.is_dir() and not kept.is_symlink()


def test_a_version_1_lock_is_migrated_stale_and_rewritten(project, upstreams, monkeypatch):
    root, cli = project
    resolved(cli)
    v3 = json.loads((root / "pins.lock").read_text())
    later = ("cuda", "vllm_wheel", "vllm_compare", "vllm_files", "vllm_python", "torch", "pins_file")
    v1 = {**{k: v for k, v in v3.items() if k not in later}, "lock_version": 1}
    newer = ("index_sha256", "content_addressed", "not_content_addressed", "cuda", "cuda_source")
    v1["wheel"] = {k: v for k, v in v3["wheel"].items() if k not in newer}
    v1["base_image"] = {k: v for k, v in v3["base_image"].items() if k not in ("cuda_version", "config_digest")}
    v1["wheel"]["sha256"] = "ab" * 32  # version 1 kept the index's claim here
    text = json.dumps(v1, indent=2) + "\n"
    (root / "pins.lock").write_text(text)

    from buildkit.models.lock import V1_REASON, consistency_problems, lock_sha256, read_lock
    from buildkit.models.pins import load_pins

    migrated = read_lock(root / "pins.lock")
    assert migrated.wheel.index_sha256 == "ab" * 32 and migrated.wheel.sha256 is None
    assert not migrated.wheel.content_addressed and migrated.wheel.not_content_addressed == V1_REASON
    # Its hash is the file's, which the records and labels of its builds carry.
    assert lock_sha256(migrated) == hashlib.sha256(text.encode()).hexdigest()
    for name, value in upstreams.env().items():
        monkeypatch.setenv(name, value)
    pins = load_pins(root / "pins.yaml")
    assert consistency_problems(pins, migrated, list(migrated.patches)) == [
        "lock version 1: the wheel is not content-addressed; run `buildkit resolve`"
    ]

    check = cli("resolve", "--check")
    assert check.code == 1 and "lock version 1: the wheel is not content-addressed" in check.stderr, check.output
    plan = cli("build", "--dry-run")
    assert "resolve: " in plan.stderr and "lock version 1" in plan.stderr and "would resolve" in plan.stderr
    rewritten = resolved(cli)
    assert rewritten["lock_version"] == 5 and rewritten["wheel"]["content_addressed"]
    assert json.loads((root / "pins.lock").read_text()) == rewritten


def test_a_lock_of_an_unknown_version(project):
    root, cli = project
    resolved(cli)
    lock = json.loads((root / "pins.lock").read_text())
    for version in (6, "3", True, None):
        (root / "pins.lock").write_text(json.dumps({**lock, "lock_version": version}))
        result = cli("resolve", "--check")
        assert result.code == 2, result.output
        no_traceback(result)
        assert "invalid lock" in result.stderr and "this buildkit reads lock versions 1, 2, 3, 4 and 5" in result.stderr


def test_an_incoherent_wheel_fact_is_refused(project):
    root, cli = project
    resolved(cli)
    good = json.loads((root / "pins.lock").read_text())
    for change, needle in (
        ({"content_addressed": False}, "content_addressed must be true exactly when sha256 is set"),
        ({"not_content_addressed": "why not"}, "not_content_addressed gives the reason"),
        ({"sha256": "AB" * 32}, "expected a sha256 (64 lowercase hex digits)"),
        ({"sha256": "ab" * 32 + "\n"}, "expected a sha256"),
        ({"sha256": None, "content_addressed": False, "not_content_addressed": "x\nRUN evil"}, "one line of text"),
    ):
        lock = {**good, "wheel": {**good["wheel"], **change}}
        (root / "pins.lock").write_text(json.dumps(lock))
        result = cli("resolve", "--offline")
        assert result.code == 2 and "invalid lock" in result.stderr and needle in result.stderr, result.output


def test_build_resolves_a_stale_lock_and_tells_of_the_download(project, upstreams, monkeypatch):
    """`buildkit build` (resolve's ensure_lock, with no progress view) hears of the download in notes; a lock
    the user chose not to hash is used as it is, with the warning."""
    from buildkit.models.paths import Paths
    from buildkit.stages.resolve import ensure_lock

    root, cli = project
    for name, value in cli.env.items():
        monkeypatch.setenv(name, value)
    paths = Paths.of(root / "pins.yaml")
    notes: list[str] = []
    inputs, wrote = ensure_lock(paths, on_note=notes.append)
    assert wrote and inputs.lock.wheel.content_addressed
    assert notes == [
        f"wheel: downloading {WHEEL_X86} (0.2 MiB) to hash it",
        f"wheel: downloaded, sha256 {served(upstreams).sha256()}",
        # The stand-in base image has no layers (tests/support/fake_upstreams.py), so no glibc to hold vLLM's symbols
        # to.
        "ABI glibc/libstdc++ not checked: the base image holds no readable libc.so.6 in the loader's directories",
    ]
    (root / "pins.lock").unlink()
    shutil.rmtree(root / "cache" / "wheels")
    assert cli("resolve", "--no-wheel-download").code == 0
    notes.clear()
    inputs, wrote = ensure_lock(paths, on_note=notes.append)
    assert not wrote and not inputs.lock.wheel.content_addressed
    assert notes == [
        f"the locked wheel is not content-addressed ({SKIPPED_REASON}); run `buildkit resolve` "
        "without --no-wheel-download to hash it"
    ]


def test_render_warns_of_a_lock_that_is_not_content_addressed(project, remote):
    """The later stages read such a lock (the user chose it, or it is a version-1 lock describing past builds)
    and say so in one line."""

    root, cli = project
    point_pins_at(root, remote)
    assert cli("resolve", "--no-wheel-download").code == 0
    result = cli("render")
    assert result.code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: the locked wheel is not content-addressed ({SKIPPED_REASON}); run `buildkit resolve` without "
        "--no-wheel-download to hash it"
    ]


def test_a_failed_lookup_stops_the_download_beside_it_and_the_next_run_continues_it(project, upstreams):
    """The download starts as soon as the wheel is chosen, beside the registry's lookups; when one of them fails,
    resolve says so at once (one error line, no lock), the download stops, and its part stays for the next run."""
    import time

    root, cli = project
    wheels = upstreams.wheels
    # 64 MiB take 64 s (the failure's scale: resolve waiting for the whole download); resolve ends long before that,
    # however busy the machine.
    wheels.files[f"/{VLLM_SHA}/{WHEEL_X86}"] = WheelFile(64 << 20, served(upstreams).etag)
    wheels.chunk_delay = 1.0
    upstreams.registry.latency = 1.0  # the registry's answer (a 404, after its token) comes after a chunk or more
    text = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(text.replace(upstreams.base_image, upstreams.base_image + "-missing"))
    started = time.monotonic()
    result = cli("resolve")
    took = time.monotonic() - started
    assert result.code == 4 and "not found in registry" in result.stderr, result.output
    assert [line for line in result.stderr.splitlines() if line.strip()][0].startswith("error:")
    assert "wheel:" not in result.stderr and not (root / "pins.lock").exists()
    assert took < 32, f"resolve waited {took:.1f}s for a download it did not need (64 s)"
    time.sleep(1.5)  # the last chunk in flight lands in the part
    [part] = entry(root, upstreams).glob("*.part")
    assert 0 < part.stat().st_size < 64 << 20
    # The next run (the pins fixed) continues the part where it stopped.
    (root / "pins.yaml").write_text(text)
    wheels.chunk_delay = upstreams.registry.latency = 0.0
    lock = resolved(cli)
    ranges = [h.get("Range") for h in wheels.wheel_gets()]
    assert ranges[0] is None and ranges[-1] is not None and ranges[-1].startswith("bytes=")
    assert lock["wheel"]["sha256"] == served(upstreams).sha256() and lock["wheel"]["size"] == 64 << 20
