"""The one place buildkit runs git: argv lists (never a shell), no prompts, C locale, git's own words on failure.

Every git call runs with hooks and fsmonitor off and replace refs ignored: the cache holds repositories someone
else may have written, and these are the ways a repository makes git run a command or show other objects. `-c`
config wins over the repository's own, and git hands it on to the gits it starts (submodules included) through
GIT_CONFIG_PARAMETERS. The other ways (filters, ssh commands, ...) are refused by the cache checks (source.py,
resolve/git.py). Repositories buildkit makes get no templates: a user's own template may hold hooks, which those
checks would refuse.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit

from buildkit.errors import GitFailed, InputError, UpstreamUnreachable
from buildkit.world import proc

GIT_TIMEOUT = 600.0
GIT_OUTPUT_MAX = 1 << 30  # bytes of one answer: a whole tree listing or a batch of objects is far less
GIT_STDERR_MAX = 1 << 20
_DISK_FULL = ("No space left on device", "Disk quota exceeded")
DISK_FULL_HINT = "the disk is full: free some space"  # as files.write_error says it
SAFE_CONFIG = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.useReplaceRefs=false"]


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    # An empty template dir: no templates, whatever the user's config or environment names.
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_ASKPASS="true", GIT_TEMPLATE_DIR="")
    # Reads never rewrite an index (`status` would put this clone's stat data back into a reproducible tree).
    env["GIT_OPTIONAL_LOCKS"] = "0"
    return env


def run_git_bytes(
    args: list[str],
    cwd: Path | None = None,
    timeout: float = GIT_TIMEOUT,
    config: list[str] | None = None,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
) -> bytes:
    """Run git with an argv list (never a shell); return stdout as bytes or raise with git's own words (a URL's
    password blanked)."""
    secrets = url_passwords(args)
    shown = [proc.redact(arg, secrets) for arg in args]
    try:
        done = proc.run(
            ["git", *SAFE_CONFIG, *(config or []), *args],
            cwd=cwd,
            env={**_git_env(), **(env or {})},
            stdin=stdin,
            timeout=timeout,
            stdout_limit=GIT_OUTPUT_MAX,
            stderr_limit=GIT_STDERR_MAX,
            secrets=secrets,
        )
    except proc.NotStarted as exc:
        if cwd is not None and not Path(cwd).is_dir():
            raise GitFailed(shown, f"{cwd} is not a directory") from None
        if isinstance(exc.error, (FileNotFoundError, NotADirectoryError)):
            raise UpstreamUnreachable("git is not installed", hint="install git (apt-get install git)") from None
        raise UpstreamUnreachable(exc.message) from None
    except proc.TimedOut:
        raise UpstreamUnreachable(f"git {shown[0]} took longer than {timeout:g}s") from None
    if done.over:
        raise GitFailed(shown, f"it printed more than {GIT_OUTPUT_MAX:,} bytes")
    if done.returncode != 0:
        stderr = proc.redact(done.stderr.decode("utf-8", "replace").strip(), done.secrets)
        if any(marker in stderr for marker in _DISK_FULL):  # not the remote's fault: the cache's disk is full
            where = f" in {cwd}" if cwd is not None else ""
            raise InputError(f"git {shown[0]} failed{where}: no space left on device", hint=DISK_FULL_HINT)
        raise GitFailed(shown, stderr)
    return done.stdout


def url_passwords(args: list[str]) -> list[str]:
    """The passwords of URLs in the arguments (https://user:password@host/...), kept out of messages."""
    found = []
    for arg in args:
        if "://" in arg and "@" in arg:
            try:
                password = urlsplit(arg).password
            except ValueError:
                continue
            if password:
                found.append(password)
    return found


def run_git(
    args: list[str],
    cwd: Path | None = None,
    timeout: float = GIT_TIMEOUT,
    config: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run git with an argv list (never a shell); return stdout or raise with git's own words."""
    return run_git_bytes(args, cwd=cwd, timeout=timeout, config=config, env=env).decode("utf-8", "replace")


GIT_PATH_MAX = 4096  # bytes of one path: Linux's PATH_MAX, so no checkout can hold a longer one


def path_problem(path: str) -> str | None:
    """Why `path` is not a path of a file in a git tree (None when it is): components joined by single `/`s, none
    of them empty (a leading, trailing or doubled `/`), `.` or `..` (git itself refuses to check such a path out),
    and at most GIT_PATH_MAX bytes of UTF-8. The compiled-input rules match paths by prefix
    (buildkit/models/compiled.py): `vllm/../csrc/x.cu` is csrc/x.cu, spelled to miss the `csrc/` rule."""
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        return "a character UTF-8 cannot hold"  # a lone surrogate, from a JSON \ud800 escape
    if size > GIT_PATH_MAX:
        return f"more than {GIT_PATH_MAX} bytes"
    for component, named in (("", "an empty component"), (".", "a '.' component"), ("..", "a '..' component")):
        if component in path.split("/"):
            return named
    return None


def has_commit(repo: Path, sha: str) -> bool:
    """Whether the repository already holds the commit (so no fetch is needed)."""
    try:
        run_git(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo)
        return True
    except GitFailed:
        return False


def object_id(kind: str, data: bytes, id_length: int = 40) -> str:
    """Git's id of an object: the hash of its header and content (SHA-1, or SHA-256 for 64-digit ids)."""
    digest = (hashlib.sha1 if id_length == 40 else hashlib.sha256)(f"{kind} {len(data)}\0".encode())
    digest.update(data)
    return digest.hexdigest()


def read_objects(repo: Path, names: list[str]) -> list[tuple[str, str, bytes]]:
    """(id, type, content) of each named object, in order, through one `git cat-file --batch`.

    Each content is checked against its id: git does not check a loose object when it reads it, so a cache
    holding forged objects would otherwise pass them on.
    """
    out = run_git_bytes(["cat-file", "--batch"], cwd=repo, stdin="".join(f"{n}\n" for n in names).encode())
    objects = []
    pos = 0
    for name in names:
        end = out.find(b"\n", pos)
        fields = out[pos:end].decode("utf-8", "replace").split(" ") if end >= 0 else []
        if len(fields) != 3 or not fields[2].isdigit():
            raise GitFailed(["cat-file", "--batch"], f"object {name} is missing")
        oid, kind, size = fields[0], fields[1], int(fields[2])
        data = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
        if object_id(kind, data, len(oid)) != oid:
            raise GitFailed(["cat-file", "--batch"], f"object {oid} is corrupt (its content does not match its id)")
        objects.append((oid, kind, data))
    return objects


def config_entries(config_file: Path) -> list[tuple[str, str]]:
    """(key, value) of every entry of one git config file, includes not followed (keys lower-case but subsections)."""
    out = run_git(["config", "--file", str(config_file), "--no-includes", "--null", "--list"])
    return [(key, value) for key, _, value in (entry.partition("\n") for entry in out.split("\0") if entry)]


# What `git init` writes in a repository's config: the format version and a few booleans it probes.
_INIT_BOOLEANS = (
    "core.filemode",
    "core.logallrefupdates",
    "core.symlinks",
    "core.ignorecase",
    "core.precomposeunicode",
)


def written_by_init(key: str, value: str, bare: bool = False) -> bool:
    if key in _INIT_BOOLEANS:
        return value in ("true", "false")
    return (key, value) in {("core.repositoryformatversion", "0"), ("core.bare", "true" if bare else "false")}


# Files git reads from a repository that make it run commands, change what is checked out, or read objects from
# elsewhere. buildkit never writes them; hooks are only git's own *.sample files.
_PLANTED = ("info/attributes", "info/grafts", "objects/info/alternates", "objects/info/http-alternates", "commondir")


def inspect_git_dir(git_dir: Path, allowed) -> tuple[str | None, dict[str, str]]:
    """Why a cached repository is not one buildkit left there (None when it is), and its local config.

    `allowed(key, value)` says which config entries buildkit (through git init, fetch and submodule update)
    writes; any other is refused, as are files that make git run commands or read objects from elsewhere.
    """
    if git_dir.is_symlink() or not git_dir.is_dir():
        return "not a directory", {}
    for name, kind in (("HEAD", os.path.isfile), ("config", os.path.isfile), ("objects", os.path.isdir)):
        if os.path.islink(git_dir / name) or not kind(git_dir / name):
            return f"no {name}", {}
    for name in _PLANTED:
        if os.path.lexists(git_dir / name):
            return f"unexpected {name}", {}
    # No link anywhere inside: git writes and deletes through them (repack, prune), into whatever they point at.
    for root, dirnames, filenames in os.walk(git_dir):
        for name in (*dirnames, *filenames):
            if os.path.islink(os.path.join(root, name)):
                where = os.path.relpath(os.path.join(root, name), git_dir)
                return f"unexpected link {where}", {}
    hooks = git_dir / "hooks"
    try:
        planted = [h.name for h in hooks.iterdir() if not h.name.endswith(".sample")] if hooks.exists() else []
    except OSError:
        planted = ["hooks"]  # a link or a file where hooks would be, or unreadable
    if hooks.is_symlink() or planted:
        return f"unexpected hook {sorted(planted or ['hooks'])[0]}", {}
    try:
        entries = config_entries(git_dir / "config")
    except GitFailed as exc:
        return f"unreadable git config ({exc.stderr.splitlines()[-1] if exc.stderr else 'no output'})", {}
    for key, value in entries:
        if not allowed(key, value):
            return f"unexpected git config {key}", {}
    return None, dict(entries)
