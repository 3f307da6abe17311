"""Drift check: what upstream's docker/Dockerfile has that the rendered one does not know, and the reverse.

Both files are parsed with BuildKit's own Dockerfile parser (the `dockerfile` package wraps it) and reduced to
their shape: stages, ARGs, ENVs, `uv sync` extras, and COPY --from=nemo-rl sources. Differences the pins declare
(dropped extras) or the template adds on purpose are not drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import dockerfile

from buildkit.errors import InputError

_UV_SYNC_RE = re.compile(r"\buv sync\b(?P<args>[^\n]*)")
_EXTRA_RE = re.compile(r"--extra[ =](\S+)")


@dataclass
class Shape:
    stages: list[str] = field(default_factory=list)
    args: set[str] = field(default_factory=set)
    envs: set[str] = field(default_factory=set)
    extras: set[str] = field(default_factory=set)  # "" for a plain `uv sync`, "all-groups" for --all-groups
    copy_sources: set[str] = field(default_factory=set)


def shape_of(text: str, name: str) -> Shape:
    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as exc:
        raise InputError(f"{name}: BuildKit's parser rejects it: {exc}") from None
    lines = text.splitlines()
    shape = Shape()
    for cmd in commands:
        if cmd.cmd == "FROM":
            value = list(cmd.value)
            if len(value) >= 3 and value[-2].upper() == "AS":
                shape.stages.append(value[-1].lower())
        elif cmd.cmd == "ARG":
            shape.args.update(v.split("=", 1)[0] for v in cmd.value)
        elif cmd.cmd == "ENV":
            shape.envs.update(cmd.value[0::2])
        elif cmd.cmd == "COPY" and "--from=nemo-rl" in cmd.flags:
            shape.copy_sources.update(cmd.value[:-1])
        elif cmd.cmd == "RUN":
            # Heredoc bodies are not in the parsed value; read the instruction's own lines.
            body = lines[cmd.start_line - 1 : cmd.end_line]
            for line in body:
                if line.lstrip().startswith("#"):
                    continue
                for m in _UV_SYNC_RE.finditer(line):
                    extras = _EXTRA_RE.findall(m.group("args"))
                    if "--all-groups" in m.group("args"):
                        extras.append("all-groups")
                    shape.extras.update(extras or [""])
    return shape


def drift(upstream: Shape, rendered: Shape, dropped_extras: set[str], template_args: frozenset[str]) -> list[str]:
    """Human-readable differences, each one line; empty when the template knows upstream exactly."""
    out: list[str] = []

    def compare(kind: str, theirs: set[str], ours: set[str]) -> None:
        for item in sorted(theirs - ours):
            out.append(f"upstream has {kind} {item or '(plain uv sync)'} that the template does not know")
        for item in sorted(ours - theirs):
            out.append(f"the template has {kind} {item or '(plain uv sync)'} that upstream does not")

    compare("stage", set(upstream.stages), set(rendered.stages))
    # ARGs the template adds on purpose are drift only if upstream has them (then they should match anyway).
    compare("ARG", upstream.args, rendered.args - (template_args - upstream.args))
    compare("ENV", upstream.envs, rendered.envs)
    compare("uv sync extra", upstream.extras - dropped_extras, rendered.extras)
    compare("COPY --from=nemo-rl source", upstream.copy_sources, rendered.copy_sources)
    return out
