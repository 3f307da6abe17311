"""What changed in upstream's docker/Dockerfile between two commits, stage by stage, for a reviewer.

Both files are parsed with BuildKit's parser (buildkit/dockerfile/text.py), so a stage is what BuildKit calls one.
Stages are matched by name (an unnamed stage by its position, `#2`); each added, removed or changed stage comes
with the lines added and removed, and ARG defaults that moved (BASE_IMAGE above all: the CUDA the image is built
on) are listed by themselves.
"""

from __future__ import annotations

import difflib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from buildkit.dockerfile.text import Parsed, parse


class StageChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    stage: str
    change: Literal["added", "removed", "changed"]
    added: int  # lines
    removed: int


class ArgChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    where: str  # "global" or the stage's name
    old: str | None  # None: no such ARG, or no default
    new: str | None


class DockerfileChanges(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    stages: list[StageChange]  # in the new file's order, then the removed ones
    unchanged: list[str]
    args: list[ArgChange]
    global_added: int = 0  # lines before the first FROM
    global_removed: int = 0


def _stage_key(parsed: Parsed, index: int) -> str:
    name = parsed.stages[index].name
    return name if name else f"#{index}"


def _stage_lines(parsed: Parsed) -> dict[str, list[str]]:
    return {
        _stage_key(parsed, s.index): [line for line in parsed.lines[s.start - 1 : s.end] if line.strip()]
        for s in parsed.stages
    }


def _global_lines(parsed: Parsed) -> list[str]:
    first = parsed.stages[0].start if parsed.stages else len(parsed.lines) + 1
    return [line for line in parsed.lines[: first - 1] if line.strip()]


def _counts(old: list[str], new: list[str]) -> tuple[int, int]:
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _arg_defaults(parsed: Parsed) -> dict[tuple[str, str], str | None]:
    found: dict[tuple[str, str], str | None] = {}
    for ins in parsed.instructions:
        if ins.cmd != "ARG":
            continue
        where = "global" if ins.stage < 0 else _stage_key(parsed, ins.stage)
        for item in ins.value:
            name, eq, default = item.partition("=")
            found[(where, name)] = default if eq else None
    return found


def compare(old_text: str, new_text: str, old_name: str, new_name: str) -> DockerfileChanges:
    """Stage by stage, what `new_text` changes of `old_text` (both untrusted: parsed with the usual limits)."""
    old, new = parse(old_text, old_name), parse(new_text, new_name)
    old_stages, new_stages = _stage_lines(old), _stage_lines(new)
    stages: list[StageChange] = []
    unchanged: list[str] = []
    for key, lines in new_stages.items():
        if key not in old_stages:
            stages.append(StageChange(stage=key, change="added", added=len(lines), removed=0))
            continue
        added, removed = _counts(old_stages[key], lines)
        if added or removed:
            stages.append(StageChange(stage=key, change="changed", added=added, removed=removed))
        else:
            unchanged.append(key)
    for key, lines in old_stages.items():
        if key not in new_stages:
            stages.append(StageChange(stage=key, change="removed", added=0, removed=len(lines)))
    old_args, new_args = _arg_defaults(old), _arg_defaults(new)
    args = [
        ArgChange(name=name, where=where, old=old_args.get((where, name)), new=new_args.get((where, name)))
        for where, name in [*new_args, *(k for k in old_args if k not in new_args)]
        if old_args.get((where, name)) != new_args.get((where, name))
        and (old_args.get((where, name)) is not None or new_args.get((where, name)) is not None)
    ]
    global_added, global_removed = _counts(_global_lines(old), _global_lines(new))
    return DockerfileChanges(
        stages=stages, unchanged=unchanged, args=args, global_added=global_added, global_removed=global_removed
    )
