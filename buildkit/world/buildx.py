"""The buildx CLI side: its version and a builder's driver, endpoint and BuildKit version.

The docker SDK cannot run BuildKit builds (docker-py issue 2230), so buildx runs as a child process with an argv
list; this module reads what `docker buildx version` and `docker buildx inspect` print.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from buildkit.errors import BuildFailed, EngineNotReady, InputError
from buildkit.world import proc

OUTPUT_MAX = 1 << 20  # `buildx version` and `buildx inspect` print a few lines
BUILDER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # used with fullmatch
DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Node:
    """One BuildKit of a builder (`docker buildx create --append` adds more) and the platforms it offers."""

    name: str
    platforms: list[str]

    @property
    def native(self) -> str | None:
        """The platform the node's own CPU runs. BuildKit lists it first; those after it run under emulation
        (QEMU registered through binfmt_misc), and `buildx create --platform` names come first too (marked *)."""
        return self.platforms[0] if self.platforms else None


@dataclass
class BuilderInfo:
    name: str
    driver: str
    endpoint: str = ""
    buildkit_version: str = ""
    platforms: list[str] = field(default_factory=list)  # every node's, in order
    nodes: list[Node] = field(default_factory=list)  # empty: one node, named as the builder, with `platforms`

    @property
    def attestations(self) -> bool:
        """Drivers with the image-attestation capability; the docker driver's classic store has none."""
        return self.driver in ("docker-container", "remote", "kubernetes")

    def where(self, platform: str) -> tuple[str, bool] | None:
        """(node, native) for the node that builds `platform`: one whose own CPU runs it first (buildx sends a
        platform to a node that has it natively), else the first that emulates it; None when none offers it."""
        nodes = self.nodes or [Node(self.name, self.platforms)]
        offers = [n for n in nodes if any(_same(platform, p) for p in n.platforms)]
        native = [n for n in offers if n.native and _same(platform, n.native)]
        if native:
            return native[0].name, True
        return (offers[0].name, False) if offers else None


def _same(platform: str, offered: str) -> bool:
    """linux/amd64 is offered by linux/amd64 and by its variants (linux/amd64/v2)."""
    return offered == platform or offered.startswith(platform + "/")


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
    """`buildx inspect`'s text: the builder's fields (the first of each name), then under "Nodes:" one block per
    node, each opened by its Name line."""
    fields: dict[str, str] = {}
    nodes: list[tuple[str, list[str]]] = []
    in_nodes = False
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if line.strip() == "Nodes:":
            in_nodes = True
        elif sep and in_nodes and key == "Name" and not line.startswith(" "):
            nodes.append((value, []))
        elif sep and in_nodes and key == "Platforms" and nodes:
            nodes[-1][1].extend(_platforms(value))
        if sep and key and key not in fields:
            fields[key] = value
    every = [p for _, each in nodes for p in each] if nodes else _platforms(fields.get("Platforms", ""))
    return BuilderInfo(
        name=fields.get("Name", ""),
        driver=fields.get("Driver", ""),
        endpoint=fields.get("Endpoint", ""),
        buildkit_version=fields.get("BuildKit version", fields.get("Buildkit", "")),
        platforms=list(dict.fromkeys(every)),
        nodes=[Node(name, each) for name, each in nodes],
    )


def _platforms(value: str) -> list[str]:
    return [p.strip().rstrip("*") for p in value.split(",") if p.strip()]


def create_index(builder: str | None, tag: str, sources: list[str], metadata_file: Path) -> str:
    """`docker buildx imagetools create`: one image index under `tag` of the pushed `sources` (name@digest, each an
    image or an index of an image and its attestations), pushed by the registry; its digest, from the metadata
    file buildx writes."""
    args = ["buildx", "imagetools", "create"] + (["--builder", validate_builder_name(builder)] if builder else [])
    args += ["--tag", tag, "--metadata-file", str(metadata_file), "--progress", "plain", *sources]
    done = _run(args, timeout=600)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
        raise BuildFailed(
            f"assembling the image index {tag}: {last}",
            hint="each platform's image is pushed and recorded; run the same `docker buildx imagetools create` "
            "again once the registry answers",
        )
    try:
        with metadata_file.open("rb") as written:  # buildx's own few lines: bounded all the same
            data = json.loads(written.read(OUTPUT_MAX))
        digest = data["containerimage.descriptor"]["digest"]
    except (OSError, ValueError, KeyError, TypeError):
        digest = None
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise BuildFailed(f"assembling the image index {tag}: buildx wrote no index digest to {metadata_file}")
    return digest
