"""The build as a picture: a Mermaid gantt chart of BuildKit's own step times, which GitHub and GitLab draw where
they show markdown. Every step name is reduced to characters the gantt grammar reads as plain text, and every task
begins with a character no gantt keyword does."""

from __future__ import annotations

import re
from datetime import datetime

MAX_TASKS = 60
MIN_INTERNAL_SECONDS = 0.5  # BuildKit's own short steps (loading the definition, metadata) add lines, not insight
_STAGE_RE = re.compile(r"\[(?P<stage>[^\]\s]+) \d+/\d+\] ")
_PLAIN_RE = re.compile(r"\[\d+/\d+\] ")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9 _./=+@,()\[\]'-]+")


def _time(text: str) -> datetime | None:
    """BuildKit's RFC 3339 times carry nanoseconds; Python reads microseconds."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text or "")
    if not m:
        return None
    fraction = (m.group(2) or ".0")[:7]
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        return datetime.fromisoformat(m.group(1) + fraction + zone)
    except ValueError:
        return None


def _text(name: str, limit: int) -> str:
    """Step text as the gantt grammar takes it: no `:` (it ends a task's name), `#`, `;`, `%` or backticks."""
    text = " ".join(_UNSAFE_RE.sub(" ", name).split())
    return (text[: limit - 3].rstrip() + "...") if len(text) > limit else (text or "step")


def _label(name: str, limit: int) -> str:
    """A task's name, led by "- ". Gantt has no quoted labels, and its lexer tries keywords (case-insensitive, as
    prefixes) where a line's text starts: a step named `section x`, `title x`, `click s1 ...`, `excludes ...` or
    `2024-01-01` would be a directive, not a bar. No keyword starts with "-"."""
    return "- " + _text(name, limit)


def _section(name: str) -> str:
    m = _STAGE_RE.match(name)
    if m:
        return f"stage {_text(m.group('stage'), 40)}"
    if _PLAIN_RE.match(name):
        return "Dockerfile"
    return "BuildKit"


def gantt(steps: list) -> str | None:
    """The chart for a build record's steps (name, started, completed, cached, error), or None without times. Times
    are milliseconds from the build's first step (`dateFormat x`), so the axis reads minutes and seconds."""
    timed = []
    for step in steps:
        start, end = _time(step.started), _time(step.completed)
        if start is None or end is None or end < start:
            continue
        instruction = bool(_STAGE_RE.match(step.name) or _PLAIN_RE.match(step.name))
        if not instruction and (end - start).total_seconds() < MIN_INTERNAL_SECONDS and not step.error:
            continue
        timed.append((start, end, step))
    if not timed:
        return None
    if len(timed) > MAX_TASKS:  # the longest steps tell the story
        timed = sorted(sorted(timed, key=lambda t: t[0] - t[1])[:MAX_TASKS], key=lambda t: t[0])
    origin = min(start for start, _, _ in timed)
    total = max(end for _, end, _ in timed) - origin
    axis = "%H:%M:%S" if total.total_seconds() >= 3600 else "%M:%S"
    sections: dict[str, list[str]] = {}
    for number, (start, end, step) in enumerate(timed, 1):
        begin = int((start - origin).total_seconds() * 1000)
        finish = max(begin + 1, int((end - origin).total_seconds() * 1000))  # a zero-length bar is not drawn
        tags = "crit, " if step.error else ("done, " if step.cached else "")
        label = _label(_STAGE_RE.sub("", _PLAIN_RE.sub("", step.name), count=1), 70)
        sections.setdefault(_section(step.name), []).append(f"    {label} :{tags}s{number}, {begin}, {finish}")
    lines = [
        "gantt",
        "    title Build steps by BuildKit's own times (minutes:seconds from the first step)",
        "    dateFormat x",
        f"    axisFormat {axis}",
    ]
    for section, tasks in sections.items():
        lines.append(f"    section {section}")
        lines.extend(tasks)
    return "\n".join(lines)


def stage_gantt(stages: list[dict]) -> str | None:
    """buildkit's stages as a chart: each as long as its record says, one after the other in pipeline order (the
    records keep durations, not one shared clock, so the bars show proportions, not when each ran). None when fewer
    than two stages have a duration (one bar says nothing the stage table does not)."""
    timed = [(s["stage"], s["seconds"]) for s in stages if s.get("seconds") is not None and s["seconds"] >= 0]
    if len(timed) < 2:
        return None
    total = sum(seconds for _, seconds in timed)
    lines = [
        "gantt",
        "    title buildkit's stages, each as long as its record says, one after the other",
        "    dateFormat x",
        f"    axisFormat {'%H:%M:%S' if total >= 3600 else '%M:%S'}",
        "    section stages",
    ]
    at = 0
    for number, (stage, seconds) in enumerate(timed, 1):
        finish = max(at + 1, at + int(seconds * 1000))
        lines.append(f"    {_label(stage, 40)} {seconds:.1f} s :t{number}, {at}, {finish}")
        at = finish
    return "\n".join(lines)
