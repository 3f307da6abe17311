"""Reproducibility: the prepared tree is a function of the commit, and (on the engine) one lock gives one image,
checked by `buildkit build --check-reproducible`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.test_render import remote, use_remote  # noqa: F401 -- the repository fixture


def snapshot(tree: Path) -> dict[str, tuple]:
    """Every path under the tree, .git included, with what an image layer keeps of it."""
    out: dict[str, tuple] = {}
    for root, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            path = Path(root, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                content = os.readlink(path).encode()
            elif stat.S_ISREG(info.st_mode):
                content = path.read_bytes()
            else:
                content = b""
            out[path.relative_to(tree).as_posix()] = (stat.filemode(info.st_mode), int(info.st_mtime), content)
    return out


def test_prepared_tree_is_the_same_bytes_from_any_cache_dir_umask_and_history(project, remote, tmp_path):  # noqa: F811
    root, cli = use_remote(project, remote)
    first = cli("prepare", "--json")
    assert first.code == 0, first.output
    tree_a = Path(json.loads(first.stdout)["tree"])

    # A second cache directory that held another commit first, prepared later and with another umask.
    other_cache = {"BUILDKIT_CACHE_DIR": str(tmp_path / "cache-b")}
    newer = remote.new_commit("docs/later.md", "later\n", "a later commit")
    pinned = (root / "pins.yaml").read_text()
    (root / "pins.yaml").write_text(pinned.replace(f'"{remote.commit}"', f'"{newer}"'))
    assert cli("resolve").code == 0
    assert cli("prepare", env=other_cache).code == 0
    text = (root / "pins.yaml").read_text().replace(f'"{newer}"', f'"{remote.commit}"')
    (root / "pins.yaml").write_text(text)
    assert cli("resolve").code == 0
    old_umask = os.umask(0o002)
    try:
        second = cli("prepare", "--json", env=other_cache)
    finally:
        os.umask(old_umask)
    assert second.code == 0, second.output
    tree_b = Path(json.loads(second.stdout)["tree"])
    assert tree_a != tree_b

    a, b = snapshot(tree_a), snapshot(tree_b)
    assert a.keys() == b.keys(), sorted(a.keys() ^ b.keys())
    assert [path for path in a if a[path] != b[path]] == []
    epoch = 1770316331  # the locked commit's time
    assert {mtime for _, mtime, _ in a.values()} == {epoch}
    assert not any(name.startswith((".git/logs", ".git/FETCH_HEAD")) for name in a)
    assert len([name for name in a if name.startswith(".git/objects/pack/") and name.endswith(".pack")]) == 1
    # git still sees a clean tree (but for the declared patch) and its full history at that commit.
    from tests.gitserver import git

    assert git("status", "--porcelain", cwd=tree_b) == "M tools/build-custom-vllm.sh"
    assert git("rev-parse", "HEAD", cwd=tree_b) == remote.commit
    git("fsck", "--no-dangling", cwd=tree_b)
