"""The buildx CLI side: its version and a builder's driver, endpoint and BuildKit version.

The docker SDK cannot run BuildKit builds (docker-py issue 2230), so buildx runs as a child process with an argv
list; this module reads what `docker buildx version` and `docker buildx inspect` print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from buildkit.errors import EngineNotReady, InputError
from buildkit.world import proc

OUTPUT_MAX = 1 << 20  # `buildx version` and `buildx inspect` print a few lines
BUILDER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # used with fullmatch


@dataclass
class BuilderInfo:
    name: str
    driver: str
    endpoint: str = ""
    buildkit_version: str = ""
    platforms: list[str] = field(default_factory=list)

    @property
    def attestations(self) -> bool:
        """Drivers with the image-attestation capability; the docker driver's classic store has none."""
        return self.driver in ("docker-container", "remote", "kubernetes")


@dataclass(frozen=True)
class Answer:
    returncode: int
    stdout: str
    stderr: str


def _run(args: list[str], timeout: float = 60) -> Answer:
    try:
        done = proc.run(["docker", *args], timeout=timeout, stdout_limit=OUTPUT_MAX)
    except proc.NotStarted as exc:
        if not isinstance(exc.error, FileNotFoundError):
            raise EngineNotReady(exc.message) from None
        raise EngineNotReady("the docker CLI is not installed", hint="install Docker (Debian: docker.io)") from None
    except proc.TimedOut:
        raise EngineNotReady(f"`docker {' '.join(args)}` did not answer within {timeout:g}s") from None
    if done.over:
        raise EngineNotReady(f"`docker {' '.join(args)}` printed more than {OUTPUT_MAX:,} bytes")
    return Answer(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))


def version() -> str:
    done = _run(["buildx", "version"])
    if done.returncode != 0:
        raise EngineNotReady(
            "docker buildx is not installed", hint="install the buildx plugin (scripts/engine-up.sh builds one)"
        )
    parts = done.stdout.split()
    return parts[1] if len(parts) > 1 else done.stdout.strip()


def validate_builder_name(name: str) -> str:
    if not BUILDER_NAME_RE.fullmatch(name):
        raise InputError(f"--builder: expected a builder name like 'mybuilder', found {name!r}")
    return name


def inspect(builder: str | None) -> BuilderInfo:
    args = ["buildx", "inspect", "--bootstrap"] + ([validate_builder_name(builder)] if builder else [])
    done = _run(args, timeout=120)
    if done.returncode != 0:
        what = f"builder {builder!r}" if builder else "the current builder"
        raise EngineNotReady(
            f"{what} is not usable: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no answer'}",
            hint="list builders with `docker buildx ls`; create one with `docker buildx create`",
        )
    return parse_inspect(done.stdout)


def parse_inspect(text: str) -> BuilderInfo:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    platforms = [p.strip().rstrip("*") for p in fields.get("Platforms", "").split(",") if p.strip()]
    return BuilderInfo(
        name=fields.get("Name", ""),
        driver=fields.get("Driver", ""),
        endpoint=fields.get("Endpoint", ""),
        buildkit_version=fields.get("BuildKit version", fields.get("Buildkit", "")),
        platforms=platforms,
    )
