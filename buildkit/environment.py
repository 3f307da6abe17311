"""The environment variables buildkit reads: one table, the one place they are described.

The code that reads a variable keeps reading it where it always did (the HTTP limits in world/http.py, the
budgets in budget.py, ...); this table only says what each one is, and docs/reference/environment.md is generated
from it (scripts/docs.py). tests/unit/suite/test_docs.py holds the table to the code: every variable a module of
buildkit/ reads must be a row here, so a new one cannot go undocumented.
"""

from __future__ import annotations

from typing import NamedTuple


class Variable(NamedTuple):
    name: str  # several names that mean one thing share a row: "HTTPS_PROXY, NO_PROXY"
    default: str  # as a reader should see it: "unset", "`20`", "`$XDG_CACHE_HOME/buildkit`"
    meaning: str  # markdown, one line


ENVIRONMENT: tuple[Variable, ...] = (
    Variable(
        "GITHUB_TOKEN",
        "unset",
        "GitHub token, sent only to `api.github.com` or `$BUILDKIT_GITHUB_API` (see "
        "[the security model](../explanation/security.md)); never printed, logged or written",
    ),
    Variable(
        "BUILDKIT_GITHUB_API",
        "`https://api.github.com`",
        "GitHub API base; wins over pins; `GITHUB_TOKEN` is sent there",
    ),
    Variable("BUILDKIT_WHEEL_INDEX", "`https://wheels.vllm.ai`", "wheel index; wins over pins"),
    Variable(
        "BUILDKIT_TORCH_INDEX",
        "the index NeMo-RL's uv.lock names",
        "where `resolve` downloads the torch wheel for the ABI check (a mirror; `https://`, or `http://` on loopback)",
    ),
    Variable(
        "BUILDKIT_CACHE_DIR",
        "`$XDG_CACHE_HOME/buildkit`",
        "git cache, prepared source trees and downloaded wheels (`--cache-dir` wins)",
    ),
    Variable("XDG_CACHE_HOME", "`~/.cache`", "the directory `BUILDKIT_CACHE_DIR` defaults to a `buildkit` folder in"),
    Variable("BUILDKIT_HTTP_TIMEOUT", "`20`", "seconds one read may wait for a byte (connect at most 10)"),
    Variable(
        "BUILDKIT_HTTP_DEADLINE", "`60`", "seconds one request may take in all: connect, redirects, headers and body"
    ),
    Variable(
        "BUILDKIT_HTTP_BACKOFF",
        "`0.5`",
        "first retry delay; doubles; 3 attempts on 5xx, timeouts and dropped connections",
    ),
    Variable("BUILDKIT_HTTP_MAX_GITHUB", "`4194304` (4 MiB)", "bytes of one GitHub API answer"),
    Variable(
        "BUILDKIT_HTTP_MAX_GITHUB_FILE",
        "`67108864` (64 MiB)",
        "bytes of one file read through the GitHub API (NeMo-RL's `uv.lock`)",
    ),
    Variable(
        "BUILDKIT_HTTP_MAX_INDEX", "`4194304` (4 MiB)", "bytes of one wheel index page (`metadata.json`, `index.html`)"
    ),
    Variable("BUILDKIT_HTTP_MAX_MANIFEST", "`4194304` (4 MiB)", "bytes of one registry manifest or image config"),
    Variable("BUILDKIT_HTTP_MAX_TOKEN", "`65536` (64 KiB)", "bytes of one registry token answer"),
    Variable(
        "BUILDKIT_HTTP_MAX_WHEEL",
        "`4294967296` (4 GiB)",
        "bytes of the wheel resolve downloads (streamed to disk, never held)",
    ),
    Variable(
        "BUILDKIT_HTTP_MAX_LAYER",
        "`17179869184` (16 GiB)",
        "bytes of one base image layer resolve reads for its glibc and libstdc++ (streamed, never held)",
    ),
    Variable(
        "BUILDKIT_HTTP_STALL",
        "`60`",
        "seconds a streamed body (the wheel, torch's wheel, a base layer) may go without receiving 1 MiB; the time "
        "buildkit spends with a chunk it holds (decompressing a layer) does not count",
    ),
    Variable(
        "BUILDKIT_BASE_DEADLINE",
        "`3600`",
        "seconds resolve's read of the base image's layers may take in all (its total deadline: exit 3 past it)",
    ),
    Variable(
        "BUILDKIT_TORCH_DEADLINE",
        "`1800`",
        "seconds the download of torch's wheel (for the ABI check) may take in all, its retries included (exit 3 past "
        "it)",
    ),
    Variable(
        "BUILDKIT_PINS",
        "`pins.yaml`",
        "default for `--pins`; without either, `pins.yaml` is looked for in the working directory and the directories "
        "above it, up to the top of the git repository; one found above is used only inside your own repository or "
        "when it and its directory are yours (git's `safe.directory` rule; exit 2 otherwise), and is named on stderr",
    ),
    Variable(
        "SUDO_UID",
        "unset",
        "under `sudo` (buildkit running as root), a `pins.yaml` found above the working directory that the invoking "
        "user owns counts as yours, as git's `safe.directory` rule has it",
    ),
    Variable(
        "BUILDKIT_SUBMODULES",
        "`1`",
        "`0` skips NeMo-RL's submodules in every command that prepares (prepare, render, build, bump): said once, for "
        "smoke builds without the submodules' hosts; `--submodules/--no-submodules` win",
    ),
    Variable(
        "BUILDKIT_PROGRESS",
        "`auto`",
        "`build --progress`, as buildx reads it: `auto`, `tty`, `plain`, `quiet`, `rawjson`",
    ),
    Variable("NO_COLOR", "unset", "set (not empty): no colour, bold or dim (no SGR escape at all)"),
    Variable("BUILDKIT_DEBUG", "unset", "show the traceback of an internal error"),
    Variable(
        "ENROOT_SQUASH_OPTIONS",
        "enroot's: `-comp lzo -noD -exit-on-error`",
        "the mksquashfs options `export` uses, as enroot reads the same variable (compression and layout only: "
        "`-comp gzip|lzo|lz4|xz|zstd`, `-b SIZE`, `-Xcompression-level N`, `-noD` ...; others are refused)",
    ),
    Variable(
        "BUILDKIT_COSIGN",
        "`cosign` on `PATH`, else `/var/cache/buildkit-engine/bin/cosign`",
        "the cosign binary `attest` and `verify --provenance` run",
    ),
    Variable(
        "COSIGN_PASSWORD",
        "unset",
        "the password of `attest --key`'s key file (empty for none); read by cosign, never printed",
    ),
    Variable(
        "DOCKER_CONFIG",
        "`~/.docker`",
        "where Docker's `config.json` is read for registry credentials; when set, the only place looked at, as with "
        "the docker CLI (see [private registries](../how-to/private-registries.md))",
    ),
    Variable(
        "PATH",
        "the caller's",
        "where git, buildx, mksquashfs, cosign, c++filt and the credential helpers are found; mksquashfs gets only "
        "`PATH` and `LC_ALL=C`",
    ),
    Variable("HTTPS_PROXY, NO_PROXY", "unset", "honoured, as by curl (requests reads them)"),
)


def names() -> set[str]:
    """Every variable the table describes, one name each."""
    return {name.strip() for row in ENVIRONMENT for name in row.name.split(",")}
