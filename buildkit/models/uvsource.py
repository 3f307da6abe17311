"""NeMo-RL's second way to pin a vLLM fork (issue 42): uv builds vLLM from a git source, in precompiled mode.

Release branches of NeMo-RL skip build-custom-vllm.sh. Their pyproject.toml names the fork as a uv git source and
sets precompiled mode through uv; their uv.lock pins the fork's commit. As NeMo-RL's `super-v3.5-posttraining` branch
writes them (5d63149a, pyproject.toml lines 273 and 539-540; uv.lock at 5f0d71a7, lines 8295-8298):

    [tool.uv.sources]
    vllm = { git = "https://github.com/TomerBN-Nvidia/vllm.git", branch = "super_vl_rl_v0.25.1", extra = "vllm" }
    [tool.uv.extra-build-variables]
    vllm = { VLLM_USE_PRECOMPILED = "1", VLLM_PRECOMPILED_WHEEL_COMMIT = "61874f98...", ... }

    [[package]]
    name = "vllm"
    version = "0.25.1"
    source = { git = "https://github.com/TomerBN-Nvidia/vllm.git?branch=super_vl_rl_v0.25.1#b31cc131..." }

uv writes the locked git URL without credentials, query or fragment, then `?subdirectory=`, `branch=`/`tag=`/`rev=`
(none for the default branch) and the full commit as the fragment (uv's `locked_git_url`). `uv_source` reads both
files, bounded and shape-checked before Python's TOML parser sees them (models/tomlshape.py), and says what they
pin; None when vLLM is no uv git source there. `written_pyproject` writes that mode into a pyproject.toml that does
not use it (vllm.install: uv-source), from the checked wheel's core metadata (`dist_metadata`). Pure: no I/O.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import tomlkit
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from buildkit.budget import UV_LOCK, Budget
from buildkit.errors import UpstreamMalformed, UpstreamMismatch, excerpt
from buildkit.models.grammar import FULL_SHA_RE, git_url
from buildkit.models.tomlshape import check_shape, package_tables

MAX_PYPROJECT_BYTES = 1 << 20  # NeMo-RL's is about 30 KB
_SELECTOR_RE = re.compile(r"(?:subdirectory=[^&#]+&)?(?:(?:branch|tag|rev)=[A-Za-z0-9._/+-]{1,255})?")  # fullmatch


@dataclass(frozen=True)
class UvSource:
    """What NeMo-RL's pyproject.toml and uv.lock at one commit pin of vLLM when uv builds it from git."""

    repo: str  # the git URL as pyproject.toml names it
    ref: str | None  # its branch, tag or rev (None: the default branch)
    commit: str  # the commit uv.lock pins (its source URL's fragment)
    locked: str  # uv.lock's source URL, whole
    wheel_commit: str | None  # extra-build-variables' VLLM_PRECOMPILED_WHEEL_COMMIT (None: not set)
    precompiled: bool  # extra-build-variables' VLLM_USE_PRECOMPILED is "1"


def _toml(text: str, what: str) -> dict:
    check_shape(text, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UpstreamMalformed(f"{what}: not a readable TOML file: {excerpt(str(exc), 120)}") from None


def _text(raw: bytes, what: str, limit: int) -> str:
    if len(raw) > limit:
        raise UpstreamMalformed(f"{what}: more than {limit:,} bytes: not a file buildkit reads")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UpstreamMalformed(f"{what}: not UTF-8 (byte {exc.start})") from None


def uv_source(pyproject: bytes, uv_lock: Callable[[], bytes | None], where: str, lock_limit: int) -> UvSource | None:
    """What pyproject.toml and uv.lock (NeMo-RL's at `where`; read by `uv_lock` only when needed) pin of vLLM as a
    uv git source; None when pyproject.toml names no git source for vLLM. A git source uv.lock does not pin is
    refused (exit 4)."""
    project = _toml(
        _text(pyproject, f"pyproject.toml at {where}", MAX_PYPROJECT_BYTES),
        f"pyproject.toml at {where}",
    )
    uv = project.get("tool", {}).get("uv", {}) if isinstance(project.get("tool"), dict) else {}
    sources = uv.get("sources") if isinstance(uv, dict) else None
    source = sources.get("vllm") if isinstance(sources, dict) else None
    if not isinstance(source, dict) or "git" not in source:
        return None  # no source, a path (build-custom-vllm.sh writes one), an index, or several with markers
    repo = source.get("git")
    refs = [source.get(key) for key in ("branch", "tag", "rev") if source.get(key) is not None]
    if not isinstance(repo, str) or len(refs) > 1 or not all(isinstance(r, str) for r in refs):
        raise UpstreamMalformed(f"pyproject.toml at {where}: [tool.uv.sources] vllm is not a git source uv reads")
    try:
        git_url(repo)
    except ValueError as exc:
        raise UpstreamMalformed(f"pyproject.toml at {where}: vLLM's git source {excerpt(repo)}: {exc}") from None
    variables = uv.get("extra-build-variables", {}).get("vllm", {}) if isinstance(uv, dict) else {}
    variables = variables if isinstance(variables, dict) else {}
    wheel_commit = variables.get("VLLM_PRECOMPILED_WHEEL_COMMIT")
    if wheel_commit is not None and not (isinstance(wheel_commit, str) and FULL_SHA_RE.fullmatch(wheel_commit)):
        raise UpstreamMalformed(
            f"pyproject.toml at {where}: VLLM_PRECOMPILED_WHEEL_COMMIT {excerpt(str(wheel_commit))} is not a full SHA"
        )
    locked = _locked(uv_lock(), where, lock_limit)
    if locked is None:
        raise UpstreamMismatch(
            f"NeMo-RL at {where} builds vLLM from the git source {repo}, and its uv.lock pins no commit of it",
            hint="pin NeMo-RL to a commit whose uv.lock pins vLLM's git source (`uv lock` writes it)",
        )
    base, _, commit = locked.partition("#")
    parts = urlsplit(base)
    if parts._replace(query="").geturl() != repo.split("#", 1)[0] or not _SELECTOR_RE.fullmatch(parts.query):
        raise UpstreamMismatch(
            f"NeMo-RL at {where}: uv.lock pins vLLM from {excerpt(locked)}, not the git source pyproject.toml names "
            f"({repo})",
            hint="pin NeMo-RL to a commit whose uv.lock matches its pyproject.toml (`uv lock` writes it)",
        )
    if not FULL_SHA_RE.fullmatch(commit):
        raise UpstreamMalformed(f"uv.lock at {where}: vLLM's git source {excerpt(locked)} pins no full commit")
    return UvSource(
        repo=repo,
        ref=refs[0] if refs else None,
        commit=commit,
        locked=locked,
        wheel_commit=wheel_commit,
        precompiled=variables.get("VLLM_USE_PRECOMPILED") == "1",
    )


def _locked(uv_lock: bytes | None, where: str, limit: int) -> str | None:
    """uv.lock's `source = { git = "..." }` of the package vllm (None: no uv.lock, or vllm from no git source).
    Only vllm's table is parsed (uv.lock is megabytes; tomllib is quadratic on hostile keys)."""
    if uv_lock is None:
        return None
    what = f"uv.lock at {where}"
    for table in package_tables(_text(uv_lock, what, limit), "vllm", Budget(what, UV_LOCK))[1:]:
        package = _toml(table, f"{what}: vllm's table")["package"][0]
        source = package.get("source")
        git = source.get("git") if isinstance(source, dict) else None
        if isinstance(git, str):
            return git
    return None


# -- writing the mode (vllm.install: uv-source on a NeMo-RL commit that uses build-custom-vllm.sh) ----------------


@dataclass(frozen=True)
class DistMetadata:
    """What a wheel's core metadata (`*.dist-info/METADATA`) says uv needs to lock vLLM without building it."""

    version: str
    requires_dist: tuple[str, ...]
    provides_extra: tuple[str, ...]


def dist_metadata(raw: bytes, what: str, max_requires: int) -> DistMetadata:
    """The Name (vllm), Version, Requires-Dist and Provides-Extra headers of core metadata, each held to its grammar
    (packaging's PEP 440 and PEP 508 parsers) and to the lock's limits (a version of 100 characters, a requirement of
    1,000, an extra of 100). Headers end at the first empty line; a folded line (leading space) continues the one
    before."""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n", 1)[0]
    headers: list[tuple[str, list[str]]] = []
    for line in text.split("\n"):
        if line[:1] in (" ", "\t") and headers:
            headers[-1][1].append(line.strip())  # joined once below: a long fold is not quadratic
        elif ":" in line:
            key, _, value = line.partition(":")
            headers.append((key.strip().lower(), [value.strip()]))
    values: dict[str, list[str]] = {key: [] for key in ("name", "version", "requires-dist", "provides-extra")}
    for key, parts in headers:
        if key in values:
            values[key].append(" ".join(parts))
    if [canonicalize_name(n) for n in values["name"]] != ["vllm"] or len(values["version"]) != 1:
        raise UpstreamMalformed(f"{what}: not the core metadata of one vllm version (Name and Version once each)")
    if len(values["requires-dist"]) > max_requires or len(values["provides-extra"]) > 200:
        raise UpstreamMalformed(
            f"{what}: {len(values['requires-dist'])} Requires-Dist and {len(values['provides-extra'])} "
            f"Provides-Extra lines, more than {max_requires} and 200"
        )
    too_long = [v for v in values["requires-dist"] if len(v) > 1000] + [v for v in values["version"] if len(v) > 100]
    if too_long:
        raise UpstreamMalformed(f"{what}: a value longer than buildkit locks: {excerpt(too_long[0], 80)}")
    try:
        version = str(Version(values["version"][0]))
        requires = tuple(str(Requirement(value)) for value in values["requires-dist"])
    except (InvalidVersion, InvalidRequirement) as exc:
        raise UpstreamMalformed(f"{what}: {excerpt(str(exc), 160)}") from None
    extras = tuple(canonicalize_name(e) for e in values["provides-extra"])
    if not all(_EXTRA_RE.fullmatch(e) and len(e) <= 100 for e in extras) or len(version) > 100:
        raise UpstreamMalformed(f"{what}: a Provides-Extra that is no extra name, or a version too long to lock")
    if any(len(r) > 1000 or any(ord(c) < 32 or ord(c) == 127 for c in r) for r in requires):
        raise UpstreamMalformed(f"{what}: a Requires-Dist that buildkit does not lock")
    return DistMetadata(version, requires, extras)


_EXTRA_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


@dataclass(frozen=True)
class WriteUvSource:
    """What prepare writes: vLLM `repo` at `commit` as NeMo-RL's uv git source, built in precompiled mode with the
    wheel of `wheel_commit`, whose core metadata stands for the source's (the proof allowed no packaging change)."""

    repo: str
    commit: str
    wheel_commit: str
    metadata: DistMetadata


def written_pyproject(text: str, where: str, want: WriteUvSource) -> str:
    """NeMo-RL's pyproject.toml with vLLM pinned as its release branches pin a fork (5d63149a, pyproject.toml lines
    148, 273, 539-546): the vllm extra names `vllm` once, with no URL or version (every `vllm ...` requirement there
    is dropped: a version pin would have to equal the built version); [tool.uv.sources] names the commit as a git
    source for that extra; [tool.uv.extra-build-variables] sets precompiled mode, the wheel commit and the version
    setuptools-scm reports (setup.py adds `+precompiled`); [[tool.uv.dependency-metadata]] gives the wheel's
    metadata, so `uv lock` need not build vLLM (the branch writes it by hand). Everything else stays as upstream
    wrote it (tomlkit keeps comments and layout). UpstreamMismatch (exit 4) when there is no vllm extra to point."""
    check_shape(text, f"pyproject.toml at {where}")
    try:
        doc = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        raise UpstreamMalformed(
            f"pyproject.toml at {where}: not a readable TOML file: {excerpt(str(exc), 120)}"
        ) from None
    project = doc.get("project")
    extras = project.get("optional-dependencies") if isinstance(project, dict) else None
    extra = extras.get("vllm") if isinstance(extras, dict) else None
    if not isinstance(extra, list) or not all(isinstance(item, str) for item in extra):
        raise UpstreamMismatch(
            f"NeMo-RL at {where}: pyproject.toml has no `vllm` extra ([project.optional-dependencies]) to point at "
            "the source: buildkit cannot write the uv-source mode there",
            hint="remove vllm.install from pins.yaml (build-custom-vllm.sh installs vLLM), or pin another commit",
        )
    try:
        _write(doc, extra, want, where)
        written = tomlkit.dumps(doc)
    except (
        ValueError,
        TypeError,
        AttributeError,
        tomlkit.exceptions.TOMLKitError,
    ) as exc:
        raise UpstreamMalformed(
            f"pyproject.toml at {where}: buildkit cannot write the uv-source mode into its layout "
            f"({excerpt(str(exc), 120)})",
            hint="remove vllm.install from pins.yaml, or pin a NeMo-RL commit whose [tool.uv] is a table",
        ) from None
    _holds(written, want, where)
    return written


def _write(doc, extra, want: WriteUvSource, where: str) -> None:
    extras: set[str] = set()
    for index in reversed(range(len(extra))):
        requirement = _requirement(extra[index], where)
        if canonicalize_name(requirement.name) == "vllm":
            extras |= requirement.extras  # kept; the version, URL and marker go (they chose the release wheel)
            del extra[index]
    extra.append(f"vllm[{','.join(sorted(extras))}]" if extras else "vllm")
    uv = _table(_table(doc, "tool"), "uv")
    _table(uv, "sources")["vllm"] = _inline({"git": want.repo, "rev": want.commit, "extra": "vllm"})
    _table(uv, "extra-build-variables")["vllm"] = _inline(_variables(want))
    entries = uv.get("dependency-metadata")
    if entries is None:
        entries = uv["dependency-metadata"] = tomlkit.aot()
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UpstreamMalformed(f"pyproject.toml at {where}: [[tool.uv.dependency-metadata]] is not a list of tables")
    for index in reversed(range(len(entries))):
        if canonicalize_name(str(entries[index].get("name", ""))) == "vllm":
            del entries[index]
    entry = tomlkit.table() if isinstance(entries, tomlkit.items.AoT) else tomlkit.inline_table()
    entry["name"] = "vllm"
    entry["version"] = want.metadata.version
    if want.metadata.provides_extra:
        entry["provides-extra"] = list(want.metadata.provides_extra)
    requires = tomlkit.array()
    requires.extend(want.metadata.requires_dist)
    entry["requires-dist"] = requires.multiline(isinstance(entry, tomlkit.items.Table))
    entries.append(entry)


def _variables(want: WriteUvSource) -> dict[str, str]:
    return {
        "VLLM_USE_PRECOMPILED": "1",
        "VLLM_PRECOMPILED_WHEEL_COMMIT": want.wheel_commit,
        # Both, as the branch writes them: vLLM's setup.py asks setuptools-scm without its dist name, which
        # reads only the second (a build of 0.14.0 with the first alone reported 0.1.dev1+g474ded95a).
        "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_VLLM": want.metadata.version,
        "SETUPTOOLS_SCM_PRETEND_VERSION": want.metadata.version,
    }


def _holds(written: str, want: WriteUvSource, where: str) -> None:
    """The file as uv will read it (tomllib) says what was written where uv looks for it: a layout tomlkit writes
    elsewhere (a dotted `uv.*` key under [tool]) is refused before `uv lock` runs, not blamed on uv after."""
    try:
        uv = tomllib.loads(written)["tool"]["uv"]
        vllm = [e for e in uv["dependency-metadata"] if canonicalize_name(str(e.get("name"))) == "vllm"]
        holds = (
            uv["sources"]["vllm"] == {"git": want.repo, "rev": want.commit, "extra": "vllm"}
            and uv["extra-build-variables"]["vllm"] == _variables(want)
            and [(e.get("version"), tuple(e.get("requires-dist", ()))) for e in vllm]
            == [(want.metadata.version, want.metadata.requires_dist)]
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, AttributeError):
        holds = False
    if not holds:
        raise UpstreamMalformed(
            f"pyproject.toml at {where}: written in its layout, it does not say the uv-source mode where uv reads "
            "it ([tool.uv] as dotted keys?)",
            hint="remove vllm.install from pins.yaml, or pin a NeMo-RL commit whose [tool.uv] is a table",
        )


def _requirement(value: str, where: str) -> Requirement:
    try:
        return Requirement(value)
    except InvalidRequirement as exc:
        raise UpstreamMalformed(f"pyproject.toml at {where}: the vllm extra's {excerpt(value)}: {exc}") from None


def _table(parent, key: str):
    """parent[key], a table (made when missing); an inline table where buildkit would add one is refused by tomlkit
    (ValueError), a value that is no table here."""
    found = parent.get(key)
    if found is None:
        found = tomlkit.inline_table() if isinstance(parent, tomlkit.items.InlineTable) else tomlkit.table()
        parent[key] = found
    if not isinstance(found, dict):
        raise TypeError(f"`{key}` is not a table")
    return found


def _inline(values: dict[str, str]):
    table = tomlkit.inline_table()
    table.update(values)
    return table
