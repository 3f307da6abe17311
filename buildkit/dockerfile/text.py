"""Upstream's docker/Dockerfile as lines and parsed instructions, and line edits that say who made them.

Upstream's file is untrusted text: it is size-checked, must be UTF-8, and is parsed with BuildKit's own parser (the
`dockerfile` package wraps it), so that every edit lands on an instruction boundary BuildKit agrees with, never
inside a continuation that would swallow the lines buildkit adds. Each edit names the transformation that made it;
`apply_edits` refuses two edits of the same line and returns which upstream lines each transformation touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dockerfile

from buildkit.errors import UpstreamMalformed

MAX_DOCKERFILE = 1024 * 1024  # upstream's is ~20 KiB; a file this large is not a Dockerfile a person maintains


@dataclass(frozen=True)
class Instruction:
    cmd: str  # upper case: FROM, ARG, RUN, ...
    flags: tuple[str, ...]
    value: tuple[str, ...]
    start: int  # first line, 1-based
    end: int  # last line (a heredoc's terminator included)
    stage: int  # index into Parsed.stages; -1 before the first FROM


@dataclass(frozen=True)
class Stage:
    index: int
    name: str | None  # lower case, as BuildKit compares stage names
    base: str
    start: int  # the FROM line
    end: int  # the last line of the stage's last instruction


@dataclass
class Parsed:
    """Upstream's Dockerfile: its lines (without line ends) and BuildKit's reading of them."""

    name: str
    lines: list[str]
    instructions: list[Instruction]
    stages: list[Stage]

    def line(self, number: int) -> str:
        return self.lines[number - 1]

    def stage_named(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name.lower()), None)

    def in_stage(self, stage: Stage) -> list[Instruction]:
        return [i for i in self.instructions if i.stage == stage.index]

    def global_instructions(self) -> list[Instruction]:
        return [i for i in self.instructions if i.stage == -1]

    def body(self, ins: Instruction) -> list[tuple[int, str]]:
        """A heredoc RUN's script lines with their numbers (between the RUN line and the terminator)."""
        if not is_heredoc(ins):
            return []
        return [(n, self.line(n)) for n in range(ins.start + 1, ins.end)]


def is_heredoc(ins: Instruction) -> bool:
    return ins.cmd == "RUN" and ins.end > ins.start and ins.value[0].lstrip().startswith("<<")


def parse(text: str, name: str) -> Parsed:
    """Refuse what is not a Dockerfile BuildKit reads; a file whose escape character is not `\\` is refused too
    (every edit here assumes BuildKit's default line continuation)."""
    if len(text.encode()) > MAX_DOCKERFILE:
        raise UpstreamMalformed(f"{name}: larger than {MAX_DOCKERFILE} bytes; not a Dockerfile buildkit transforms")
    if "\r" in text or "\0" in text:
        raise UpstreamMalformed(f"{name}: holds carriage returns or NUL bytes; buildkit transforms plain LF text only")
    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as exc:
        raise UpstreamMalformed(f"{name}: BuildKit's parser rejects it: {exc}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        stripped = line.strip().lower().replace(" ", "")
        if not stripped.startswith("#"):
            break
        if stripped.startswith("#escape="):
            raise UpstreamMalformed(f"{name}: sets a parser directive `escape`; buildkit transforms `\\` files only")
    instructions: list[Instruction] = []
    stages: list[Stage] = []
    for cmd in commands:
        kind = cmd.cmd.upper()
        if kind == "FROM":
            value = list(cmd.value)
            stage_name = value[-1].lower() if len(value) >= 3 and value[-2].upper() == "AS" else None
            stages.append(Stage(len(stages), stage_name, value[0] if value else "", cmd.start_line, cmd.end_line))
        instructions.append(
            Instruction(kind, tuple(cmd.flags), tuple(cmd.value), cmd.start_line, cmd.end_line, len(stages) - 1)
        )
    ends: dict[int, int] = {}
    for ins in instructions:
        if ins.stage >= 0:
            ends[ins.stage] = max(ends.get(ins.stage, 0), ins.end)
    stages = [Stage(s.index, s.name, s.base, s.start, ends[s.index]) for s in stages]
    return Parsed(name, lines, instructions, stages)


@dataclass(frozen=True)
class Edit:
    """Upstream lines start..end (1-based, inclusive) replaced by `new`; end = start - 1 inserts before start."""

    transformation: str
    start: int
    end: int
    new: tuple[str, ...]

    @classmethod
    def replace(cls, transformation: str, start: int, end: int, new: list[str]) -> Edit:
        return cls(transformation, start, end, tuple(new))

    @classmethod
    def insert_after(cls, transformation: str, line: int, new: list[str]) -> Edit:
        return cls(transformation, line + 1, line, tuple(new))


@dataclass
class Applied:
    text: str
    touched: dict[str, list[int]] = field(default_factory=dict)  # transformation -> upstream lines it replaced
    inserted: dict[str, list[int]] = field(default_factory=dict)  # transformation -> upstream lines it added after


def apply_edits(parsed: Parsed, edits: list[Edit], prefix: list[str], suffix: list[str]) -> Applied:
    """The upstream lines with every edit made (in line order; insertions at one place keep the order given), with
    `prefix` before them and `suffix` after. Two edits that replace the same line are a bug in buildkit."""
    ordered = sorted(enumerate(edits), key=lambda item: (item[1].start, item[1].end >= item[1].start, item[0]))
    owner: dict[int, str] = {}
    touched: dict[str, list[int]] = {}
    inserted: dict[str, list[int]] = {}
    for _, edit in ordered:
        if edit.end < edit.start:
            inserted.setdefault(edit.transformation, []).append(edit.start - 1)
        for number in range(edit.start, edit.end + 1):
            if number in owner:
                raise AssertionError(f"line {number} edited by both {owner[number]} and {edit.transformation}")
            owner[number] = edit.transformation
            touched.setdefault(edit.transformation, []).append(number)
    out = list(prefix)
    position = 1
    for _, edit in ordered:
        out.extend(parsed.lines[position - 1 : edit.start - 1])
        out.extend(edit.new)
        position = max(position, edit.end + 1, edit.start)
    out.extend(parsed.lines[position - 1 :])
    out.extend(suffix)
    return Applied(
        "\n".join(out) + "\n",
        {name: sorted(lines) for name, lines in touched.items()},
        {name: sorted(lines) for name, lines in inserted.items()},
    )
